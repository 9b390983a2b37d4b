//! Retention: which segments leave the log, and what becomes of their files.
//!
//! Whole segments go, the oldest first, never the active one, while the
//! log holds more than `max_segments` segments or `max_bytes` bytes of
//! segment files, or while its oldest segment is older than `max_age_ms`;
//! and on request, every segment all of whose records are below an index
//! ([`Store::trim_below`], the sequencer's snapshots).
//!
//! **Age.** A segment's age is the time since the next segment was
//! activated (that segment header's `created`): the segment was sealed
//! then, so each of its records is at least that old (Kafka ages a
//! segment by its newest record's timestamp; a store keeps no time per
//! record, and this bound costs nothing per append). A record is never
//! deleted before it is `max_age_ms` old; it may be kept longer, by the
//! time its segment stayed active after it was written. The active
//! segment is never deleted, however old: a store that stops appending
//! keeps its last segment.
//!
//! **Off the appending thread.** Taking segments out of the log is a few
//! pointer moves under the segments' lock, done wherever retention is
//! applied: at a roll (on the writer's thread), by the pre-touch thread
//! (retention by age, as time passes), at open, and by `trim_below` on its
//! caller's thread. Nothing there touches a file: a retired segment goes
//! to the pre-touch thread, which reuses its file as the next prepared
//! segment ([`Segment::reuse`]: no page of it is zero-filled again) or
//! removes it; without a pre-touch thread it is removed on the reaper
//! ([`crate::worker::defer`]). A reader in this process that holds a
//! segment keeps reading it: a file is reused only once nobody holds its
//! segment (and a removed file's map stays valid until the last holder
//! lets go); a reader in another process checks, after each read, that
//! the file still holds the segment it read ([`Segment::is_current`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::CachePadded;

use super::{Clock, Config, Event, Reason, Segment, Store, StoreError};
use crate::sys::lock;

/// A retired file is reused only if at least this fraction of its data
/// pages is still in the page cache: faulting in a file whose pages went
/// back to the disk reads it all from there (a resident one costs a third
/// of the CPU of a new zero-filled segment: docs/BENCHMARKS.md, "Segment
/// recycling"; a cold one was not measured).
const REUSE_MIN_RESIDENT: f64 = 0.5;

/// Retention's limits (see the module's doc).
#[derive(Debug, Clone, Copy, Default)]
struct Limits {
    max_segments: Option<usize>,
    max_bytes: Option<u64>,
    max_age_ns: Option<u64>,
}

impl Limits {
    /// Why the oldest segment of `segs` must go (`floor`: `trim_below`'s
    /// index), if it must. Never the last (active) one.
    fn due(&self, segs: &[Arc<Segment>], floor: u64, now: u64) -> Option<Reason> {
        let (first, next) = match segs {
            [first, next, ..] => (first, next),
            _ => return None,
        };
        if floor > 0 && first.base() + first.count() <= floor {
            return Some(Reason::Trim);
        }
        if self.max_segments.is_some_and(|m| segs.len() > m) {
            return Some(Reason::MaxSegments);
        }
        if let Some(m) = self.max_bytes {
            let bytes: u64 = segs.iter().map(|s| s.layout.file_len as u64).sum();
            if bytes > m {
                return Some(Reason::MaxBytes);
            }
        }
        // Sealed when the next one was activated: at least that old.
        if self
            .max_age_ns
            .is_some_and(|a| now.saturating_sub(next.created_ns()) >= a)
        {
            return Some(Reason::MaxAge);
        }
        None
    }
}

/// The log's segments as readers, the writer and the pre-touch thread share
/// them: the list, its first index, and what retention retired from it.
pub(super) struct Segs {
    list: RwLock<Vec<Arc<Segment>>>,
    first_index: CachePadded<AtomicU64>,
    limits: Limits,
    clock: Clock,
    /// Segments out of the log whose files are still there, for the
    /// pre-touch thread to reuse or remove.
    retired: Mutex<Vec<Arc<Segment>>>,
    /// A pre-touch thread takes retired segments (else they are removed on
    /// the reaper as they retire).
    reuse: AtomicBool,
    /// Files were created, renamed or removed since the last `sync`.
    pub(super) dir_dirty: AtomicBool,
    pub(super) deleted: AtomicU64,
    pub(super) reused: AtomicU64,
    events: Mutex<VecDeque<Event>>,
}

