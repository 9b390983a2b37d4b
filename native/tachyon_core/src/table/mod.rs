//! A persistent key-value table in the Krati / Bitcask family: an in-memory
//! hash index over values kept in an append-only log of segment files.
//!
//! * **One writer, many readers.** Writes (`put`, `delete`, `put_many`) are
//!   serialised by one mutex; each is copied into the log (the page cache:
//!   it survives a crash of the process) before the index changes and before
//!   the call returns. Reads take one shard's read lock of the [`index`], so
//!   readers never wait for each other and wait for the writer only for the
//!   duration of one hash-table insert into their shard.
//! * **Three value modes**, after Krati's segment kinds: [`ValueMode::Memory`]
//!   keeps every value in RAM as well (reads never touch the log),
//!   [`ValueMode::Mapped`] reads values from the memory-mapped segments,
//!   [`ValueMode::File`] neither maps nor caches: `pwrite` and `pread`.
//! * **Recovery.** Every sealed segment gets a hint file (its keys, sequence
//!   numbers and value offsets, CRC-checked) once it is durable; `open`
//!   rebuilds the index from the hints and scans only segments without one
//!   (the tail), checking every record's CRC. A torn tail is cut and
//!   reported. Replay keeps, per key, the entry with the highest sequence
//!   number, so the order of files does not matter.
//! * **Compaction** runs in a background thread: a sealed segment whose live
//!   bytes fall under a ratio is rewritten (its live entries copied to a new
//!   segment, with their sequence numbers) and deleted. A delete's tombstone
//!   is only dropped when no older record of any key can remain on disk, so
//!   a deleted key never comes back after compaction and a restart.
//! * **Disk full.** Segments are preallocated with `fallocate` before they
//!   are written: a full disk is an `ENOSPC` error from `put`, and the table
//!   stays as it was.
//!
//! See `docs/FORMAT.md` for the bytes and `docs/ARCHITECTURE.md` for the
//! threads.

pub mod arena;
mod compact;
pub mod config;
pub mod format;
pub mod index;
mod read;
mod recover;
mod roll;
pub mod segment;
mod write;

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use format::*;
use index::Index;

use crate::segment::dir::DirError;
use crate::segment::{Prepared, WriteMap};
use crate::sys::lock;
use crate::wait::Wake;
use crate::worker::Worker;
pub use config::{Config, ValueMode, MAX_SEGMENT, MIN_SEGMENT};
pub use read::{Snapshot, Value};
pub use segment::Segment;

/// Errors of table operations.
#[derive(Debug)]
pub enum TableError {
    Closed,
    /// A key or value (or a batch) over the configured limits.
    TooLarge,
    /// The disk is full (ENOSPC / EDQUOT); the table is unchanged.
    NoSpace,
    /// Another handle (in this or another process) has the table open.
    Locked,
    /// A damaged segment header (a damaged record tail is cut, not an error).
    Corrupt {
        segment: u64,
        offset: u64,
    },
    /// The directory is not this table's (another part's, or of a newer
    /// format): nothing was changed in it.
    Dir(DirError),
    BadConfig(&'static str),
    Io(io::Error),
}

crate::segment::segment_error_impls!(TableError, "corrupt segment");

pub type Result<T> = std::result::Result<T, TableError>;

/// What `open` found and did.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    pub segments: u64,
    /// Segments loaded from their hint file.
    pub hinted_segments: u64,
    /// Segments scanned record by record (CRC checked).
    pub scanned_segments: u64,
    /// Entries replayed (puts and deletes, live or not).
    pub records: u64,
    /// Live keys after recovery.
    pub keys: u64,
    /// Bytes of torn records cut off.
    pub truncated_bytes: u64,
    /// Segment and offset of the (last) cut, if any.
    pub cut: Option<(u64, u64)>,
    /// Unfinished files removed (temporary hints, segments never written).
    pub removed_files: u64,
    pub duration: Duration,
}

/// What one compaction round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compaction {
    pub segments_in: u64,
    pub segments_out: u64,
    /// Bytes of the input segment files.
    pub bytes_in: u64,
    /// Bytes of the output segment files.
    pub bytes_out: u64,
    pub entries_copied: u64,
    pub tombstones_dropped: u64,
    pub duration: Duration,
}

/// Something telemetry should hear about, queued in Rust and taken by the
/// owning process (`take_events`).
#[derive(Debug, Clone)]
pub enum Event {
    Compacted(Compaction),
}

