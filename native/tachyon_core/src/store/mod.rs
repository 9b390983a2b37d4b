//! The append-only message log on memory-mapped segment files.
//!
//! One writer per directory (an `flock` on `.lock`), any number of readers in
//! this process (through the same [`Store`]) and in other processes (a
//! [`Store`] opened with [`Mode::Read`]). Appends copy into the mapped active
//! segment and publish each record with one release store of its header, so a
//! reader never sees a torn record. A pre-touch thread faults pages in ahead
//! of the writer and prepares the next segment, so a steady writer takes no
//! page fault and no file creation on its path.
//!
//! See `docs/FORMAT.md` for the bytes and `docs/ARCHITECTURE.md` for the
//! threads.

pub mod format;
pub mod segment;

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::spin::SpinMutex;
use crate::sys::{fsync_dir, lock};
use crate::worker::{Ctx, Worker};
use format::*;
pub use segment::{OpenError, RecordError, Segment};

/// Errors of store operations.
#[derive(Debug)]
pub enum StoreError {
    Closed,
    NotFound,
    MessageTooLarge,
    NoSpace,
    Locked,
    ReadOnly,
    Corrupt { segment: u64, offset: u64 },
    BadConfig(&'static str),
    Io(io::Error),
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT) {
            StoreError::NoSpace
        } else {
            StoreError::Io(e)
        }
    }
}

impl From<OpenError> for StoreError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Io(e) => e.into(),
            OpenError::Corrupt { segment, offset } => StoreError::Corrupt { segment, offset },
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Corrupt { segment, offset } => {
                write!(f, "corrupt record in segment {segment} at offset {offset}")
            }
            StoreError::BadConfig(s) => write!(f, "bad config: {s}"),
            StoreError::Io(e) => write!(f, "{e}"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for StoreError {}

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
    /// Data bytes per segment.
    pub segment_size: usize,
    pub max_message_size: usize,
    /// Keep at most this many segments (oldest deleted at roll).
    pub max_segments: Option<usize>,
    /// Keep at most this many bytes of segment files (never the active one).
    pub max_bytes: Option<u64>,
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
            segment_size: 64 << 20,
            max_message_size: 1 << 20,
            max_segments: None,
            max_bytes: None,
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
        Ok(())
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

/// Something telemetry should hear about, queued by the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Roll {
        segment: u64,
        base_index: u64,
        prepared: bool,
        roll_ns: u64,
        deleted_segments: u64,
    },
}

/// Counters, read with [`Store::stats`].
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub appended: u64,
    pub appended_bytes: u64,
    pub rolls: u64,
    pub prepared_rolls: u64,
    pub deleted_segments: u64,
    pub segments: u64,
    pub first_index: u64,
    pub next_index: u64,
    pub disk_bytes: u64,
    pub unsynced_bytes: u64,
}

struct Writer {
    active: Arc<Segment>,
    /// The read-only twin of `active`, made off the writer's path (by the
    /// pre-touch thread with the segment, or at open): a roll swaps it in
    /// without a system call (an `mmap` there waited for the process's mmap
    /// lock behind the pre-touch thread's work: milliseconds).
    active_twin: Option<Arc<Segment>>,
    /// Next data offset (relative to the data region) in `active`.
    pos: usize,
    /// Next slot in `active`.
    slot: usize,
    next_index: u64,
    /// Sealed segments with unsynced data.
    unsynced: Vec<Arc<Segment>>,
    /// Data offset in `active` up to which `sync` has flushed.
    synced_pos: usize,
    synced_slot: usize,
    dir_dirty: bool,
    appended: u64,
    appended_bytes: u64,
    rolls: u64,
    prepared_rolls: u64,
    deleted: u64,
}

/// The most segments `Config::prepared_segments` may ask for.
///
/// The pre-touch thread keeps `prepared_segments` next segments ready:
/// each one created, allocated, faulted in whole (index and data), its
/// read-only twin mapped, before the writer reaches it. Faulting in a fresh
/// segment is the kernel zeroing its page-cache pages: about 60 ms for 64
/// MiB on the test machine (1 GB/s), slower than an appender in a tight
/// loop (up to 2 GB/s). A writer that catches up with the thread's
/// faulting-in waits in its own page faults, behind the thread, for about
/// 20 ms (see docs/BENCHMARKS.md, "The stall"). With 4 segments of 64 MiB
/// ready from the open on (and the active one faulted in whole), a burst of
/// 256 MiB finds every page ready; the cost is the disk space preallocated
/// for them, and the open's time to fault them in (done on a dirty
/// scheduler).
pub const MAX_PREPARED_SEGMENTS: usize = 16;

