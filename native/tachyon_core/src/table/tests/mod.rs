use super::*;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A fresh directory, removed on drop.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new() -> TmpDir {
        TmpDir(crate::segment::test_dir("table"))
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const MODES: [ValueMode; 3] = [ValueMode::Memory, ValueMode::Mapped, ValueMode::File];

fn small(mode: ValueMode) -> Config {
    Config {
        mode,
        segment_size: 64 * 1024,
        max_key_size: 256,
        max_value_size: 4096,
        compaction_interval: None,
        shards: 8,
        ..Config::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn val(i: u64, version: u64) -> Vec<u8> {
    let n = ((i * 7 + version * 13) % 300) as usize;
    let mut v = format!("v{version}-{i}-").into_bytes();
    v.resize(v.len() + n, (i % 251) as u8);
    v
}

fn seg_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // (A hint file may be renamed meanwhile by the background thread.)
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.metadata().ok()?.blocks() * 512))
        .sum()
}

/// Sealed segments (not the active one, not a prepared next one).
fn sealed(t: &Table) -> u64 {
    lock(&t.inner.segs)
        .by_id
        .values()
        .filter(|s| s.sealed.load(Ordering::Acquire))
        .count() as u64
}

/// Runs one background compaction round now, as the thread would.
fn compact_background(t: &Table) -> Compaction {
    let _g = lock(&t.inner.bg);
    t.inner.write_hints().unwrap();
    t.inner.compact_round(false).unwrap()
}

#[test]
fn put_get_delete_reopen_all_modes() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.get(b"nope").unwrap(), None);
        for i in 0..2000 {
            t.put(&key(i), &val(i, 0)).unwrap();
        }
        for i in (0..2000).step_by(3) {
            t.put(&key(i), &val(i, 1)).unwrap();
        }
        for i in (0..2000).step_by(5) {
            assert!(t.delete(&key(i)).unwrap());
        }
        assert!(!t.delete(b"nope").unwrap());
        t.put(b"", b"empty key").unwrap();
        t.put(b"empty value", b"").unwrap();
        let expect = |i: u64| -> Option<Vec<u8>> {
            if i.is_multiple_of(5) {
                None
            } else if i.is_multiple_of(3) {
                Some(val(i, 1))
            } else {
                Some(val(i, 0))
            }
        };
        let live = (0..2000).filter(|i| i % 5 != 0).count() as u64 + 2;
        for i in 0..2000 {
            assert_eq!(t.get(&key(i)).unwrap(), expect(i), "{mode:?} key {i}");
        }
        assert_eq!(t.count().unwrap(), live);
        assert!(
            t.stats().unwrap().segments > 2,
            "64 KiB segments must have rolled"
        );
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.recovery().cut, None);
        assert_eq!(t.recovery().keys, live);
        assert_eq!(t.count().unwrap(), live);
        for i in 0..2000 {
            assert_eq!(
                t.get(&key(i)).unwrap(),
                expect(i),
                "{mode:?} key {i} after reopen"
            );
        }
        assert_eq!(t.get(b"").unwrap(), Some(b"empty key".to_vec()));
        assert_eq!(t.get(b"empty value").unwrap(), Some(vec![]));
        t.close().unwrap();
        assert!(matches!(t.get(b""), Err(TableError::Closed)));
        assert!(matches!(t.put(b"a", b"b"), Err(TableError::Closed)));
        assert!(matches!(t.delete(b"a"), Err(TableError::Closed)));
        assert!(matches!(t.count(), Err(TableError::Closed)));
        assert!(matches!(t.sync(), Err(TableError::Closed)));
        assert!(matches!(t.compact(), Err(TableError::Closed)));
        t.close().unwrap();
    }
}

/// A table in `d` with keys 0..3000 put and the hint files of its sealed
/// segments written.
fn filled_with_hints(d: &TmpDir, mode: ValueMode) -> Table {
    let t = Table::open(&d.0, small(mode)).unwrap();
    for i in 0..3000 {
        t.put(&key(i), &val(i, 0)).unwrap();
    }
    {
        let _g = lock(&t.inner.bg);
        t.inner.write_hints().unwrap();
    }
    t
}

