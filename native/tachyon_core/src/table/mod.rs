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

pub mod format;
pub mod index;
pub mod segment;

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use format::*;
use index::{Index, Node};

use crate::sys::{fsync_dir, lock};
use crate::worker::Worker;
pub use segment::{Segment, WriteMap};

/// How values are stored and read (Krati's Memory / Mapped / Channel
/// segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueMode {
    /// Values in RAM too; reads never touch the log.
    Memory,
    /// Values read from memory-mapped segment files.
    Mapped,
    /// No mapping: `pwrite` to append, `pread` to read.
    File,
}

impl ValueMode {
    pub fn parse(s: &str) -> Option<ValueMode> {
        match s {
            "memory" => Some(ValueMode::Memory),
            "mapped" => Some(ValueMode::Mapped),
            "file" => Some(ValueMode::File),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueMode::Memory => "memory",
            ValueMode::Mapped => "mapped",
            ValueMode::File => "file",
        }
    }

    fn maps(self) -> bool {
        self != ValueMode::File
    }
}

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
    BadConfig(&'static str),
    Io(io::Error),
}

impl From<io::Error> for TableError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => TableError::NoSpace,
            _ => TableError::Io(e),
        }
    }
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::Corrupt { segment, offset } => {
                write!(f, "corrupt segment {segment} at offset {offset}")
            }
            TableError::BadConfig(s) => write!(f, "bad config: {s}"),
            TableError::Io(e) => write!(f, "{e}"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for TableError {}

pub type Result<T> = std::result::Result<T, TableError>;

/// Table options.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: ValueMode,
    /// Bytes per segment file (preallocated for the active one).
    pub segment_size: usize,
    pub max_key_size: usize,
    pub max_value_size: usize,
    /// Periodic `sync` by the background thread.
    pub sync_interval: Option<Duration>,
    /// A sealed segment whose live bytes / total bytes fall under this is
    /// compacted.
    pub compaction_threshold: f64,
    /// How often the background thread looks for segments to compact
    /// (`None`: only on `compact`).
    pub compaction_interval: Option<Duration>,
    /// Index shards (rounded up to a power of two).
    pub shards: usize,
    /// Expected number of keys (index preallocation).
    pub capacity: usize,
    /// Fault pages of the active segment in ahead of the writer.
    pub pretouch: bool,
    /// Segments kept ready (created, allocated, faulted in whole) ahead of
    /// the writer with `pretouch`, the first ones during `open`.
    pub prepared_segments: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: ValueMode::Mapped,
            segment_size: 64 << 20,
            max_key_size: 64 * 1024,
            max_value_size: 1 << 20,
            sync_interval: None,
            compaction_threshold: 0.5,
            compaction_interval: Some(Duration::from_secs(5)),
            shards: 256,
            capacity: 0,
            pretouch: true,
            prepared_segments: 4,
        }
    }
}

pub const MIN_SEGMENT: usize = 64 * 1024;
pub const MAX_SEGMENT: usize = 1 << 30;

impl Config {
    fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&self.segment_size) {
            return Err(TableError::BadConfig(
                "segment_size must be between 64 KiB and 1 GiB",
            ));
        }
        if self.max_key_size == 0 || self.max_key_size > u32::MAX as usize {
            return Err(TableError::BadConfig("max_key_size must be positive"));
        }
        if SEG_HEADER + REC_HEADER + ENTRY_HEADER + self.max_key_size + self.max_value_size
            > self.segment_size
        {
            return Err(TableError::BadConfig(
                "max_key_size + max_value_size must fit in a segment",
            ));
        }
        if !(self.compaction_threshold >= 0.0 && self.compaction_threshold <= 1.0) {
            return Err(TableError::BadConfig(
                "compaction_threshold must be between 0.0 and 1.0",
            ));
        }
        if self.prepared_segments > crate::store::MAX_PREPARED_SEGMENTS {
            return Err(TableError::BadConfig(
                "prepared_segments must be at most 16",
            ));
        }
        if self.shards == 0 || self.shards > 65536 {
            return Err(TableError::BadConfig("shards must be between 1 and 65536"));
        }
        Ok(())
    }
}

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

/// Most segments a table may have at once.
const MAX_SLOTS: usize = 1 << 16;
/// How far ahead of the writer the active segment is faulted in.
const PRETOUCH_AHEAD: usize = 4 << 20;
const MAX_EVENTS: usize = 1024;
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

#[derive(Default)]
struct Maint {
    stop: bool,
    /// Compaction requests made / served.
    requested: u64,
    served: u64,
    last: Option<std::result::Result<Compaction, String>>,
    wake: bool,
}

struct Inner {
    dir: PathBuf,
    cfg: Config,
    closed: AtomicBool,
    /// Set first thing by `close`/drop: background work stops at the next
    /// check (every few hundred entries) so that joining is quick.
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
    maint: Mutex<Maint>,
    maint_cv: Condvar,
    events: Mutex<VecDeque<Event>>,
    compactions: AtomicU64,
    compacted_in: AtomicU64,
    compacted_out: AtomicU64,
    syncs: AtomicU64,
    /// Serialises compaction and hint writing against `close`.
    bg: Mutex<()>,
    lock_file: Mutex<Option<File>>,
    prep: Prep,
}

