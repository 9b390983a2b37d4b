//! The append-only message log on memory-mapped segment files.
//!
//! One writer per directory (an `flock` on `.lock`), any number of readers in
//! this process (through the same [`Store`]) and in other processes (a
//! [`Store`] opened with [`Mode::Read`]). Appends copy into the mapped active
//! segment and publish each record with one release store of its header, so a
//! reader never sees a torn record. A pre-touch thread faults pages in ahead
//! of the writer and prepares the next segments, so a steady writer takes no
//! page fault and no file creation on its path (the segment files, their
//! maps and the prepared-segment queue are [`crate::segment`]'s).
//!
//! * [`open`](Store::open) and recovery: `open.rs`, `recover.rs` (also
//!   [`truncate_dir`] and [`reset_dir`]);
//! * appends and `sync`: `write.rs`; rolls and the pre-touch thread:
//!   `roll.rs`; retention ([`Store::trim_below`], what becomes of retired
//!   files): `retain.rs`; reads: `read.rs`.
//!
//! See `docs/FORMAT.md` for the bytes and `docs/ARCHITECTURE.md` for the
//! threads.

pub mod format;
mod open;
mod read;
mod recover;
mod retain;
mod roll;
pub mod segment;
mod write;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::segment::dir::{DirError, Kind};
use crate::segment::{Growth, WriteMap};
use crate::spin::SpinMutex;
use crate::sys::lock;
use crate::worker::Worker;
use format::*;
#[cfg(test)]
use open::list_segments;
pub use recover::{reset_dir, truncate_dir};
use retain::Segs;
use roll::Touch;
pub use segment::{OpenError, RecordError, Segment};

pub use crate::segment::MAX_PREPARED_SEGMENTS;

/// Errors of store operations.
#[derive(Debug)]
pub enum StoreError {
    Closed,
    NotFound,
    MessageTooLarge,
    NoSpace,
    Locked,
    ReadOnly,
    /// The index is below the first one the log still holds (retention
    /// or [`Store::trim_below`] deleted it): the first index available.
    Trimmed(u64),
    Corrupt {
        segment: u64,
        offset: u64,
    },
    /// A record that does not verify in the middle of the log, found at
    /// open: `repair: true` would cut the log there, losing `records`
    /// records (`bytes` bytes of data) from `segment` on.
    Damaged {
        segment: u64,
        offset: u64,
        records: u64,
        bytes: u64,
    },
    /// The directory is not this store's (another part's, or of a newer
    /// format): nothing was changed in it.
    Dir(DirError),
    BadConfig(&'static str),
    Io(io::Error),
}

crate::segment::segment_error_impls!(StoreError, "corrupt record in segment");

impl From<OpenError> for StoreError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Io(e) => e.into(),
            OpenError::Corrupt { segment, offset } => StoreError::Corrupt { segment, offset },
        }
    }
}

/// Writer or reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Write,
    Read,
}

/// Which segments recovery verifies record by record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Only the active (last) segment; sealed ones are checked on read.
    Active,
    /// Every segment.
    All,
}

/// Store options.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: Mode,
    /// Which part owns the directory (`Store`; a sequencer node's log says
    /// `Sequencer`): a writer refuses a directory of another kind, and a
    /// new directory is claimed for this one (see [`crate::segment::dir`]).
    pub kind: Kind,
    /// Data bytes of the largest segments.
    pub segment_size: usize,
    /// Data bytes of the first segment of a new log (raised to fit a
    /// message of `max_message_size`); each next segment has twice the
    /// one before it, up to `segment_size` (see [`Growth`]).
    pub initial_segment_size: usize,
    pub max_message_size: usize,
    /// Retention: keep at most this many segments (the oldest go first,
    /// never the active one; see `retain.rs`).
    pub max_segments: Option<usize>,
    /// Retention: keep at most this many bytes of segment files (never
    /// the active one).
    pub max_bytes: Option<u64>,
    /// Retention: delete a segment once its newest record is older than
    /// this many milliseconds (its age: the time since the next segment
    /// was activated, which is when it was sealed).
    pub max_age_ms: Option<u64>,
    /// The time, for segment headers and retention by age.
    pub clock: Clock,
    /// Run the pre-touch thread.
    pub pretouch: bool,
    /// How far ahead of the write position pages are faulted in (in an
    /// active segment the pre-touch thread did not prepare whole).
    pub pretouch_ahead: usize,
    /// Segments the pre-touch thread keeps ready (created, allocated and
    /// faulted in whole) ahead of the writer; the first ones at open.
    pub prepared_segments: usize,
    /// Cut a corrupt record in the middle of the log instead of failing.
    pub repair: bool,
    pub verify: Verify,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Write,
            kind: Kind::Store,
            segment_size: 64 << 20,
            initial_segment_size: 2 << 20,
            max_message_size: 1 << 20,
            max_segments: None,
            max_bytes: None,
            max_age_ms: None,
            clock: Clock::default(),
            pretouch: true,
            pretouch_ahead: 32 << 20,
            prepared_segments: 4,
            repair: false,
            verify: Verify::Active,
        }
    }
}

