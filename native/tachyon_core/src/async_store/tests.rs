use super::*;
use crate::store::Config as StoreConfig;
use std::fs;
use std::path::PathBuf;
use std::sync::mpsc;

static N: AtomicUsize = AtomicUsize::new(0);

fn tmp() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tachyon-async-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

fn store_cfg() -> StoreConfig {
    StoreConfig {
        segment_size: 64 * 1024,
        max_message_size: 4096,
        pretouch: false,
        ..StoreConfig::default()
    }
}

/// Tests never busy-spin: the writer parks (and is unparked by producers).
fn cfg() -> Config {
    Config {
        ring_size: 64 * 1024,
        wait: WaitStrategy::Park,
        // Generous: a parked writer on a loaded test machine can take a
        // while to wake up.
        on_full: OnFull::Spin(Duration::from_secs(5)),
        ..Config::default()
    }
}

fn msg(i: u64) -> Vec<u8> {
    let n = (i % 200) as usize;
    let mut v = format!("m{i}-").into_bytes();
    v.resize(v.len() + n, (i % 251) as u8);
    v
}

const T: Duration = Duration::from_secs(10);

#[test]
fn order_and_indices_for_one_producer() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    for i in 0..5u64 {
        store.append(&msg(i)).unwrap();
    }
    let a = AsyncStore::open(store.clone(), cfg(), None).unwrap();
    assert_eq!(a.stats().base_index, 5);
    for i in 5..20_005u64 {
        assert_eq!(a.append(&msg(i)).unwrap(), i);
    }
    assert_eq!(a.flush(T).unwrap(), 20_005);
    assert_eq!(store.next_index().unwrap(), 20_005);
    for i in 0..20_005u64 {
        assert_eq!(store.read(i).unwrap(), msg(i), "message {i}");
    }
    let s = a.stats();
    assert_eq!((s.enqueued, s.written, s.pending()), (20_000, 20_000, 0));
    assert!(s.batches >= 1 && s.batches <= 20_000);
    assert!(s.high_water_bytes > 0 && s.high_water_bytes <= 64 * 1024);
    assert_eq!(
        s.written_bytes,
        (5..20_005u64).map(|i| msg(i).len() as u64).sum::<u64>()
    );
    a.close().unwrap();
    assert_eq!(a.state(), State::Closed);
    assert!(a.writer_exited());
    drop(a);
    drop(store);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn many_producers_keep_their_own_order() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let a = Arc::new(AsyncStore::open(store.clone(), cfg(), None).unwrap());
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for k in 0..5_000u32 {
                    let mut m = vec![t];
                    m.extend_from_slice(&k.to_le_bytes());
                    m.resize(5 + (k % 100) as usize, t);
                    got.push(a.append(&m).unwrap());
                }
                got
            })
        })
        .collect();
    let indices: Vec<Vec<u64>> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    a.flush(T).unwrap();
    let mut last = [None::<u32>; 4];
    for i in 0..20_000u64 {
        let m = store.read(i).unwrap();
        let (t, k) = (
            m[0] as usize,
            u32::from_le_bytes(m[1..5].try_into().unwrap()),
        );
        assert_eq!(
            indices[t][k as usize], i,
            "the returned index is where the message is"
        );
        assert_eq!(last[t].map_or(0, |x| x + 1), k, "producer {t} out of order");
        last[t] = Some(k);
    }
    assert_eq!(last, [Some(4_999); 4]);
    a.close().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn full_ring_error_policy_and_drain() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let c = Config {
        ring_size: 4096,
        on_full: OnFull::Error,
        ..cfg()
    };
    let a = AsyncStore::open(store.clone(), c, None).unwrap();
    assert_eq!(a.max_message_size(), 2040);
    assert_eq!(a.append(&[0; 2041]), Err(AppendError::TooLarge));
    a.set_paused(true);
    let mut ok = 0u64;
    loop {
        match a.append(&[ok as u8; 100]) {
            Ok(i) => {
                assert_eq!(i, ok);
                ok += 1;
            }
            Err(AppendError::Full) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(ok, 4096 / 112);
    assert_eq!(a.append(&[1; 100]), Err(AppendError::Full));
    let s = a.stats();
    assert_eq!((s.full_events, s.rejected, s.written), (2, 2, 0));
    assert_eq!(a.flush(Duration::from_millis(20)), Err(WaitError::Timeout));
    a.set_paused(false);
    a.drain(T).unwrap();
    assert_eq!(store.next_index().unwrap(), ok);
    assert_eq!(a.append(&[9]).unwrap(), ok);
    assert_eq!(a.flush(T).unwrap(), ok + 1);
    for i in 0..ok {
        assert_eq!(store.read(i).unwrap(), vec![i as u8; 100]);
    }
    assert_eq!(store.read(ok).unwrap(), vec![9]);
    a.close().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn full_ring_spin_policy_is_bounded_and_succeeds_when_room_appears() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let c = Config {
        ring_size: 4096,
        on_full: OnFull::Spin(Duration::from_millis(2)),
        ..cfg()
    };
    let a = Arc::new(AsyncStore::open(store.clone(), c, None).unwrap());
    a.set_paused(true);
    while a.append(&[7; 500]).is_ok() {}
    // Bounded: gives up after about the limit.
    let t0 = Instant::now();
    assert_eq!(a.append(&[7; 500]), Err(AppendError::Full));
    let spent = t0.elapsed();
    assert!(spent >= Duration::from_millis(2), "{spent:?}");
    assert!(spent < Duration::from_secs(1), "{spent:?}");
    // Succeeds when the writer frees room during the spin.
    let c = Config {
        on_full: OnFull::Spin(Duration::from_secs(5)),
        ..cfg()
    };
    a.close().unwrap();
    drop(a);
    let a = Arc::new(
        AsyncStore::open(
            store.clone(),
            Config {
                ring_size: 4096,
                ..c
            },
            None,
        )
        .unwrap(),
    );
    a.set_paused(true);
    while a.stats().full_events == 0 {
        // Fill it; with a 5 s spin a full ring would block, so stop at the
        // first record that does not fit right away.
        if !a.producer.lock().has_room_for(500) {
            break;
        }
        a.append(&[8; 500]).unwrap();
    }
    let a2 = a.clone();
    let unpause = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        a2.set_paused(false);
    });
    let t0 = Instant::now();
    let i = a.append(&[9; 500]).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(10));
    unpause.join().unwrap();
    assert_eq!(a.stats().full_events, 1);
    assert_eq!(a.stats().rejected, 0);
    assert_eq!(a.flush(T).unwrap(), i + 1);
    assert_eq!(store.read(i).unwrap(), vec![9; 500]);
    a.close().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn close_writes_everything_then_refuses() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let (tx, rx) = mpsc::channel();
    let reporter: Reporter = Box::new(move |r| {
        let _ = tx.send(r);
    });
    let a = AsyncStore::open(store.clone(), cfg(), Some(reporter)).unwrap();
    a.set_paused(true);
    for i in 0..300u64 {
        a.append(&msg(i)).unwrap();
    }
    assert_eq!(a.stats().written, 0);
    a.close().unwrap();
    assert_eq!(store.next_index().unwrap(), 300);
    assert_eq!(store.read(299).unwrap(), msg(299));
    assert_eq!(a.append(b"late"), Err(AppendError::Closed));
    assert_eq!(a.flush(T), Err(WaitError::Closed));
    assert_eq!(a.drain(T), Err(WaitError::Closed));
    a.close().unwrap();
    match rx.recv_timeout(T).unwrap() {
        Report::Stopped(s) => assert_eq!((s.enqueued, s.written), (300, 300)),
        other => panic!("{other:?}"),
    }
    // The store stays open for its owner.
    assert_eq!(store.append(b"direct").unwrap(), 300);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn drop_stops_the_writer_without_waiting_for_it() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let a = AsyncStore::open(store.clone(), cfg(), None).unwrap();
    let sh = a.shared.clone();
    a.append(b"x").unwrap();
    assert!(!sh.exited.load(Ordering::Acquire));
    drop(a);
    // The writer writes what was queued and ends on its own (its join goes
    // to the worker reaper: a drop may run on a BEAM scheduler).
    let t0 = Instant::now();
    while !sh.exited.load(Ordering::Acquire) {
        assert!(t0.elapsed() < T, "the writer never ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(store.read(0).unwrap(), b"x");
    // Detached on drop: the store can take a new AsyncStore.
    let b = AsyncStore::open(store.clone(), cfg(), None).unwrap();
    assert_eq!(b.append(b"y").unwrap(), 1);
    b.close().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_errors() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let bad = Config {
        ring_size: 5000,
        ..cfg()
    };
    assert!(matches!(
        AsyncStore::open(store.clone(), bad, None),
        Err(OpenError::BadRingSize)
    ));
    let a = AsyncStore::open(store.clone(), cfg(), None).unwrap();
    assert!(matches!(
        AsyncStore::open(store.clone(), cfg(), None),
        Err(OpenError::Busy)
    ));
    a.close().unwrap();
    let reader = Arc::new(
        Store::open(
            &d,
            StoreConfig {
                mode: Mode::Read,
                ..store_cfg()
            },
        )
        .unwrap(),
    );
    assert!(matches!(
        AsyncStore::open(reader, cfg(), None),
        Err(OpenError::ReadOnly)
    ));
    store.close();
    assert!(matches!(
        AsyncStore::open(store.clone(), cfg(), None),
        Err(OpenError::Closed)
    ));
    fs::remove_dir_all(&d).unwrap();
}

/// A segment that cannot be created (the directory was moved away) stops
/// the writer: appends and flushes report it, and the log that was written
/// is intact.
#[test]
fn writer_failure_is_reported_and_the_log_stays_valid() {
    let d = tmp();
    let moved = d.with_extension("moved");
    let _ = fs::remove_dir_all(&moved);
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let (tx, rx) = mpsc::channel();
    let reporter: Reporter = Box::new(move |r| {
        let _ = tx.send(r);
    });
    let a = AsyncStore::open(store.clone(), cfg(), Some(reporter)).unwrap();
    for i in 0..50u64 {
        a.append(&msg(i)).unwrap();
    }
    assert_eq!(a.flush(T).unwrap(), 50);
    fs::rename(&d, &moved).unwrap();
    // 64 KiB segments: 1000 messages of ~100+ bytes must roll.
    let mut first_err = None;
    for i in 50..2_000u64 {
        match a.append(&msg(i)) {
            Ok(_) => {}
            Err(e) => {
                first_err = Some(e);
                break;
            }
        }
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let enoent = Failure::Io {
        errno: Some(libc::ENOENT),
        message: String::new(),
    };
    let is_enoent =
        |f: &Failure| matches!(f, Failure::Io { errno: Some(e), .. } if *e == libc::ENOENT);
    let f = match a.flush(T) {
        Err(WaitError::Failed(f)) => f,
        other => panic!("expected a failure, got {other:?} ({enoent:?})"),
    };
    assert!(is_enoent(&f), "{f:?}");
    if let Some(e) = first_err {
        assert!(
            matches!(&e, AppendError::Failed(f) if is_enoent(f)),
            "{e:?}"
        );
    }
    assert!(matches!(a.append(b"more"), Err(AppendError::Failed(f)) if is_enoent(&f)));
    assert_eq!(a.state(), State::Failed);
    let s = a.stats();
    assert!(s.written >= 50 && s.written < s.enqueued, "{s:?}");
    match rx.recv_timeout(T).unwrap() {
        Report::Failed(rf, rs) => {
            assert_eq!(rf, f);
            assert_eq!(rs.written, s.written);
        }
        other => panic!("{other:?}"),
    }
    assert!(a.close().is_err());
    let written = s.written;
    drop(a);
    drop(store);
    fs::rename(&moved, &d).unwrap();
    let store = Store::open(&d, store_cfg()).unwrap();
    assert_eq!(store.recovery().cut, None);
    assert_eq!(store.next_index().unwrap(), written);
    for i in 0..written {
        assert_eq!(store.read(i).unwrap(), msg(i));
    }
    drop(store);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_direct_append_is_an_index_conflict() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let a = AsyncStore::open(store.clone(), cfg(), None).unwrap();
    assert_eq!(a.append(b"a").unwrap(), 0);
    a.flush(T).unwrap();
    store.append(b"sneaky").unwrap();
    assert_eq!(a.append(b"b").unwrap(), 1);
    assert_eq!(
        a.flush(T),
        Err(WaitError::Failed(Failure::IndexConflict {
            expected: 1,
            found: 2
        }))
    );
    // Nothing of the conflicting batch was written.
    assert_eq!(store.next_index().unwrap(), 2);
    assert_eq!(store.read(1).unwrap(), b"sneaky");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn periodic_stats_reports() {
    let d = tmp();
    let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
    let (tx, rx) = mpsc::channel();
    let reporter: Reporter = Box::new(move |r| {
        let _ = tx.send(r);
    });
    let c = Config {
        stats_interval: Some(Duration::from_millis(5)),
        ..cfg()
    };
    let a = AsyncStore::open(store, c, Some(reporter)).unwrap();
    a.append(b"hello").unwrap();
    a.flush(T).unwrap();
    let mut seen = 0;
    while seen < 2 {
        match rx.recv_timeout(T).unwrap() {
            Report::Stats(s) if s.written == 1 => seen += 1,
            Report::Stats(_) => {}
            other => panic!("{other:?}"),
        }
    }
    // A drop does not wait for the writer; its last report comes when it
    // has written everything and stopped.
    drop(a);
    let last = loop {
        match rx.recv_timeout(T) {
            Ok(Report::Stats(_)) => continue,
            other => break other,
        }
    };
    assert!(matches!(last, Ok(Report::Stopped(_))), "{last:?}");
    fs::remove_dir_all(&d).unwrap();
}

/// Without any flush, the writer takes messages on its own within a nap,
/// for every strategy that naps (producers do not wake it below half full).
#[test]
fn messages_reach_the_store_without_a_flush() {
    for (wait, linger) in [
        (WaitStrategy::Backoff, Duration::from_micros(50)),
        (WaitStrategy::Backoff, Duration::ZERO),
        (WaitStrategy::Park, Duration::from_micros(50)),
    ] {
        let d = tmp();
        let store = Arc::new(Store::open(&d, store_cfg()).unwrap());
        let c = Config {
            wait,
            linger,
            ..cfg()
        };
        let a = AsyncStore::open(store.clone(), c, None).unwrap();
        // Let the writer go idle (Backoff ends up in its longest naps).
        std::thread::sleep(Duration::from_millis(30));
        for i in 0..10u64 {
            a.append(&msg(i)).unwrap();
        }
        let t0 = Instant::now();
        while store.next_index().unwrap() < 10 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{wait:?} never wrote"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(store.read(9).unwrap(), msg(9));
        a.close().unwrap();
        fs::remove_dir_all(&d).unwrap();
    }
}
