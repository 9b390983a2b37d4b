//! Opening a table: the directory lock, recovery of the index from hint
//! files and segment scans (a torn tail is cut), the active segment, and
//! the background threads.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::format::*;
use super::index::{Index, Node};
use super::roll::Prep;
use super::segment::{self, Segment};
use super::MAX_SLOTS;
use super::{Config, Inner, Recovery, Registry, Result, Table, TableError, ValueMode, Writer};
use crate::segment::dir::{self, Kind};
use crate::segment::prepare;
use crate::segment::Prepared;
use crate::sys::{fsync_dir, lock};
use crate::wait::Wake;
use crate::worker::Worker;

type Tombstones = hashbrown::HashMap<Box<[u8]>, u64>;

/// Whether the file at `path` starts with a hint file's magic.
fn is_hint_file(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let mut m = [0u8; 8];
    fs::File::open(path)
        .and_then(|f| f.read_exact_at(&mut m, 0))
        .is_ok_and(|()| m == HINT_MAGIC)
}

impl Table {
    /// Opens (creating if needed) the table in `dir`, recovering its index.
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<Table> {
        cfg.validate()?;
        let t0 = Instant::now();
        let dir = dir.as_ref().to_path_buf();
        let lock_file = dir::open_writer(&dir, Kind::Table)?.ok_or(TableError::Locked)?;
        let mut inner = Inner::new(dir, cfg).map_err(TableError::Io)?;
        let mut recovery = inner.recover()?;
        recovery.duration = t0.elapsed();
        *lock(&inner.lock_file) = Some(lock_file);
        inner.keys.store(recovery.keys, Ordering::Relaxed);
        let inner = Arc::new(inner);
        let bg = inner.clone();
        let thread = Worker::spawn_with_wake(
            "tachyon-table",
            None,
            inner.maint_wake.clone(),
            move |ctx| bg.maintenance_loop(ctx),
        )
        .map_err(TableError::Io)?;
        let table = Table {
            inner: inner.clone(),
            thread: Mutex::new(Some(thread)),
            prep_thread: Mutex::new(None),
            recovery,
        };
        if inner.cfg.pretouch {
            // The first next segments are made ready here (`open` runs on
            // a dirty scheduler): a writer that starts at once must not
            // catch up with the thread's faulting-in. (A full disk: puts
            // report it.)
            let mut p = Prep(inner.clone());
            let _ = prepare::fill(&mut p, || false);
            let t = Worker::spawn_with_wake(
                "tachyon-table-prep",
                None,
                inner.prep_wake.clone(),
                move |ctx| prepare::run(ctx, p),
            )
            .map_err(TableError::Io)?;
            *lock(&table.prep_thread) = Some(t);
        }
        Ok(table)
    }
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

    fn push(&mut self, inner: &Inner, seg: &Segment, e: EntryRef<'d>, tombstones: &mut Tombstones) {
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

    fn flush(&mut self, inner: &Inner, seg: &Segment, tombstones: &mut Tombstones) {
        for (e, h) in self.entries.drain(..) {
            inner.replay(seg, e, h, tombstones);
        }
    }

    /// Replays what is left and stores the segment's counters.
    fn finish(mut self, inner: &Inner, seg: &Segment, tombstones: &mut Tombstones) {
        self.flush(inner, seg, tombstones);
        seg.total.fetch_add(self.total, Ordering::Relaxed);
        seg.tombs.fetch_add(self.tombs, Ordering::Relaxed);
        seg.min_seq.fetch_min(self.min_seq, Ordering::Relaxed);
        seg.max_seq.fetch_max(self.max_seq, Ordering::Relaxed);
    }
}

impl Inner {
    fn new(dir: std::path::PathBuf, cfg: Config) -> io::Result<Inner> {
        let slots: Box<[AtomicPtr<Segment>]> = (0..MAX_SLOTS)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        Ok(Inner {
            dir,
            index: Index::new(cfg.shards, cfg.capacity),
            prepared: Prepared::new(cfg.prepared_segments),
            cfg,
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
            maint_wake: Arc::new(Wake::new()?),
            requests: Mutex::new(Vec::new()),
            prep_wake: Arc::new(Wake::new()?),
            want: Mutex::new(None),
            active_cap: AtomicUsize::new(0),
            events: Mutex::new(VecDeque::new()),
            compactions: AtomicU64::new(0),
            compacted_in: AtomicU64::new(0),
            compacted_out: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            bg: Mutex::new(()),
            lock_file: Mutex::new(None),
        })
    }

