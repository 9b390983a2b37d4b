//! The table's segments: the registry (ids, slots), rolls, and the prepare
//! thread that keeps the next segments ready.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::*;
use super::{Inner, Registry, Result, Segment, TableError, ValueMode, Writer, MAX_SLOTS};
use crate::segment::prepare::{Prepare, Prepared};
use crate::sys::lock;

impl Inner {
    pub(super) fn alloc_slot(reg: &mut Registry) -> Result<u32> {
        if let Some(s) = reg.free_slots.pop() {
            return Ok(s);
        }
        if reg.next_slot as usize >= MAX_SLOTS {
            return Err(TableError::BadConfig(
                "too many segments: raise segment_size",
            ));
        }
        reg.next_slot += 1;
        Ok(reg.next_slot - 1)
    }

    pub(super) fn register(&self, seg: Segment) -> Arc<Segment> {
        let seg = Arc::new(seg);
        self.slots[seg.slot as usize].store(Arc::as_ptr(&seg) as *mut Segment, Ordering::Release);
        lock(&self.segs).by_id.insert(seg.id, seg.clone());
        seg
    }

    /// Creates and registers a new writable segment of `cap` bytes.
    pub(super) fn new_segment(&self, cap: usize) -> Result<Arc<Segment>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Self::alloc_slot(&mut lock(&self.segs))?;
        match Segment::create(&self.dir, id, slot, cap, self.cfg.mode.maps()) {
            Ok(s) => {
                self.dir_dirty.store(true, Ordering::Release);
                Ok(self.register(s))
            }
            Err(e) => {
                lock(&self.segs).free_slots.push(slot);
                Err(e.into())
            }
        }
    }

    /// Unregisters a segment whose entries have all been moved, and deletes
    /// its files (the map and descriptor go when the last `Arc` does).
    pub(super) fn remove_segment(&self, seg: &Arc<Segment>) {
        let mut reg = lock(&self.segs);
        self.slots[seg.slot as usize].store(std::ptr::null_mut(), Ordering::Release);
        reg.by_id.remove(&seg.id);
        reg.free_slots.push(seg.slot);
        drop(reg);
        seg.remove_files();
        self.dir_dirty.store(true, Ordering::Release);
    }

    /// The size of the segment the writer takes after one of `prev` bytes
    /// (`None`: the first; see [`Config::growth`](super::Config::growth)).
    pub(super) fn next_cap(&self, prev: Option<usize>) -> usize {
        self.cfg.growth().next(prev)
    }

    /// Seals the active segment and starts a new one that holds a record
    /// of `need` bytes: the one the prepare thread made ready (waiting for
    /// the one it is making, if any), or a new one now (also when the
    /// prepared one is too small: a `put_many` larger than the segments
    /// have grown to). On error (disk full) the old segment stays active.
    pub(super) fn roll(&self, w: &mut Writer, need: usize) -> Result<()> {
        let new = match self.prepared.pop_or_wait() {
            Some(s) if s.cap >= SEG_HEADER + need => s,
            other => {
                if let Some(small) = other {
                    // Prepared, never written: not part of the table.
                    self.remove_segment(&small);
                }
                let cap = self
                    .next_cap(w.active.as_ref().map(|a| a.cap))
                    .max(SEG_HEADER + need);
                self.new_segment(cap)?
            }
        };
        // The old segment's writable mapping: the writer's hold goes now,
        // before the segment is sealed; the maintenance thread releases the
        // segment's own before syncing it (`finish_segment`), and the reaper
        // unmaps it, off the writer's path.
        w.wmap = new.writable_map();
        self.active_cap.store(new.cap, Ordering::Relaxed);
        if let Some(old) = w.active.replace(new) {
            old.end.store(w.pos as u64, Ordering::Release);
            old.sealed.store(true, Ordering::Release);
        }
        w.pos = SEG_HEADER;
        w.touched_to = SEG_HEADER;
        self.prep_wake.wake();
        self.maint_wake.wake();
        Ok(())
    }
}

/// The prepare thread's side (see [`crate::segment::prepare`]): next
/// segments created, allocated and faulted in whole; the active one faulted
/// in ahead of the writer when it asks (`Inner::want`).
pub(super) struct Prep(pub(super) Arc<Inner>);

impl Prepare for Prep {
    type Seg = Arc<Segment>;

    fn queue(&self) -> &Prepared<Arc<Segment>> {
        &self.0.prepared
    }

    fn make(&self, _queued: usize) -> io::Result<Arc<Segment>> {
        // After the last one queued, or the active one (not from the
        // writer: a roll holds its lock while waiting for this segment).
        let prev = self.0.prepared.lock().back().map(|s| s.cap);
        let prev = prev.unwrap_or_else(|| self.0.active_cap.load(Ordering::Relaxed));
        let cap = self.0.next_cap(Some(prev));
        let s = self.0.new_segment(cap).map_err(|e| match e {
            TableError::Io(e) => e,
            TableError::NoSpace => io::Error::from_raw_os_error(libc::ENOSPC),
            e => io::Error::other(e.to_string()),
        })?;
        s.populate(0, s.cap, self.0.cfg.mode == ValueMode::Mapped);
        s.touched.store(s.cap, Ordering::Release);
        Ok(s)
    }

    fn discard(&self, seg: Arc<Segment>) {
        // Prepared, never written: not part of the table.
        self.0.remove_segment(&seg);
    }

    fn touch_ahead(&mut self) -> bool {
        let want = lock(&self.0.want).take();
        if let Some((seg, to)) = want {
            let from = seg.touched.load(Ordering::Acquire);
            if to > from && !seg.sealed.load(Ordering::Acquire) {
                seg.populate(from, to, self.0.cfg.mode == ValueMode::Mapped);
                seg.touched.store(to, Ordering::Release);
            }
        }
        // The writer wakes the thread when it wants more.
        false
    }
}
