//! Opening a store: the writer (lock, recovery, the pre-touch thread) and
//! the reader (the segments listed so far).

use std::borrow::Borrow;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use super::format::*;
use super::recover::verify_segments;
use super::retain::Segs;
use super::roll::Touch;
use super::{Config, Mode, OpenError, Recovery, Segment, Store, StoreError, Writer};
use crate::segment::dir::{self, Kind};
use crate::spin::SpinMutex;

/// Removes segment `seq`, a file at `path` that is not activated, if it is
/// this store's prepared segment or holds nothing
/// ([`Segment::is_unused_and_ours`]); one already gone (a closed store's
/// prepare thread removes its own on the way out) is fine. Anything else in
/// the sequence is not the store's to remove: `Corrupt`.
pub(super) fn remove_unused(path: &Path, seq: u64) -> Result<(), StoreError> {
    match Segment::is_unused_and_ours(path, seq) {
        Ok(true) => {}
        Ok(false) => {
            return Err(StoreError::Corrupt {
                segment: seq,
                offset: 0,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// The segment files of `dir`, by sequence number.
pub(super) fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
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

/// Removes the `.retired` files of `dir` (a crash interrupted their reuse:
/// see [`Segment::reuse`]) that are the store's
/// ([`Segment::is_retired_and_ours`]; anything else stays). Returns how
/// many went.
fn remove_retired(dir: &Path) -> Result<u64, StoreError> {
    let mut n = 0;
    for e in fs::read_dir(dir)? {
        let p = e?.path();
        let retired = p
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(crate::segment::parse_file_name)
            .is_some_and(|(_, ext)| ext == "retired");
        if retired && Segment::is_retired_and_ours(&p)? {
            fs::remove_file(&p)?;
            n += 1;
        }
    }
    Ok(n)
}

/// The first index kept and the next index of `segs`.
pub(super) fn bounds(segs: &[Arc<Segment>]) -> (u64, u64) {
    match (segs.first(), segs.last()) {
        (Some(f), Some(l)) => (f.base(), l.base() + l.count()),
        _ => (0, 0),
    }
}

/// Takes the directory's writer lock, once the directory is known to be a
/// directory of `kind` (or made one: see [`crate::segment::dir`]).
pub(super) fn lock_dir(dir: &Path, kind: Kind) -> Result<File, StoreError> {
    crate::segment::dir::open_writer(dir, kind)?.ok_or(StoreError::Locked)
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
        let lock_file = lock_dir(&dir, cfg.kind)?;
        let mut rec = Recovery::default();
        let mut segs = open_segments(&dir, &mut rec)?;
        // (records, data bytes) of the last segment, from its scan.
        let (active_count, active_end) = verify_segments(&mut segs, &cfg, &mut rec)?;
        let dir_dirty = segs.is_empty() || rec.removed_unused > 0;
        if segs.is_empty() {
            let s = Segment::create(&dir, 0, cfg.growth().first())?;
            s.activate(0, cfg.clock.now_ns());
            segs.push(Arc::new(s));
        }
        let (active, sealed) = segs.split_last().ok_or(StoreError::NotFound)?;
        // The last segment is the active one, even if a crash left it sealed.
        active.clear_seal();
        // Recovery is over: the sealed segments are read through their
        // read-only maps only from now on (open runs on a dirty scheduler:
        // unmapped here).
        for s in sealed {
            drop(s.take_writable());
        }
        let writer = Writer::resume(active.clone(), active_count, active_end)?;
        let first = segs[0].base();
        rec.segments = segs.len() as u64;
        rec.messages = writer.next_index - first;
        let touch = cfg.pretouch.then(|| {
            // The whole active segment is faulted in now (open runs on a
            // dirty scheduler), the next ones by the thread.
            let l = active.layout;
            active.populate(0, l.data_start);
            active.populate(l.data_start + active_end, l.file_len);
            active.touched.store(l.file_len, Ordering::Release);
            Arc::new(Touch::new(
                active.clone(),
                active_end,
                cfg.prepared_segments,
            ))
        });
        rec.duration = t0.elapsed();
        let next = writer.next_index;
        let store = Store::build(dir, cfg, Some(writer), segs, (first, next), rec);
        store.segs.dir_dirty.store(dir_dirty, Ordering::Relaxed);
        *super::lock(&store.lock_file) = Some(lock_file);
        store.retain_at_open();
        match touch {
            Some(t) => store.start_pretouch(t),
            None => Ok(store),
        }
    }

    fn open_reader(dir: PathBuf, cfg: Config) -> Result<Store, StoreError> {
        let t0 = Instant::now();
        dir::check_reader(&dir, cfg.kind)?;
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
        Ok(Store::build(dir, cfg, None, segs, (first, next), rec))
    }

    fn build(
        dir: PathBuf,
        cfg: Config,
        writer: Option<Writer>,
        segs: Vec<Arc<Segment>>,
        (first, next): (u64, u64),
        recovery: Recovery,
    ) -> Store {
        Store {
            segs: Arc::new(Segs::new(&cfg, segs, first)),
            dir,
            cfg,
            writer: SpinMutex::new(writer),
            next_index: CachePadded::new(AtomicU64::new(next)),
            closed: AtomicBool::new(false),
            touch: None,
            toucher: Mutex::new(None),
            lock_file: Mutex::new(None),
            recovery,
        }
    }
}

impl Writer {
    /// The writer of `active`, whose scan found `count` records in `end`
    /// data bytes.
    fn resume(active: Arc<Segment>, count: usize, end: usize) -> Result<Writer, StoreError> {
        let wmap = active.writable().ok_or(StoreError::Io(io::Error::other(
            "active segment not writable",
        )))?;
        Ok(Writer {
            next_index: active.base() + count as u64,
            active,
            wmap,
            pos: end,
            slot: count,
            unsynced: Vec::new(),
            synced_pos: end,
            synced_slot: count,
            header_dirty: true,
            appended: 0,
            appended_bytes: 0,
            rolls: 0,
            prepared_rolls: 0,
        })
    }
}

/// Opens every segment of `dir` writable (recovery may repair them),
/// removing the ones a crash left prepared but never activated (or
/// retired while being reused: `.retired` files) and those a reset left
/// before the segment it starts the log with, and checks that they follow
/// each other.
fn open_segments(dir: &Path, rec: &mut Recovery) -> Result<Vec<Arc<Segment>>, StoreError> {
    rec.removed_unused += remove_retired(dir)?;
    let mut segs: Vec<Arc<Segment>> = Vec::new();
    for (seq, path) in list_segments(dir)? {
        match Segment::open(&path, seq, true)? {
            Some(s) => segs.push(Arc::new(s)),
            None => {
                // (So the next roll can create it again.)
                remove_unused(&path, seq)?;
                rec.removed_unused += 1;
            }
        }
    }
    for s in drop_before_reset(&mut segs) {
        fs::remove_file(&s.path)?;
        rec.removed_unused += 1;
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
    Ok(segs)
}

/// Takes the segments before the last one that starts the log anew
/// (`FLAG_RESET`: a crash interrupted [`super::reset_dir`] after it made
/// that one) out of `segs`, and returns them.
pub(super) fn drop_before_reset<S: Borrow<Segment>>(segs: &mut Vec<S>) -> Vec<S> {
    match segs
        .iter()
        .rposition(|s| s.borrow().flags() & FLAG_RESET != 0)
    {
        Some(i) => segs.drain(..i).collect(),
        None => Vec::new(),
    }
}

/// A reader's segments: those of `current` still listed, and new ones
/// opened read-only, skipping files not activated (prepared ahead, or a
/// retired one being reused).
pub(super) fn load_reader_segments(
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
            Ok(None) => continue, // prepared, not activated yet
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => continue, // deleted meanwhile
            // Renamed away while we read its header (retired, its file
            // being reused): not a segment of the log any more.
            Err(OpenError::Corrupt { .. }) if !path.exists() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    drop_before_reset(&mut segs);
    Ok(segs)
}
