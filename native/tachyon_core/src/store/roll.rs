//! Rolls (sealing the active segment, activating the next), and the
//! pre-touch thread that prepares the next segments (reusing the files of
//! retired ones: see `retain.rs`).

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::format::*;
use super::open::remove_unused;
use super::retain::Segs;
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

    pub(super) fn prepared_len(&self) -> usize {
        self.prepared.len()
    }

    /// The writer's position, for the thread (one relaxed store per append).
    #[inline]
    pub(super) fn set_write_pos(&self, pos: usize) {
        self.write_pos.store(pos as u64, Ordering::Relaxed);
    }
}

/// The pre-touch thread's side (see [`crate::segment::prepare`]): keeps
/// `Config::prepared_segments` next segments ready (created and allocated,
/// or reused from a retired segment; faulted in whole, writable and
/// readable), and faults in `ahead` bytes ahead of the writer in an active
/// segment that was not prepared so; applies retention by age, and removes
/// the retired segments it did not reuse. When stopped it removes the
/// segments it had prepared.
struct Pretouch {
    t: Arc<Touch>,
    segs: Arc<Segs>,
    dir: PathBuf,
    growth: Growth,
    ahead: usize,
    last_pos: u64,
}

impl Pretouch {
    /// Segment `seq` of `cap` data bytes, prepared: a retired segment's
    /// file whose pages are in the page cache (faulting it in zeroes
    /// nothing), or a new one; renamed or created, never over a file the
    /// writer made itself.
    fn make_segment(&self, seq: u64, cap: usize) -> io::Result<Segment> {
        let reused = self
            .segs
            .take_reusable(cap)
            .and_then(|old| old.reuse(&self.dir, seq).ok());
        let seg = match reused {
            Some(s) => {
                self.segs.reused.fetch_add(1, Ordering::Relaxed);
                s
            }
            None => Segment::create(&self.dir, seq, cap)?,
        };
        seg.populate(0, seg.layout.file_len);
        seg.touched.store(seg.layout.file_len, Ordering::Release);
        Ok(seg)
    }
}

impl Prepare for Pretouch {
    type Seg = Segment;

    fn queue(&self) -> &Prepared<Segment> {
        &self.t.prepared
    }

    fn make(&self, queued: usize) -> io::Result<Segment> {
        let mut tries = 0;
        loop {
            let (seq, cap) = {
                let a = lock(&self.t.active);
                let n = 1 + queued;
                (a.seq + n as u64, self.growth.after(a.layout.data_cap, n))
            };
            match self.make_segment(seq, cap) {
                // The writer rolled past it and made that file itself
                // meanwhile: the next one, then.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => tries += 1,
                r => return r,
            }
        }
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

    fn retire(&mut self) {
        if self.segs.age_due() {
            self.segs.apply_now(0);
        }
    }

    fn tidy(&mut self) {
        self.segs.tidy();
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
            segs: self.segs.clone(),
            dir: self.dir.clone(),
            growth: self.cfg.growth(),
            ahead: self.cfg.pretouch_ahead,
            last_pos: u64::MAX,
        };
        // (A full disk: the writer's roll reports it.)
        let _ = prepare::fill(&mut p, || false);
        p.tidy();
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
        next.activate(w.next_index, self.cfg.clock.now_ns());
        let next = Arc::new(next);
        w.active.seal(w.slot as u64, w.pos as u64);
        let old = std::mem::replace(&mut w.active, next.clone());
        // From now on the sealed segment is read through its read-only map
        // only; its writable one is unmapped by the reaper.
        drop(old.take_writable());
        retire(std::mem::replace(&mut w.wmap, wmap));
        // (Segments retention took out meanwhile need no sync.)
        w.unsynced.retain(|s| {
            s.upgrade()
                .is_some_and(|s| !s.deleted.load(Ordering::Acquire))
        });
        w.unsynced.push(Arc::downgrade(&old));
        w.pos = 0;
        w.slot = 0;
        w.synced_pos = 0;
        w.synced_slot = 0;
        w.header_dirty = true;
        self.segs.dir_dirty.store(true, Ordering::Release);
        w.rolls += 1;
        w.prepared_rolls += prepared as u64;
        let deleted = {
            let mut segs = self.segs.write();
            segs.push(next.clone());
            // Out of the log here; the files are the pre-touch thread's
            // (or the reaper's).
            self.segs.apply(&mut segs, 0)
        };
        if let Some(t) = &self.touch {
            *lock(&t.active) = next.clone();
            t.set_write_pos(0);
        }
        self.wake_pretouch();
        self.segs.queue_event(Event::Roll {
            segment: seq,
            base_index: next.base(),
            prepared,
            roll_ns: t0.elapsed().as_nanos() as u64,
            deleted_segments: deleted,
        });
        Ok(())
    }

    /// Makes the log empty with next index `next` (any index): a follower
    /// installing its primary's checkpoint. A new segment, after every
    /// other one, is activated at `next` with `FLAG_RESET` and synced
    /// (with the directory); then every older segment leaves the log as
    /// retention's do (a read below `next` is [`StoreError::Trimmed`]).
    /// A crash after the sync leaves older files an open drops (see
    /// [`super::reset_dir`], the same on a closed store's directory).
    pub fn reset_to(&self, next: u64) -> Result<(), StoreError> {
        let mut g = self.writer.lock();
        let Some(w) = g.as_mut() else {
            return Err(self.no_writer());
        };
        let seq = w.active.seq + 1;
        let cap = self.cfg.growth().next(Some(w.active.layout.data_cap));
        let (seg, _) = self.next_segment(seq, cap)?;
        let wmap = seg
            .writable()
            .ok_or(StoreError::Io(io::Error::other("new segment not writable")))?;
        seg.mark_reset();
        seg.activate(next, self.cfg.clock.now_ns());
        seg.sync_range(0, HEADER_SIZE)?;
        crate::sys::fsync_dir(&self.dir)?;
        let seg = Arc::new(seg);
        w.active.seal(w.slot as u64, w.pos as u64);
        let old = std::mem::replace(&mut w.active, seg.clone());
        drop(old.take_writable());
        retire(std::mem::replace(&mut w.wmap, wmap));
        w.unsynced.clear();
        (w.pos, w.slot, w.synced_pos, w.synced_slot) = (0, 0, 0, 0);
        w.header_dirty = false;
        w.next_index = next;
        self.next_index.store(next, Ordering::Release);
        self.segs.replace_all(seg.clone());
        if let Some(t) = &self.touch {
            *lock(&t.active) = seg;
            t.set_write_pos(0);
        }
        drop(g);
        self.wake_pretouch();
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

    /// Wakes the pre-touch thread (a roll; retired segments to take).
    pub(super) fn wake_pretouch(&self) {
        if let Some(h) = lock(&self.toucher).as_ref() {
            h.wake();
        }
    }
}
