//! Compaction: disk space returned, deletes kept across restarts and
//! crashes, the background threads, concurrent readers and writer.

use super::*;

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