crate::named_fields! {
    /// Counters, read with [`Table::stats`].
    #[derive(Debug, Clone, Default)]
    pub struct Stats {
        pub keys: u64,
        pub puts: u64,
        pub deletes: u64,
        pub batches: u64,
        pub segments: u64,
        /// Blocks in use by segment files.
        pub disk_bytes: u64,
        pub live_bytes: u64,
        pub total_bytes: u64,
        pub compactions: u64,
        pub compacted_bytes_in: u64,
        pub compacted_bytes_out: u64,
        pub syncs: u64,
        pub next_seq: u64,
    }
}

/// Most segments a table may have at once.
const MAX_SLOTS: usize = 1 << 16;
/// How far ahead of the writer the active segment is faulted in.
const PRETOUCH_AHEAD: usize = 4 << 20;
pub(crate) const MAX_EVENTS: usize = 1024;
/// Most bytes of the next record's place prefetched by a put.
const PREFETCH_MAX: usize = 1024;

struct Writer {
    /// `None` once closed (its map and descriptor released).
    active: Option<Arc<Segment>>,
    /// The active segment's writable mapping (mapped modes).
    wmap: Option<Arc<WriteMap>>,
    pos: usize,
    seq: u64,
    /// Encoding buffer for the `File` mode.
    buf: Vec<u8>,
    touched_to: usize,
    puts: u64,
    deletes: u64,
    batches: u64,
}

/// Segments by id, plus free slots.
struct Registry {
    by_id: BTreeMap<u64, Arc<Segment>>,
    free_slots: Vec<u32>,
    next_slot: u32,
}

/// What a compaction round answers a [`Table::compact`] call (an error as
/// its text, or `"enospc"`).
type CompactResult = std::result::Result<Compaction, String>;

struct Inner {
    dir: PathBuf,
    cfg: Config,
    closed: AtomicBool,
    /// Set first thing by `close`/drop: background work stops at the next
    /// check (every few hundred entries) so that joining is quick, and no
    /// compaction request is taken any more.
    stopping: AtomicBool,
    index: Index,
    writer: Mutex<Writer>,
    segs: Mutex<Registry>,
    /// Segment pointers by slot, for readers: valid while an index entry
    /// points at the slot (see `remove_segment`).
    slots: Box<[AtomicPtr<Segment>]>,
    next_id: AtomicU64,
    keys: AtomicU64,
    dir_dirty: AtomicBool,
    /// The maintenance thread's wake-up line (a roll, a compaction request,
    /// the stop).
    maint_wake: Arc<Wake>,
    /// Callers of [`Table::compact`] waiting for the next round's result.
    requests: Mutex<Vec<mpsc::Sender<CompactResult>>>,
    /// The prepare thread's wake-up line (a roll, a writer that wants pages
    /// faulted in, the stop).
    prep_wake: Arc<Wake>,
    /// The active segment and the offset the prepare thread should fault it
    /// in up to.
    want: Mutex<Option<(Arc<Segment>, usize)>>,
    /// The next segments, ready: created, allocated and faulted in whole
    /// (see [`crate::segment::prepare`]).
    prepared: Prepared<Arc<Segment>>,
    /// Bytes of the active segment, for the prepare thread's sizes (it
    /// must not take the writer's lock: a roll holds it while it waits for
    /// the segment being prepared).
    active_cap: AtomicUsize,
    events: Mutex<VecDeque<Event>>,
    compactions: AtomicU64,
    compacted_in: AtomicU64,
    compacted_out: AtomicU64,
    syncs: AtomicU64,
    /// Serialises compaction and hint writing against `close`.
    bg: Mutex<()>,
    lock_file: Mutex<Option<File>>,
}

/// An open table. Dropping it closes it.
pub struct Table {
    inner: Arc<Inner>,
    /// The maintenance thread (`tachyon-table`): periodic sync, hints,
    /// compaction.
    thread: Mutex<Option<Worker>>,
    /// The prepare thread (`tachyon-table-prep`), with `pretouch`.
    prep_thread: Mutex<Option<Worker>>,
    recovery: Recovery,
}

impl Table {
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    fn check_sizes(&self, key: &[u8], val: &[u8]) -> Result<()> {
        let c = &self.inner.cfg;
        if key.len() > c.max_key_size || val.len() > c.max_value_size {
            return Err(TableError::TooLarge);
        }
        Ok(())
    }

    /// Writes `key => val`. In the log (the page cache) when it returns.
    pub fn put(&self, key: &[u8], val: &[u8]) -> Result<()> {
        self.check_sizes(key, val)?;
        self.inner.write_batch(&[(KIND_PUT, key, val)])
    }