impl Segs {
    pub(super) fn new(cfg: &Config, list: Vec<Arc<Segment>>, first: u64) -> Segs {
        Segs {
            list: RwLock::new(list),
            first_index: CachePadded::new(AtomicU64::new(first)),
            limits: Limits {
                max_segments: cfg.max_segments,
                max_bytes: cfg.max_bytes,
                max_age_ns: cfg.max_age_ms.map(|ms| ms.saturating_mul(1_000_000)),
            },
            clock: cfg.clock.clone(),
            retired: Mutex::new(Vec::new()),
            reuse: AtomicBool::new(cfg.pretouch),
            dir_dirty: AtomicBool::new(false),
            deleted: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            events: Mutex::new(VecDeque::new()),
        }
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Segment>>> {
        self.list.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Vec<Arc<Segment>>> {
        self.list.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The first index the log holds.
    #[inline]
    pub(super) fn first_index(&self) -> u64 {
        self.first_index.load(Ordering::Acquire)
    }

    pub(super) fn set_first_index(&self, first: u64) {
        self.first_index.store(first, Ordering::Release);
    }

    /// Queues an event for telemetry (the oldest goes past 1024).
    pub(super) fn queue_event(&self, e: Event) {
        let mut ev = lock(&self.events);
        if ev.len() >= 1024 {
            ev.pop_front();
        }
        ev.push_back(e);
    }

    pub(super) fn take_events(&self) -> Vec<Event> {
        lock(&self.events).drain(..).collect()
    }

    /// Takes the segments due (see [`Segs::due`]) out of `segs` (the list,
    /// write-locked by the caller), oldest first, and hands their files on
    /// (see [`Segs::retire`]). Returns how many went.
    pub(super) fn apply(&self, segs: &mut Vec<Arc<Segment>>, floor: u64) -> u64 {
        let now = if self.limits.max_age_ns.is_some() {
            self.clock.now_ns()
        } else {
            0
        };
        // (segments, bytes) per reason, in `Reason::ALL`'s order.
        let mut went = [(0u64, 0u64); 4];
        let mut out = Vec::new();
        while let Some(reason) = self.limits.due(segs, floor, now) {
            let old = segs.remove(0);
            let r = Reason::ALL.iter().position(|&x| x == reason).unwrap_or(0);
            went[r].0 += 1;
            went[r].1 += old.layout.file_len as u64;
            out.push(old);
        }
        if out.is_empty() {
            return 0;
        }
        let first = segs[0].base();
        self.set_first_index(first);
        for (reason, (n, bytes)) in Reason::ALL.into_iter().zip(went) {
            if n > 0 {
                self.queue_event(Event::Retention {
                    reason,
                    deleted_segments: n,
                    deleted_bytes: bytes,
                    first_index: first,
                });
            }
        }
        let n = out.len() as u64;
        self.deleted.fetch_add(n, Ordering::Relaxed);
        self.retire(out);
        n
    }

    /// Makes `seg` the log's only segment (a reset): the others retire.
    pub(super) fn replace_all(&self, seg: Arc<Segment>) {
        let first = seg.base();
        let out = std::mem::replace(&mut *self.write(), vec![seg]);
        self.set_first_index(first);
        let bytes = out.iter().map(|s| s.layout.file_len as u64).sum();
        self.queue_event(Event::Retention {
            reason: Reason::Trim,
            deleted_segments: out.len() as u64,
            deleted_bytes: bytes,
            first_index: first,
        });
        self.deleted.fetch_add(out.len() as u64, Ordering::Relaxed);
        self.retire(out);
    }

    /// Applies retention now (takes the list's lock).
    pub(super) fn apply_now(&self, floor: u64) -> u64 {
        if self.limits.max_age_ns.is_none() && floor == 0 && !self.has_limits() {
            return 0;
        }
        let mut segs = self.write();
        self.apply(&mut segs, floor)
    }

    fn has_limits(&self) -> bool {
        self.limits.max_segments.is_some() || self.limits.max_bytes.is_some()
    }

    /// Whether the age limit has a segment due now (checked under the read
    /// lock, so the pre-touch thread's periodic look costs the writer
    /// nothing when nothing is due).
    pub(super) fn age_due(&self) -> bool {
        let Some(a) = self.limits.max_age_ns else {
            return false;
        };
        let segs = self.read();
        segs.get(1)
            .is_some_and(|next| self.clock.now_ns().saturating_sub(next.created_ns()) >= a)
    }

    /// Hands the files of segments taken out of the log on: to the
    /// pre-touch thread (reused or removed there), or removed on the reaper.
    fn retire(&self, out: Vec<Arc<Segment>>) {
        for s in &out {
            s.deleted.store(true, Ordering::Release);
        }
        self.dir_dirty.store(true, Ordering::Release);
        if self.reuse.load(Ordering::Acquire) {
            lock(&self.retired).extend(out);
        } else {
            crate::worker::defer(move || remove(out));
        }
    }

    /// A retired segment whose file can become a new segment of `cap` data
    /// bytes: of that size, held by nobody else, and mostly in the page
    /// cache. Others stay for [`Segs::tidy`].
    pub(super) fn take_reusable(&self, cap: usize) -> Option<Segment> {
        let mut r = lock(&self.retired);
        let i = r.iter().position(|s| {
            s.layout.data_cap == cap
                && Arc::strong_count(s) == 1
                && s.resident_fraction() >= REUSE_MIN_RESIDENT
        })?;
        match Arc::try_unwrap(r.swap_remove(i)) {
            Ok(seg) => Some(seg),
            // Held again meanwhile (a `sync`): it goes with the others.
            Err(s) => {
                r.push(s);
                None
            }
        }
    }

    /// Removes the retired segments that were not reused.
    pub(super) fn tidy(&self) {
        let out = std::mem::take(&mut *lock(&self.retired));
        if !out.is_empty() {
            remove(out);
            self.dir_dirty.store(true, Ordering::Release);
        }
    }

    /// No thread reuses retired segments from now on (the store closes):
    /// the files of those left are removed now.
    pub(super) fn stop_reuse(&self) {
        self.reuse.store(false, Ordering::Release);
        let out = std::mem::take(&mut *lock(&self.retired));
        remove(out);
    }
}

/// Removes the files of retired segments (a name taken over meanwhile is
/// left alone); each map goes with the last holder of its segment.
fn remove(out: Vec<Arc<Segment>>) {
    for s in out {
        s.remove_if_same_file();
    }
}

impl Store {
    /// Takes every whole segment all of whose records are below `index`
    /// out of the log (never the active one), and returns the first index
    /// the log holds then. Callable from any thread; the files are reused
    /// or removed by the pre-touch thread (or the reaper), not by the
    /// caller. A read below the new first index is
    /// [`StoreError::Trimmed`].
    pub fn trim_below(&self, index: u64) -> Result<u64, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if self.cfg.mode == super::Mode::Read {
            return Err(StoreError::ReadOnly);
        }
        if self.segs.apply_now(index) > 0 {
            self.wake_pretouch();
        }
        Ok(self.segs.first_index())
    }

    /// Where retention by `max_bytes` and `max_age_ms` (as in [`Config`])
    /// would cut the log now, at `floor` at most: the first index of the
    /// oldest segment it would keep (a segment's base; the first index
    /// when nothing would go). Nothing is removed: a caller that must
    /// save something first (a sequencer node's checkpoint) then calls
    /// [`Store::trim_below`] with it.
    pub fn retention_point(
        &self,
        max_bytes: Option<u64>,
        max_age_ms: Option<u64>,
        floor: u64,
    ) -> u64 {
        let limits = Limits {
            max_segments: None,
            max_bytes,
            max_age_ns: max_age_ms.map(|ms| ms.saturating_mul(1_000_000)),
        };
        let now = self.segs.clock.now_ns();
        let segs = self.segs.read();
        let mut i = 0;
        while limits.due(&segs[i..], 0, now).is_some() {
            i += 1;
        }
        while i > 0 && segs[i].base() > floor {
            i -= 1;
        }
        segs.get(i).map_or(self.segs.first_index(), |s| s.base())
    }

    /// Applies retention to the segments found at open.
    pub(super) fn retain_at_open(&self) {
        self.segs.apply_now(0);
    }
}

#[cfg(test)]
mod tests;