impl Config {
    fn validate(&self) -> Result<(), StoreError> {
        if !(MIN_DATA_CAP..=MAX_DATA_CAP).contains(&self.segment_size)
            || !self.segment_size.is_multiple_of(8)
        {
            return Err(StoreError::BadConfig(
                "segment_size must be a multiple of 8 between 64 KiB and 3 GiB",
            ));
        }
        if self.max_message_size > MAX_PAYLOAD
            || record_size(self.max_message_size) > self.segment_size
        {
            return Err(StoreError::BadConfig(
                "max_message_size must fit in a segment",
            ));
        }
        if self.prepared_segments > MAX_PREPARED_SEGMENTS {
            return Err(StoreError::BadConfig(
                "prepared_segments must be at most 16",
            ));
        }
        if self.max_segments == Some(0) {
            return Err(StoreError::BadConfig("max_segments must be at least 1"));
        }
        if self.max_bytes == Some(0) {
            return Err(StoreError::BadConfig("max_bytes must be at least 1"));
        }
        if self.max_age_ms == Some(0) {
            return Err(StoreError::BadConfig("max_age_ms must be at least 1"));
        }
        if !(MIN_DATA_CAP..=MAX_DATA_CAP).contains(&self.initial_segment_size) {
            return Err(StoreError::BadConfig(
                "initial_segment_size must be between 64 KiB and 3 GiB",
            ));
        }
        Ok(())
    }

    /// The sizes of the segments: from `initial_segment_size`, raised to
    /// hold the largest message and rounded up to a multiple of 8, doubling
    /// up to `segment_size`.
    pub fn growth(&self) -> Growth {
        let first = self
            .initial_segment_size
            .max(record_size(self.max_message_size));
        Growth::new(align_up(first, 8), self.segment_size)
    }
}

/// What recovery found and did when a writer opened the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    pub segments: u64,
    pub messages: u64,
    /// Records checked (CRC) and kept by the scan.
    pub recovered: u64,
    pub truncated_bytes: u64,
    pub lost_records: u64,
    /// `None`, `Some("torn_tail")` or `Some("repaired")`.
    pub cut: Option<&'static str>,
    pub cut_segment: Option<u64>,
    pub cut_offset: Option<u64>,
    /// Prepared-but-unused segment files removed.
    pub removed_unused: u64,
    /// Segment sequence number that was scanned last.
    pub scanned_segment: u64,
    pub duration: Duration,
}

/// Where a store reads the time (Unix nanoseconds): the system's clock,
/// or one a test sets ([`Clock::new`]).
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<dyn Fn() -> u64 + Send + Sync>>);

impl Clock {
    /// A clock that reads `now`.
    pub fn new(now: impl Fn() -> u64 + Send + Sync + 'static) -> Clock {
        Clock(Some(Arc::new(now)))
    }

    /// The time, Unix nanoseconds.
    pub fn now_ns(&self) -> u64 {
        match &self.0 {
            Some(f) => f(),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Clock(set)"
        } else {
            "Clock(system)"
        })
    }
}

/// Why retention took segments out of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    MaxSegments,
    MaxBytes,
    MaxAge,
    /// [`Store::trim_below`].
    Trim,
}

impl Reason {
    pub const ALL: [Reason; 4] = [
        Reason::Trim,
        Reason::MaxSegments,
        Reason::MaxBytes,
        Reason::MaxAge,
    ];

    /// The name telemetry gives it (`:max_segments`, ..., `:trim`).
    pub fn name(self) -> &'static str {
        match self {
            Reason::MaxSegments => "max_segments",
            Reason::MaxBytes => "max_bytes",
            Reason::MaxAge => "max_age",
            Reason::Trim => "trim",
        }
    }
}

/// Something telemetry should hear about, queued by the writer (rolls)
/// and by retention (whoever applied it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Roll {
        segment: u64,
        base_index: u64,
        prepared: bool,
        roll_ns: u64,
        deleted_segments: u64,
    },
    /// Segments taken out of the log (their files removed or reused).
    Retention {
        reason: Reason,
        deleted_segments: u64,
        deleted_bytes: u64,
        first_index: u64,
    },
}

crate::named_fields! {
    /// Counters, read with [`Store::stats`].
    #[derive(Debug, Clone, Default)]
    pub struct Stats {
        pub appended: u64,
        pub appended_bytes: u64,
        pub rolls: u64,
        pub prepared_rolls: u64,
        /// Segments retention took out of the log.
        pub deleted_segments: u64,
        /// Of those, files reused as new segments (not zero-filled again).
        pub reused_segments: u64,
        pub segments: u64,
        pub first_index: u64,
        pub next_index: u64,
        pub disk_bytes: u64,
        pub unsynced_bytes: u64,
        /// The pre-touch thread is running.
        pub pretouch: bool,
    }
}