    /// Removes `key`. `Ok(false)` if it was not there (nothing is written).
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        if key.len() > self.inner.cfg.max_key_size {
            return Err(TableError::TooLarge);
        }
        self.inner.delete(key)
    }

    /// Writes every pair as one record: after a crash, all or none of them.
    pub fn put_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        let mut total = SEG_HEADER + REC_HEADER;
        for (k, v) in pairs {
            self.check_sizes(k, v)?;
            total += ENTRY_HEADER + k.len() + v.len();
        }
        if total > self.inner.cfg.segment_size {
            return Err(TableError::TooLarge);
        }
        if pairs.is_empty() {
            return if self.inner.closed.load(Ordering::Acquire) {
                Err(TableError::Closed)
            } else {
                Ok(())
            };
        }
        let batch: Vec<(u8, &[u8], &[u8])> =
            pairs.iter().map(|(k, v)| (KIND_PUT, *k, *v)).collect();
        self.inner.write_batch(&batch)
    }

    /// Live keys.
    pub fn count(&self) -> Result<u64> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(TableError::Closed);
        }
        Ok(self.inner.keys.load(Ordering::Acquire))
    }

    /// Makes every write so far durable (fdatasync of the segments written
    /// since the last sync, and of the directory if files were added).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    pub fn stats(&self) -> Result<Stats> {
        let inner = &*self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(TableError::Closed);
        }
        let (puts, deletes, batches, seq) = {
            let w = lock(&inner.writer);
            (w.puts, w.deletes, w.batches, w.seq)
        };
        let mut st = Stats {
            keys: inner.keys.load(Ordering::Relaxed),
            puts,
            deletes,
            batches,
            next_seq: seq,
            compactions: inner.compactions.load(Ordering::Relaxed),
            compacted_bytes_in: inner.compacted_in.load(Ordering::Relaxed),
            compacted_bytes_out: inner.compacted_out.load(Ordering::Relaxed),
            syncs: inner.syncs.load(Ordering::Relaxed),
            ..Stats::default()
        };
        for s in lock(&inner.segs).by_id.values() {
            st.segments += 1;
            st.disk_bytes += s.disk_bytes();
            st.live_bytes += s.live.load(Ordering::Relaxed);
            st.total_bytes += s.total.load(Ordering::Relaxed);
        }
        Ok(st)
    }

    /// Takes the queued events (compactions).
    pub fn take_events(&self) -> Vec<Event> {
        lock(&self.inner.events).drain(..).collect()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Stops the background threads, syncs, and releases memory, maps, file
    /// descriptors and the directory lock. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.shut(true)
    }

    fn shut(&self, sync: bool) -> Result<()> {
        let inner = &*self.inner;
        inner.stopping.store(true, Ordering::Release);
        // A compaction request from now on is refused; the waiting ones get
        // `Closed` (their senders go).
        lock(&inner.requests).clear();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        // The prepare thread removes the segments it had prepared.
        if let Some(t) = lock(&self.prep_thread).take() {
            let _ = t.join();
        }
        lock(&inner.requests).clear();
        *lock(&inner.want) = None;
        for s in inner.prepared.drain() {
            // Prepared, never written: not part of the table.
            inner.remove_segment(&s);
        }
        let _bg = lock(&inner.bg);
        let mut w = lock(&inner.writer);
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let res = if sync {
            inner.sync_segments(inner.unsynced(&w))
        } else {
            Ok(())
        };
        // Give back the preallocated tail of the active segment.
        w.wmap = None;
        if let Some(a) = w.active.take() {
            let _ = a.truncate(w.pos as u64);
        }
        // Barrier: a reader that saw `closed == false` holds its shard's read
        // lock; taking every write lock waits for all of them.
        for i in 0..inner.index.shard_count() {
            let mut s = inner.index.write_shard(i);
            *s = index::Shard::default();
            // (The prefetch addresses go stale: harmless.)
        }
        {
            let mut reg = lock(&inner.segs);
            for s in reg.by_id.values() {
                inner.slots[s.slot as usize].store(std::ptr::null_mut(), Ordering::Release);
            }
            reg.by_id.clear();
        }
        drop(w);
        *lock(&inner.lock_file) = None;
        res
    }
}

impl Drop for Table {
    /// Closes without the final fdatasync (every write is in the page cache
    /// already) and without waiting: a table is dropped by whichever BEAM
    /// scheduler collected its handle, which must not wait for the
    /// background threads (a compaction round may be under way) nor unmap
    /// segments, so the close runs on the reaper thread
    /// ([`crate::worker::defer`]).
    fn drop(&mut self) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        let t = Table {
            inner: self.inner.clone(),
            thread: Mutex::new(lock(&self.thread).take()),
            prep_thread: Mutex::new(lock(&self.prep_thread).take()),
            recovery: Recovery::default(),
        };
        crate::worker::defer(move || {
            let _ = t.shut(false);
        });
    }
}

#[cfg(test)]
mod tests;