#[test]
fn hints_are_used_on_reopen() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = filled_with_hints(&d, mode);
        let sealed = sealed(&t);
        assert!(sealed >= 3);
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        let r = t.recovery().clone();
        assert_eq!(r.hinted_segments, sealed, "{r:?}");
        assert_eq!(r.scanned_segments, 1);
        assert_eq!(r.keys, 3000);
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
        // A damaged hint is ignored: the segment is scanned instead.
        let _ = t.shut(false); // what a drop did, synchronously
        let hint = fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "hint"))
            .unwrap();
        let mut b = fs::read(&hint).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x55;
        fs::write(&hint, b).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.recovery().hinted_segments, sealed - 1);
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    }
}

#[test]
fn sealed_segments_drop_their_writable_mapping_before_sync() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = filled_with_hints(&d, mode);
        let active = lock(&t.inner.writer).active.clone().unwrap();
        let segs: Vec<Arc<Segment>> = lock(&t.inner.segs).by_id.values().cloned().collect();
        let mut hinted = 0;
        for s in &segs {
            assert_eq!(s.is_mapped(), mode != ValueMode::File, "{mode:?}");
            if s.hinted.load(Ordering::Acquire) {
                hinted += 1;
                // Synced without a writable mapping; writing is refused.
                assert!(s.writable_map().is_none(), "{mode:?} segment {}", s.id);
                if s.is_mapped() {
                    assert!(s.write_record(s.cap - 64, &[1u8; 32]).is_err());
                }
            }
        }
        assert!(hinted >= 3, "{mode:?}: {hinted} hinted segments");
        assert_eq!(
            active.writable_map().is_some(),
            mode != ValueMode::File,
            "{mode:?}"
        );
        drop((active, segs));
        // Values in sealed segments and the active one still read (through
        // the read-only mapping in the Mapped mode), and new puts land.
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)), "{mode:?} key {i}");
        }
        for i in 0..500 {
            t.put(&key(i), &val(i, 1)).unwrap();
        }
        t.close().unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..3000 {
            let v = if i < 500 { val(i, 1) } else { val(i, 0) };
            assert_eq!(
                t.get(&key(i)).unwrap(),
                Some(v),
                "{mode:?} key {i} after reopen"
            );
        }
    }
}

#[test]
fn put_many_is_atomic_and_checked() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..50).map(|i| (key(i), val(i, 0))).collect();
        let refs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        t.put_many(&refs).unwrap();
        t.put_many(&[]).unwrap();
        // The same key twice in a batch: the last wins.
        t.put_many(&[(b"dup", b"1"), (b"dup", b"2")]).unwrap();
        assert_eq!(t.get(b"dup").unwrap(), Some(b"2".to_vec()));
        // One oversized value fails the whole batch.
        let big = vec![0u8; 4097];
        assert!(matches!(
            t.put_many(&[(b"x", b"1"), (b"y", &big)]),
            Err(TableError::TooLarge)
        ));
        assert_eq!(t.get(b"x").unwrap(), None);
        // A batch that cannot fit in a segment.
        let v = vec![1u8; 4000];
        let many: Vec<(&[u8], &[u8])> = (0..20).map(|_| (&b"k"[..], &v[..])).collect();
        assert!(matches!(t.put_many(&many), Err(TableError::TooLarge)));
        assert_eq!(t.count().unwrap(), 51);
        assert_eq!(t.stats().unwrap().batches, 2);
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..50 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
        assert_eq!(t.get(b"dup").unwrap(), Some(b"2".to_vec()));
    }
}

#[test]
fn torn_batch_is_all_or_nothing() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    t.put(b"before", b"1").unwrap();
    let v = vec![7u8; 1000];
    let batch: Vec<(Vec<u8>, &[u8])> = (0..10).map(|i| (key(i), &v[..])).collect();
    let refs: Vec<(&[u8], &[u8])> = batch.iter().map(|(k, v)| (&k[..], *v)).collect();
    t.put_many(&refs).unwrap();
    let end = lock(&t.inner.writer).pos;
    let _ = t.shut(false); // what a drop did, synchronously
                           // Damage the last byte of the batch record: none of it survives.
    let f = seg_files(&d.0).pop().unwrap();
    let mut b = fs::read(&f).unwrap();
    b[end - 1] ^= 0xff;
    fs::write(&f, &b).unwrap();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    let r = t.recovery();
    assert!(r.cut.is_some() && r.truncated_bytes > 0, "{r:?}");
    assert_eq!(t.get(b"before").unwrap(), Some(b"1".to_vec()));
    for i in 0..10 {
        assert_eq!(t.get(&key(i)).unwrap(), None);
    }
    assert_eq!(t.count().unwrap(), 1);
}

