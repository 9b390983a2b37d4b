//! A node's log in the shells: a [`Store`] (the entries) and, beside it in
//! the same directory, `meta` (the node's [`Meta`]: Raft's term and vote,
//! the log's identity, the host's boot at the last start, whether the node
//! is a learner; written in place with a checksum and `fdatasync`ed before
//! the node answers anyone). The replayer and the syncer read the same
//! store through [`SharedStore`].
//!
//! A truncation (a follower's uncommitted tail, after a change of primary)
//! closes the store, cuts its files durably ([`crate::store::truncate_dir`])
//! and reopens it: rare, and it keeps the live writer out of it.
//!
//! Retention is the node's ([`crate::seq::core::node`]'s `retention`): the
//! store's `max_bytes` and `max_age_ms` are the log's policy, which
//! [`Log::retention_point`] reads, and the store itself removes nothing;
//! [`trim`] removes whole segments after the checkpoint that sums them up
//! is saved, and [`Log::install`] replaces the log by an empty one at a
//! checkpoint's index ([`Store::reset_to`]).
//!
//! The store is opened with `repair`: a record that does not verify cuts
//! the log there (the node then starts as a learner and copies what it
//! lost from its peers). A log written by an older version (16-byte
//! message headers, a `vote` file) is refused, untouched.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::core::{Entries, Log, LogError, Meta};
use crate::store::{self, Store, StoreError};

/// The store as the replayer and the syncer see it: replaced after a
/// truncation.
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<Arc<Store>>>);

impl SharedStore {
    pub fn get(&self) -> Arc<Store> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, s: Arc<Store>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

const META_MAGIC: u32 = 0x4154_4d54; // "TMTA"
const META_VERSION: u32 = 1;
const META_LEN: usize = 40;

/// Why a node's log could not be opened.
#[derive(Debug)]
pub enum NodeLogError {
    Store(StoreError),
    /// Written by an older version of the sequencer (its entries' format
    /// differs): left as it is.
    OldFormat,
}

impl From<StoreError> for NodeLogError {
    fn from(e: StoreError) -> NodeLogError {
        NodeLogError::Store(e)
    }
}

impl From<std::io::Error> for NodeLogError {
    fn from(e: std::io::Error) -> NodeLogError {
        NodeLogError::Store(StoreError::from(e))
    }
}

/// The checkpoint beside the log ([`crate::seq::core::node::checkpoint`]):
/// the state of the entries retention removed.
const CHECKPOINT: &str = "checkpoint";

/// Saves `checkpoint` durably (a new file renamed over the old one).
pub fn save_checkpoint(dir: &Path, checkpoint: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join("checkpoint.new");
    let f = File::create(&tmp)?;
    f.write_all_at(checkpoint, 0)?;
    f.sync_data()?;
    std::fs::rename(&tmp, dir.join(CHECKPOINT))?;
    crate::sys::fsync_dir(dir)
}

fn load_checkpoint_file(dir: &Path) -> Option<Vec<u8>> {
    std::fs::read(dir.join(CHECKPOINT)).ok()
}

/// Retention's work, off the node's thread: the checkpoint saved first,
/// then the whole segments below `first` removed (a crash between leaves
/// segments a later trim removes).
pub fn trim(
    dir: &Path,
    store: &SharedStore,
    first: u64,
    checkpoint: &[u8],
) -> Result<(), StoreError> {
    save_checkpoint(dir, checkpoint)?;
    store.get().trim_below(first).map(|_| ())
}

/// The log's retention policy (the store's `max_bytes`, `max_age_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Policy {
    max_bytes: Option<u64>,
    max_age_ms: Option<u64>,
}

pub struct NodeLog {
    store: Arc<Store>,
    shared: SharedStore,
    dir: PathBuf,
    cfg: store::Config,
    meta: Option<Meta>,
    meta_file: Option<File>,
    lost: u64,
    checkpoint: Option<Vec<u8>>,
    policy: Policy,
}

