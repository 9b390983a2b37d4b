//! Retention (by count, bytes, age, `trim_below`), reused segment files,
//! `reset_dir`, and crashes in the middle of them.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::super::format::*;
use super::super::open::list_segments;
use super::super::*;
use crate::segment::wait_until;

const SEG: usize = 64 * 1024;

fn tmp() -> PathBuf {
    crate::segment::test_dir("retain")
}

/// Segments all of one size (a reused file fits the next segment).
fn cfg() -> Config {
    Config {
        segment_size: SEG,
        initial_segment_size: SEG,
        max_message_size: 4096,
        ..Config::default()
    }
}

/// The message at index `i` (what every read checks against).
fn msg(i: u64) -> Vec<u8> {
    let mut v = format!("message-{i}-").into_bytes();
    v.resize(200, (i % 251) as u8);
    v
}

fn fill(s: &Store, n: u64) {
    for _ in 0..n {
        let i = s.next_index().unwrap();
        assert_eq!(s.append(&msg(i)).unwrap(), i);
    }
}

/// As `fill`, at the pace of the pre-touch thread: each roll finds a
/// prepared segment (an appender in a tight loop outruns the thread here,
/// where a 64 KiB segment fills in microseconds).
fn fill_steadily(s: &Store, n: u64) {
    for _ in 0..n {
        wait_until("a prepared segment", || s.prepared_segments() > 0);
        fill(s, 1);
    }
}

/// The files of `d` whose header says activated (`TACHLOG1`).
fn activated(d: &Path) -> usize {
    list_segments(d)
        .unwrap()
        .iter()
        .filter(|(_, p)| fs::read(p).is_ok_and(|b| b.starts_with(&MAGIC)))
        .count()
}

fn check_all(s: &Store) {
    let (first, next) = (s.first_index().unwrap(), s.next_index().unwrap());
    for i in first..next {
        assert_eq!(s.read(i).unwrap(), msg(i), "index {i}");
    }
}