/// Work for the prepare thread: fault in the active segment ahead of the
/// writer, and have the next segment created (preallocated, its first pages
/// faulted in) before the writer needs it, so that neither page faults nor
/// `fallocate` land on the writer's path.
#[derive(Default)]
struct Prep {
    stop: AtomicBool,
    /// The active segment and the offset to fault in up to.
    want: Mutex<Option<(Arc<Segment>, usize)>>,
    /// The next segments, ready: created, allocated and faulted in whole
    /// (at most `Config::prepared_segments`; see the store's
    /// `MAX_PREPARED_SEGMENTS` for why whole and several).
    next: Mutex<VecDeque<Arc<Segment>>>,
    /// Held while the thread creates and faults in a segment: a roll that
    /// finds none ready waits for that one rather than creating its own and
    /// failing for the disk space the other takes.
    creating: Mutex<()>,
    thread: Mutex<Option<std::thread::Thread>>,
}

impl Prep {
    fn kick(&self) {
        if let Some(t) = lock(&self.thread).as_ref() {
            t.unpark();
        }
    }
}

/// An open table. Dropping it closes it.
pub struct Table {
    inner: Arc<Inner>,
    thread: Mutex<Option<Worker>>,
    prep_thread: Mutex<Option<Worker>>,
    recovery: Recovery,
}

fn write_file_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        io::Write::write_all(&mut f, bytes)?;
        f.sync_data()?;
    }
    fs::rename(&tmp, path)
}

/// Recovery replays entries in groups: the index slots of a whole group are
/// prefetched first, so that their cache misses overlap instead of coming
/// one after the other (the replay is bound by them).
/// The segment's counters are summed here and stored once at the end.
struct Replay<'d> {
    entries: Vec<(EntryRef<'d>, u64)>,
    total: u64,
    tombs: u64,
    min_seq: u64,
    max_seq: u64,
}

impl<'d> Replay<'d> {
    const GROUP: usize = 32;

    fn new() -> Self {
        Replay {
            entries: Vec::with_capacity(Self::GROUP),
            total: 0,
            tombs: 0,
            min_seq: u64::MAX,
            max_seq: 0,
        }
    }

    fn push(
        &mut self,
        inner: &Inner,
        seg: &Segment,
        e: EntryRef<'d>,
        tombstones: &mut hashbrown::HashMap<Box<[u8]>, u64>,
    ) {
        let cost = entry_cost(e.key.len(), e.vlen as usize);
        self.total += cost;
        if e.kind == KIND_DEL {
            self.tombs += cost;
        }
        self.min_seq = self.min_seq.min(e.seq);
        self.max_seq = self.max_seq.max(e.seq);
        let h = inner.index.hash(e.key);
        inner.index.prefetch(h);
        self.entries.push((e, h));
        if self.entries.len() == Self::GROUP {
            self.flush(inner, seg, tombstones);
        }
    }

    fn flush(
        &mut self,
        inner: &Inner,
        seg: &Segment,
        tombstones: &mut hashbrown::HashMap<Box<[u8]>, u64>,
    ) {
        for (e, h) in self.entries.drain(..) {
            inner.replay(seg, e, h, tombstones);
        }
    }

