//! Rolls (sealing the active segment, activating the next), retention, and
//! the pre-touch thread that prepares the next segments.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::format::*;
use super::open::remove_unused;
use super::{Event, Segment, Store, StoreError, Writer};
use crate::segment::map::retire;
use crate::segment::prepare::{self, Prepare, Prepared};
use crate::segment::Growth;
use crate::sys::lock;
use crate::worker::Worker;

/// State shared by the writer and the pre-touch thread.
pub(super) struct Touch {
    active: Mutex<Arc<Segment>>,
    /// The writer's data position in `active` (relative to its data region).
    write_pos: CachePadded<AtomicU64>,
    /// The next segments, in order, made ready by the thread.
    prepared: Prepared<Segment>,
}

impl Touch {
    pub(super) fn new(active: Arc<Segment>, pos: usize, max: usize) -> Touch {
        Touch {
            active: Mutex::new(active),
            write_pos: CachePadded::new(AtomicU64::new(pos as u64)),
            prepared: Prepared::new(max),
        }
    }

    /// The writer's position, for the thread (one relaxed store per append).
    #[inline]
    pub(super) fn set_write_pos(&self, pos: usize) {
        self.write_pos.store(pos as u64, Ordering::Relaxed);
    }
}

/// The pre-touch thread's side (see [`crate::segment::prepare`]): keeps
/// `Config::prepared_segments` next segments ready (created, allocated,
/// faulted in whole, writable and readable), and faults in `ahead` bytes
/// ahead of the writer in an active segment that was not prepared so. When
/// stopped it removes the segments it had prepared.
struct Pretouch {
    t: Arc<Touch>,
    dir: PathBuf,
    growth: Growth,
    ahead: usize,
    last_pos: u64,
}

impl Prepare for Pretouch {
    type Seg = Segment;

    fn queue(&self) -> &Prepared<Segment> {
        &self.t.prepared
    }

    fn make(&self, queued: usize) -> io::Result<Segment> {
        let (seq, cap) = {
            let a = lock(&self.t.active);
            let n = 1 + queued;
            (a.seq + n as u64, self.growth.after(a.layout.data_cap, n))
        };
        // create_new: never touches a file the writer made itself.
        let seg = Segment::create(&self.dir, seq, cap)?;
        seg.populate(0, seg.layout.file_len);
        seg.touched.store(seg.layout.file_len, Ordering::Release);
        Ok(seg)
    }

    /// A segment the writer overtook meanwhile (it rolled and created that
    /// file itself) is not next any more.
    fn still_next(&self, seg: &Segment, queue: &VecDeque<Segment>) -> bool {
        lock(&self.t.active).seq + 1 + queue.len() as u64 == seg.seq
    }

    fn discard(&self, seg: Segment) {
        seg.remove_if_same_file();
    }

    fn touch_ahead(&mut self) -> bool {
        let active = lock(&self.t.active).clone();
        let pos = self.t.write_pos.load(Ordering::Relaxed);
        let l = active.layout;
        let at = l.data_start + pos as usize;
        let want = (at + self.ahead).min(l.file_len);
        let touched = active.touched.load(Ordering::Acquire);
        if want > touched {
            active.populate(touched.max(at), want);
            active.touched.store(want, Ordering::Release);
        }
        let busy = pos != self.last_pos;
        self.last_pos = pos;
        busy
    }

    fn idle_nap(&self) -> Duration {
        Duration::from_millis(20)
    }
}

impl Store {
    /// Makes the first next segments ready (open runs on a dirty
    /// scheduler: a writer that starts at once must not catch up with the
    /// thread, see [`crate::segment::MAX_PREPARED_SEGMENTS`]), then starts
    /// the pre-touch thread.
    pub(super) fn start_pretouch(mut self, t: Arc<Touch>) -> Result<Store, StoreError> {
        let mut p = Pretouch {
            t: t.clone(),
            dir: self.dir.clone(),
            growth: self.cfg.growth(),
            ahead: self.cfg.pretouch_ahead,
            last_pos: u64::MAX,
        };
        // (A full disk: the writer's roll reports it.)
        let _ = prepare::fill(&mut p, || false);
        let w = Worker::spawn("tachyon-pretouch", None, move |ctx| prepare::run(ctx, p))?;
        self.touch = Some(t);
        *lock(&self.toucher) = Some(w);
        Ok(self)
    }

