//! What it costs to make a segment ready for a writer, three ways (issue
//! 29, item 4: the pre-touch thread's page zeroing). Each round makes a
//! segment file of `size` bytes ready (created or reused, then faulted in
//! writable with `MADV_POPULATE_WRITE`, as `segment::prepare` does), writes
//! it whole through the map (the log's appends), and retires the oldest
//! file once more than `keep` are live (retention):
//!
//! * `fallocate`: a new file, `fallocate`d (unwritten extents: the kernel
//!   zero-fills each page cache page when it is first faulted), retired
//!   files unlinked (what the store did before);
//! * `pwrite`: a new file, `fallocate`d (so a full disk is still `ENOSPC`
//!   at creation), then written with whole-page `pwrite`s of zeros before
//!   it is faulted in; retired files unlinked;
//! * `recycle`: the oldest retired file renamed and reused: its first page
//!   and its first 1/17 (the index region of a store segment) zeroed with
//!   `pwrite`, then faulted in (its pages are still in the page cache:
//!   nothing to zero); a new file only until `keep + 1` exist.
//!
//! Prints, per mode, the thread CPU time and wall time of the preparing
//! step per segment, of the retiring step, and of writing the segment
//! (the appender's share), medians over the rounds after the first `keep
//! + 1` (which create files in every mode).
//!
//!     cargo run --release -p tachyon_core --bin tachyon_fill_bench -- DIR [ROUNDS] [SIZE_MIB] [MODES]
//!
//! MODES is a comma-separated list (default `fallocate,pwrite,recycle`),
//! run in turn; run it several times to interleave.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn thread_cpu() -> Duration {
    // SAFETY: clock_gettime writes into the timespec we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

struct Timed {
    cpu: Duration,
    wall: Duration,
}

fn timed(f: impl FnOnce()) -> Timed {
    let (c0, w0) = (thread_cpu(), Instant::now());
    f();
    Timed {
        cpu: thread_cpu() - c0,
        wall: w0.elapsed(),
    }
}

const MM_CHUNK: usize = 1 << 20;

fn populate(p: *mut u8, len: usize) {
    let mut at = 0;
    while at < len {
        let end = (at + MM_CHUNK).min(len);
        // SAFETY: [at, end) is inside the map; MADV_POPULATE_WRITE changes
        // no byte.
        let rc = unsafe {
            libc::madvise(
                p.add(at) as *mut libc::c_void,
                end - at,
                libc::MADV_POPULATE_WRITE,
            )
        };
        assert_eq!(
            rc,
            0,
            "MADV_POPULATE_WRITE: {}",
            std::io::Error::last_os_error()
        );
        at = end;
    }
}

fn fallocate(f: &File, len: usize) {
    // SAFETY: fallocate on a descriptor we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
}

fn pwrite_zeros(f: &File, from: usize, to: usize) {
    let zeros = vec![0u8; MM_CHUNK];
    let mut at = from;
    while at < to {
        let end = (at + MM_CHUNK).min(to);
        f.write_all_at(&zeros[..end - at], at as u64)
            .expect("pwrite");
        at = end;
    }
}

struct Live {
    path: PathBuf,
    file: File,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).expect("usage: DIR [ROUNDS] [SIZE_MIB] [MODES]"));
    let rounds: usize = args.get(2).map_or(24, |s| s.parse().expect("ROUNDS"));
    let size: usize = args.get(3).map_or(64, |s| s.parse().expect("SIZE_MIB")) << 20;
    let modes = args
        .get(4)
        .map_or("fallocate,pwrite,recycle", |s| s.as_str());
    let keep = 4;
    for mode in modes.split(',') {
        let d = dir.join(mode);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        run(&d, mode, rounds, size, keep);
        let _ = std::fs::remove_dir_all(&d);
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn run(dir: &Path, mode: &str, rounds: usize, size: usize, keep: usize) {
    let mut live: Vec<Live> = Vec::new();
    let mut spare: Option<Live> = None;
    let (mut prep_cpu, mut prep_wall, mut retire_cpu, mut write_cpu, mut write_wall) =
        (vec![], vec![], vec![], vec![], vec![]);
    let data = vec![0xA5u8; MM_CHUNK];
    for round in 0..rounds {
        let path = dir.join(format!("{round:020}.seg"));
        let mut made = None;
        let prep = timed(|| {
            let file = match (mode, spare.take()) {
                ("recycle" | "recycle-cold", Some(old)) => {
                    std::fs::rename(&old.path, &path).expect("rename");
                    // The header page and the index region (1/17 of a
                    // store segment) zeroed; the data region left as it was.
                    pwrite_zeros(&old.file, 0, size / 17);
                    old.file
                }
                _ => {
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .expect("create");
                    fallocate(&f, size);
                    if mode == "pwrite" {
                        pwrite_zeros(&f, 0, size);
                    }
                    f
                }
            };
            let map = memmap2::MmapOptions::new()
                .len(size)
                .map_raw(&file)
                .expect("mmap");
            populate(map.as_mut_ptr(), size);
            made = Some((file, map));
        });
        let (file, map) = made.expect("made above");
        let w = timed(|| {
            let mut at = 0;
            while at < size {
                // SAFETY: inside the map, which only this thread writes.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), map.as_mut_ptr().add(at), MM_CHUNK)
                };
                at += MM_CHUNK;
            }
        });
        drop(map);
        live.push(Live { path, file });
        let mut r = Duration::ZERO;
        while live.len() > keep {
            let old = live.remove(0);
            r += timed(|| {
                if mode.starts_with("recycle") && spare.is_none() {
                    if mode == "recycle-cold" {
                        // Its pages written back and dropped from the page
                        // cache (a file retired long after it was written).
                        old.file.sync_data().expect("fdatasync");
                        // SAFETY: fadvise on a descriptor we own.
                        unsafe {
                            libc::posix_fadvise(
                                old.file.as_raw_fd(),
                                0,
                                0,
                                libc::POSIX_FADV_DONTNEED,
                            )
                        };
                    }
                    spare = Some(old);
                } else {
                    std::fs::remove_file(&old.path).expect("unlink");
                }
            })
            .cpu;
        }
        if round > keep {
            prep_cpu.push(prep.cpu);
            prep_wall.push(prep.wall);
            retire_cpu.push(r);
            write_cpu.push(w.cpu);
            write_wall.push(w.wall);
        }
    }
    println!(
        "{mode:>9} {} MiB x {}: prepare cpu {:>6.1} ms wall {:>6.1} ms | retire cpu {:>5.2} ms | write cpu {:>6.1} ms wall {:>6.1} ms",
        size >> 20,
        prep_cpu.len(),
        median(prep_cpu).as_secs_f64() * 1e3,
        median(prep_wall).as_secs_f64() * 1e3,
        median(retire_cpu).as_secs_f64() * 1e3,
        median(write_cpu).as_secs_f64() * 1e3,
        median(write_wall).as_secs_f64() * 1e3,
    );
}