#[test]
fn torn_tail_is_cut_and_reported() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..100 {
            t.put(&key(i), &val(i, 0)).unwrap();
        }
        let end = lock(&t.inner.writer).pos;
        let _ = t.shut(false); // what a drop did, synchronously
                               // A half-written record after the last one: a header claiming 200
                               // bytes, with a CRC that cannot match, and some payload.
        let f = seg_files(&d.0).pop().unwrap();
        let mut b = fs::read(&f).unwrap();
        assert_eq!(b.len(), end, "close gives back the preallocated tail");
        b.extend([0xde, 0xad, 0xbe, 0xef, 200, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        b.extend([0xabu8; 50]);
        fs::write(&f, &b).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        let r = t.recovery().clone();
        assert_eq!(r.truncated_bytes, 66, "{mode:?} {r:?}");
        assert_eq!(r.cut.map(|c| c.1), Some(end as u64));
        assert_eq!(t.count().unwrap(), 100);
        // The table goes on after the cut.
        t.put(b"after", b"cut").unwrap();
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.recovery().cut, None);
        assert_eq!(t.get(b"after").unwrap(), Some(b"cut".to_vec()));
        for i in 0..100 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    }
}

#[test]
fn leftover_files_are_cleaned() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    t.put(b"k", b"v").unwrap();
    let _ = t.shut(false); // what a drop did, synchronously
                           // A segment whose creation never finished, an orphan hint, a temp file.
    fs::write(d.0.join(segment_file_name(999)), vec![0u8; 4096]).unwrap();
    fs::write(d.0.join(hint_file_name(555)), b"TCHYHNT1 orphan").unwrap();
    fs::write(d.0.join("00000000000000000001.tmp"), b"junk").unwrap();
    // Files that are not the table's are left alone: a "hint" that is not
    // one, a temporary file of another name.
    fs::write(d.0.join(hint_file_name(556)), b"not a hint").unwrap();
    fs::write(d.0.join("notes.tmp"), b"mine").unwrap();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    assert_eq!(t.recovery().removed_files, 3);
    assert_eq!(t.get(b"k").unwrap(), Some(b"v".to_vec()));
    let _ = t.shut(false); // what a drop did, synchronously
    assert_eq!(
        fs::read(d.0.join(hint_file_name(556))).unwrap(),
        b"not a hint"
    );
    assert_eq!(fs::read(d.0.join("notes.tmp")).unwrap(), b"mine");
    // A segment with a zero header over data is not one the table made
    // (it writes the header first): an error, the file stays.
    let mut odd = vec![0u8; 4096];
    odd[100] = 1;
    fs::write(d.0.join(segment_file_name(998)), &odd).unwrap();
    assert!(matches!(
        Table::open(&d.0, small(ValueMode::Mapped)),
        Err(TableError::Corrupt { segment: 998, .. })
    ));
    assert_eq!(fs::read(d.0.join(segment_file_name(998))).unwrap(), odd);
    fs::remove_file(d.0.join(segment_file_name(998))).unwrap();
    // A damaged segment header is an error, not silently dropped data.
    let f = seg_files(&d.0).pop().unwrap();
    let mut b = fs::read(&f).unwrap();
    b[3] ^= 1;
    fs::write(&f, b).unwrap();
    assert!(matches!(
        Table::open(&d.0, small(ValueMode::Mapped)),
        Err(TableError::Corrupt { .. })
    ));
}

