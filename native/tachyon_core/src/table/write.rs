//! The write path (`put`, `delete`, `put_many`: one record each, then the
//! index) and `sync`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::*;
use super::index::Node;
use super::{Inner, Result, Segment, TableError, ValueMode, WriteMap, Writer};
use super::{PREFETCH_MAX, PRETOUCH_AHEAD};
use crate::sys::{fsync_dir, lock};

impl Inner {
    /// Appends one record holding `batch` and applies it to the index.
    pub(super) fn write_batch(&self, batch: &[(u8, &[u8], &[u8])]) -> Result<()> {
        let payload: usize = batch
            .iter()
            .map(|(_, k, v)| ENTRY_HEADER + k.len() + v.len())
            .sum();
        let rec_len = REC_HEADER + payload;
        // Memory mode: build the index nodes (key and value) before taking
        // any lock; their locations are filled in below.
        // (No Vec for the usual batch of one: no allocation besides the node.)
        let memory = self.cfg.mode == ValueMode::Memory;
        let new_node = |k: &[u8], v: &[u8]| Node::new(k, Some(v), v.len() as u32, 0, 0, 0);
        let mut first: Option<Node> = None;
        let mut rest: Vec<Node> = Vec::new();
        if memory {
            for (kind, k, v) in batch {
                if *kind == KIND_PUT {
                    if first.is_none() {
                        first = Some(new_node(k, v));
                    } else {
                        rest.push(new_node(k, v));
                    }
                }
            }
        }
        // Start loading the index slots while the record is written (the
        // first key's hash is kept: a batch of one hashes once).
        let h0 = batch.first().map_or(0, |(_, k, _)| self.index.hash(k));
        self.index.prefetch(h0);
        for (_, k, _) in batch.iter().skip(1).take(7) {
            self.index.prefetch(self.index.hash(k));
        }
        let mut guard = lock(&self.writer);
        let Some(active) = &guard.active else {
            return Err(TableError::Closed);
        };
        if guard.pos + rec_len > active.cap {
            self.roll(&mut guard, rec_len)?;
        }
        // Field borrows of the writer, so that the active segment is used
        // without an `Arc` clone (two atomic operations) per put.
        let w = &mut *guard;
        let Some(seg) = &w.active else {
            return Err(TableError::Closed);
        };
        let seq = w.seq;
        let pos = w.pos;
        Self::encode_and_write(w.wmap.as_deref(), &mut w.buf, seg, pos, seq, batch, payload)?;
        w.pos += rec_len;
        w.seq += batch.len() as u64;
        seg.end.store(w.pos as u64, Ordering::Release);
        if let Some(wmap) = &w.wmap {
            // The next record most likely has this one's size.
            wmap.prefetch_write(w.pos, rec_len.min(PREFETCH_MAX));
        }
        // (Sequence numbers grow: only a segment's first record lowers it.)
        if seg.min_seq.load(Ordering::Relaxed) > seq {
            seg.min_seq.fetch_min(seq, Ordering::Relaxed);
        }
        seg.max_seq
            .store(seq + batch.len() as u64 - 1, Ordering::Relaxed);
        if batch.len() > 1 {
            w.batches += 1;
        }
        // Apply to the index, in order.
        let mut off = pos + REC_HEADER;
        let mut nodes = first.into_iter().chain(rest);
        for (i, (kind, k, v)) in batch.iter().enumerate() {
            let cost = entry_cost(k.len(), v.len());
            seg.total.fetch_add(cost, Ordering::Relaxed);
            let val_off = (off + ENTRY_HEADER + k.len()) as u32;
            if *kind == KIND_PUT {
                seg.live.fetch_add(cost, Ordering::Relaxed);
                let node = nodes.next();
                let h = if i == 0 { h0 } else { self.index.hash(k) };
                self.index_put(
                    k,
                    h,
                    v.len() as u32,
                    seg.slot,
                    val_off,
                    seq + i as u64,
                    node,
                );
                w.puts += 1;
            } else {
                seg.tombs.fetch_add(cost, Ordering::Relaxed);
                self.index_remove(k);
                w.deletes += 1;
            }
            off += ENTRY_HEADER + k.len() + v.len();
        }
        if self.cfg.pretouch && w.pos + PRETOUCH_AHEAD / 2 > w.touched_to && seg.is_mapped() {
            // Ask the prepare thread to fault in further ahead (about every
            // PRETOUCH_AHEAD / 2 bytes written).
            w.touched_to = (w.pos + PRETOUCH_AHEAD).min(seg.cap);
            *lock(&self.want) = Some((seg.clone(), w.touched_to));
            self.prep_wake.wake();
        }
        Ok(())
    }