    /// Replays what is left and stores the segment's counters.
    fn finish(
        mut self,
        inner: &Inner,
        seg: &Segment,
        tombstones: &mut hashbrown::HashMap<Box<[u8]>, u64>,
    ) {
        self.flush(inner, seg, tombstones);
        seg.total.fetch_add(self.total, Ordering::Relaxed);
        seg.tombs.fetch_add(self.tombs, Ordering::Relaxed);
        seg.min_seq.fetch_min(self.min_seq, Ordering::Relaxed);
        seg.max_seq.fetch_max(self.max_seq, Ordering::Relaxed);
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
    /// Opens (creating if needed) the table in `dir`, recovering its index.
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<Table> {
        cfg.validate()?;
        let t0 = Instant::now();
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(".lock"))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                TableError::Locked
            } else {
                e.into()
            });
        }

        let slots: Box<[AtomicPtr<Segment>]> = (0..MAX_SLOTS)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        let mut inner = Inner {
            dir: dir.clone(),
            index: Index::new(cfg.shards, cfg.capacity),
            cfg: cfg.clone(),
            closed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            writer: Mutex::new(Writer {
                active: None,
                wmap: None,
                pos: 0,
                seq: 1,
                buf: Vec::new(),
                touched_to: 0,
                puts: 0,
                deletes: 0,
                batches: 0,
            }),
            segs: Mutex::new(Registry {
                by_id: BTreeMap::new(),
                free_slots: Vec::new(),
                next_slot: 0,
            }),
            slots,
            next_id: AtomicU64::new(1),
            keys: AtomicU64::new(0),
            dir_dirty: AtomicBool::new(false),
            maint: Mutex::new(Maint::default()),
            maint_cv: Condvar::new(),
            events: Mutex::new(VecDeque::new()),
            compactions: AtomicU64::new(0),
            compacted_in: AtomicU64::new(0),
            compacted_out: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            bg: Mutex::new(()),
            lock_file: Mutex::new(None),
            prep: Prep::default(),
        };
        let mut recovery = inner.recover()?;
        recovery.duration = t0.elapsed();
        *lock(&inner.lock_file) = Some(lock_file);
        inner.keys.store(recovery.keys, Ordering::Relaxed);
        let inner = Arc::new(inner);
        let bg = inner.clone();
        let thread = Worker::spawn("tachyon-table", None, move |_| bg.maintenance_loop())
            .map_err(TableError::Io)?;
        let table = Table {
            inner: inner.clone(),
            thread: Mutex::new(Some(thread)),
            prep_thread: Mutex::new(None),
            recovery,
        };
        if table.inner.cfg.pretouch {
            // The first next segments are made ready here (`open` runs on
            // a dirty scheduler): a writer that starts at once must not
            // catch up with the thread's faulting-in.
            inner.fill_prepared();
            let bg = inner.clone();
            let t = Worker::spawn("tachyon-table-prep", None, move |_| {
                *lock(&bg.prep.thread) = Some(std::thread::current());
                bg.prepare_loop()
            })
            .map_err(TableError::Io)?;
            *lock(&table.prep_thread) = Some(t);
            inner.prep.kick();
        }
        Ok(table)
    }

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

    /// Seals the active segment if it holds garbage and compacts every
    /// sealed segment with any garbage, in the background thread; returns
    /// when that round is done.
    pub fn compact(&self) -> Result<Compaction> {
        let inner = &*self.inner;
        let mut m = lock(&inner.maint);
        if inner.closed.load(Ordering::Acquire) || m.stop {
            return Err(TableError::Closed);
        }
        m.requested += 1;
        let want = m.requested;
        m.wake = true;
        inner.maint_cv.notify_all();
        while m.served < want && !m.stop {
            m = inner.maint_cv.wait(m).unwrap_or_else(|p| p.into_inner());
        }
        if m.served < want {
            return Err(TableError::Closed);
        }
        match m.last.clone() {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) if e == "enospc" => Err(TableError::NoSpace),
            Some(Err(e)) => Err(TableError::Io(io::Error::other(e))),
            None => Ok(Compaction::default()),
        }
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

    /// Stops the background thread, syncs, and releases memory, maps, file
    /// descriptors and the directory lock. Idempotent.
    pub fn close(&self) -> Result<()> {
        self.shut(true)
    }

    fn shut(&self, sync: bool) -> Result<()> {
        let inner = &*self.inner;
        inner.stopping.store(true, Ordering::Release);
        {
            let mut m = lock(&inner.maint);
            m.stop = true;
            inner.maint_cv.notify_all();
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        inner.prep.stop.store(true, Ordering::Release);
        inner.prep.kick();
        if let Some(t) = lock(&self.prep_thread).take() {
            let _ = t.join();
        }
        *lock(&inner.prep.thread) = None;
        *lock(&inner.prep.want) = None;
        let prepared: Vec<_> = lock(&inner.prep.next).drain(..).collect();
        for s in prepared {
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
    /// background threads (a compaction round may be under way), so the
    /// close runs on a thread of its own (`tachyon-table-close`, joined by
    /// the worker reaper).
    fn drop(&mut self) {
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        let t = Table {
            inner: self.inner.clone(),
            thread: Mutex::new(
                self.thread
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(),
            ),
            prep_thread: Mutex::new(
                self.prep_thread
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .take(),
            ),
            recovery: Recovery::default(),
        };
        let slot = Arc::new(Mutex::new(Some(t)));
        let s2 = slot.clone();
        let spawned = Worker::spawn("tachyon-table-close", None, move |_| {
            if let Some(t) = lock(&s2).take() {
                let _ = t.shut(false);
            }
        });
        match spawned {
            Ok(w) => drop(w),
            // No thread to be had: close here after all.
            Err(_) => {
                if let Some(t) = lock(&slot).take() {
                    let _ = t.shut(false);
                }
            }
        }
    }
}

impl Inner {
    #[inline]
    fn seg_at(&self, slot: u32) -> &Segment {
        let p = self.slots[slot as usize].load(Ordering::Acquire);
        assert!(!p.is_null(), "index entry points at an empty segment slot");
        // SAFETY: an index entry points at this slot, and the caller holds
        // the entry's shard lock (or the writer lock, or is the background
        // thread that alone removes segments): `remove_segment` clears the
        // slot only after every entry pointing into it has been moved under
        // its shard's write lock, so the segment outlives this borrow.
        unsafe { &*p }
    }

    fn alloc_slot(reg: &mut Registry) -> Result<u32> {
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

    fn register(&self, seg: Segment) -> Arc<Segment> {
        let seg = Arc::new(seg);
        self.slots[seg.slot as usize].store(Arc::as_ptr(&seg) as *mut Segment, Ordering::Release);
        lock(&self.segs).by_id.insert(seg.id, seg.clone());
        seg
    }

    /// Creates and registers a new writable segment.
    fn new_segment(&self) -> Result<Arc<Segment>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Self::alloc_slot(&mut lock(&self.segs))?;
        match Segment::create(
            &self.dir,
            id,
            slot,
            self.cfg.segment_size,
            self.cfg.mode.maps(),
        ) {
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
    fn remove_segment(&self, seg: &Arc<Segment>) {
        let mut reg = lock(&self.segs);
        self.slots[seg.slot as usize].store(std::ptr::null_mut(), Ordering::Release);
        reg.by_id.remove(&seg.id);
        reg.free_slots.push(seg.slot);
        drop(reg);
        seg.remove_files();
        self.dir_dirty.store(true, Ordering::Release);
    }

    // ---------------------------------------------------------------- write

    /// Appends one record holding `batch` and applies it to the index.
    fn write_batch(&self, batch: &[(u8, &[u8], &[u8])]) -> Result<()> {
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
            self.roll(&mut guard)?;
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
            *lock(&self.prep.want) = Some((seg.clone(), w.touched_to));
            self.prep.kick();
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

    fn delete(&self, key: &[u8]) -> Result<bool> {
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

    /// Seals the active segment and starts a new one. On error (disk full)
    /// the old segment stays active.
    fn roll(&self, w: &mut Writer) -> Result<()> {
        // The segment the prepare thread made ready, or a new one now.
        let mut ready = lock(&self.prep.next).pop_front();
        if ready.is_none() && self.cfg.pretouch {
            // One may be on its way: wait for it.
            let _c = lock(&self.prep.creating);
            ready = lock(&self.prep.next).pop_front();
        }
        let new = match ready {
            Some(s) => s,
            None => self.new_segment()?,
        };
        // The old segment's writable mapping: the writer's hold goes now,
        // before the segment is sealed; the background thread releases the
        // segment's own before syncing it (`finish_segment`), which unmaps
        // it off the writer's path.
        w.wmap = new.writable_map();
        if let Some(old) = w.active.replace(new) {
            old.end.store(w.pos as u64, Ordering::Release);
            old.sealed.store(true, Ordering::Release);
        }
        w.pos = SEG_HEADER;
        w.touched_to = SEG_HEADER;
        self.prep.kick();
        self.wake();
        Ok(())
    }

    /// Prepares next segments until `Config::prepared_segments` are ready
    /// (or a stop): each one created, allocated and faulted in whole. False
    /// if one could not be created (a full disk).
    fn fill_prepared(&self) -> bool {
        while lock(&self.prep.next).len() < self.cfg.prepared_segments {
            if self.prep.stop.load(Ordering::Acquire) || self.closed.load(Ordering::Acquire) {
                return true;
            }
            let _c = lock(&self.prep.creating);
            let s = match self.new_segment() {
                Ok(s) => s,
                Err(_) => return false,
            };
            s.populate(0, s.cap, self.cfg.mode == ValueMode::Mapped);
            s.touched.store(s.cap, Ordering::Release);
            lock(&self.prep.next).push_back(s);
        }
        true
    }

    /// The prepare thread (see [`Prep`]). Parks until kicked (or 100 ms).
    fn prepare_loop(self: Arc<Self>) {
        let mut failed_at: Option<Instant> = None;
        while !self.prep.stop.load(Ordering::Acquire) {
            let want = lock(&self.prep.want).take();
            if let Some((seg, to)) = want {
                let from = seg.touched.load(Ordering::Acquire);
                if to > from && !seg.sealed.load(Ordering::Acquire) {
                    seg.populate(from, to, self.cfg.mode == ValueMode::Mapped);
                    seg.touched.store(to, Ordering::Release);
                }
            }
            // After a failure (disk full), retry at most every second.
            let retry = failed_at.is_none_or(|t| t.elapsed() > Duration::from_secs(1));
            if retry {
                failed_at = if self.fill_prepared() {
                    None
                } else {
                    Some(Instant::now())
                };
            }
            if lock(&self.prep.want).is_none() {
                std::thread::park_timeout(Duration::from_millis(100));
            }
        }
    }

    fn wake(&self) {
        let mut m = lock(&self.maint);
        m.wake = true;
        self.maint_cv.notify_all();
    }

    /// Syncs what was written before the call. The writer lock is held only
    /// to read the positions: writers go on during the fdatasyncs.
    fn sync(&self) -> Result<()> {
        let todo = {
            let w = lock(&self.writer);
            if self.closed.load(Ordering::Acquire) {
                return Err(TableError::Closed);
            }
            self.unsynced(&w)
        };
        self.sync_segments(todo)
    }

    fn unsynced(&self, w: &Writer) -> Vec<(Arc<Segment>, u64)> {
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

    fn sync_segments(&self, todo: Vec<(Arc<Segment>, u64)>) -> Result<()> {
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

    // ------------------------------------------------------------- recovery

    fn recover(&mut self) -> Result<Recovery> {
        let mut rec = Recovery::default();
        // A compaction that crashed while deleting its inputs: finish it
        // (its outputs were durable before the manifest was written).
        let manifest = self.dir.join(MANIFEST_FILE);
        match fs::read(&manifest) {
            Ok(bytes) => {
                if let Some(ids) = decode_manifest(&bytes) {
                    for id in ids {
                        let seg = self.dir.join(segment_file_name(id));
                        if seg.exists() {
                            fs::remove_file(&seg)?;
                            rec.removed_files += 1;
                        }
                        let _ = fs::remove_file(self.dir.join(hint_file_name(id)));
                    }
                    fsync_dir(&self.dir)?;
                }
                fs::remove_file(&manifest)?;
                fsync_dir(&self.dir)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let mut seg_ids = Vec::new();
        let mut hint_ids = std::collections::HashSet::new();
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(e.path());
                rec.removed_files += 1;
                continue;
            }
            match parse_file_name(name) {
                Some((id, "seg")) => seg_ids.push(id),
                Some((id, _)) => {
                    hint_ids.insert(id);
                }
                None => {}
            }
        }
        seg_ids.sort_unstable();
        for id in &hint_ids {
            if seg_ids.binary_search(id).is_err() {
                let _ = fs::remove_file(self.dir.join(hint_file_name(*id)));
                rec.removed_files += 1;
            }
        }

        let mut tombstones: hashbrown::HashMap<Box<[u8]>, u64> = hashbrown::HashMap::new();
        let mut max_seq = 0u64;
        let mut last: Option<Arc<Segment>> = None;
        let maps = self.cfg.mode.maps();
        for &id in &seg_ids {
            let path = self.dir.join(segment_file_name(id));
            let hint_path = self.dir.join(hint_file_name(id));
            match Segment::read_header(&path, id) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    // Created, never written: a leftover of a crash.
                    let _ = fs::remove_file(&path);
                    let _ = fs::remove_file(&hint_path);
                    rec.removed_files += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(TableError::Corrupt {
                        segment: id,
                        offset: 0,
                    });
                }
                Err(e) => return Err(e.into()),
            }
            let slot = Self::alloc_slot(&mut lock(&self.segs))?;
            let seg = self.register(Segment::open(&path, id, slot, maps, None)?);
            let file_len = seg.cap as u64;
            rec.segments += 1;

            let mut hinted = false;
            if hint_ids.contains(&id) {
                if let Ok(bytes) = fs::read(&hint_path) {
                    // Validate the whole file first, then apply it.
                    if decode_hints(&bytes, id, |_| {}).ok() == Some(file_len) {
                        let mut batch = Replay::new();
                        let _ = decode_hints(&bytes, id, |e| {
                            max_seq = max_seq.max(e.seq);
                            rec.records += 1;
                            batch.push(self, &seg, e, &mut tombstones);
                        });
                        batch.finish(self, &seg, &mut tombstones);
                        seg.end.store(file_len, Ordering::Release);
                        hinted = true;
                    }
                }
                if !hinted {
                    let _ = fs::remove_file(&hint_path);
                }
            }
            if hinted {
                rec.hinted_segments += 1;
                seg.hinted.store(true, Ordering::Release);
                seg.synced.store(file_len, Ordering::Release);
            } else {
                rec.scanned_segments += 1;
                let data = seg.data(file_len as usize)?;
                let mut n = 0u64;
                let mut batch = Replay::new();
                let (end, how) = scan_records(&data, |e| {
                    max_seq = max_seq.max(e.seq);
                    n += 1;
                    batch.push(self, &seg, e, &mut tombstones);
                });
                batch.finish(self, &seg, &mut tombstones);
                rec.records += n;
                if how == ScanEnd::Torn {
                    let bad_end = segment::nonzero_end(&data, end);
                    rec.truncated_bytes += (bad_end - end) as u64;
                    rec.cut = Some((id, end as u64));
                }
                drop(data);
                if how == ScanEnd::Torn || (end as u64) < file_len {
                    // Cut a torn tail, or give back preallocated zeroes.
                    let w = OpenOptions::new().write(true).open(&path)?;
                    w.set_len(end as u64)?;
                    w.sync_all()?;
                }
                seg.end.store(end as u64, Ordering::Release);
            }
            seg.sealed.store(true, Ordering::Release);
            last = Some(seg);
        }
        drop(tombstones);
        self.next_id
            .store(seg_ids.last().map_or(1, |m| m + 1), Ordering::Relaxed);

        // The active segment: the last one again if it is less than half
        // full (its hint goes: it will grow), else a new one.
        // On a full disk, the last segment as it is (puts then get NoSpace
        // but the table opens).
        let cap = self.cfg.segment_size;
        let reuse = last
            .as_ref()
            .filter(|s| (s.end.load(Ordering::Acquire) as usize) < cap / 2);
        let active = match reuse {
            Some(old) => self.reopen_for_append(old, cap),
            None => self.new_segment(),
        };
        let active = match (active, &last) {
            (Err(TableError::NoSpace), Some(old)) => self.reopen_for_append(old, 0)?,
            (r, _) => r?,
        };
        drop(last);
        let pos = active.end.load(Ordering::Acquire) as usize;
        {
            let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
            w.active = Some(active.clone());
            w.wmap = active.writable_map();
            w.pos = pos;
            w.seq = max_seq + 1;
            w.touched_to = pos;
        }
        if self.cfg.pretouch {
            // The whole active segment now (open runs on a dirty
            // scheduler); the next ones are prepared before `open` returns.
            let cap = active.cap;
            active.populate(pos, cap, self.cfg.mode == ValueMode::Mapped);
            active.touched.store(cap, Ordering::Release);
            self.writer
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .touched_to = cap;
        }
        fsync_dir(&self.dir)?;
        self.dir_dirty.store(false, Ordering::Release);
        rec.keys = self.keys.load(Ordering::Relaxed);
        Ok(rec)
    }

    /// Makes the recovered segment `old` the active one, preallocated to
    /// `cap` bytes (at least its current length).
    fn reopen_for_append(&self, old: &Arc<Segment>, cap: usize) -> Result<Arc<Segment>> {
        let seg = Segment::open(&old.path, old.id, old.slot, self.cfg.mode.maps(), Some(cap))?;
        let _ = fs::remove_file(self.dir.join(hint_file_name(old.id)));
        let (total, live, tombs) = old.counters();
        seg.end
            .store(old.end.load(Ordering::Acquire), Ordering::Release);
        seg.live.store(live, Ordering::Release);
        seg.total.store(total, Ordering::Release);
        seg.tombs.store(tombs, Ordering::Release);
        seg.min_seq
            .store(old.min_seq.load(Ordering::Acquire), Ordering::Release);
        seg.max_seq
            .store(old.max_seq.load(Ordering::Acquire), Ordering::Release);
        // No reader exists yet: swapping the segment behind the slot is safe.
        Ok(self.register(seg))
    }

    /// Applies one entry found on disk during recovery: the highest sequence
    /// number per key wins, whatever the order of files.
    fn replay(
        &self,
        seg: &Segment,
        e: EntryRef<'_>,
        h: u64,
        tombstones: &mut hashbrown::HashMap<Box<[u8]>, u64>,
    ) {
        let cost = entry_cost(e.key.len(), e.vlen as usize);
        let mut shard = self.index.write(h);
        let existing_seq = shard.find(h, e.key).map(|x| x.seq());
        if e.kind == KIND_DEL {
            if existing_seq.is_some_and(|s| s > e.seq) {
                return;
            }
            if let Some(x) = shard.remove(h, e.key) {
                self.seg_at(x.slot()).live.fetch_sub(
                    entry_cost(e.key.len(), x.vlen() as usize),
                    Ordering::Relaxed,
                );
                self.keys.fetch_sub(1, Ordering::Relaxed);
            }
            let t = tombstones.entry(e.key.into()).or_insert(0);
            *t = (*t).max(e.seq);
            return;
        }
        if tombstones.get(e.key).is_some_and(|&t| t > e.seq) {
            return;
        }
        if existing_seq.is_some_and(|s| s > e.seq) {
            return;
        }
        let mem_value = (self.cfg.mode == ValueMode::Memory)
            .then(|| seg.map_slice(e.val_off as usize, e.vlen as usize));
        let node = Node::new(e.key, mem_value, e.vlen, seg.slot, e.val_off, e.seq);
        match shard.find_mut(h, e.key) {
            Some(x) => {
                self.seg_at(x.slot()).live.fetch_sub(
                    entry_cost(e.key.len(), x.vlen() as usize),
                    Ordering::Relaxed,
                );
                *x = node;
            }
            None => {
                shard.insert_new(h, node);
                self.index.publish(h, &shard);
                self.keys.fetch_add(1, Ordering::Relaxed);
            }
        }
        seg.live.fetch_add(cost, Ordering::Relaxed);
    }

    // ---------------------------------------------------- background thread

    fn maintenance_loop(self: Arc<Self>) {
        let tick = [self.cfg.sync_interval, self.cfg.compaction_interval]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(1), Duration::from_secs(1));
        let mut last_sync = Instant::now();
        let mut last_compact = Instant::now();
        loop {
            let (forced, stop) = {
                let mut m = lock(&self.maint);
                if !m.wake && !m.stop && m.requested == m.served {
                    m = self
                        .maint_cv
                        .wait_timeout(m, tick)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                m.wake = false;
                (m.requested > m.served, m.stop)
            };
            if stop {
                break;
            }
            let _bg = lock(&self.bg);
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            if let Some(iv) = self.cfg.sync_interval {
                if last_sync.elapsed() >= iv {
                    let _ = self.sync();
                    last_sync = Instant::now();
                }
            }
            let _ = self.write_hints();
            let due = self
                .cfg
                .compaction_interval
                .is_some_and(|iv| last_compact.elapsed() >= iv);
            if forced || due {
                let want = lock(&self.maint).requested;
                let res = self.compact_round(forced);
                last_compact = Instant::now();
                if let Ok(c) = &res {
                    if c.segments_in > 0 {
                        let mut ev = lock(&self.events);
                        if ev.len() >= MAX_EVENTS {
                            ev.pop_front();
                        }
                        ev.push_back(Event::Compacted(c.clone()));
                    }
                }
                if forced {
                    let mut m = lock(&self.maint);
                    m.last = Some(res.map_err(|e| match e {
                        TableError::NoSpace => "enospc".to_string(),
                        e => e.to_string(),
                    }));
                    m.served = want;
                    self.maint_cv.notify_all();
                }
            }
        }
        // Wake anyone waiting for a compaction that will not run.
        let mut m = lock(&self.maint);
        m.stop = true;
        self.maint_cv.notify_all();
    }

    /// Makes every sealed segment without a hint durable, cuts its
    /// preallocated tail and writes its hint file.
    fn write_hints(&self) -> Result<()> {
        let todo: Vec<Arc<Segment>> = lock(&self.segs)
            .by_id
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire) && !s.hinted.load(Ordering::Acquire))
            .cloned()
            .collect();
        for s in todo {
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            self.finish_segment(&s)?;
        }
        Ok(())
    }

    fn finish_segment(&self, s: &Segment) -> Result<()> {
        // No writable mapping left when the pages are written back (see
        // `segment`'s module doc): no TLB shootdown per page.
        s.release_writable();
        let end = s.end.load(Ordering::Acquire);
        if s.file_len()? > end {
            s.truncate(end)?;
        }
        s.datasync()?;
        s.synced.store(end, Ordering::Release);
        let data = s.data(end as usize)?;
        let mut entries: Vec<(u8, u64, &[u8], u32, u32)> = Vec::new();
        scan_records(&data, |e| {
            entries.push((e.kind, e.seq, e.key, e.vlen, e.val_off))
        });
        let bytes = encode_hints(s.id, end, &entries);
        drop(entries);
        write_file_durably(&self.dir.join(hint_file_name(s.id)), &bytes)?;
        s.hinted.store(true, Ordering::Release);
        fsync_dir(&self.dir)?;
        Ok(())
    }

    /// One compaction round (the background thread only).
    fn compact_round(&self, forced: bool) -> Result<Compaction> {
        let t0 = Instant::now();
        let mut out = Compaction::default();
        if forced {
            let mut w = lock(&self.writer);
            if self.closed.load(Ordering::Acquire) {
                return Err(TableError::Closed);
            }
            let Some(a) = &w.active else {
                return Err(TableError::Closed);
            };
            let (total, live, tombs) = a.counters();
            if live + tombs < total || tombs > 0 {
                self.roll(&mut w)?;
            }
            drop(w);
            self.write_hints()?;
        }
        // Garbage: entries neither live nor tombstones. A forced round also
        // takes segments holding tombstones (to drop those that may go).
        let threshold = self.cfg.compaction_threshold;
        let all: Vec<Arc<Segment>> = lock(&self.segs).by_id.values().cloned().collect();
        let is_candidate = |s: &Segment| {
            let (total, live, tombs) = s.counters();
            let garbage = total - (live + tombs).min(total);
            s.sealed.load(Ordering::Acquire)
                && s.hinted.load(Ordering::Acquire)
                && if forced {
                    garbage > 0 || tombs > 0 || total == 0
                } else {
                    total == 0
                        || (garbage > 0 && ((live + tombs) as f64) < threshold * total as f64)
                }
        };
        let (inputs, others): (Vec<_>, Vec<_>) = all.into_iter().partition(|s| is_candidate(s));
        if inputs.is_empty() {
            return Ok(out);
        }
        // A tombstone older than every record outside the inputs shadows
        // nothing that could survive: it may go.
        let min_other = others
            .iter()
            .filter(|s| s.total.load(Ordering::Acquire) > 0)
            .map(|s| s.min_seq.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        drop(others);

        let mut outputs: Vec<Arc<Segment>> = Vec::new();
        let mut cur: Option<(Arc<Segment>, usize)> = None;
        let mut buf: Vec<u8> = Vec::new();
        let mut processed = 0;
        for seg in &inputs {
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            processed += 1;
            let end = seg.end.load(Ordering::Acquire) as usize;
            out.bytes_in += seg.file_len().unwrap_or(end as u64);
            let data = seg.data(end)?;
            let mut err: Option<TableError> = None;
            let mut seen = 0u32;
            scan_records(&data, |e| {
                if err.is_some() {
                    return;
                }
                seen = seen.wrapping_add(1);
                if seen.is_multiple_of(256) && self.stopping.load(Ordering::Acquire) {
                    err = Some(TableError::Closed);
                    return;
                }
                let val = &data[e.val_off as usize..e.val_off as usize + e.vlen as usize];
                let keep = if e.kind == KIND_PUT {
                    let h = self.index.hash(e.key);
                    self.index
                        .read(h)
                        .find(h, e.key)
                        .is_some_and(|x| x.slot() == seg.slot && x.off() == e.val_off)
                } else {
                    let keep = e.seq >= min_other;
                    if !keep {
                        out.tombstones_dropped += 1;
                    }
                    keep
                };
                if !keep {
                    return;
                }
                let rec_len = REC_HEADER + ENTRY_HEADER + e.key.len() + val.len();
                if cur.as_ref().is_none_or(|(s, pos)| pos + rec_len > s.cap) {
                    if let Some((s, pos)) = cur.take() {
                        s.end.store(pos as u64, Ordering::Release);
                        outputs.push(s);
                    }
                    match self.new_segment() {
                        Ok(s) => cur = Some((s, SEG_HEADER)),
                        Err(e) => {
                            err = Some(e);
                            return;
                        }
                    }
                }
                let (o, pos) = cur.as_mut().unwrap();
                buf.clear();
                buf.resize(rec_len, 0);
                write_entry(&mut buf[REC_HEADER..], e.kind, e.key, val);
                let crc = finish_record_header(&mut buf, rec_len - REC_HEADER, e.seq);
                buf[0..4].copy_from_slice(&crc.to_le_bytes());
                if let Err(x) = o.write_record(*pos, &buf) {
                    err = Some(x.into());
                    return;
                }
                let new_off = (*pos + REC_HEADER + ENTRY_HEADER + e.key.len()) as u32;
                *pos += rec_len;
                o.end.store(*pos as u64, Ordering::Release);
                let cost = entry_cost(e.key.len(), val.len());
                o.total.fetch_add(cost, Ordering::Relaxed);
                if e.kind == KIND_DEL {
                    o.tombs.fetch_add(cost, Ordering::Relaxed);
                }
                o.min_seq.fetch_min(e.seq, Ordering::Relaxed);
                o.max_seq.fetch_max(e.seq, Ordering::Relaxed);
                out.entries_copied += 1;
                if e.kind == KIND_PUT {
                    // Move the index entry, unless the writer replaced it
                    // meanwhile (then the copy is garbage).
                    let h = self.index.hash(e.key);
                    let mut shard = self.index.write(h);
                    if let Some(x) = shard.find_mut(h, e.key) {
                        if x.slot() == seg.slot && x.off() == e.val_off {
                            let (vlen, seq) = (x.vlen(), x.seq());
                            x.set_loc(o.slot, new_off, vlen, seq);
                            o.live.fetch_add(cost, Ordering::Relaxed);
                            seg.live.fetch_sub(cost, Ordering::Relaxed);
                        }
                    }
                }
            });
            drop(data);
            if let Some(e) = err {
                // Keep what was written: outputs are valid segments.
                if let Some((s, pos)) = cur.take() {
                    s.end.store(pos as u64, Ordering::Release);
                    outputs.push(s);
                }
                for s in &outputs {
                    s.sealed.store(true, Ordering::Release);
                }
                return Err(e);
            }
        }
        if let Some((s, pos)) = cur.take() {
            s.end.store(pos as u64, Ordering::Release);
            outputs.push(s);
        }
        // Outputs durable (with hints) before any input goes.
        for s in &outputs {
            s.sealed.store(true, Ordering::Release);
            self.finish_segment(s)?;
            out.bytes_out += s.file_len().unwrap_or(0);
        }
        fsync_dir(&self.dir)?;
        let mut removed = 0;
        if processed == inputs.len() {
            // All inputs go, or (after a crash) recovery finishes the job:
            // the dropped tombstones were only safe for the inputs as a whole.
            let ids: Vec<u64> = inputs.iter().map(|s| s.id).collect();
            let manifest = self.dir.join(MANIFEST_FILE);
            write_file_durably(&manifest, &encode_manifest(&ids))?;
            fsync_dir(&self.dir)?;
            for seg in &inputs {
                self.remove_segment(seg);
                removed += 1;
            }
            fsync_dir(&self.dir)?;
            fs::remove_file(&manifest)?;
            fsync_dir(&self.dir)?;
            self.dir_dirty.store(false, Ordering::Release);
        }
        // Stopped half-way (close): the inputs stay. Their live entries
        // were moved (the outputs hold copies, which recovery resolves by
        // sequence number), and they keep the tombstones that were dropped
        // from the outputs.
        out.segments_in = removed;
        out.segments_out = outputs.len() as u64;
        out.duration = t0.elapsed();
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.compacted_in.fetch_add(out.bytes_in, Ordering::Relaxed);
        self.compacted_out
            .fetch_add(out.bytes_out, Ordering::Relaxed);
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