    /// Rebuilds the index from the directory's files and makes the active
    /// segment ready.
    fn recover(&mut self) -> Result<Recovery> {
        let mut rec = Recovery::default();
        self.finish_crashed_compaction(&mut rec)?;
        let (seg_ids, hint_ids) = self.list_files(&mut rec)?;
        let mut tombstones = Tombstones::new();
        let mut max_seq = 0u64;
        let mut last: Option<Arc<Segment>> = None;
        for &id in &seg_ids {
            let hinted = hint_ids.contains(&id);
            if let Some(seg) =
                self.load_segment(id, hinted, &mut rec, &mut tombstones, &mut max_seq)?
            {
                last = Some(seg);
            }
        }
        drop(tombstones);
        self.next_id
            .store(seg_ids.last().map_or(1, |m| m + 1), Ordering::Relaxed);
        self.start_active(last, max_seq)?;
        fsync_dir(&self.dir)?;
        self.dir_dirty.store(false, Ordering::Release);
        rec.keys = self.keys.load(Ordering::Relaxed);
        Ok(rec)
    }

    /// A compaction that crashed while deleting its inputs: finish it (its
    /// outputs were durable before the manifest was written).
    fn finish_crashed_compaction(&self, rec: &mut Recovery) -> Result<()> {
        let manifest = self.dir.join(MANIFEST_FILE);
        let bytes = match fs::read(&manifest) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
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
        Ok(())
    }

    /// The segment ids (sorted) and hint ids of the directory; the table's
    /// temporary files (a hint's `<id:020>.tmp`, `compact.tmp`) and hints
    /// without a segment are removed. Other files are left alone.
    fn list_files(&self, rec: &mut Recovery) -> Result<(Vec<u64>, HashSet<u64>)> {
        let mut seg_ids = Vec::new();
        let mut hint_ids = HashSet::new();
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let tmp = name == "compact.tmp"
                || crate::segment::parse_file_name(name).is_some_and(|(_, ext)| ext == "tmp");
            if tmp {
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
            let path = self.dir.join(hint_file_name(*id));
            // A hint of a segment that is gone (a compaction's input), if
            // it is one: a file that is not a hint is not the table's.
            if seg_ids.binary_search(id).is_err() && is_hint_file(&path) {
                let _ = fs::remove_file(&path);
                rec.removed_files += 1;
            }
        }
        Ok((seg_ids, hint_ids))
    }