#[test]
fn limits_lock_and_config() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Memory)).unwrap();
    assert!(matches!(
        t.put(&[0u8; 257], b"v"),
        Err(TableError::TooLarge)
    ));
    assert!(matches!(
        t.put(b"k", &[0u8; 4097]),
        Err(TableError::TooLarge)
    ));
    assert!(matches!(t.delete(&[0u8; 257]), Err(TableError::TooLarge)));
    t.put(&[1u8; 256], &[2u8; 4096]).unwrap();
    assert!(matches!(
        Table::open(&d.0, small(ValueMode::Memory)),
        Err(TableError::Locked)
    ));
    let _ = t.shut(false); // what a drop did, synchronously
    assert!(Table::open(&d.0, small(ValueMode::Memory)).is_ok());
    let bad = Config {
        segment_size: 1000,
        ..small(ValueMode::Memory)
    };
    assert!(matches!(
        Table::open(&TmpDir::new().0, bad),
        Err(TableError::BadConfig(_))
    ));
    let bad = Config {
        max_value_size: 1 << 20,
        ..small(ValueMode::Memory)
    };
    assert!(matches!(
        Table::open(&TmpDir::new().0, bad),
        Err(TableError::BadConfig(_))
    ));
    let bad = Config {
        compaction_threshold: 1.5,
        ..small(ValueMode::Memory)
    };
    assert!(matches!(
        Table::open(&TmpDir::new().0, bad),
        Err(TableError::BadConfig(_))
    ));
}

#[test]
fn compaction_returns_disk_space() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        let v = vec![9u8; 1000];
        for i in 0..2000 {
            t.put(&key(i), &v).unwrap();
        }
        for i in 0..2000 {
            if i % 10 != 0 {
                t.delete(&key(i)).unwrap();
            }
        }
        t.sync().unwrap();
        let before = disk_usage(&d.0);
        let c = t.compact().unwrap();
        assert!(c.segments_in > 20, "{c:?}");
        assert!(c.bytes_out < c.bytes_in / 5, "{c:?}");
        // Every tombstone may go: nothing older remains outside the inputs.
        assert_eq!(c.tombstones_dropped, 1800, "{c:?}");
        let after = disk_usage(&d.0);
        assert!(after < before / 4, "{mode:?}: {before} -> {after}");
        for i in 0..2000 {
            let want = if i % 10 == 0 { Some(v.clone()) } else { None };
            assert_eq!(t.get(&key(i)).unwrap(), want);
        }
        let st = t.stats().unwrap();
        assert_eq!(st.compactions, 1);
        assert_eq!(st.keys, 200);
        assert!(matches!(t.take_events().as_slice(), [Event::Compacted(_)]));
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.count().unwrap(), 200);
        for i in 0..2000 {
            let want = if i % 10 == 0 { Some(v.clone()) } else { None };
            assert_eq!(
                t.get(&key(i)).unwrap(),
                want,
                "{mode:?} {i} after compaction + reopen"
            );
        }
    }
}

/// Bitcask's bug: compaction drops a tombstone while an older put of the
/// key survives in a segment that was not compacted; after a restart the
/// key is back. Here the tombstone must be kept.
#[test]
fn deleted_keys_stay_deleted_after_compaction_and_restart() {
    for mode in MODES {
        let d = TmpDir::new();
        let cfg = Config {
            compaction_threshold: 0.5,
            ..small(mode)
        };
        let t = Table::open(&d.0, cfg.clone()).unwrap();
        let v = vec![1u8; 500];
        // Segment A: "victim" plus live keys that keep A above the threshold.
        t.put(b"victim", b"old").unwrap();
        let mut i = 0;
        while sealed(&t) < 1 {
            t.put(&key(i), &v).unwrap();
            i += 1;
        }
        // Segment B: the tombstone, then garbage (overwrites within B) so
        // that B alone falls under the threshold.
        t.delete(b"victim").unwrap();
        let mut j = 0;
        while sealed(&t) < 2 {
            t.put(b"churn", &val(j, j)).unwrap();
            j += 1;
        }
        let c = compact_background(&t);
        assert_eq!(c.segments_in, 1, "only B is compacted: {c:?}");
        assert_eq!(
            c.tombstones_dropped, 0,
            "the tombstone shadows a put in A: {c:?}"
        );
        assert_eq!(t.get(b"victim").unwrap(), None);
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, cfg.clone()).unwrap();
        assert_eq!(
            t.get(b"victim").unwrap(),
            None,
            "{mode:?}: deleted key resurrected"
        );
        assert_eq!(t.get(&key(0)).unwrap(), Some(v.clone()));
        // Now A goes too (forced): the tombstone can finally be dropped, and
        // the key stays deleted.
        let c = t.compact().unwrap();
        assert!(c.segments_in >= 1, "{c:?}");
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, cfg).unwrap();
        assert_eq!(t.get(b"victim").unwrap(), None);
        assert_eq!(t.get(b"churn").unwrap(), Some(val(j - 1, j - 1)));
        for k in 0..i {
            assert_eq!(t.get(&key(k)).unwrap(), Some(v.clone()));
        }
    }
}

