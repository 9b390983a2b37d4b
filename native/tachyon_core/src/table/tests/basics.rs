//! The table's operations: puts, gets, deletes, batches, limits,
//! snapshots, closing, and a random model check, in every value mode.

use super::*;

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