impl NodeLog {
    /// Opens (or creates) the store and reads the metadata in `dir`.
    /// `on_disk`: acknowledgements will promise the disk, so everything
    /// the files hold is synced first (a crash of the last writer may have
    /// left it in the page cache only).
    pub fn open(
        dir: &Path,
        mut cfg: store::Config,
        on_disk: bool,
    ) -> Result<NodeLog, NodeLogError> {
        if dir.join("vote").exists() && !dir.join("meta").exists() {
            return Err(NodeLogError::OldFormat);
        }
        cfg.repair = true;
        // The node trims (after a checkpoint), the store never on its own.
        let policy = Policy {
            max_bytes: cfg.max_bytes.take(),
            max_age_ms: cfg.max_age_ms.take(),
        };
        cfg.max_segments = None;
        // The directory is a sequencer's (a store's or a table's is
        // refused, unchanged); the truncation's reopen keeps the kind.
        cfg.kind = crate::segment::dir::Kind::Sequencer;
        let store = Arc::new(Store::open(dir, cfg.clone())?);
        let first = store.first_index().unwrap_or(0);
        if store.next_index().unwrap_or(0) > first {
            // Entries are messages (entry 0 the session record), with a
            // 16-byte header in the old format, 20 bytes now.
            let ok = store
                .read_with(first, |e| crate::seq::wire::Msg::from_entry(e).is_ok())
                .unwrap_or(false);
            if !ok {
                store.close();
                return Err(NodeLogError::OldFormat);
            }
        }
        if on_disk {
            store.sync_all()?;
        }
        let lost = store.recovery().lost_records;
        let path = dir.join("meta");
        let (meta, meta_file) = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => {
                let mut b = [0u8; META_LEN];
                let m = f
                    .read_exact_at(&mut b, 0)
                    .ok()
                    .and_then(|_| decode_meta(&b));
                (m, Some(f))
            }
            Err(_) => (None, None),
        };
        Ok(NodeLog {
            shared: SharedStore(Arc::new(Mutex::new(store.clone()))),
            store,
            dir: dir.to_path_buf(),
            cfg,
            meta,
            meta_file,
            lost,
            checkpoint: load_checkpoint_file(dir),
            policy,
        })
    }

    pub fn shared(&self) -> SharedStore {
        self.shared.clone()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Closes the store, changes its files with `f` (the directory, the
    /// store's config) and reopens it. Readers (the replayer) get `Closed`
    /// meanwhile, never garbage.
    fn rewrite(
        &mut self,
        f: impl FnOnce(&Path, &store::Config) -> Result<(), StoreError>,
    ) -> Result<(), LogError> {
        self.store.close();
        let done = f(&self.dir, &self.cfg);
        let reopened = Store::open(&self.dir, self.cfg.clone());
        let s = Arc::new(reopened?);
        self.store = s.clone();
        self.shared.set(s);
        done.map_err(LogError::from)
    }

    fn meta_file(&mut self) -> std::io::Result<&File> {
        if self.meta_file.is_none() {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.dir.join("meta"))?;
            crate::sys::fsync_dir(&self.dir)?;
            self.meta_file = Some(f);
        }
        Ok(self.meta_file.as_ref().expect("opened above"))
    }
}

fn encode_meta(m: &Meta) -> [u8; META_LEN] {
    let mut b = [0u8; META_LEN];
    b[0..4].copy_from_slice(&META_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&META_VERSION.to_le_bytes());
    b[8..12].copy_from_slice(&m.term.to_le_bytes());
    b[12] = m.vote.is_some() as u8;
    b[13] = m.vote.unwrap_or(0);
    b[14] = m.learner as u8;
    // 0 in files of before this flag: not fresh (safe: they held a log).
    b[15] = m.fresh as u8;
    b[16..24].copy_from_slice(&m.log_id.to_le_bytes());
    b[24..32].copy_from_slice(&m.boot.to_le_bytes());
    let crc = crate::crc::crc32c(&b[..32]);
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_meta(b: &[u8; META_LEN]) -> Option<Meta> {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    if u32_at(0) != META_MAGIC
        || u32_at(4) != META_VERSION
        || crate::crc::crc32c(&b[..32]) != u32_at(32)
    {
        return None;
    }
    Some(Meta {
        term: u32_at(8),
        vote: (b[12] == 1).then_some(b[13]),
        learner: b[14] == 1,
        fresh: b[15] == 1,
        log_id: u64_at(16),
        boot: u64_at(24),
    })
}

impl Entries for NodeLog {
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        read_checked(&self.store, from, max, f)
    }
}