/// A crash in the middle of deleting a compaction's inputs: one input (with
/// an old value) survives, the one with the delete that shadowed it is gone,
/// and the tombstone was dropped from the output. Recovery must finish the
/// deletion from the manifest, or the key comes back.
#[test]
fn crash_while_deleting_compaction_inputs_keeps_deletes() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        let v = vec![2u8; 500];
        t.put(b"victim", b"old").unwrap();
        let mut i = 0;
        while sealed(&t) < 1 {
            t.put(&key(i), &v).unwrap();
            i += 1;
        }
        t.delete(b"victim").unwrap();
        // The segment holding the old value, as it was before compaction.
        let first = seg_files(&d.0)[0].clone();
        let saved = fs::read(&first).unwrap();
        let c = t.compact().unwrap();
        assert!(c.tombstones_dropped >= 1, "{c:?}");
        assert!(!first.exists());
        let _ = t.shut(false); // what a drop did, synchronously
                               // Put the old input back, as if the crash came before its unlink,
                               // with the manifest the compaction wrote before deleting.
        fs::write(&first, &saved).unwrap();
        let id = parse_file_name(first.file_name().unwrap().to_str().unwrap())
            .unwrap()
            .0;
        fs::write(d.0.join(MANIFEST_FILE), encode_manifest(&[id])).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert!(t.recovery().removed_files >= 1);
        assert!(!first.exists());
        assert!(!d.0.join(MANIFEST_FILE).exists());
        assert_eq!(
            t.get(b"victim").unwrap(),
            None,
            "{mode:?}: deleted key resurrected"
        );
        for k in 0..i {
            assert_eq!(t.get(&key(k)).unwrap(), Some(v.clone()));
        }
        // Without the manifest the same files would resurrect it: the
        // scenario is real.
        let _ = t.shut(false); // what a drop did, synchronously
        fs::write(&first, &saved).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.get(b"victim").unwrap(), Some(b"old".to_vec()));
    }
}

#[test]
fn periodic_sync_and_background_compaction() {
    let d = TmpDir::new();
    let cfg = Config {
        sync_interval: Some(Duration::from_millis(5)),
        compaction_interval: Some(Duration::from_millis(5)),
        ..small(ValueMode::Mapped)
    };
    let t = Table::open(&d.0, cfg).unwrap();
    let v = vec![3u8; 1000];
    for round in 0..5 {
        for i in 0..200 {
            t.put(&key(i), &val(i, round)).unwrap();
        }
    }
    t.put(b"x", &v).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = t.stats().unwrap();
        if st.compactions > 0 && st.syncs > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no background sync/compaction: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for i in 0..200 {
        assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 4)));
    }
}