/// A next segment, made ready by the pre-touch thread.
struct Prepared {
    seg: Segment,
    twin: Option<Segment>,
}

/// State shared with the pre-touch thread.
struct Touch {
    active: Mutex<Arc<Segment>>,
    write_pos: CachePadded<AtomicU64>,
    /// The next segments, in order (at most `prepared_max`).
    prepared: Mutex<VecDeque<Prepared>>,
    prepared_max: usize,
    /// Writable maps of sealed segments, for the thread to drop: unmapping
    /// 64 MiB of dirty shared pages takes milliseconds, not for the writer.
    retired: Mutex<Vec<Arc<Segment>>>,
}

/// An open store: a writer (with readers in this process) or a reader.
pub struct Store {
    dir: PathBuf,
    cfg: Config,
    writer: SpinMutex<Option<Writer>>,
    segments: RwLock<Vec<Arc<Segment>>>,
    next_index: CachePadded<AtomicU64>,
    first_index: CachePadded<AtomicU64>,
    closed: AtomicBool,
    touch: Option<Arc<Touch>>,
    toucher: Mutex<Option<Worker>>,
    events: Mutex<VecDeque<Event>>,
    lock_file: Mutex<Option<File>>,
    recovery: Recovery,
}

/// Removes a prepared, never activated segment file; one already gone (a
/// closed store's pre-touch thread removes its own on the way out) is fine.
fn remove_unused(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        if let Some(seq) = e.file_name().to_str().and_then(parse_segment_file_name) {
            v.push((seq, e.path()));
        }
    }
    v.sort_by_key(|(s, _)| *s);
    Ok(v)
}

/// Result of scanning one segment's records.
struct Scan {
    count: usize,
    end: usize,
    bad: Option<usize>,
}

/// Walks the records of `seg` from the start, checking CRCs and rebuilding the
/// index when `fix_index` is set. Stops at the end of the log or at the first
/// record that does not verify.
fn scan_segment(seg: &Segment, fix_index: bool) -> Scan {
    let l = seg.layout;
    let mut pos = 0usize;
    let mut k = 0usize;
    loop {
        let off = l.data_start + pos;
        if k >= l.slots || off + REC_HEADER > l.file_len {
            return Scan {
                count: k,
                end: pos,
                bad: None,
            };
        }
        match seg.record_at(off) {
            Ok(payload) => {
                if fix_index && seg.slot(k).load(Ordering::Relaxed) != off as u32 {
                    seg.slot(k).store(off as u32, Ordering::Relaxed);
                }
                pos += record_size(payload.len());
                k += 1;
            }
            Err(RecordError::Empty) => {
                // A zero header ends the log, unless the index says a record
                // was there (a hole): that is damage, not an end.
                let s = seg.slot(k).load(Ordering::Relaxed) as usize;
                if s == off {
                    return Scan {
                        count: k,
                        end: pos,
                        bad: Some(off),
                    };
                }
                return Scan {
                    count: k,
                    end: pos,
                    bad: None,
                };
            }
            Err(RecordError::Corrupt) => {
                return Scan {
                    count: k,
                    end: pos,
                    bad: Some(off),
                }
            }
        }
    }
}

/// Whether any verified record lies after slot `k` (damage in the middle
/// rather than a torn tail). Looks at the next index slots.
fn valid_records_after(seg: &Segment, k: usize, bad_off: usize) -> u64 {
    let mut n = 0;
    for j in (k + 1)..seg.layout.slots {
        let off = seg.slot(j).load(Ordering::Relaxed) as usize;
        if off == 0 {
            break;
        }
        if off > bad_off && seg.record_at(off).is_ok() {
            n += 1;
        }
    }
    n
}

