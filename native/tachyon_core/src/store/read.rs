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
            let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
            segs.last().is_none_or(|s| s.is_sealed())
                || segs.first().is_some_and(|s| !s.path.exists())
        };
        if need_list {
            let current = self
                .segments
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let segs = load_reader_segments(&self.dir, &current)?;
            *self.segments.write().unwrap_or_else(|p| p.into_inner()) = segs;
        }
        let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
        let (first, next) = bounds(&segs);
        self.first_index.store(first, Ordering::Release);
        self.next_index.store(next, Ordering::Release);
        Ok(())
    }

    /// Index of the oldest message kept.
    pub fn first_index(&self) -> Result<u64, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.refresh()?;
        Ok(self.first_index.load(Ordering::Acquire))
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
        let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
        if segs.is_empty() || index < segs[0].base() {
            return Err(StoreError::NotFound);
        }
        let i = segs.partition_point(|s| s.base() <= index);
        Ok(segs[i - 1].clone())
    }

    /// Calls `f` with the payload of message `index` (a view of the map).
    pub fn read_with<R>(&self, index: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if index >= self.next_index.load(Ordering::Acquire)
            || index < self.first_index.load(Ordering::Acquire)
        {
            self.refresh()?;
            if index >= self.next_index.load(Ordering::Acquire)
                || index < self.first_index.load(Ordering::Acquire)
            {
                return Err(StoreError::NotFound);
            }
        }
        let seg = self.find(index)?;
        let k = (index - seg.base()) as usize;
        if k >= seg.layout.slots {
            return Err(StoreError::NotFound);
        }
        let off = seg.slot(k).load(Ordering::Acquire) as usize;
        if off == 0 {
            return Err(StoreError::NotFound);
        }
        match seg.record_at(off) {
            Ok(p) => Ok(f(p)),
            Err(_) => Err(StoreError::Corrupt {
                segment: seg.seq,
                offset: off as u64,
            }),
        }
    }

    /// Reads message `index` into a new vector.
    pub fn read(&self, index: u64) -> Result<Vec<u8>, StoreError> {
        self.read_with(index, |p| p.to_vec())
    }

    /// Calls `f` for consecutive messages from `from` until `max_count`
    /// messages or `max_bytes` bytes (at least one message) were visited, or
    /// the end. Returns how many were visited.
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
        while n < max_count {
            match self.read_with(index, |p| {
                f(index, p);
                p.len()
            }) {
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