/// Readers, a writer and compaction all at once: every value read is one
/// that was written for that key, and the end state matches the model.
#[test]
fn concurrent_readers_writer_and_compaction() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Arc::new(Table::open(&d.0, small(mode)).unwrap());
        const KEYS: u64 = 300;
        for i in 0..KEYS {
            t.put(&key(i), &val(i, 0)).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        // Progress of each reader and of compaction: the writer does not
        // stop them before each has done some work (on a loaded machine a
        // thread may not run at all during the writes).
        let progress: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
        let mut readers = Vec::new();
        for r in 0..3 {
            let (t, stop, progress) = (t.clone(), stop.clone(), progress.clone());
            readers.push(std::thread::spawn(move || {
                let mut n = 0u64;
                let mut i = r as u64;
                while !stop.load(Ordering::Relaxed) {
                    progress[r].fetch_add(1, Ordering::Relaxed);
                    i = (i * 31 + 7) % KEYS;
                    if let Some(v) = t.get(&key(i)).unwrap() {
                        // The value names its key and a version; check it
                        // against the generator.
                        let s = String::from_utf8_lossy(
                            &v[..v.iter().position(|&b| b == b'-').unwrap()],
                        )
                        .to_string();
                        let version: u64 = s[1..].parse().unwrap();
                        assert_eq!(v, val(i, version), "torn or misplaced value");
                    }
                    n += 1;
                }
                n
            }));
        }
        let compactor = {
            let (t, stop, progress) = (t.clone(), stop.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += t.compact().unwrap().segments_in;
                    progress[3].store(n, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
                n
            })
        };
        let mut model: HashMap<u64, Vec<u8>> = (0..KEYS).map(|i| (i, val(i, 0))).collect();
        let mut x = 12345u64;
        for version in 1..=30u64 {
            for _ in 0..KEYS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = x % KEYS;
                if x.is_multiple_of(7) {
                    t.delete(&key(i)).unwrap();
                    model.remove(&i);
                } else {
                    t.put(&key(i), &val(i, version)).unwrap();
                    model.insert(i, val(i, version));
                }
            }
        }
        let t0 = std::time::Instant::now();
        while progress.iter().any(|p| p.load(Ordering::Relaxed) == 0) {
            assert!(t0.elapsed() < Duration::from_secs(30), "no progress");
            // Keep writing: compaction needs garbage to remove segments.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % KEYS;
            t.put(&key(i), &val(i, 31)).unwrap();
            model.insert(i, val(i, 31));
            std::thread::sleep(Duration::from_micros(100));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        let compacted = compactor.join().unwrap();
        assert!(compacted > 0, "{mode:?}: compaction never ran");
        let check = |t: &Table| {
            for i in 0..KEYS {
                assert_eq!(
                    t.get(&key(i)).unwrap().as_ref(),
                    model.get(&i),
                    "{mode:?} key {i}"
                );
            }
            assert_eq!(t.count().unwrap(), model.len() as u64);
        };
        check(&t);
        let _ = Arc::try_unwrap(t).ok().unwrap().shut(false);
        let t = Table::open(&d.0, small(mode)).unwrap();
        check(&t);
    }
}

/// Random operations against a HashMap model, with reopens and forced
/// compactions in between, in every mode.
#[test]
fn randomized_model() {
    for mode in MODES {
        let d = TmpDir::new();
        let mut t = Table::open(&d.0, small(mode)).unwrap();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut x = 0x9e3779b97f4a7c15u64 ^ mode as u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..20_000u64 {
            let k = key(rnd(500));
            match rnd(100) {
                0..=49 => {
                    let v = val(rnd(1000), step);
                    t.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
                50..=64 => {
                    assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some());
                }
                65..=69 => {
                    let n = rnd(8) as usize;
                    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                        .map(|_| (key(rnd(500)), val(rnd(1000), step)))
                        .collect();
                    let refs: Vec<(&[u8], &[u8])> =
                        pairs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                    t.put_many(&refs).unwrap();
                    for (k, v) in pairs {
                        model.insert(k, v);
                    }
                }
                70 if rnd(10) == 0 => {
                    t.compact().unwrap();
                }
                71 if rnd(20) == 0 => {
                    let _ = t.shut(false); // what a drop did, synchronously
                    t = Table::open(&d.0, small(mode)).unwrap();
                    assert_eq!(t.recovery().cut, None);
                }
                _ => {
                    assert_eq!(
                        t.get(&k).unwrap().as_ref(),
                        model.get(&k),
                        "{mode:?} step {step}"
                    );
                }
            }
        }
        assert_eq!(t.count().unwrap(), model.len() as u64);
        let mut snap = t.snapshot().unwrap();
        let mut seen = HashMap::new();
        loop {
            let b = snap.next_batch(64).unwrap();
            if b.is_empty() {
                break;
            }
            seen.extend(b);
        }
        assert_eq!(seen, model);
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(t.count().unwrap(), model.len() as u64);
    }
}

#[test]
fn snapshot_is_consistent_and_survives_compaction() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    for i in 0..1000 {
        t.put(&key(i), &val(i, 0)).unwrap();
    }
    let mut snap = t.snapshot().unwrap();
    assert_eq!(snap.len(), 1000);
    // Later writes and a compaction that deletes the segments the snapshot
    // points into do not change what it returns.
    for i in 0..1000 {
        t.put(&key(i), &val(i, 1)).unwrap();
    }
    t.delete(&key(0)).unwrap();
    assert!(t.compact().unwrap().segments_in > 0);
    let mut got = HashMap::new();
    loop {
        let b = snap.next_batch(100).unwrap();
        if b.is_empty() {
            break;
        }
        got.extend(b);
    }
    assert_eq!(got.len(), 1000);
    for i in 0..1000 {
        assert_eq!(got[&key(i)], val(i, 0));
    }
}