    /// Registers segment `id` and replays its entries, from its hint file
    /// if it has a valid one, else by scanning it (cutting a torn tail).
    /// `None` for a segment whose creation did not finish (removed).
    fn load_segment(
        &self,
        id: u64,
        has_hint: bool,
        rec: &mut Recovery,
        tombstones: &mut Tombstones,
        max_seq: &mut u64,
    ) -> Result<Option<Arc<Segment>>> {
        let path = self.dir.join(segment_file_name(id));
        let hint_path = self.dir.join(hint_file_name(id));
        match Segment::read_header(&path, id) {
            Ok(Some(_)) => {}
            Ok(None) if crate::segment::is_all_zero(&path)? => {
                // Created, never written (a crash before its header, which
                // is written first): it holds nothing.
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(&hint_path);
                rec.removed_files += 1;
                return Ok(None);
            }
            Ok(None) => {
                // A zero header over data: not a segment the table made.
                return Err(TableError::Corrupt {
                    segment: id,
                    offset: 0,
                });
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
        let seg = self.register(Segment::open(&path, id, slot, self.cfg.mode.maps(), None)?);
        rec.segments += 1;
        let hinted = has_hint && self.replay_hints(&seg, &hint_path, rec, tombstones, max_seq);
        if hinted {
            rec.hinted_segments += 1;
            seg.hinted.store(true, Ordering::Release);
            seg.synced.store(seg.cap as u64, Ordering::Release);
        } else {
            let _ = fs::remove_file(&hint_path);
            rec.scanned_segments += 1;
            self.replay_scan(&seg, &path, rec, tombstones, max_seq)?;
        }
        seg.sealed.store(true, Ordering::Release);
        Ok(Some(seg))
    }

    /// Replays a segment's hint file if it is whole and covers the whole
    /// segment (validated first, then applied).
    fn replay_hints(
        &self,
        seg: &Segment,
        hint_path: &Path,
        rec: &mut Recovery,
        tombstones: &mut Tombstones,
        max_seq: &mut u64,
    ) -> bool {
        let file_len = seg.cap as u64;
        let Ok(bytes) = fs::read(hint_path) else {
            return false;
        };
        if decode_hints(&bytes, seg.id, |_| {}).ok() != Some(file_len) {
            return false;
        }
        let mut batch = Replay::new();
        let _ = decode_hints(&bytes, seg.id, |e| {
            *max_seq = (*max_seq).max(e.seq);
            rec.records += 1;
            batch.push(self, seg, e, tombstones);
        });
        batch.finish(self, seg, tombstones);
        seg.end.store(file_len, Ordering::Release);
        true
    }

    /// Replays a segment record by record (CRC checked); a torn tail is
    /// cut and the preallocated zeroes given back.
    fn replay_scan(
        &self,
        seg: &Segment,
        path: &Path,
        rec: &mut Recovery,
        tombstones: &mut Tombstones,
        max_seq: &mut u64,
    ) -> Result<()> {
        let file_len = seg.cap as u64;
        let data = seg.data(file_len as usize)?;
        let mut n = 0u64;
        let mut batch = Replay::new();
        let (end, how) = scan_records(&data, |e| {
            *max_seq = (*max_seq).max(e.seq);
            n += 1;
            batch.push(self, seg, e, tombstones);
        });
        batch.finish(self, seg, tombstones);
        rec.records += n;
        if how == ScanEnd::Torn {
            let bad_end = segment::nonzero_end(&data, end);
            rec.truncated_bytes += (bad_end - end) as u64;
            rec.cut = Some((seg.id, end as u64));
        }
        drop(data);
        if how == ScanEnd::Torn || (end as u64) < file_len {
            // Cut a torn tail, or give back preallocated zeroes.
            let w = OpenOptions::new().write(true).open(path)?;
            w.set_len(end as u64)?;
            w.sync_all()?;
        }
        seg.end.store(end as u64, Ordering::Release);
        Ok(())
    }

    /// The active segment: the last one again if it is less than half full
    /// (its hint goes: it will grow), else a new one. On a full disk, the
    /// last segment as it is (puts then get NoSpace but the table opens).
    /// With `pretouch` it is faulted in whole now (open runs on a dirty
    /// scheduler).
    fn start_active(&mut self, last: Option<Arc<Segment>>, max_seq: u64) -> Result<()> {
        // The last segment is extended to the first size of the segments'
        // growth that is at least twice its data, and reused if that is
        // not past the largest size (it is at most half full then).
        let g = self.cfg.growth();
        let reuse = last.as_ref().and_then(|s| {
            let end = s.end.load(Ordering::Acquire) as usize;
            let mut cap = g.first();
            while cap < 2 * end && cap < g.max() {
                cap = g.next(Some(cap));
            }
            (end < cap / 2).then_some((s, cap))
        });
        let active = match reuse {
            Some((old, cap)) => self.reopen_for_append(old, cap),
            None => self.new_segment(self.next_cap(last.as_ref().map(|s| s.cap))),
        };
        let active = match (active, &last) {
            (Err(TableError::NoSpace), Some(old)) => self.reopen_for_append(old, 0)?,
            (r, _) => r?,
        };
        drop(last);
        let pos = active.end.load(Ordering::Acquire) as usize;
        let mut touched_to = pos;
        if self.cfg.pretouch {
            active.populate(pos, active.cap, self.cfg.mode == ValueMode::Mapped);
            active.touched.store(active.cap, Ordering::Release);
            touched_to = active.cap;
        }
        self.active_cap.store(active.cap, Ordering::Relaxed);
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        w.wmap = active.writable_map();
        w.active = Some(active);
        w.pos = pos;
        w.seq = max_seq + 1;
        w.touched_to = touched_to;
        Ok(())
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
    pub(super) fn replay(
        &self,
        seg: &Segment,
        e: EntryRef<'_>,
        h: u64,
        tombstones: &mut Tombstones,
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
}