/// Cuts `seg` at file offset `off` (record `k`): zeroes the data from there to
/// the last non-zero byte and clears the index slots from `k`. Returns the
/// bytes cut.
fn cut_segment(seg: &Segment, k: usize, off: usize) -> u64 {
    let l = seg.layout;
    // The end of the damage: the furthest record the index knows of, or the
    // claimed length of the damaged header, or at least one page.
    let mut end = off + REC_HEADER;
    for j in k..l.slots {
        let o = seg.slot(j).load(Ordering::Relaxed) as usize;
        if o == 0 {
            break;
        }
        end = end.max(o + REC_HEADER);
        seg.slot(j).store(0, Ordering::Relaxed);
    }
    // Find the last non-zero page of the data region from `off` on.
    let mut last_nonzero = end;
    let mut p = off;
    // Page by page from the cut; stop 16 clean pages past the known end.
    while p < l.file_len {
        let next = align_up(p + 1, PAGE).min(l.file_len);
        if page_nonzero(seg, p, next) {
            last_nonzero = next;
        } else if p > end + 16 * PAGE {
            break;
        }
        p = next;
    }
    let cut_to = last_nonzero.max(end).min(l.file_len);
    let bytes = cut_to.saturating_sub(off) as u64;
    seg.zero_range(off, cut_to);
    bytes
}