#[test]
fn retention_by_bytes_reads_below_are_trimmed_and_files_are_reused() {
    let d = tmp();
    let limit = 4 * Layout::new(SEG).file_len as u64;
    let s = Store::open(
        &d,
        Config {
            max_bytes: Some(limit),
            ..cfg()
        },
    )
    .unwrap();
    fill_steadily(&s, 5000);
    let st = s.stats();
    assert!(st.disk_bytes <= limit, "{st:?}");
    assert!(st.deleted_segments > 0);
    let first = s.first_index().unwrap();
    assert_eq!(first, st.first_index);
    assert!(first > 0);
    assert!(matches!(s.read(first - 1), Err(StoreError::Trimmed(f)) if f == first));
    assert!(matches!(s.read(0), Err(StoreError::Trimmed(f)) if f == first));
    assert!(matches!(
        s.read_range(0, 10, usize::MAX, |_, _| {}),
        Err(StoreError::Trimmed(f)) if f == first
    ));
    assert!(matches!(s.read(5000), Err(StoreError::NotFound)));
    check_all(&s);
    // The retired files were reused as new segments (their pages in the
    // page cache), and only the retained ones are activated on disk.
    wait_until("the retired files reused or removed", || {
        activated(&d) as u64 == s.stats().segments
    });
    wait_until("a reused file", || s.stats().reused_segments > 0);
    let events = s.take_events();
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Retention { reason: Reason::MaxBytes, deleted_segments, first_index, .. }
            if *deleted_segments > 0 && *first_index > 0
    )));
    s.close();
    // Records written into reused files verify after a reopen (their seed
    // is in their header), and the old records in them are not read back.
    let s = Store::open(&d, cfg()).unwrap();
    assert_eq!(s.recovery().cut, None);
    assert_eq!(s.first_index().unwrap(), first);
    assert_eq!(s.next_index().unwrap(), 5000);
    check_all(&s);
    fill(&s, 10);
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn retention_by_age_uses_the_time_the_next_segment_was_activated() {
    for pretouch in [true, false] {
        let d = tmp();
        let now = Arc::new(AtomicU64::new(1_000_000_000_000));
        let n = now.clone();
        let c = Config {
            max_age_ms: Some(60_000),
            pretouch,
            clock: Clock::new(move || n.load(Ordering::Relaxed)),
            ..cfg()
        };
        let s = Store::open(&d, c).unwrap();
        fill(&s, 2000); // a few segments, all activated "now"
        let segs = s.stats().segments;
        assert!(segs >= 4, "{segs}");
        // 59 s later nothing is old enough.
        now.fetch_add(59_000_000_000, Ordering::Relaxed);
        fill(&s, 1);
        assert_eq!(s.first_index().unwrap(), 0);
        // At 60 s every sealed segment is: they go, the active one stays
        // (with pretouch, the thread applies it without any append; else
        // the next roll does).
        now.fetch_add(1_000_000_000, Ordering::Relaxed);
        if !pretouch {
            assert_eq!(s.first_index().unwrap(), 0);
            let before = s.stats().rolls;
            while s.stats().rolls == before {
                fill(&s, 1);
            }
        }
        wait_until("the old segments gone", || s.stats().segments <= 2);
        let first = s.first_index().unwrap();
        assert!(first > 0);
        assert!(matches!(s.read(0), Err(StoreError::Trimmed(f)) if f == first));
        check_all(&s);
        assert!(s.take_events().iter().any(|e| matches!(
            e,
            Event::Retention {
                reason: Reason::MaxAge,
                ..
            }
        )));
        s.close();
        fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn trim_below_keeps_a_segment_a_reader_holds_readable() {
    let d = tmp();
    let s = Arc::new(Store::open(&d, cfg()).unwrap());
    fill(&s, 3000);
    let segs = s.stats().segments;
    assert!(segs >= 5);
    // A reader holds record 0 (its segment) while the log is trimmed past
    // it and its file is removed or reused meanwhile.
    let trimmed = AtomicBool::new(false);
    let s2 = s.clone();
    let r = s
        .read_with(0, |p| {
            let to = s2.trim_below(2500).unwrap();
            assert!(to > 0 && to <= 2500);
            fill(&s2, 3000); // rolls: the pre-touch thread takes the files
            wait_until("the trimmed files gone", || {
                !list_segments(&d).unwrap().iter().any(|(q, _)| *q == 0)
            });
            trimmed.store(true, Ordering::Relaxed);
            p.to_vec()
        })
        .unwrap();
    assert!(trimmed.load(Ordering::Relaxed));
    assert_eq!(r, msg(0));
    let first = s.first_index().unwrap();
    assert!(first > 0);
    assert!(matches!(s.read(0), Err(StoreError::Trimmed(f)) if f == first));
    // Below the active segment's base: every sealed one goes, not it.
    let next = s.next_index().unwrap();
    let base = s.trim_below(u64::MAX).unwrap();
    assert_eq!(s.stats().segments, 1);
    assert!(base <= next);
    check_all(&s);
    s.close();
    assert!(matches!(s.trim_below(1), Err(StoreError::Closed)));
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn readers_here_and_in_another_process_never_see_a_reused_file() {
    let d = tmp();
    let s = Arc::new(
        Store::open(
            &d,
            Config {
                max_segments: Some(3),
                ..cfg()
            },
        )
        .unwrap(),
    );
    fill(&s, 100);
    // A reader of the same store, and one opened as another process opens
    // it (read-only, its own maps).
    let other = Arc::new(
        Store::open(
            &d,
            Config {
                mode: Mode::Read,
                ..cfg()
            },
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = [s.clone(), other.clone()]
        .into_iter()
        .map(|r| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut ok, mut trimmed) = (0u64, 0u64);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    match r.read_range(i, 64, usize::MAX, |j, p| {
                        assert_eq!(p, msg(j), "index {j}");
                        ok += 1;
                    }) {
                        Ok(0) => std::thread::yield_now(),
                        Ok(n) => i += n as u64,
                        Err(StoreError::Trimmed(f)) => {
                            assert!(f > i);
                            trimmed += 1;
                            i = f;
                        }
                        Err(e) => panic!("{e}"),
                    }
                    // Also from the oldest kept index (the race with
                    // retention).
                    let first = r.first_index().unwrap_or_else(|e| panic!("{e}"));
                    match r.read(first) {
                        Ok(_) | Err(StoreError::Trimmed(_)) | Err(StoreError::NotFound) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                (ok, trimmed)
            })
        })
        .collect();
    fill_steadily(&s, 20_000);
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (ok, _trimmed) = r.join().unwrap();
        assert!(ok > 0);
    }
    assert!(s.stats().reused_segments > 0);
    other.close();
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

/// Segment `seq`'s file, and a copy of its bytes.
fn file_of(d: &Path, seq: u64) -> (PathBuf, Vec<u8>) {
    let p = d.join(segment_file_name(seq));
    let b = fs::read(&p).unwrap();
    (p, b)
}

#[test]
fn a_crash_in_the_middle_of_a_reuse_or_a_removal_leaves_a_store_that_opens() {
    let d = tmp();
    let c = Config {
        pretouch: false,
        ..cfg()
    };
    let s = Store::open(&d, c.clone()).unwrap();
    fill(&s, 2000);
    let last = list_segments(&d).unwrap().last().unwrap().0;
    assert!(last >= 4);
    s.close();
    // Segment 0 retired and its reuse as segment `last + 1` interrupted
    // after its header was rewritten (under its `.retired` name); segment 1
    // retired and reused (renamed) but never activated.
    let seg0 = Segment::open(&d.join(segment_file_name(0)), 0, true)
        .unwrap()
        .unwrap();
    let seg0 = seg0.reuse(&d, last + 1).unwrap();
    let retired0 = d.join(retired_file_name(0));
    fs::rename(&seg0.path, &retired0).unwrap();
    drop(seg0);
    assert_eq!(&fs::read(&retired0).unwrap()[..8], &PREP_MAGIC);
    // And a `.retired` file that is not a store segment: left alone.
    let stranger = d.join(retired_file_name(99));
    fs::write(&stranger, b"not a segment").unwrap();
    let seg1 = Segment::open(&d.join(segment_file_name(1)), 1, true)
        .unwrap()
        .unwrap();
    let base2 = seg1.base() + seg1.count();
    drop(seg1.reuse(&d, last + 2).unwrap());
    // (Segment 1's name is free now: a removal.)
    let s = Store::open(&d, c.clone()).unwrap();
    assert_eq!(s.recovery().removed_unused, 2);
    assert_eq!(s.first_index().unwrap(), base2);
    assert_eq!(s.next_index().unwrap(), 2000);
    check_all(&s);
    fill(&s, 1000);
    s.close();
    assert!(!retired0.exists());
    assert!(stranger.exists());
    let s = Store::open(&d, c).unwrap();
    check_all(&s);
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_old_record_after_the_end_of_a_reused_segment_is_never_read() {
    let d = tmp();
    let c = Config {
        max_segments: Some(2),
        ..cfg()
    };
    let s = Store::open(&d, c.clone()).unwrap();
    // Fixed-size records: the old records of a reused file sit exactly
    // where the new ones go.
    fill_steadily(&s, 2000);
    // Until a reused file is the active segment, with a few records in it.
    let active_reused = || {
        let segs = s.segs.read();
        let a = segs.last().unwrap();
        a.flags() & FLAG_REUSED != 0 && a.count() >= 5
    };
    for _ in 0..100_000 {
        if active_reused() {
            break;
        }
        fill_steadily(&s, 1);
    }
    assert!(active_reused(), "{:?}", s.stats());
    let (seq, pos) = s.active_position().unwrap();
    let next = s.next_index().unwrap();
    s.close();
    // A clean close: the word after the last record is zero, nothing is cut.
    let (path, mut b) = file_of(&d, seq);
    let l = Layout::new(SEG);
    let end = l.data_start + pos;
    assert_eq!(&b[end..end + 8], &[0u8; 8]);
    let s = Store::open(&d, c.clone()).unwrap();
    assert_eq!(s.recovery().cut, None);
    assert_eq!(s.next_index().unwrap(), next);
    s.close();
    // The page holding that zero word lost (a power loss): an old record,
    // valid under the file's old seed, is back there. It does not verify
    // now: a torn tail is cut, and no record comes back from the old life.
    let old = header_word(0x5eed, &msg(0));
    b[end..end + 8].copy_from_slice(&old.to_le_bytes());
    b[end + 8..end + 8 + 200].copy_from_slice(&msg(0));
    fs::write(&path, &b).unwrap();
    let s = Store::open(&d, c).unwrap();
    assert_eq!(s.recovery().cut, Some("torn_tail"));
    assert_eq!(s.next_index().unwrap(), next);
    check_all(&s);
    fill(&s, 10);
    check_all(&s);
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reset_dir_starts_the_log_at_a_base_even_after_a_crash_halfway() {
    let d = tmp();
    let s = Store::open(&d, cfg()).unwrap();
    fill(&s, 2000);
    s.close();
    reset_dir(&d, &cfg(), 10_000).unwrap();
    let s = Store::open(&d, cfg()).unwrap();
    assert_eq!(s.first_index().unwrap(), 10_000);
    assert_eq!(s.next_index().unwrap(), 10_000);
    assert!(matches!(s.read(5), Err(StoreError::Trimmed(10_000))));
    assert!(matches!(s.read(10_000), Err(StoreError::NotFound)));
    assert_eq!(s.append(&msg(10_000)).unwrap(), 10_000);
    fill(&s, 1000);
    s.close();
    let s = Store::open(&d, cfg()).unwrap();
    assert_eq!(s.first_index().unwrap(), 10_000);
    check_all(&s);
    s.close();
    // A crash after the reset's segment was made, before the old ones went:
    // they are removed at the next open, and the log starts at the base.
    let last = list_segments(&d).unwrap().last().unwrap().0;
    let r = Segment::create(&d, last + 1, SEG).unwrap();
    r.mark_reset();
    r.activate(50_000, 1);
    drop(r);
    let s = Store::open(&d, cfg()).unwrap();
    assert_eq!(s.first_index().unwrap(), 50_000);
    assert_eq!(s.next_index().unwrap(), 50_000);
    assert_eq!(list_segments(&d).unwrap().first().unwrap().0, last + 1);
    fill(&s, 10);
    check_all(&s);
    s.close();
    // A reader sees the same log; a new directory is claimed and reset.
    let r = Store::open(
        &d,
        Config {
            mode: Mode::Read,
            ..cfg()
        },
    )
    .unwrap();
    assert_eq!(r.first_index().unwrap(), 50_000);
    r.close();
    let e = tmp();
    reset_dir(&e, &cfg(), 7).unwrap();
    let s = Store::open(&e, cfg()).unwrap();
    assert_eq!(s.append(b"x").unwrap(), 7);
    s.close();
    fs::remove_dir_all(&d).unwrap();
    fs::remove_dir_all(&e).unwrap();
}

#[test]
fn retention_point_says_where_the_policy_would_cut_at_a_floor_at_most() {
    let d = tmp();
    // No limits of its own: the caller (a sequencer node) decides.
    let t = Arc::new(AtomicU64::new(1 << 60));
    let clock = {
        let t = t.clone();
        Clock::new(move || t.load(Ordering::Relaxed))
    };
    let s = Store::open(&d, Config { clock, ..cfg() }).unwrap();
    fill(&s, 3000);
    let bases: Vec<u64> = s.segs.read().iter().map(|x| x.base()).collect();
    assert!(bases.len() > 6, "{bases:?}");
    let file_len = Layout::new(SEG).file_len as u64;
    assert_eq!(s.retention_point(None, None, u64::MAX), 0);
    let p = s.retention_point(Some(4 * file_len), None, u64::MAX);
    // The base of the fourth segment from the end: four files kept.
    assert_eq!(p, bases[bases.len() - 4], "{bases:?}");
    // At a floor at most, on a segment boundary.
    let q = s.retention_point(Some(4 * file_len), None, p - 1);
    assert_eq!(q, bases[bases.len() - 5]);
    assert_eq!(s.retention_point(Some(4 * file_len), None, 1), 0);
    // Nothing went: the caller trims.
    assert_eq!(s.first_index().unwrap(), 0);
    assert_eq!(s.trim_below(p).unwrap(), p);
    assert!(matches!(s.read(p - 1), Err(StoreError::Trimmed(f)) if f == p));
    assert_eq!(s.read(p).unwrap(), msg(p));
    // By age (the test's clock): nothing is a second old yet; ten
    // seconds on, every sealed segment is, never the active one.
    assert_eq!(s.retention_point(None, Some(1000), u64::MAX), p);
    t.fetch_add(10_000_000_000, Ordering::Relaxed);
    let last = *bases.last().unwrap();
    assert_eq!(s.retention_point(None, Some(1000), u64::MAX), last);
    assert_eq!(
        s.retention_point(None, Some(1000), last - 1),
        bases[bases.len() - 2]
    );
    s.close();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reset_to_empties_an_open_log_at_an_index_and_a_reopen_keeps_it() {
    let d = tmp();
    let s = Store::open(&d, cfg()).unwrap();
    fill(&s, 1000);
    let held = s.read(10).unwrap();
    s.reset_to(5000).unwrap();
    assert_eq!(
        (s.first_index().unwrap(), s.next_index().unwrap()),
        (5000, 5000)
    );
    assert!(matches!(s.read(10), Err(StoreError::Trimmed(5000))));
    assert!(matches!(s.read(5000), Err(StoreError::NotFound)));
    assert_eq!(held, msg(10));
    fill(&s, 600);
    check_all(&s);
    wait_until("the old files reused or removed", || {
        activated(&d) as u64 == s.stats().segments
    });
    s.close();
    let s = Store::open(&d, cfg()).unwrap();
    assert_eq!(
        (s.first_index().unwrap(), s.next_index().unwrap()),
        (5000, 5600)
    );
    check_all(&s);
    s.close();
    // A reader cannot.
    let r = Store::open(
        &d,
        Config {
            mode: Mode::Read,
            ..cfg()
        },
    )
    .unwrap();
    assert!(matches!(r.reset_to(1), Err(StoreError::ReadOnly)));
    drop(r);
    fs::remove_dir_all(&d).unwrap();
}