#[test]
fn close_releases_threads_and_descriptors() {
    fn fds() -> usize {
        fs::read_dir("/proc/self/fd").unwrap().count()
    }
    let d = TmpDir::new();
    // Other tests run in parallel threads of this process: count only this
    // table's files, through /proc/self/maps and the fd links.
    fn mine(dir: &Path) -> usize {
        let d = dir.to_string_lossy().to_string();
        let fd_links = fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
            .filter(|p| p.to_string_lossy().contains(&d))
            .count();
        let maps = fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&d))
            .count();
        fd_links + maps
    }
    let _ = fds();
    for mode in MODES {
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..2000 {
            t.put(&key(i), &val(i, 0)).unwrap();
        }
        assert!(mine(&d.0) > 0);
        assert!(t.thread.lock().unwrap().is_some());
        t.close().unwrap();
        assert_eq!(
            mine(&d.0),
            0,
            "{mode:?}: files still open or mapped after close"
        );
        assert!(t.thread.lock().unwrap().is_none(), "not joined");
        // The lock is released: the table reopens while `t` still exists.
        let t2 = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t2.count().unwrap(), 2000);
        // (A drop closes on a thread of its own: close to wait for it.)
        t2.close().unwrap();
        let _ = t.shut(false); // what a drop did, synchronously
        assert_eq!(mine(&d.0), 0);
    }
}

/// A full disk: `put` gets `NoSpace`, everything acknowledged stays readable
/// and survives a reopen. Needs a small tmpfs (root); skipped otherwise.
#[test]
fn disk_full_is_enospc_not_sigbus() {
    let d = TmpDir::new();
    fs::create_dir_all(&d.0).unwrap();
    let target = std::ffi::CString::new(d.0.to_string_lossy().as_bytes()).unwrap();
    let fstype = std::ffi::CString::new("tmpfs").unwrap();
    let opts = std::ffi::CString::new("size=1m").unwrap();
    // SAFETY: plain mount(2) with valid C strings.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            opts.as_ptr() as *const libc::c_void,
        )
    };
    if rc != 0 {
        eprintln!(
            "disk_full_is_enospc_not_sigbus: skipped (cannot mount a tmpfs: {})",
            io::Error::last_os_error()
        );
        return;
    }
    struct Unmount(std::ffi::CString);
    impl Drop for Unmount {
        fn drop(&mut self) {
            // SAFETY: umount2 of the path we mounted.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _u = Unmount(target);
    for mode in MODES {
        let dir = d.0.join(mode.name());
        let t = Table::open(&dir, small(mode)).unwrap();
        let v = vec![5u8; 3000];
        let mut acked = 0u64;
        let err = loop {
            match t.put(&key(acked), &v) {
                Ok(()) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 10_000, "the disk never filled");
        };
        assert!(matches!(err, TableError::NoSpace), "{mode:?}: {err:?}");
        assert!(acked > 10);
        // The background thread may still free a little space (it cuts the
        // preallocated tail of sealed segments): a few more puts can fit,
        // then the disk is full again.
        let err = loop {
            match t.put(&key(acked), &v) {
                Ok(()) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 10_000);
        };
        assert!(matches!(err, TableError::NoSpace), "{mode:?}: {err:?}");
        for i in 0..acked {
            assert_eq!(t.get(&key(i)).unwrap(), Some(v.clone()));
        }
        let _ = t.shut(false); // what a drop did, synchronously
                               // It reopens on the full disk, with everything acknowledged.
        let t = Table::open(&dir, small(mode)).unwrap();
        assert_eq!(t.count().unwrap(), acked);
        for i in 0..acked {
            assert_eq!(t.get(&key(i)).unwrap(), Some(v.clone()));
        }
        let _ = t.shut(false); // what a drop did, synchronously
        fs::remove_dir_all(&dir).unwrap();
    }
}