    fn encode_and_write(
        wmap: Option<&WriteMap>,
        buf: &mut Vec<u8>,
        seg: &Segment,
        pos: usize,
        seq: u64,
        batch: &[(u8, &[u8], &[u8])],
        payload: usize,
    ) -> Result<()> {
        let rec_len = REC_HEADER + payload;
        if let Some(wmap) = wmap {
            // SAFETY: we hold the writer lock (the only writer of the active
            // segment) and [pos, pos + rec_len) is past `end` and inside
            // `cap` (checked by the caller's roll). The slice is dropped
            // before `end` moves.
            let rec = unsafe { wmap.slice_mut(pos, rec_len) };
            let mut p = REC_HEADER;
            for (kind, k, v) in batch {
                p += write_entry(&mut rec[p..], *kind, k, v);
            }
            let crc = finish_record_header(rec, payload, seq);
            std::sync::atomic::compiler_fence(Ordering::Release);
            rec[0..4].copy_from_slice(&crc.to_le_bytes());
            Ok(())
        } else {
            buf.clear();
            buf.resize(rec_len, 0);
            let mut p = REC_HEADER;
            for (kind, k, v) in batch {
                p += write_entry(&mut buf[p..], *kind, k, v);
            }
            let crc = finish_record_header(buf, payload, seq);
            buf[0..4].copy_from_slice(&crc.to_le_bytes());
            seg.write_record(pos, buf)?;
            if buf.capacity() > 1 << 20 {
                *buf = Vec::new();
            }
            Ok(())
        }
    }

    /// Points `key` (hash `h`) at a new value (the writer lock is held).
    /// `node`: the new node holding the value (Memory mode).
    #[allow(clippy::too_many_arguments)]
    fn index_put(
        &self,
        key: &[u8],
        h: u64,
        vlen: u32,
        slot: u32,
        off: u32,
        seq: u64,
        node: Option<Node>,
    ) {
        let node = node.map(|mut n| {
            n.set_loc(slot, off, vlen, seq);
            n
        });
        let mut old = None;
        {
            let mut shard = self.index.write(h);
            if let Some(e) = shard.find_mut(h, key) {
                self.seg_at(e.slot())
                    .live
                    .fetch_sub(entry_cost(key.len(), e.vlen() as usize), Ordering::Relaxed);
                match node {
                    Some(n) => old = Some(std::mem::replace(e, n)),
                    None => e.set_loc(slot, off, vlen, seq),
                }
            } else {
                let n = node.unwrap_or_else(|| Node::new(key, None, vlen, slot, off, seq));
                shard.insert_new(h, n);
                self.index.publish(h, &shard);
                self.keys.fetch_add(1, Ordering::Release);
            }
        }
        // Freed outside the shard lock.
        drop(old);
    }

    /// Removes `key` from the index (the writer lock is held).
    fn index_remove(&self, key: &[u8]) -> bool {
        let h = self.index.hash(key);
        // The shard lock is held until the removed entry's segment has been
        // charged: once the entry is gone and the lock released, compaction
        // may remove that segment (its slot becomes empty), and `seg_at`
        // would then find nothing (a race seen as a panic in
        // `concurrent_readers_writer_and_compaction` under load).
        let mut shard = self.index.write(h);
        let Some(e) = shard.remove(h, key) else {
            return false;
        };
        self.seg_at(e.slot())
            .live
            .fetch_sub(entry_cost(key.len(), e.vlen() as usize), Ordering::Relaxed);
        drop(shard);
        self.keys.fetch_sub(1, Ordering::Release);
        // The node is freed outside the shard lock.
        drop(e);
        true
    }

    pub(super) fn delete(&self, key: &[u8]) -> Result<bool> {
        // Only the writer changes which keys exist, so the check below
        // stays true until we write.
        let w = lock(&self.writer);
        if self.closed.load(Ordering::Acquire) {
            return Err(TableError::Closed);
        }
        let h = self.index.hash(key);
        let present = self.index.read(h).find(h, key).is_some();
        drop(w);
        if !present {
            return Ok(false);
        }
        // Another delete of the same key may slip in between: harmless (a
        // second tombstone).
        self.write_batch(&[(KIND_DEL, key, &[])])?;
        Ok(true)
    }

    /// Syncs what was written before the call. The writer lock is held only
    /// to read the positions: writers go on during the fdatasyncs.
    pub(super) fn sync(&self) -> Result<()> {
        let todo = {
            let w = lock(&self.writer);
            if self.closed.load(Ordering::Acquire) {
                return Err(TableError::Closed);
            }
            self.unsynced(&w)
        };
        self.sync_segments(todo)
    }

    pub(super) fn unsynced(&self, w: &Writer) -> Vec<(Arc<Segment>, u64)> {
        let segs: Vec<Arc<Segment>> = lock(&self.segs).by_id.values().cloned().collect();
        segs.into_iter()
            .filter_map(|s| {
                let active = w.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &s));
                let end = if active {
                    w.pos as u64
                } else {
                    s.end.load(Ordering::Acquire)
                };
                (s.synced.load(Ordering::Acquire) < end).then_some((s, end))
            })
            .collect()
    }

    pub(super) fn sync_segments(&self, todo: Vec<(Arc<Segment>, u64)>) -> Result<()> {
        for (s, end) in todo {
            s.datasync()?;
            s.synced.fetch_max(end, Ordering::AcqRel);
        }
        if self.dir_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = fsync_dir(&self.dir) {
                self.dir_dirty.store(true, Ordering::Release);
                return Err(e.into());
            }
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
