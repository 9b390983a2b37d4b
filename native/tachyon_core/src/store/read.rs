//! Reads, and a reader's view of a writer's segments.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::open::{bounds, load_reader_segments};
use super::{Mode, Segment, Store, StoreError};

impl Store {
    /// Refreshes a reader's view (new segments, deleted ones, new records).
    pub(super) fn refresh(&self) -> Result<(), StoreError> {
        if self.cfg.mode != Mode::Read {
            return Ok(());
        }
        let need_list = {
            let segs = self.segs.read();
            segs.last().is_none_or(|s| s.is_sealed())
                || segs
                    .first()
                    .is_some_and(|s| !s.path.exists() || !s.is_current())
        };
        if need_list {
            let current = self.segs.read().clone();
            let segs = load_reader_segments(&self.dir, &current)?;
            *self.segs.write() = segs;
        }
        let segs = self.segs.read();
        let (first, next) = bounds(&segs);
        self.segs.set_first_index(first);
        self.next_index.store(next, Ordering::Release);
        Ok(())
    }

    /// Index of the oldest message kept.
    pub fn first_index(&self) -> Result<u64, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.refresh()?;
        Ok(self.segs.first_index())
    }

    /// Index the next append gets (one past the newest message).
    pub fn next_index(&self) -> Result<u64, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.refresh()?;
        Ok(self.next_index.load(Ordering::Acquire))
    }

    fn find(&self, index: u64) -> Result<Arc<Segment>, StoreError> {
        let segs = self.segs.read();
        match segs.first() {
            None => Err(StoreError::NotFound),
            Some(f) if index < f.base() => Err(StoreError::Trimmed(f.base())),
            Some(_) => Ok(segs[segs.partition_point(|s| s.base() <= index) - 1].clone()),
        }
    }

    /// Whether `index` is outside the log: past its end (`NotFound`), or
    /// below its first index (`Trimmed`).
    fn outside(&self, index: u64) -> Option<StoreError> {
        if index >= self.next_index.load(Ordering::Acquire) {
            Some(StoreError::NotFound)
        } else {
            let first = self.segs.first_index();
            (index < first).then_some(StoreError::Trimmed(first))
        }
    }

    /// Calls `f` with the payload of message `index` (a view of the map).
    /// Below the first index the log holds: `Trimmed` with that index.
    ///
    /// A reader in another process ([`Mode::Read`]) checks after `f` that
    /// the file still holds the segment it read: if the writer reused it
    /// meanwhile (retention), `f` may have seen bytes being overwritten,
    /// and its result is dropped for `Trimmed`.
    pub fn read_with<R>(&self, index: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if self.outside(index).is_some() {
            self.refresh()?;
            if let Some(e) = self.outside(index) {
                return Err(e);
            }
        }
        let seg = self.find(index)?;
        let k = (index - seg.base()) as usize;
        if k >= seg.layout.slots {
            return Err(StoreError::NotFound);
        }
        let off = seg.slot(k).load(Ordering::Acquire) as usize;
        let r = match off {
            0 => Err(StoreError::NotFound),
            _ => seg.record_at(off).map(f).map_err(|_| StoreError::Corrupt {
                segment: seg.seq,
                offset: off as u64,
            }),
        };
        if self.cfg.mode == Mode::Read && !seg.is_current() {
            // Reused by the writer (its index zeroed, its records being
            // overwritten) before or while we read it.
            self.refresh()?;
            return Err(StoreError::Trimmed(self.segs.first_index().max(index + 1)));
        }
        r
    }

    /// Reads message `index` into a new vector.
    pub fn read(&self, index: u64) -> Result<Vec<u8>, StoreError> {
        self.read_with(index, |p| p.to_vec())
    }

    /// Calls `f` for consecutive messages from `from` until `max_count`
    /// messages or `max_bytes` bytes (at least one message) were visited, or
    /// the end. Returns how many were visited; `Trimmed` if `from` is below
    /// the first index the log holds.
    pub fn read_range(
        &self,
        from: u64,
        max_count: usize,
        max_bytes: usize,
        mut f: impl FnMut(u64, &[u8]),
    ) -> Result<usize, StoreError> {
        let mut n = 0;
        let mut bytes = 0;
        let mut index = from;
        // A reader in another process hands `f` a copy it checked (see
        // `read_with`), never bytes the writer may be reusing.
        let mut copy = Vec::new();
        while n < max_count {
            let read = if self.cfg.mode == Mode::Read {
                self.read_with(index, |p| {
                    copy.clear();
                    copy.extend_from_slice(p);
                })
                .map(|()| {
                    f(index, &copy);
                    copy.len()
                })
            } else {
                self.read_with(index, |p| {
                    f(index, p);
                    p.len()
                })
            };
            match read {
                Ok(len) => {
                    n += 1;
                    bytes += len;
                    index += 1;
                    if bytes >= max_bytes {
                        break;
                    }
                }
                Err(StoreError::NotFound) => break,
                Err(e) => {
                    if n == 0 {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        Ok(n)
    }
}
