use super::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::worker::Worker;

fn tmp() -> PathBuf {
    let d = test_dir("segment");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// This process's maps of `path`, by permissions.
fn maps_of(path: &Path) -> Vec<String> {
    let path = std::fs::canonicalize(path).unwrap();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with(path.to_str().unwrap()))
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect()
}

#[test]
fn file_names_round_trip() {
    assert_eq!(file_name(42, "seg"), "00000000000000000042.seg");
    assert_eq!(
        parse_file_name("00000000000000000042.hint"),
        Some((42, "hint"))
    );
    assert_eq!(parse_file_name("42.seg"), None);
    assert_eq!(parse_file_name("0000000000000000004x.seg"), None);
    assert_eq!(parse_file_name("00000000000000000042"), None);
}

#[test]
fn the_directory_lock_is_exclusive() {
    let d = tmp();
    let l = lock_dir(&d).unwrap();
    assert!(l.is_some());
    assert!(lock_dir(&d).unwrap().is_none());
    drop(l);
    assert!(lock_dir(&d).unwrap().is_some());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn create_allocates_and_removes_on_error() {
    let d = tmp();
    let (f, path, ()) = create(&d, "a.seg", 1 << 16, b"HEAD", |_| Ok(())).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 16);
    // The header first, the rest allocated and zero.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], b"HEAD");
    assert!(bytes[4..].iter().all(|&b| b == 0));
    assert!(!is_all_zero(&path).unwrap());
    // Never over an existing file.
    assert!(create(&d, "a.seg", 1 << 16, b"", |_| Ok(())).is_err());
    assert!(path.exists());
    // A failing init removes the file.
    let e = create(&d, "b.seg", 1 << 16, b"", |_| {
        Err::<(), _>(io::Error::other("x"))
    });
    assert!(e.is_err());
    assert!(!d.join("b.seg").exists());
    // Removal only of the same file.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"other").unwrap();
    remove_if_same_file(&f, &path);
    assert!(path.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn maps_share_the_file_and_a_retired_write_map_is_unmapped() {
    let d = tmp();
    let len = 4 * MM_CHUNK + PAGE;
    let (f, path, maps) = create(&d, "m.seg", len, b"", |f| Maps::new(f, len, true)).unwrap();
    let mut perms = maps_of(&path);
    perms.sort();
    assert_eq!(perms, ["r--s", "rw-s"]);
    maps.populate(0, len, true);
    let w = maps.writable().unwrap();
    // SAFETY: this test is the only writer and reads only after writing.
    unsafe { w.slice_mut(len - 8, 8).copy_from_slice(b"12345678") };
    // SAFETY: written above, not written again.
    assert_eq!(unsafe { maps.slice(len - 8, 8) }, Some(&b"12345678"[..]));
    // SAFETY: as above.
    assert_eq!(unsafe { maps.slice(len - 8, 9) }, None);
    maps.sync_range(&f, 0, len).unwrap();
    // The segment's hold, then the writer's, retired: unmapped by the
    // reaper.
    maps.release_writable();
    assert!(maps.writable().is_none());
    assert_eq!(maps_of(&path).len(), 2);
    map::retire(w);
    assert!(wait_until(|| maps_of(&path) == ["r--s"]));
    // The bytes are the file's.
    // SAFETY: as above.
    assert_eq!(unsafe { maps.slice(len - 8, 8) }, Some(&b"12345678"[..]));
    map::populate_without_madv_populate(maps.ptr() as *mut u8, len, 0, len);
    maps.sync_range(&f, 0, len).unwrap();
    drop(maps);
    assert!(maps_of(&path).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_leftover_is_judged_on_one_read_of_it() {
    let d = tmp();
    let f = d.join("x.seg");
    let ours = |h: &[u8]| h.starts_with(b"MINE");
    for (bytes, zero, mine) in [
        (&b""[..], true, true),
        (&[0u8; 5000][..], true, true),
        (b"MINE and more", false, true),
        (b"\0\0\0\0theirs", false, false),
    ] {
        std::fs::write(&f, bytes).unwrap();
        assert_eq!(is_all_zero(&f).unwrap(), zero, "{bytes:?}");
        assert_eq!(is_all_zero_or(&f, ours).unwrap(), mine, "{bytes:?}");
    }
    // Past the first chunk too.
    let mut big = vec![0u8; 3 * MM_CHUNK];
    big[2 * MM_CHUNK + 7] = 1;
    std::fs::write(&f, &big).unwrap();
    assert!(!is_all_zero(&f).unwrap());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn segments_grow_from_the_first_size_to_the_largest() {
    let g = Growth::new(2 << 20, 64 << 20);
    let sizes: Vec<usize> = std::iter::successors(Some(g.next(None)), |&s| Some(g.next(Some(s))))
        .take(8)
        .map(|s| s >> 20)
        .collect();
    assert_eq!(sizes, [2, 4, 8, 16, 32, 64, 64, 64]);
    assert_eq!(g.after(4 << 20, 2), 16 << 20);
    assert_eq!(g.after(4 << 20, 0), 4 << 20);
    // A segment of another size (a reopened part) carries on from there.
    assert_eq!(g.next(Some(3 << 20)), 6 << 20);
    assert_eq!(g.next(Some(1 << 10)), 2 << 20);
    // A first size above the largest is the largest: fixed sizes.
    let fixed = Growth::new(128 << 20, 64 << 20);
    assert_eq!(
        (fixed.next(None), fixed.next(Some(64 << 20))),
        (64 << 20, 64 << 20)
    );
}

#[test]
fn a_full_disk_is_recorded_for_the_message() {
    // (A real full disk is tested from Elixir, on a small tmpfs.)
    let d = tmp();
    let free = shortfall::free_bytes(&d).unwrap();
    assert!(free > 0);
    assert_eq!(shortfall::last(&d), None);
    shortfall::record(&d, 64 << 20);
    let s = shortfall::last(&d).unwrap();
    assert_eq!(s.asked, 64 << 20);
    assert!(s.free > 0 && s.free <= free + (256 << 20), "{s:?}");
    assert_eq!(shortfall::last(&d.join("other")), None);
    // A segment made there since clears it.
    create(&d, "small.seg", 1 << 16, b"", |_| Ok(())).unwrap();
    assert_eq!(shortfall::last(&d), None);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A part whose segments are numbers; the active one is `active`.
struct Fake {
    q: Arc<Prepared<u64>>,
    active: Arc<Mutex<u64>>,
    discarded: Arc<Mutex<Vec<u64>>>,
    fail: bool,
}

impl Prepare for Fake {
    type Seg = u64;
    fn queue(&self) -> &Prepared<u64> {
        &self.q
    }
    fn make(&self, queued: usize) -> io::Result<u64> {
        if self.fail {
            return Err(io::Error::other("full"));
        }
        Ok(*self.active.lock().unwrap() + 1 + queued as u64)
    }
    fn still_next(&self, seg: &u64, q: &VecDeque<u64>) -> bool {
        *seg == *self.active.lock().unwrap() + 1 + q.len() as u64
    }
    fn discard(&self, seg: u64) {
        self.discarded.lock().unwrap().push(seg);
    }
    fn touch_ahead(&mut self) -> bool {
        false
    }
}

#[test]
fn the_queue_is_filled_in_line_and_emptied_at_stop() {
    let q = Arc::new(Prepared::new(3));
    let active = Arc::new(Mutex::new(0));
    let discarded = Arc::new(Mutex::new(Vec::new()));
    let mut p = Fake {
        q: q.clone(),
        active: active.clone(),
        discarded: discarded.clone(),
        fail: false,
    };
    // One segment until the writer rolls (an idle part keeps one).
    prepare::fill(&mut p, || false).unwrap();
    assert_eq!(*q.lock(), [1]);
    assert_eq!(q.target(), 1);
    // The writer takes one at each roll; one more is kept after each, up
    // to the queue's max, and the thread tops it up when woken.
    assert_eq!(q.pop_or_wait(), Some(1));
    *active.lock().unwrap() = 1;
    assert_eq!(q.target(), 2);
    prepare::fill(&mut p, || false).unwrap();
    assert_eq!(*q.lock(), [2, 3]);
    assert_eq!(q.pop(), Some(2));
    *active.lock().unwrap() = 2;
    assert_eq!(q.pop(), Some(3));
    *active.lock().unwrap() = 3;
    assert_eq!(q.target(), 3);
    let w = Worker::spawn("tseg-prep", None, move |ctx| prepare::run(ctx, p)).unwrap();
    w.wake();
    assert!(wait_until(|| q.len() == 3));
    assert_eq!(*q.lock(), [4, 5, 6]);
    // Never more than the max.
    assert_eq!(q.pop(), Some(4));
    assert_eq!(q.target(), 3);
    *active.lock().unwrap() = 4;
    w.wake();
    assert!(wait_until(|| q.len() == 3));
    w.join().unwrap();
    assert!(q.is_empty());
    assert_eq!(*discarded.lock().unwrap(), [5, 6, 7]);
    // Errors stop the filling and are returned.
    let mut p = Fake {
        q: Arc::new(Prepared::new(2)),
        active,
        discarded,
        fail: true,
    };
    assert!(prepare::fill(&mut p, || false).is_err());
    assert_eq!(p.q.pop_or_wait(), None);
}
