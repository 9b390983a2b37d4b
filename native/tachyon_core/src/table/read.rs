//! Reads: `get` (from memory, the map or the file) and snapshots.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inner, Result, Segment, Table, TableError, ValueMode};
use crate::sys::lock;

/// A value found by [`Table::get_with`]: bytes in memory, or a place in a
/// segment file to `pread` from.
pub enum Value<'a> {
    Bytes(&'a [u8]),
    File {
        seg: &'a Segment,
        off: usize,
        len: usize,
    },
}

impl Value<'_> {
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Value::Bytes(b) => b.len(),
            Value::File { len, .. } => *len,
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the value into `dst` (`dst.len() == self.len()`).
    #[inline]
    pub fn copy_to(&self, dst: &mut [u8]) -> io::Result<()> {
        match self {
            Value::Bytes(b) => {
                dst.copy_from_slice(b);
                Ok(())
            }
            Value::File { seg, off, .. } => seg.read_into(*off, dst),
        }
    }

    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; self.len()];
        self.copy_to(&mut v)?;
        Ok(v)
    }
}

/// A point-in-time copy of the index (keys and value locations) with the
/// segments it needs kept open, for `stream`.
pub struct Snapshot {
    items: Vec<(Box<[u8]>, u32, u32, u32)>,
    segs: Vec<Option<Arc<Segment>>>,
    pos: usize,
}

impl Snapshot {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Up to `n` more `(key, value)` pairs; empty at the end.
    pub fn next_batch(&mut self, n: usize) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let end = (self.pos + n).min(self.items.len());
        let mut out = Vec::with_capacity(end - self.pos);
        for (key, slot, off, len) in &self.items[self.pos..end] {
            let seg = self.segs[*slot as usize].as_ref().expect("pinned segment");
            let mut v = vec![0u8; *len as usize];
            seg.read_into(*off as usize, &mut v)?;
            out.push((key.to_vec(), v));
        }
        self.pos = end;
        Ok(out)
    }
}

impl Table {
    /// Calls `f` with the value of `key` (under the key's shard read lock:
    /// keep `f` short). `Ok(None)` if absent.
    #[inline]
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(Value<'_>) -> R) -> Result<Option<R>> {
        let inner = &*self.inner;
        let h = inner.index.hash(key);
        let shard = inner.index.read(h);
        if inner.closed.load(Ordering::Relaxed) {
            return Err(TableError::Closed);
        }
        let Some(e) = shard.find(h, key) else {
            return Ok(None);
        };
        let v = match inner.cfg.mode {
            ValueMode::Memory => Value::Bytes(e.mem_value()),
            ValueMode::Mapped => {
                let seg = inner.seg_at(e.slot());
                Value::Bytes(seg.map_slice(e.off() as usize, e.vlen() as usize))
            }
            ValueMode::File => {
                let seg = inner.seg_at(e.slot());
                Value::File {
                    seg,
                    off: e.off() as usize,
                    len: e.vlen() as usize,
                }
            }
        };
        Ok(Some(f(v)))
    }

    /// The value of `key`, copied.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.get_with(key, |v| v.to_vec())? {
            Some(Ok(v)) => Ok(Some(v)),
            Some(Err(e)) => Err(e.into()),
            None => Ok(None),
        }
    }

    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get_with(key, |_| ())?.is_some())
    }

    /// A consistent copy of the index (taken with writes held off) that
    /// reads values lazily from the segments it keeps open.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let inner = &*self.inner;
        let w = lock(&inner.writer);
        if inner.closed.load(Ordering::Acquire) {
            return Err(TableError::Closed);
        }
        let mut segs: Vec<Option<Arc<Segment>>> = Vec::new();
        for s in lock(&inner.segs).by_id.values() {
            let i = s.slot as usize;
            if segs.len() <= i {
                segs.resize(i + 1, None);
            }
            segs[i] = Some(s.clone());
        }
        let mut items = Vec::with_capacity(inner.keys.load(Ordering::Relaxed) as usize);
        for i in 0..inner.index.shard_count() {
            // Compaction may move values meanwhile; the copy it makes is
            // identical, and the old segment stays open through `segs`.
            let shard = inner.index.read_shard(i);
            for e in shard.iter() {
                items.push((
                    e.key().to_vec().into_boxed_slice(),
                    e.slot(),
                    e.off(),
                    e.vlen(),
                ));
            }
        }
        drop(w);
        Ok(Snapshot {
            items,
            segs,
            pos: 0,
        })
    }
}

impl Inner {
    #[inline]
    pub(super) fn seg_at(&self, slot: u32) -> &Segment {
        let p = self.slots[slot as usize].load(Ordering::Acquire);
        assert!(!p.is_null(), "index entry points at an empty segment slot");
        // SAFETY: an index entry points at this slot, and the caller holds
        // the entry's shard lock (or the writer lock, or is the background
        // thread that alone removes segments): `remove_segment` clears the
        // slot only after every entry pointing into it has been moved under
        // its shard's write lock, so the segment outlives this borrow.
        unsafe { &*p }
    }
}