/// A store's entries, a record that does not verify reported as
/// [`LogError::Damaged`] with its index (what came before it is read).
pub fn read_checked(
    store: &Store,
    from: u64,
    max: usize,
    f: &mut dyn FnMut(u64, &[u8]),
) -> Result<usize, LogError> {
    let mut n = 0;
    match store.read_range(from, max, usize::MAX, &mut |i: u64, e: &[u8]| {
        n += 1;
        f(i, e)
    }) {
        Ok(k) => Ok(k),
        Err(StoreError::Corrupt { .. }) if n > 0 => Ok(n),
        Err(StoreError::Corrupt { .. }) => Err(LogError::Damaged(from)),
        Err(e) => Err(e.into()),
    }
}

impl Log for NodeLog {
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        Ok(self.store.append(entry)?)
    }

    fn next_index(&self) -> u64 {
        self.store.next_index().unwrap_or(0)
    }

    fn truncate(&mut self, from: u64) -> Result<(), LogError> {
        self.rewrite(|dir, _| store::truncate_dir(dir, from).map(|_| ()))
    }

    fn load_meta(&self) -> Option<Meta> {
        self.meta
    }

    fn save_meta(&mut self, m: &Meta) -> Result<(), LogError> {
        if self.meta == Some(*m) {
            return Ok(());
        }
        let b = encode_meta(m);
        self.meta_file()
            .and_then(|f| f.write_all_at(&b, 0).and_then(|_| f.sync_data()))
            .map_err(|e| LogError::Store(StoreError::from(e)))?;
        self.meta = Some(*m);
        Ok(())
    }

    fn recovery_lost(&self) -> u64 {
        self.lost
    }

    fn first_index(&self) -> u64 {
        self.store.first_index().unwrap_or(0)
    }

    fn load_checkpoint(&self) -> Option<Vec<u8>> {
        self.checkpoint.clone()
    }

    fn retention_point(&self, floor: u64) -> u64 {
        let first = self.first_index();
        if self.policy == Policy::default() {
            return first;
        }
        let p = self.policy;
        self.store
            .retention_point(p.max_bytes, p.max_age_ms, floor)
            .max(first)
    }

    fn install(&mut self, base: u64, checkpoint: &[u8]) -> Result<(), LogError> {
        // The checkpoint first: a crash before the reset leaves the old
        // log and a checkpoint past it (the node installs again).
        save_checkpoint(&self.dir, checkpoint).map_err(|e| LogError::Store(e.into()))?;
        self.checkpoint = Some(checkpoint.to_vec());
        Ok(self.store.reset_to(base)?)
    }

    fn has_space(&mut self) -> bool {
        // A new segment needs its whole size (it is allocated at creation).
        let need = self.cfg.segment_size as u64 + crate::store::format::HEADER_SIZE as u64;
        crate::sys::free_space(&self.dir).is_ok_and(|free| free >= need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_garbage_is_none() {
        let m = Meta {
            term: 7,
            vote: Some(2),
            log_id: 0xdead_beef,
            boot: 42,
            learner: true,
            fresh: true,
        };
        assert_eq!(decode_meta(&encode_meta(&m)), Some(m));
        let none = Meta {
            vote: None,
            learner: false,
            fresh: false,
            ..m
        };
        assert_eq!(decode_meta(&encode_meta(&none)), Some(none));
        let mut b = encode_meta(&m);
        b[9] ^= 1;
        assert_eq!(decode_meta(&b), None);
        assert_eq!(decode_meta(&[0; META_LEN]), None);
    }

    #[test]
    fn a_store_directory_is_not_a_node_log_nor_the_other_way_round() {
        use crate::segment::dir::{DirError, Kind};
        let root =
            std::env::temp_dir().join(format!("tachyon-nodelog-kind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cfg = store::Config {
            segment_size: 64 * 1024,
            initial_segment_size: 64 * 1024,
            max_message_size: 1024,
            ..store::Config::default()
        };
        let listing = |d: &Path| {
            let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let name = e.file_name().into_string().unwrap();
                    (name, std::fs::read(e.path()).unwrap())
                })
                .collect();
            v.sort();
            v
        };
        // A store's directory: the node refuses it and leaves it as it was.
        let sd = root.join("store");
        let s = Store::open(&sd, cfg.clone()).unwrap();
        s.append(b"mine").unwrap();
        s.close();
        let before = listing(&sd);
        assert!(matches!(
            NodeLog::open(&sd, cfg.clone(), false),
            Err(NodeLogError::Store(StoreError::Dir(DirError::WrongKind(
                Some(Kind::Store)
            ))))
        ));
        assert_eq!(listing(&sd), before);
        // A node's log: a store writer refuses it, a reader reads it.
        let nd = root.join("node");
        let mut l = NodeLog::open(&nd, cfg.clone(), false).unwrap();
        let mut entry = Vec::new();
        crate::seq::wire::write_msg(&mut entry, 0, 0, 0, 1, b"x");
        l.append(&entry).unwrap();
        let m = Meta {
            term: 2,
            vote: Some(0),
            log_id: 7,
            boot: 1,
            learner: false,
            fresh: false,
        };
        l.save_meta(&m).unwrap();
        l.store().close(); // (its pre-touch thread joined: no file changes after)
        drop(l);
        let before = listing(&nd);
        assert!(matches!(
            Store::open(&nd, cfg.clone()),
            Err(StoreError::Dir(DirError::WrongKind(Some(Kind::Sequencer))))
        ));
        let r = Store::open(
            &nd,
            store::Config {
                mode: store::Mode::Read,
                ..cfg.clone()
            },
        )
        .unwrap();
        assert_eq!(r.read(0).unwrap(), entry);
        drop(r);
        assert_eq!(listing(&nd), before);
        // And it reopens as a node's log.
        let l = NodeLog::open(&nd, cfg, false).unwrap();
        assert_eq!((l.next_index(), l.load_meta()), (1, Some(m)));
        l.store().close();
        drop(l);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_metadata_survives_a_reopen_and_a_truncation_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("tachyon-nodelog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = store::Config {
            segment_size: 64 * 1024,
            max_message_size: 1024,
            ..store::Config::default()
        };
        let mut l = NodeLog::open(&dir, cfg.clone(), false).unwrap();
        assert_eq!(l.load_meta(), None);
        let mut e = Vec::new();
        for i in 0..100u64 {
            e.clear();
            crate::seq::wire::write_msg(&mut e, (i > 0) as u32, i, 0, 1, b"x");
            assert_eq!(l.append(&e).unwrap(), i);
        }
        let m = Meta {
            term: 4,
            vote: Some(1),
            log_id: 99,
            boot: 3,
            learner: false,
            fresh: false,
        };
        l.save_meta(&m).unwrap();
        let reader = l.shared();
        l.truncate(60).unwrap();
        assert_eq!(l.next_index(), 60);
        assert_eq!(reader.get().next_index().unwrap(), 60);
        assert_eq!(l.append(b"y").unwrap(), 60);
        l.store().close();
        drop(l);
        drop(reader);
        let l = NodeLog::open(&dir, cfg.clone(), true).unwrap();
        assert_eq!(l.load_meta(), Some(m));
        assert_eq!(l.next_index(), 61);
        let mut got = Vec::new();
        l.read_range(59, 10, &mut |i, e| got.push((i, e.len())))
            .unwrap();
        assert_eq!(got, vec![(59, crate::seq::wire::MSG_HEADER + 1), (60, 1)]);
        l.store().close();
        drop(l);
        // An older version's directory (a `vote` file, no `meta`) is left
        // alone.
        std::fs::remove_file(dir.join("meta")).unwrap();
        std::fs::write(dir.join("vote"), [0u8; 16]).unwrap();
        assert!(matches!(
            NodeLog::open(&dir, cfg, false),
            Err(NodeLogError::OldFormat)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn retention_trims_whole_segments_after_the_checkpoint_and_install_resets() {
        let dir =
            std::env::temp_dir().join(format!("tachyon-nodelog-retain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let seg = 64 * 1024;
        let file_len = store::format::Layout::new(seg).file_len as u64;
        let cfg = store::Config {
            segment_size: seg,
            initial_segment_size: seg,
            max_message_size: 1024,
            max_bytes: Some(3 * file_len),
            ..store::Config::default()
        };
        let entry = |i: u64| {
            let mut e = Vec::new();
            crate::seq::wire::write_msg(&mut e, (i > 0) as u32, i, 0, 1, &[7u8; 100]);
            e
        };
        let mut l = NodeLog::open(&dir, cfg.clone(), false).unwrap();
        for i in 0..3000u64 {
            assert_eq!(l.append(&entry(i)).unwrap(), i);
        }
        // The store removed nothing on its own: the node trims.
        assert_eq!(l.first_index(), 0);
        assert!(l.store().stats().segments > 4);
        let p = l.retention_point(u64::MAX);
        assert!(p > 0);
        assert_eq!(l.retention_point(0), 0);
        assert!(l.retention_point(p - 1) < p);
        trim(&dir, &l.shared(), p, b"checkpoint at p").unwrap();
        assert_eq!(l.first_index(), p);
        let st = l.store().stats();
        assert!(st.disk_bytes <= 3 * file_len, "{st:?}");
        assert!(matches!(
            l.read_range(0, 1, &mut |_, _| {}),
            Err(LogError::Store(StoreError::Trimmed(f))) if f == p
        ));
        let mut got = Vec::new();
        l.read_range(p, 1, &mut |i, e| got.push((i, e.to_vec())))
            .unwrap();
        assert_eq!(got, vec![(p, entry(p))]);
        // Nothing more to cut until more is written.
        assert_eq!(l.retention_point(u64::MAX), p);
        // The pre-touch thread reuses or removes the files (a crash before
        // leaves them in the log, below the checkpoint: harmless).
        let activated = || {
            std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(|e| std::fs::read(e.unwrap().path()).ok())
                .filter(|b| b.starts_with(&store::format::MAGIC))
                .count() as u64
        };
        crate::segment::wait_until("the trimmed files reused or removed", || {
            activated() == l.store().stats().segments
        });
        l.store().close();
        drop(l);
        // A reopen keeps the first index and the checkpoint.
        let mut l = NodeLog::open(&dir, cfg.clone(), false).unwrap();
        assert_eq!((l.first_index(), l.next_index()), (p, 3000));
        assert_eq!(
            l.load_checkpoint().as_deref(),
            Some(&b"checkpoint at p"[..])
        );
        // A checkpoint installed: an empty log whose next index is its base.
        let reader = l.shared();
        l.install(5000, b"checkpoint at 5000").unwrap();
        assert_eq!((l.first_index(), l.next_index()), (5000, 5000));
        assert_eq!(reader.get().next_index().unwrap(), 5000);
        assert_eq!(l.append(&entry(5000)).unwrap(), 5000);
        l.store().close();
        drop(l);
        drop(reader);
        let l = NodeLog::open(&dir, cfg, true).unwrap();
        assert_eq!((l.first_index(), l.next_index()), (5000, 5001));
        assert_eq!(
            l.load_checkpoint().as_deref(),
            Some(&b"checkpoint at 5000"[..])
        );
        l.store().close();
        drop(l);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