/// Removes every entry from index `from` on from the store in `dir`, which
/// no [`Store`] has open (it takes the directory's lock): the entries of
/// the segment holding `from` are cut there, later segments are deleted,
/// and a reopened store continues at `from`. Returns the entries removed.
/// A sequencer node drops an uncommitted tail this way (rarely, after a
/// change of primary): closing the store, truncating, reopening keeps the
/// live writer, its pre-touch thread and prepared segments out of it.
pub fn truncate_dir(dir: &Path, from: u64) -> Result<u64, StoreError> {
    let lock_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(".lock"))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(StoreError::Locked);
    }
    let mut segs = Vec::new();
    for (seq, path) in list_segments(dir)? {
        match Segment::open(&path, seq, true)? {
            Some(s) => segs.push((s, path)),
            // Prepared, never activated: removed (a reopen prepares anew).
            None => remove_unused(&path)?,
        }
    }
    let Some(first) = segs.first().map(|(s, _)| s.base()) else {
        return if from == 0 {
            Ok(0)
        } else {
            Err(StoreError::NotFound)
        };
    };
    let counts: Vec<u64> = segs
        .iter()
        .map(|(s, _)| scan_segment(s, false).count as u64)
        .collect();
    let end = segs.last().map(|(s, _)| s.base()).unwrap_or(0) + counts.last().copied().unwrap_or(0);
    if from < first || from > end {
        return Err(StoreError::NotFound);
    }
    let mut removed = 0;
    let mut dirty = false;
    for (i, (seg, path)) in segs.iter().enumerate().rev() {
        let (base, count) = (seg.base(), counts[i]);
        if base + count <= from {
            break;
        }
        if base >= from && i > 0 {
            // Entirely at or after `from`, and not the first: deleted.
            fs::remove_file(path)?;
            removed += count;
            dirty = true;
            continue;
        }
        let k = (from - base) as usize;
        let off = seg.slot(k).load(Ordering::Acquire) as usize;
        if off != 0 {
            cut_segment(seg, k, off);
        }
        seg.clear_seal();
        removed += count - k as u64;
        seg.sync_async();
    }
    if dirty {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

fn page_nonzero(seg: &Segment, from: usize, to: usize) -> bool {
    let mut o = from;
    while o + 8 <= to {
        if seg.header_at(o) != 0 {
            return true;
        }
        o += 8;
    }
    false
}

impl Store {
    /// Opens (creating if needed, for a writer) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<Store, StoreError> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        match cfg.mode {
            Mode::Write => Self::open_writer(dir, cfg),
            Mode::Read => Self::open_reader(dir, cfg),
        }
    }

    fn open_writer(dir: PathBuf, cfg: Config) -> Result<Store, StoreError> {
        let t0 = Instant::now();
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
                StoreError::Locked
            } else {
                e.into()
            });
        }

        let mut rec = Recovery::default();
        let mut segs: Vec<Arc<Segment>> = Vec::new();
        let listed = list_segments(&dir)?;
        for (seq, path) in &listed {
            match Segment::open(path, *seq, true)? {
                Some(s) => segs.push(Arc::new(s)),
                None => {
                    remove_unused(path)?;
                    rec.removed_unused += 1;
                }
            }
        }
        // Sequence numbers must be contiguous and each base follow the last.
        for w in segs.windows(2) {
            if w[1].seq != w[0].seq + 1 || w[1].base() != w[0].base() + w[0].count() {
                return Err(StoreError::Corrupt {
                    segment: w[1].seq,
                    offset: 0,
                });
            }
        }

        // Verify segments: all, or only the last one.
        let first_checked = match cfg.verify {
            Verify::All => 0,
            Verify::Active => segs.len().saturating_sub(1),
        };
        // (records, data bytes) of the last segment, from its scan.
        let mut active_scan = (0usize, 0usize);
        let mut i = first_checked;
        while i < segs.len() {
            let seg = segs[i].clone();
            let is_last = i + 1 == segs.len();
            let scan = scan_segment(&seg, is_last);
            rec.scanned_segment = seg.seq;
            rec.recovered += scan.count as u64;
            if let Some(bad) = scan.bad {
                let after = valid_records_after(&seg, scan.count, bad);
                let later: u64 = segs[i + 1..].iter().map(|s| s.count()).sum();
                let middle = after > 0 || later > 0;
                if middle && !cfg.repair {
                    return Err(StoreError::Corrupt {
                        segment: seg.seq,
                        offset: bad as u64,
                    });
                }
                rec.truncated_bytes += cut_segment(&seg, scan.count, bad);
                rec.cut = Some(if middle { "repaired" } else { "torn_tail" });
                rec.cut_segment = Some(seg.seq);
                rec.cut_offset = Some(bad as u64);
                rec.lost_records += after + later;
                // Everything after the cut goes.
                for s in segs.drain(i + 1..) {
                    rec.truncated_bytes += s.layout.file_len as u64;
                    fs::remove_file(&s.path)?;
                }
                // It is the active segment again.
                seg.clear_seal();
            } else if is_last && seg.is_sealed() && seg.count() != scan.count as u64 {
                return Err(StoreError::Corrupt {
                    segment: seg.seq,
                    offset: 0,
                });
            }
            if i + 1 == segs.len() {
                active_scan = (scan.count, scan.end);
            }
            i += 1;
        }

        let mut dir_dirty = false;
        if segs.is_empty() {
            let s = Segment::create(&dir, 0, cfg.segment_size)?;
            s.activate(0);
            segs.push(Arc::new(s));
            dir_dirty = true;
        }
        let active = segs.last().unwrap().clone();
        // The last segment is the active one, even if a crash left it sealed.
        active.clear_seal();
        // Recovery is over: the sealed segments are read through read-only
        // maps from now on (see `Segment::read_only_twin`).
        let n = segs.len();
        for s in &mut segs[..n - 1] {
            if let Ok(t) = s.read_only_twin() {
                *s = Arc::new(t);
            }
        }
        // The loop above scanned the last segment (or it was just created).
        let (active_count, active_end) = active_scan;
        let first = segs[0].base();
        let next = active.base() + active_count as u64;

        let active_twin = active.read_only_twin().ok().map(Arc::new);
        let writer = Writer {
            active: active.clone(),
            active_twin,
            pos: active_end,
            slot: active_count,
            next_index: next,
            unsynced: Vec::new(),
            synced_pos: active_end,
            synced_slot: active_count,
            dir_dirty,
            appended: 0,
            appended_bytes: 0,
            rolls: 0,
            prepared_rolls: 0,
            deleted: 0,
        };
        rec.segments = segs.len() as u64;
        rec.messages = next - first;

        let touch = if cfg.pretouch {
            // The whole active segment is faulted in now (open runs on a
            // dirty scheduler), the next ones by the thread.
            let l = active.layout;
            active.populate(0, l.data_start);
            active.populate(l.data_start + active_end, l.file_len);
            Some(Arc::new(Touch {
                active: Mutex::new(active.clone()),
                write_pos: CachePadded::new(AtomicU64::new(active_end as u64)),
                prepared: Mutex::new(VecDeque::new()),
                prepared_max: cfg.prepared_segments,
                retired: Mutex::new(Vec::new()),
            }))
        } else {
            None
        };

        // A leftover prepared file for the next sequence number was removed
        // above, so the next roll can create it again.
        rec.duration = t0.elapsed();
        let store = Store {
            dir,
            cfg,
            writer: SpinMutex::new(Some(writer)),
            segments: RwLock::new(segs),
            next_index: CachePadded::new(AtomicU64::new(next)),
            first_index: CachePadded::new(AtomicU64::new(first)),
            closed: AtomicBool::new(false),
            touch,
            toucher: Mutex::new(None),
            events: Mutex::new(VecDeque::new()),
            lock_file: Mutex::new(Some(lock_file)),
            recovery: rec,
        };
        {
            let mut g = store.writer.lock();
            let w = g.as_mut().unwrap();
            store.apply_retention(
                w,
                &mut store.segments.write().unwrap_or_else(|p| p.into_inner()),
            );
        }
        if let Some(t) = &store.touch {
            let t = t.clone();
            let dir = store.dir.clone();
            let cap = store.cfg.segment_size;
            let ahead = store.cfg.pretouch_ahead;
            // The first next segments are made ready here (open runs on a
            // dirty scheduler): a writer that starts at once must not catch
            // up with the thread (see [`MAX_PREPARED_SEGMENTS`]).
            let mut whole = VecDeque::from([lock(&t.active).seq]);
            fill_prepared(&t, &dir, cap, &mut whole, || false);
            let w = Worker::spawn("tachyon-pretouch", None, move |ctx| {
                pretouch_loop(ctx, t, dir, cap, ahead, whole)
            })?;
            *lock(&store.toucher) = Some(w);
        }
        Ok(store)
    }

    fn open_reader(dir: PathBuf, cfg: Config) -> Result<Store, StoreError> {
        let t0 = Instant::now();
        if !dir.is_dir() {
            return Err(StoreError::Io(io::Error::from_raw_os_error(libc::ENOENT)));
        }
        let segs = load_reader_segments(&dir, &[])?;
        let (first, next) = bounds(&segs);
        let rec = Recovery {
            segments: segs.len() as u64,
            messages: next - first,
            duration: t0.elapsed(),
            ..Recovery::default()
        };
        Ok(Store {
            dir,
            cfg,
            writer: SpinMutex::new(None),
            segments: RwLock::new(segs),
            next_index: CachePadded::new(AtomicU64::new(next)),
            first_index: CachePadded::new(AtomicU64::new(first)),
            closed: AtomicBool::new(false),
            touch: None,
            toucher: Mutex::new(None),
            events: Mutex::new(VecDeque::new()),
            lock_file: Mutex::new(None),
            recovery: rec,
        })
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

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Appends one message; returns its index.
    #[inline]
    pub fn append(&self, data: &[u8]) -> Result<u64, StoreError> {
        if data.len() > self.cfg.max_message_size {
            return Err(StoreError::MessageTooLarge);
        }
        let mut g = self.writer.lock();
        let Some(w) = g.as_mut() else {
            return Err(if self.cfg.mode == Mode::Read && !self.is_closed() {
                StoreError::ReadOnly
            } else {
                StoreError::Closed
            });
        };
        let idx = self.append_locked(w, data)?;
        self.next_index.store(w.next_index, Ordering::Release);
        if let Some(t) = &self.touch {
            t.write_pos.store(w.pos as u64, Ordering::Relaxed);
        }
        Ok(idx)
    }

    /// Appends messages as one batch (contiguous indices, no other appender in
    /// between); returns the last index. Sizes are checked before anything is
    /// written. An I/O error mid-batch leaves the messages before it stored.
    pub fn append_many<'a, I>(&self, msgs: I) -> Result<Option<u64>, StoreError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let it = msgs.into_iter();
        if it.clone().any(|m| m.len() > self.cfg.max_message_size) {
            return Err(StoreError::MessageTooLarge);
        }
        let mut g = self.writer.lock();
        let Some(w) = g.as_mut() else {
            return Err(if self.cfg.mode == Mode::Read {
                StoreError::ReadOnly
            } else {
                StoreError::Closed
            });
        };
        let mut last = None;
        let mut result = Ok(());
        for m in it {
            match self.append_locked(w, m) {
                Ok(i) => last = Some(i),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.next_index.store(w.next_index, Ordering::Release);
        if let Some(t) = &self.touch {
            t.write_pos.store(w.pos as u64, Ordering::Relaxed);
        }
        result.map(|_| last)
    }

    #[inline]
    fn append_locked(&self, w: &mut Writer, data: &[u8]) -> Result<u64, StoreError> {
        let need = record_size(data.len());
        if w.slot >= w.active.layout.slots || w.pos + need > w.active.layout.data_cap {
            self.roll(w)?;
        }
        w.active.write_record(w.pos, w.slot, data);
        w.pos += need;
        w.slot += 1;
        let idx = w.next_index;
        w.next_index += 1;
        w.appended += 1;
        w.appended_bytes += data.len() as u64;
        Ok(idx)
    }

    #[cold]
    fn roll(&self, w: &mut Writer) -> Result<(), StoreError> {
        let t0 = Instant::now();
        let seq = w.active.seq + 1;
        let mut prepared = false;
        let mut next_twin = None;
        let next = match self
            .touch
            .as_ref()
            .and_then(|t| lock(&t.prepared).pop_front())
        {
            Some(p) if p.seg.seq == seq && p.seg.layout.data_cap == self.cfg.segment_size => {
                prepared = true;
                next_twin = p.twin;
                p.seg
            }
            other => {
                if let Some(p) = other {
                    p.seg.remove_if_same_file();
                }
                // Any other prepared segment is out of sequence now.
                if let Some(t) = &self.touch {
                    for p in lock(&t.prepared).drain(..) {
                        p.seg.remove_if_same_file();
                    }
                }
                // The pre-touch thread had nothing ready (or failed): create
                // the segment here. A leftover file of a failed attempt goes.
                // (The pre-touch thread may be creating the same file right
                // now: take the name over; its copy is then discarded.)
                let path = self.dir.join(segment_file_name(seq));
                let mut tries = 0;
                loop {
                    match Segment::create(&self.dir, seq, self.cfg.segment_size) {
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => {
                            let _ = fs::remove_file(&path);
                            tries += 1;
                        }
                        other => break other?,
                    }
                }
            }
        };
        // Activate the new segment before sealing the old one: a reader that
        // sees the seal always finds the next segment.
        next.activate(w.next_index);
        let next = Arc::new(next);
        w.active.seal(w.slot as u64, w.pos as u64);
        let old = std::mem::replace(&mut w.active, next.clone());
        // From now on the sealed segment is read through a read-only map
        // (see `Segment::read_only_twin`); the writable one is unmapped once
        // the last reader holding it lets go. (If the twin cannot be made,
        // the writable map stays: correct, only slower under writeback.)
        let sealed = match w.active_twin.take() {
            Some(t) => {
                // Mapped before the segment was activated: its base, and a
                // deletion, come from the writable original.
                t.base.store(old.base(), Ordering::Release);
                t.deleted
                    .store(old.deleted.load(Ordering::Acquire), Ordering::Release);
                t
            }
            None => old
                .read_only_twin()
                .map(Arc::new)
                .unwrap_or_else(|_| old.clone()),
        };
        w.active_twin = next_twin.map(Arc::new);
        w.unsynced.push(sealed.clone());
        w.pos = 0;
        w.slot = 0;
        w.synced_pos = 0;
        w.synced_slot = 0;
        w.dir_dirty = true;
        w.rolls += 1;
        if prepared {
            w.prepared_rolls += 1;
        }
        let deleted = {
            let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = segs.iter_mut().find(|s| Arc::ptr_eq(s, &old)) {
                *slot = sealed;
            }
            segs.push(next.clone());
            self.apply_retention(w, &mut segs)
        };
        if let Some(t) = &self.touch {
            *lock(&t.active) = next.clone();
            lock(&t.retired).push(old);
            t.write_pos.store(0, Ordering::Relaxed);
            if let Some(h) = lock(&self.toucher).as_ref() {
                h.wake();
            }
        }
        let mut ev = lock(&self.events);
        if ev.len() >= 1024 {
            ev.pop_front();
        }
        ev.push_back(Event::Roll {
            segment: seq,
            base_index: next.base(),
            prepared,
            roll_ns: t0.elapsed().as_nanos() as u64,
            deleted_segments: deleted,
        });
        Ok(())
    }

    /// Deletes the oldest segments beyond `max_segments` / `max_bytes` (never
    /// the active one). Returns how many went.
    fn apply_retention(&self, w: &mut Writer, segs: &mut Vec<Arc<Segment>>) -> u64 {
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

    /// Refreshes a reader's view (new segments, deleted ones, new records).
    fn refresh(&self) -> Result<(), StoreError> {
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

    /// Makes everything appended so far durable (msync of the written ranges
    /// and fsync of the directory). Returns the bytes flushed. Does not block
    /// appenders while it waits for the disk.
    pub fn sync(&self) -> Result<u64, StoreError> {
        let (sealed, active, from, to, slot_from, slot_to, dir_dirty) = {
            let mut g = self.writer.lock();
            let Some(w) = g.as_mut() else {
                return Err(if self.cfg.mode == Mode::Read && !self.is_closed() {
                    StoreError::ReadOnly
                } else {
                    StoreError::Closed
                });
            };
            let sealed = std::mem::take(&mut w.unsynced);
            let r = (
                sealed,
                w.active.clone(),
                w.synced_pos,
                w.pos,
                w.synced_slot,
                w.slot,
                w.dir_dirty,
            );
            w.synced_pos = w.pos;
            w.synced_slot = w.slot;
            w.dir_dirty = false;
            r
        };
        let mut bytes = 0u64;
        let result = (|| {
            for s in &sealed {
                if !s.deleted.load(Ordering::Acquire) {
                    s.sync_range(0, s.layout.file_len)?;
                    bytes += s.layout.file_len as u64;
                }
            }
            let l = active.layout;
            if to > from || dir_dirty {
                active.sync_range(0, HEADER_SIZE)?;
                active.sync_range(l.index_start + slot_from * 4, l.index_start + slot_to * 4)?;
                active.sync_range(l.data_start + from, l.data_start + to)?;
                bytes += (to - from) as u64;
            }
            if dir_dirty {
                fsync_dir(&self.dir)?;
            }
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = result {
            // Put the work back so the next sync retries it.
            let mut g = self.writer.lock();
            if let Some(w) = g.as_mut() {
                w.unsynced.extend(sealed);
                if Arc::ptr_eq(&w.active, &active) {
                    w.synced_pos = w.synced_pos.min(from);
                    w.synced_slot = w.synced_slot.min(slot_from);
                }
                w.dir_dirty |= dir_dirty;
            }
            return Err(e.into());
        }
        Ok(bytes)
    }

    /// Takes the queued events (rolls) for telemetry.
    pub fn take_events(&self) -> Vec<Event> {
        lock(&self.events).drain(..).collect()
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        if let Some(w) = self.writer.lock().as_ref() {
            s.appended = w.appended;
            s.appended_bytes = w.appended_bytes;
            s.rolls = w.rolls;
            s.prepared_rolls = w.prepared_rolls;
            s.deleted_segments = w.deleted;
            s.unsynced_bytes = (w.pos - w.synced_pos) as u64
                + w.unsynced
                    .iter()
                    .map(|s| s.layout.data_cap as u64)
                    .sum::<u64>();
        }
        let _ = self.refresh();
        let segs = self.segments.read().unwrap_or_else(|p| p.into_inner());
        s.segments = segs.len() as u64;
        s.disk_bytes = segs.iter().map(|x| x.layout.file_len as u64).sum();
        s.first_index = self.first_index.load(Ordering::Acquire);
        s.next_index = self.next_index.load(Ordering::Acquire);
        s
    }

    /// Closes the store: no more appends or reads, the pre-touch thread is
    /// stopped and joined (it removes the segment it had prepared),
    /// writeback is started (not waited for: call [`Store::sync`] first for
    /// durability), the directory lock released. Idempotent. Blocks for the
    /// join: from the BEAM, on a dirty scheduler (a dropped store stops the
    /// thread without waiting for it).
    pub fn close(&self) {
        self.shut(true)
    }

    fn shut(&self, join: bool) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let w = self.writer.lock().take();
        if let Some(worker) = lock(&self.toucher).take() {
            if join {
                let _ = worker.join();
            }
            // (Else dropped: stopped, and joined by the reaper.)
        }
        if let Some(w) = w {
            w.active.sync_async();
        }
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        lock(&self.lock_file).take();
    }

    /// The writer's active segment and data position (for tests).
    #[doc(hidden)]
    pub fn active_position(&self) -> Option<(u64, usize)> {
        self.writer.lock().as_ref().map(|w| (w.active.seq, w.pos))
    }

    /// Whether the pre-touch thread is running.
    pub fn pretouch_running(&self) -> bool {
        lock(&self.toucher)
            .as_ref()
            .is_some_and(|w| !w.is_finished())
    }
}

impl Drop for Store {
    /// Closes without waiting for the pre-touch thread (a store is dropped
    /// by whichever BEAM scheduler collected its handle): the thread stops
    /// on its own, removing the segment it had prepared.
    fn drop(&mut self) {
        self.shut(false);
    }
}

fn bounds(segs: &[Arc<Segment>]) -> (u64, u64) {
    match (segs.first(), segs.last()) {
        (Some(f), Some(l)) => (f.base(), l.base() + l.count()),
        _ => (0, 0),
    }
}

fn load_reader_segments(
    dir: &Path,
    current: &[Arc<Segment>],
) -> Result<Vec<Arc<Segment>>, StoreError> {
    let mut segs = Vec::new();
    for (seq, path) in list_segments(dir)? {
        if let Some(s) = current.iter().find(|s| s.seq == seq) {
            segs.push(s.clone());
            continue;
        }
        match Segment::open(&path, seq, false) {
            Ok(Some(s)) => segs.push(Arc::new(s)),
            Ok(None) => break, // prepared but not activated yet: the end
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => continue, // deleted meanwhile
            Err(e) => return Err(e.into()),
        }
    }
    Ok(segs)
}

/// Prepares next segments until `Config::prepared_segments` are ready (or
/// `stop()`): each created, allocated, faulted in whole and its read-only
/// twin mapped; their sequence numbers go to `whole`. A segment the writer
/// overtook meanwhile (it rolled and created that file itself) is removed.
fn fill_prepared(
    t: &Touch,
    dir: &Path,
    cap: usize,
    whole: &mut VecDeque<u64>,
    stop: impl Fn() -> bool,
) {
    loop {
        let queued = lock(&t.prepared).len();
        if queued >= t.prepared_max || stop() {
            return;
        }
        let seq = lock(&t.active).seq + 1 + queued as u64;
        // create_new: never touches a file the writer made itself.
        let Ok(seg) = Segment::create(dir, seq, cap) else {
            // (A full disk: the writer's roll reports it.)
            return;
        };
        seg.populate(0, seg.layout.file_len);
        let twin = seg.read_only_twin().ok();
        let mut p = lock(&t.prepared);
        // Only kept if it is still next in line.
        if lock(&t.active).seq + 1 + p.len() as u64 == seq {
            p.push_back(Prepared { seg, twin });
            whole.push_back(seq);
        } else {
            drop(p);
            seg.remove_if_same_file();
            return;
        }
    }
}

/// The pre-touch thread: keeps `Config::prepared_segments` next segments ready
/// (created, allocated, faulted in whole, read-only twin mapped), faults in
/// `ahead` bytes ahead of the writer in an active segment that was not
/// prepared so, and unmaps the writable maps of sealed segments. When
/// stopped it removes the segments it had prepared.
fn pretouch_loop(
    ctx: &Ctx,
    t: Arc<Touch>,
    dir: PathBuf,
    cap: usize,
    ahead: usize,
    mut whole: VecDeque<u64>,
) {
    let mut touched_seq = u64::MAX;
    let mut touched_to = 0usize;
    let mut last_pos = u64::MAX;
    while !ctx.stopped() {
        // Unmap the writable maps of sealed segments (the last reference,
        // unless a reader still holds one) here, off the writer's path:
        // their pages first, a few at a time (see `Segment::release_pages`).
        for s in std::mem::take(&mut *lock(&t.retired)) {
            if Arc::strong_count(&s) == 1 {
                s.release_pages();
            }
        }
        let active = lock(&t.active).clone();
        let pos = t.write_pos.load(Ordering::Relaxed);
        let l = active.layout;
        if active.seq != touched_seq {
            touched_seq = active.seq;
            touched_to = if whole.contains(&active.seq) {
                l.file_len
            } else {
                l.data_start + pos as usize
            };
            whole.retain(|&q| q >= active.seq);
        }
        let want = (l.data_start + pos as usize + ahead).min(l.file_len);
        if want > touched_to {
            let from = touched_to.max(l.data_start + pos as usize);
            active.populate(from, want);
            touched_to = want;
        }
        fill_prepared(&t, &dir, cap, &mut whole, || ctx.stopped());
        let busy = pos != last_pos;
        last_pos = pos;
        ctx.sleep(if busy {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(20)
        });
    }
    for p in lock(&t.prepared).drain(..) {
        p.seg.remove_if_same_file();
    }
}

#[cfg(test)]
mod tests;
