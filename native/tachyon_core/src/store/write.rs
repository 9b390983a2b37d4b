//! Appends and `sync`.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::format::*;
use super::{Mode, Store, StoreError, Writer};
use crate::sys::fsync_dir;

impl Store {
    /// Why there is no writer: a reader, or closed.
    pub(super) fn no_writer(&self) -> StoreError {
        if self.cfg.mode == Mode::Read && !self.is_closed() {
            StoreError::ReadOnly
        } else {
            StoreError::Closed
        }
    }

    /// Appends one message; returns its index.
    #[inline]
    pub fn append(&self, data: &[u8]) -> Result<u64, StoreError> {
        if data.len() > self.cfg.max_message_size {
            return Err(StoreError::MessageTooLarge);
        }
        let mut g = self.writer.lock();
        let Some(w) = g.as_mut() else {
            return Err(self.no_writer());
        };
        let idx = self.append_locked(w, data)?;
        self.next_index.store(w.next_index, Ordering::Release);
        if let Some(t) = &self.touch {
            t.set_write_pos(w.pos);
        }
        Ok(idx)
    }

    /// Appends messages as one batch (contiguous indices, no other appender in
    /// between); returns the last index. Sizes are checked before anything is
    /// written. An I/O error mid-batch leaves the messages before it stored.
    pub fn append_many<'a, I>(&self, msgs: I) -> Result<Option<u64>, StoreError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let it = msgs.into_iter();
        if it.clone().any(|m| m.len() > self.cfg.max_message_size) {
            return Err(StoreError::MessageTooLarge);
        }
        let mut g = self.writer.lock();
        let Some(w) = g.as_mut() else {
            return Err(self.no_writer());
        };
        let mut last = None;
        let mut result = Ok(());
        for m in it {
            match self.append_locked(w, m) {
                Ok(i) => last = Some(i),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.next_index.store(w.next_index, Ordering::Release);
        if let Some(t) = &self.touch {
            t.set_write_pos(w.pos);
        }
        result.map(|_| last)
    }

    #[inline]
    fn append_locked(&self, w: &mut Writer, data: &[u8]) -> Result<u64, StoreError> {
        let need = record_size(data.len());
        if w.slot >= w.active.layout.slots || w.pos + need > w.active.layout.data_cap {
            self.roll(w)?;
        }
        w.active.write_record(&w.wmap, w.pos, w.slot, data);
        w.pos += need;
        w.slot += 1;
        let idx = w.next_index;
        w.next_index += 1;
        w.appended += 1;
        w.appended_bytes += data.len() as u64;
        Ok(idx)
    }

    /// Makes every segment durable as it is, whoever wrote it (a store
    /// opened after a crash of its writer cannot know what of its files
    /// the page cache still holds unwritten): each file synced whole, then
    /// the directory. Slow; for an open that must promise the disk.
    pub fn sync_all(&self) -> Result<(), StoreError> {
        let segs: Vec<_> = self.segs.read().iter().cloned().collect();
        for s in segs {
            if !s.deleted.load(Ordering::Acquire) {
                s.sync_range(0, s.layout.file_len)?;
            }
        }
        fsync_dir(&self.dir)?;
        Ok(())
    }

    /// Makes everything appended so far durable (the written ranges of the
    /// active segment, every sealed segment with unsynced data, and the
    /// directory after a roll). Returns the bytes flushed. Does not block
    /// appenders while it waits for the disk.
    ///
    /// The active segment's ranges (its header when it changed, the new
    /// index slots, the new data) take one device cache flush, not one
    /// each: every `msync`/`fdatasync` flushes the device's cache even
    /// when it wrote nothing, which on the 2-core VM cost about 50 us a
    /// flush, two thirds of a sync of one record (docs/BENCHMARKS.md,
    /// "Sequencer with durability: :fsync"). So the header and the index
    /// are written back without a flush, all three ranges' writes started
    /// together, and the last range is `msync`ed: its `fdatasync` commits
    /// the file's metadata and flushes the cache once for all.
    pub fn sync(&self) -> Result<u64, StoreError> {
        let (sealed, active, from, to, slot_from, slot_to, header_dirty, dir_dirty) = {
            let mut g = self.writer.lock();
            let Some(w) = g.as_mut() else {
                return Err(self.no_writer());
            };
            let sealed = std::mem::take(&mut w.unsynced);
            let r = (
                sealed,
                w.active.clone(),
                w.synced_pos,
                w.pos,
                w.synced_slot,
                w.slot,
                w.header_dirty,
                self.segs.dir_dirty.swap(false, Ordering::AcqRel),
            );
            w.synced_pos = w.pos;
            w.synced_slot = w.slot;
            w.header_dirty = false;
            r
        };
        let mut bytes = 0u64;
        let result = (|| {
            for s in sealed.iter().filter_map(Weak::upgrade) {
                // (One retention took out needs no sync: its file is gone
                // or reused.)
                if !s.deleted.load(Ordering::Acquire) {
                    s.sync_range(0, s.layout.file_len)?;
                    bytes += s.layout.file_len as u64;
                }
            }
            let l = active.layout;
            let header = (0, if header_dirty { HEADER_SIZE } else { 0 });
            let index = (l.index_start + slot_from * 4, l.index_start + slot_to * 4);
            let data = (l.data_start + from, l.data_start + to);
            let mut ranges = [header, index, data];
            let ranges = {
                let n = ranges.iter().filter(|r| r.1 > r.0).count();
                ranges.sort_by_key(|r| r.1 <= r.0); // (stable: the empty ones last)
                &ranges[..n]
            };
            if let Some((last, rest)) = ranges.split_last() {
                for r in ranges {
                    active.write_back(r.0, r.1, false)?;
                }
                for r in rest {
                    active.write_back(r.0, r.1, true)?;
                }
                active.sync_range(last.0, last.1)?;
                bytes += (to - from) as u64;
            }
            if dir_dirty {
                fsync_dir(&self.dir)?;
            }
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = result {
            // Put the work back so the next sync retries it.
            let mut g = self.writer.lock();
            if let Some(w) = g.as_mut() {
                w.unsynced.extend(sealed);
                if Arc::ptr_eq(&w.active, &active) {
                    w.synced_pos = w.synced_pos.min(from);
                    w.synced_slot = w.synced_slot.min(slot_from);
                    w.header_dirty |= header_dirty;
                }
            }
            if dir_dirty {
                self.segs.dir_dirty.store(true, Ordering::Release);
            }
            return Err(e.into());
        }
        Ok(bytes)
    }
}
