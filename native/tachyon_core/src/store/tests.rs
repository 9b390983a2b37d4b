use super::*;
use std::fs;
use std::time::Duration;

fn tmp() -> PathBuf {
    crate::segment::test_dir("core")
}

fn small() -> Config {
    Config {
        segment_size: 64 * 1024,
        max_message_size: 4096,
        ..Config::default()
    }
}

fn msg(i: u64) -> Vec<u8> {
    let n = (i % 300) as usize;
    let mut v = format!("message-{i}-").into_bytes();
    v.resize(v.len() + n, (i % 251) as u8);
    v
}

#[test]
fn append_read_reopen() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    for i in 0..1000u64 {
        assert_eq!(s.append(&msg(i)).unwrap(), i);
    }
    assert_eq!(s.append(b"").unwrap(), 1000);
    for i in 0..1000u64 {
        assert_eq!(s.read(i).unwrap(), msg(i));
    }
    assert_eq!(s.read(1000).unwrap(), b"");
    assert!(matches!(s.read(1001), Err(StoreError::NotFound)));
    assert!(s.stats().rolls > 0, "64 KiB segments must have rolled");
    s.close();
    let s = Store::open(&d, small()).unwrap();
    assert_eq!(s.recovery().cut, None);
    assert_eq!(s.next_index().unwrap(), 1001);
    for i in 0..1000u64 {
        assert_eq!(s.read(i).unwrap(), msg(i));
    }
    assert_eq!(s.append(b"after").unwrap(), 1001);
    s.close();
    assert!(matches!(s.append(b"x"), Err(StoreError::Closed)));
    assert!(matches!(s.read(0), Err(StoreError::Closed)));
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn limits_and_lock() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    assert!(matches!(
        s.append(&vec![0u8; 4097]),
        Err(StoreError::MessageTooLarge)
    ));
    assert!(matches!(Store::open(&d, small()), Err(StoreError::Locked)));
    let bad = Config {
        segment_size: 1000,
        ..small()
    };
    assert!(matches!(
        Store::open(tmp(), bad),
        Err(StoreError::BadConfig(_))
    ));
    s.close();
    Store::open(&d, small()).unwrap().close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn retention_by_segments_and_bytes() {
    let d = tmp();
    let cfg = Config {
        max_segments: Some(3),
        ..small()
    };
    let s = Store::open(&d, cfg).unwrap();
    for i in 0..5000u64 {
        s.append(&msg(i)).unwrap();
    }
    let st = s.stats();
    assert_eq!(st.segments, 3);
    assert!(st.deleted_segments > 0);
    let first = s.first_index().unwrap();
    assert!(first > 0);
    assert!(matches!(s.read(first - 1), Err(StoreError::Trimmed(f)) if f == first));
    assert_eq!(s.read(first).unwrap(), msg(first));
    // The retired files go on the pre-touch thread (removed or reused).
    let activated = || {
        list_segments(&d)
            .unwrap()
            .iter()
            // A prepared segment may be removed while we look: absent is fine.
            .filter(|(_, p)| fs::read(p).is_ok_and(|b| b.starts_with(&MAGIC)))
            .count()
    };
    crate::segment::wait_until("3 activated segment files", || activated() == 3);
    s.close();
    let layout = Layout::new(64 * 1024);
    let cfg = Config {
        max_bytes: Some(2 * layout.file_len as u64),
        ..small()
    };
    let s = Store::open(&d, cfg).unwrap();
    assert!(s.stats().segments <= 2);
    // The store must be closed (its pre-touch thread joined) before its
    // directory goes: the thread may be creating the next segment (this
    // was a CI flake: remove_dir_all got DirectoryNotEmpty).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

fn active_file(d: &Path) -> PathBuf {
    // the last activated segment
    let mut v = list_segments(d).unwrap();
    v.retain(|(_, p)| {
        let b = fs::read(p).unwrap();
        b[..8] == MAGIC
    });
    v.last().unwrap().1.clone()
}

#[test]
fn torn_tail_is_cut() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    for i in 0..10u64 {
        s.append(&msg(i)).unwrap();
    }
    let (_, pos) = s.active_position().unwrap();
    s.close();
    // Write a record whose payload does not match its CRC at the end.
    let path = active_file(&d);
    let mut b = fs::read(&path).unwrap();
    let l = Layout::new(64 * 1024);
    let off = l.data_start + pos;
    let word = header_word(0, b"0123456789abcdef");
    b[off..off + 8].copy_from_slice(&word.to_le_bytes());
    b[off + 8..off + 16].copy_from_slice(b"01234567"); // second half missing
    fs::write(&path, &b).unwrap();
    let s = Store::open(&d, small()).unwrap();
    let r = s.recovery().clone();
    assert_eq!(r.cut, Some("torn_tail"));
    assert_eq!(r.cut_offset, Some(off as u64));
    assert!(r.truncated_bytes >= 8);
    assert_eq!(s.next_index().unwrap(), 10);
    assert_eq!(s.append(b"next").unwrap(), 10);
    assert_eq!(s.read(9).unwrap(), msg(9));
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn corruption_in_the_middle_fails_unless_repair() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    let mut offs = vec![];
    for i in 0..20u64 {
        let (_, pos) = s.active_position().unwrap();
        offs.push(pos);
        s.append(&msg(i)).unwrap();
    }
    let (_, end) = s.active_position().unwrap();
    s.close();
    let path = active_file(&d);
    let l = Layout::new(64 * 1024);
    let mut b = fs::read(&path).unwrap();
    let off = l.data_start + offs[5] + 8 + 3;
    b[off] ^= 0xff;
    fs::write(&path, &b).unwrap();
    // The error says what a repair would cut: the 14 records after the
    // damaged one, and the bytes from it to the end of the log.
    match Store::open(&d, small()) {
        Err(StoreError::Damaged {
            segment: 0,
            offset,
            records: 14,
            bytes,
        }) => {
            assert_eq!(offset as usize, l.data_start + offs[5]);
            assert_eq!(bytes as usize, end - offs[5]);
        }
        other => panic!("expected damage, got {:?}", other.map(|_| ())),
    }
    let cfg = Config {
        repair: true,
        ..small()
    };
    let s = Store::open(&d, cfg).unwrap();
    let r = s.recovery().clone();
    assert_eq!(r.cut, Some("repaired"));
    assert_eq!(r.lost_records, 14);
    assert_eq!(s.next_index().unwrap(), 5);
    assert_eq!(s.read(4).unwrap(), msg(4));
    assert_eq!(s.append(b"x").unwrap(), 5);
    s.close();
    // The repaired log opens cleanly.
    let s = Store::open(&d, small()).unwrap();
    assert_eq!(s.recovery().cut, None);
    assert_eq!(s.read(5).unwrap(), b"x");
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reader_follows_writer_across_rolls() {
    let d = tmp();
    let w = Store::open(&d, small()).unwrap();
    w.append(b"first").unwrap();
    let r = Store::open(
        &d,
        Config {
            mode: Mode::Read,
            ..small()
        },
    )
    .unwrap();
    assert_eq!(r.read(0).unwrap(), b"first");
    assert!(matches!(r.append(b"no"), Err(StoreError::ReadOnly)));
    for i in 1..3000u64 {
        w.append(&msg(i)).unwrap();
        if i % 97 == 0 {
            assert_eq!(r.read(i).unwrap(), msg(i));
        }
    }
    assert_eq!(r.next_index().unwrap(), 3000);
    for i in 1..3000u64 {
        assert_eq!(r.read(i).unwrap(), msg(i));
    }
    let mut n = 0;
    r.read_range(10, 100, usize::MAX, |i, p| {
        assert_eq!(p, msg(i).as_slice());
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 100);
    w.close();
    r.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn concurrent_appenders_keep_their_order() {
    let d = tmp();
    let s = Arc::new(Store::open(&d, small()).unwrap());
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let mut m = vec![t];
                    m.extend_from_slice(&i.to_le_bytes());
                    s.append(&m).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut next = [0u32; 4];
    for i in 0..8000u64 {
        let m = s.read(i).unwrap();
        let t = m[0] as usize;
        let n = u32::from_le_bytes(m[1..5].try_into().unwrap());
        assert_eq!(n, next[t]);
        next[t] += 1;
    }
    assert_eq!(next, [2000; 4]);
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn pretouch_prepares_segments_and_stops() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    assert!(s.pretouch_running());
    for i in 0..1500u64 {
        s.append(&msg(i)).unwrap();
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let st = s.stats();
    assert!(st.rolls > 0);
    assert!(st.prepared_rolls > 0, "{st:?}");
    let ev = s.take_events();
    assert_eq!(ev.len() as u64, st.rolls);
    s.close();
    assert!(!s.pretouch_running());
    // the unused prepared file is gone after close
    for (_, p) in list_segments(&d).unwrap() {
        assert_eq!(fs::read(&p).unwrap()[..8], MAGIC);
    }
    s.close();
    let s = Store::open(
        &d,
        Config {
            pretouch: false,
            ..small()
        },
    )
    .unwrap();
    assert!(!s.pretouch_running());
    for i in 1500..3000u64 {
        assert_eq!(s.append(&msg(i)).unwrap(), i);
    }
    assert_eq!(s.stats().prepared_rolls, 0);
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn sync_and_append_many() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    let msgs: Vec<Vec<u8>> = (0..500).map(msg).collect();
    let last = s.append_many(msgs.iter().map(|m| m.as_slice())).unwrap();
    assert_eq!(last, Some(499));
    assert!(s.sync().unwrap() > 0);
    assert_eq!(s.sync().unwrap(), 0);
    let too_big = [vec![0u8; 10], vec![0u8; 5000]];
    assert!(matches!(
        s.append_many(too_big.iter().map(|m| m.as_slice())),
        Err(StoreError::MessageTooLarge)
    ));
    assert_eq!(s.next_index().unwrap(), 500);
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn leftover_prepared_file_is_removed_on_open() {
    let d = tmp();
    let s = Store::open(
        &d,
        Config {
            pretouch: false,
            ..small()
        },
    )
    .unwrap();
    s.append(b"a").unwrap();
    s.close();
    let _ = Segment::create(&d, 1, 64 * 1024).unwrap();
    let s = Store::open(
        &d,
        Config {
            pretouch: false,
            ..small()
        },
    )
    .unwrap();
    assert_eq!(s.recovery().removed_unused, 1);
    assert_eq!(s.read(0).unwrap(), b"a");
    // close joins the pre-touch thread (a drop does not wait for it).
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn only_files_the_store_can_prove_are_its_own_are_removed() {
    let d = tmp();
    let cfg = Config {
        pretouch: false,
        ..small()
    };
    let s = Store::open(&d, cfg.clone()).unwrap();
    s.append(b"a").unwrap();
    s.close();
    // A prepared file of the release before prepared headers (all zero)
    // holds nothing: it goes. So does an empty one (a crash before the
    // header).
    fs::write(d.join(segment_file_name(1)), vec![0u8; 8192]).unwrap();
    let s = Store::open(&d, cfg.clone()).unwrap();
    assert_eq!(s.recovery().removed_unused, 1);
    s.close();
    // A file in the sequence that is not activated and holds something
    // that is not a prepared segment of this store: left alone, the open
    // fails.
    let other = d.join(segment_file_name(1));
    fs::write(&other, b"TCHYTBL1 a small table's segment").unwrap();
    assert!(matches!(
        Store::open(&d, cfg.clone()),
        Err(StoreError::Corrupt {
            segment: 1,
            offset: 0
        })
    ));
    assert_eq!(
        fs::read(&other).unwrap(),
        b"TCHYTBL1 a small table's segment"
    );
    // A prepared header naming another sequence number is not this one's.
    let seg = Segment::create(&d, 7, 64 * 1024).unwrap();
    drop(seg);
    fs::rename(d.join(segment_file_name(7)), &other).unwrap();
    assert!(Store::open(&d, cfg.clone()).is_err());
    assert!(other.exists());
    fs::remove_file(&other).unwrap();
    assert_eq!(Store::open(&d, cfg).unwrap().read(0).unwrap(), b"a");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_new_store_takes_little_disk_and_its_segments_grow() {
    let d = tmp();
    let s = Store::open(&d, Config::default()).unwrap();
    let files = |d: &Path| -> Vec<u64> {
        list_segments(d)
            .unwrap()
            .iter()
            .map(|(_, p)| fs::metadata(p).unwrap().len())
            .collect()
    };
    let l = |cap: usize| Layout::new(cap).file_len as u64;
    // The first segment (2 MiB of data) and one prepared (4 MiB).
    assert_eq!(files(&d), [l(2 << 20), l(4 << 20)]);
    let big = vec![7u8; 1 << 20];
    for _ in 0..16 {
        s.append(&big).unwrap();
    }
    // 2, 4, 8 and 16 MiB written through (a 1 MiB message and its header
    // fill a segment less 8 bytes per message)...
    let caps: Vec<u64> = s
        .segs
        .read()
        .iter()
        .map(|x| x.layout.data_cap as u64 >> 20)
        .collect();
    assert_eq!(&caps[..4], [2, 4, 8, 16]);
    s.close();
    // ...and a reopen carries on from the last size.
    let s = Store::open(&d, Config::default()).unwrap();
    for _ in 0..48 {
        s.append(&big).unwrap();
    }
    let last = s.segs.read().last().unwrap().layout.data_cap;
    assert_eq!(last, 64 << 20);
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

/// The permissions ("rw-s", "r--s") of this process's maps of files in `d`.
fn maps_of(d: &Path) -> Vec<(String, String)> {
    let d = fs::canonicalize(d).unwrap();
    let prefix = d.to_string_lossy().into_owned();
    fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = f.get(5)?;
            path.starts_with(&prefix).then(|| {
                (
                    f[1].to_string(),
                    path.rsplit('/').next().unwrap().to_string(),
                )
            })
        })
        .collect()
}

#[test]
fn sealed_segments_are_mapped_read_only() {
    let d = tmp();
    let cfg = Config {
        pretouch: false,
        ..small()
    };
    let s = Store::open(&d, cfg.clone()).unwrap();
    for i in 0..2000u64 {
        s.append(&msg(i)).unwrap();
    }
    let segments = s.stats().segments;
    assert!(segments >= 4, "{segments} segments");
    // Only the active segment (the last) is writable (and mapped
    // read-only too, for readers); every sealed one is mapped once,
    // read-only. The writable maps of sealed segments are unmapped by the
    // reaper thread: the check waits for it.
    let settled = |s: &Store| {
        let maps = maps_of(&d);
        let active = segment_file_name(s.segs.read().last().unwrap().seq);
        let mut active_perms: Vec<&str> = Vec::new();
        for (perms, name) in &maps {
            if *name == active {
                active_perms.push(perms);
            } else if perms != "r--s" {
                return Err(format!("{name}: {maps:?}"));
            }
        }
        active_perms.sort();
        if active_perms != ["r--s", "rw-s"] || maps.len() as u64 != s.stats().segments + 1 {
            return Err(format!("{maps:?}"));
        }
        Ok(())
    };
    let check = |s: &Store| {
        let t0 = std::time::Instant::now();
        while let Err(e) = settled(s) {
            assert!(t0.elapsed() < Duration::from_secs(10), "{e}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    check(&s);
    // Reads and sync still work through the read-only maps.
    for i in 0..2000u64 {
        assert_eq!(s.read(i).unwrap(), msg(i));
    }
    assert!(s.sync().unwrap() > 0);
    s.close();
    // Reopened: the same after recovery.
    let s = Store::open(&d, cfg).unwrap();
    check(&s);
    assert_eq!(s.read(1999).unwrap(), msg(1999));
    assert_eq!(s.append(b"after").unwrap(), 2000);
    s.close();
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn truncate_dir_cuts_the_tail_across_segments() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    for i in 0..2000u64 {
        s.append(&msg(i)).unwrap();
    }
    assert!(s.stats().rolls >= 3, "several segments");
    s.close();
    // Locked while open.
    let open = Store::open(&d, small()).unwrap();
    assert!(matches!(truncate_dir(&d, 10), Err(StoreError::Locked)));
    open.close();
    // Out of range.
    assert!(matches!(truncate_dir(&d, 2001), Err(StoreError::NotFound)));
    assert_eq!(truncate_dir(&d, 2000).unwrap(), 0);
    // Within the last segment, then across segments, then to the start.
    for cut in [1990u64, 700, 333, 1, 0] {
        let before = Store::open(&d, small()).unwrap();
        let end = before.next_index().unwrap();
        before.close();
        assert_eq!(truncate_dir(&d, cut).unwrap(), end - cut);
        let s = Store::open(&d, small()).unwrap();
        assert_eq!(s.next_index().unwrap(), cut, "cut at {cut}");
        assert_eq!(s.recovery().lost_records, 0);
        for i in 0..cut {
            assert_eq!(s.read(i).unwrap(), msg(i));
        }
        assert!(matches!(s.read(cut), Err(StoreError::NotFound)));
        // Appends continue at the cut, with other data.
        for i in cut..cut + 50 {
            assert_eq!(s.append(b"new").unwrap(), i);
        }
        s.close();
        let s = Store::open(&d, small()).unwrap();
        assert_eq!(s.next_index().unwrap(), cut + 50);
        assert_eq!(s.read(cut + 49).unwrap(), b"new");
        s.close();
        assert_eq!(truncate_dir(&d, cut).unwrap(), 50);
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_dropped_store_is_unmapped_by_the_reaper() {
    let d = tmp();
    let s = Store::open(&d, small()).unwrap();
    for i in 0..3000u64 {
        s.append(&msg(i)).unwrap();
    }
    assert!(s.stats().segments >= 5);
    assert!(!maps_of(&d).is_empty());
    // The drop only hands the segments (and the pre-touch thread's join)
    // over; the reaper unmaps them.
    drop(s);
    let t0 = std::time::Instant::now();
    while !maps_of(&d).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", maps_of(&d));
        std::thread::sleep(Duration::from_millis(1));
    }
    // The directory lock was released.
    Store::open(&d, small()).unwrap().close();
    fs::remove_dir_all(&d).unwrap();
}