    /// Seals the active segment and activates the next one (the prepared
    /// one, or one created here), then applies retention.
    #[cold]
    pub(super) fn roll(&self, w: &mut Writer) -> Result<(), StoreError> {
        let t0 = Instant::now();
        let seq = w.active.seq + 1;
        let cap = self.cfg.growth().next(Some(w.active.layout.data_cap));
        let (next, prepared) = self.next_segment(seq, cap)?;
        let wmap = next
            .writable()
            .ok_or(StoreError::Io(io::Error::other("new segment not writable")))?;
        // Activate the new segment before sealing the old one: a reader that
        // sees the seal always finds the next segment.
        next.activate(w.next_index);
        let next = Arc::new(next);
        w.active.seal(w.slot as u64, w.pos as u64);
        let old = std::mem::replace(&mut w.active, next.clone());
        // From now on the sealed segment is read through its read-only map
        // only; its writable one is unmapped by the reaper.
        drop(old.take_writable());
        retire(std::mem::replace(&mut w.wmap, wmap));
        w.unsynced.push(old);
        w.pos = 0;
        w.slot = 0;
        w.synced_pos = 0;
        w.synced_slot = 0;
        w.header_dirty = true;
        w.dir_dirty = true;
        w.rolls += 1;
        w.prepared_rolls += prepared as u64;
        let deleted = {
            let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
            segs.push(next.clone());
            self.apply_retention(w, &mut segs)
        };
        if let Some(t) = &self.touch {
            *lock(&t.active) = next.clone();
            t.set_write_pos(0);
            if let Some(h) = lock(&self.toucher).as_ref() {
                h.wake();
            }
        }
        self.queue_event(Event::Roll {
            segment: seq,
            base_index: next.base(),
            prepared,
            roll_ns: t0.elapsed().as_nanos() as u64,
            deleted_segments: deleted,
        });
        Ok(())
    }

    /// Segment `seq` of `cap` data bytes, not yet activated: the prepared
    /// one (then `true`), or one created now.
    fn next_segment(&self, seq: u64, cap: usize) -> Result<(Segment, bool), StoreError> {
        if let Some(t) = &self.touch {
            match t.prepared.pop() {
                Some(s) if s.seq == seq && s.layout.data_cap == cap => {
                    return Ok((s, true));
                }
                other => {
                    // Any other prepared segment is out of sequence now.
                    if let Some(s) = other {
                        s.remove_if_same_file();
                    }
                    for s in t.prepared.drain() {
                        s.remove_if_same_file();
                    }
                }
            }
        }
        Ok((self.create_segment(seq, cap)?, false))
    }

    /// Creates segment `seq` on the writer's path (the pre-touch thread had
    /// none ready, or failed). A prepared file left by a failed attempt
    /// goes; the pre-touch thread may be creating the same file right now:
    /// the name is taken over and its copy is then discarded. A file there
    /// that is not a prepared segment of this store is left alone (the
    /// roll fails).
    fn create_segment(&self, seq: u64, cap: usize) -> Result<Segment, StoreError> {
        let path = self.dir.join(segment_file_name(seq));
        let mut tries = 0;
        loop {
            match Segment::create(&self.dir, seq, cap) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => {
                    remove_unused(&path, seq)?;
                    tries += 1;
                }
                other => return Ok(other?),
            }
        }
    }

    /// Queues an event for telemetry (the oldest goes past 1024).
    fn queue_event(&self, e: Event) {
        let mut ev = lock(&self.events);
        if ev.len() >= 1024 {
            ev.pop_front();
        }
        ev.push_back(e);
    }

    /// Applies retention to the segments found at open.
    pub(super) fn retain_at_open(&self) {
        let mut g = self.writer.lock();
        if let Some(w) = g.as_mut() {
            let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
            self.apply_retention(w, &mut segs);
        }
    }

    /// Deletes the oldest segments beyond `max_segments` / `max_bytes` (never
    /// the active one). Returns how many went.
    pub(super) fn apply_retention(&self, w: &mut Writer, segs: &mut Vec<Arc<Segment>>) -> u64 {
        let mut deleted = 0;
        loop {
            if segs.len() <= 1 {
                break;
            }
            let too_many = self.cfg.max_segments.is_some_and(|m| segs.len() > m);
            let bytes: u64 = segs.iter().map(|s| s.layout.file_len as u64).sum();
            let too_big = self.cfg.max_bytes.is_some_and(|m| bytes > m);
            if !(too_many || too_big) {
                break;
            }
            let old = segs.remove(0);
            old.deleted.store(true, Ordering::Release);
            let _ = fs::remove_file(&old.path);
            w.unsynced.retain(|s| !Arc::ptr_eq(s, &old));
            deleted += 1;
        }
        if deleted > 0 {
            self.first_index.store(segs[0].base(), Ordering::Release);
            w.deleted += deleted;
            w.dir_dirty = true;
        }
        deleted
    }
}