/// The writer's state, behind the store's spin lock.
struct Writer {
    active: Arc<Segment>,
    /// The writable map of `active` (the segment holds it too until it is
    /// sealed): appends write through it without taking the map's lock.
    wmap: Arc<WriteMap>,
    /// Next data offset (relative to the data region) in `active`.
    pos: usize,
    /// Next slot in `active`.
    slot: usize,
    next_index: u64,
    /// Sealed segments with unsynced data (weak: retention, on any thread,
    /// may take them out of the log and reuse their files).
    unsynced: Vec<Weak<Segment>>,
    /// Data offset in `active` up to which `sync` has flushed.
    synced_pos: usize,
    synced_slot: usize,
    /// The active segment's header may differ from what is on the disk
    /// (activated, or its seal cleared at open, since the last sync).
    header_dirty: bool,
    appended: u64,
    appended_bytes: u64,
    rolls: u64,
    prepared_rolls: u64,
}

/// An open store: a writer (with readers in this process) or a reader.
pub struct Store {
    dir: PathBuf,
    cfg: Config,
    writer: SpinMutex<Option<Writer>>,
    /// The segments, the first index and retention, shared with the
    /// pre-touch thread.
    segs: Arc<Segs>,
    next_index: CachePadded<AtomicU64>,
    closed: AtomicBool,
    touch: Option<Arc<Touch>>,
    toucher: Mutex<Option<Worker>>,
    lock_file: Mutex<Option<File>>,
    recovery: Recovery,
}

impl Store {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Takes the queued events (rolls, retention) for telemetry.
    pub fn take_events(&self) -> Vec<Event> {
        self.segs.take_events()
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        if let Some(w) = self.writer.lock().as_ref() {
            s.appended = w.appended;
            s.appended_bytes = w.appended_bytes;
            s.rolls = w.rolls;
            s.prepared_rolls = w.prepared_rolls;
            s.unsynced_bytes = (w.pos - w.synced_pos) as u64
                + w.unsynced
                    .iter()
                    .filter_map(Weak::upgrade)
                    .filter(|s| !s.deleted.load(Ordering::Acquire))
                    .map(|s| s.layout.data_cap as u64)
                    .sum::<u64>();
        }
        s.deleted_segments = self.segs.deleted.load(Ordering::Relaxed);
        s.reused_segments = self.segs.reused.load(Ordering::Relaxed);
        let _ = self.refresh();
        let segs = self.segs.read();
        s.segments = segs.len() as u64;
        s.disk_bytes = segs.iter().map(|x| x.layout.file_len as u64).sum();
        s.first_index = self.segs.first_index();
        s.next_index = self.next_index.load(Ordering::Acquire);
        drop(segs);
        s.pretouch = self.pretouch_running();
        s
    }

    /// Closes the store: no more appends or reads, the pre-touch thread is
    /// stopped and joined (it removes the segments it had prepared),
    /// writeback is started (not waited for: call [`Store::sync`] first for
    /// durability), the segments unmapped, the directory lock released.
    /// Idempotent. Blocks for the join and the unmaps: from the BEAM, on a
    /// dirty scheduler (a dropped store hands both to threads).
    pub fn close(&self) {
        self.shut(true)
    }

    fn shut(&self, wait: bool) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let w = self.writer.lock().take();
        if let Some(worker) = lock(&self.toucher).take() {
            if wait {
                let _ = worker.join();
            }
            // (Else dropped: stopped, and joined by the reaper.)
        }
        if let Some(w) = &w {
            w.active.sync_async();
        }
        let segs = std::mem::take(&mut *self.segs.write());
        // Retired segments no thread will reuse now: their files removed
        // here, before the lock goes (a few unlinks, even for a dropped
        // store), so that a reopen never finds what retention took out.
        self.segs.stop_reuse();
        lock(&self.lock_file).take();
        if !wait {
            // Unmapping every segment takes milliseconds per 64 MiB: not on
            // the scheduler that collected the store.
            crate::worker::defer(move || drop((w, segs)));
        }
    }

    /// The writer's active segment and data position (for tests).
    #[doc(hidden)]
    pub fn active_position(&self) -> Option<(u64, usize)> {
        self.writer.lock().as_ref().map(|w| (w.active.seq, w.pos))
    }

    /// Segments the pre-touch thread has ready (for tests).
    #[doc(hidden)]
    pub fn prepared_segments(&self) -> usize {
        self.touch.as_ref().map_or(0, |t| t.prepared_len())
    }

    /// Whether the pre-touch thread is running.
    pub fn pretouch_running(&self) -> bool {
        lock(&self.toucher)
            .as_ref()
            .is_some_and(|w| !w.is_finished())
    }
}

impl Drop for Store {
    /// Closes without waiting for anything (a store is dropped by whichever
    /// BEAM scheduler collected its handle): the pre-touch thread stops on
    /// its own, removing the segments it had prepared, and the reaper joins
    /// it and unmaps the segments.
    fn drop(&mut self) {
        self.shut(false);
    }
}

#[cfg(test)]
mod tests;
