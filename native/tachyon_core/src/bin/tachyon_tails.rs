//! Where the slowest calls of a table put and a store append come from:
//! the Rust loops of `mix tachyon.bench table --procs 1 --engines
//! tachyon.memory` and `mix tachyon.bench store` (the same configurations,
//! sizes and counts), with the machine's own hiccups measured first in the
//! same process, and each call slower than `--slow-us` explained from the
//! calling thread's counters (`getrusage(RUSAGE_THREAD)` around every call
//! with `--why`): page faults it took, and whether it was switched out
//! (voluntarily: it waited; involuntarily: another thread took its CPU).
//!
//!     cargo run --release -p tachyon_core --bin tachyon_tails -- table --why
//!     cargo run --release -p tachyon_core --bin tachyon_tails -- store --pin 0
//!
//! `--pin CPU` pins the process (the loop, and the threads the table or
//! store starts, which inherit it) to one CPU: what a 2-core machine looks
//! like to the writer when its other core is busy with something else.
//! Times are CLOCK_MONOTONIC nanoseconds, the clock of ftrace's `mono`
//! `trace_clock`, so that a slow call can be found in a scheduler trace.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tachyon_core::hist::{format_ns, Hist};
use tachyon_core::store::{self, Store};
use tachyon_core::table::{self, Table, ValueMode};

struct Args {
    what: String,
    pin: Option<usize>,
    why: bool,
    slow_ns: u64,
    dir: PathBuf,
    hiccup_ms: u64,
}

fn args() -> Args {
    let mut a = Args {
        what: String::new(),
        pin: None,
        why: false,
        slow_ns: 100_000,
        dir: std::env::temp_dir(),
        hiccup_ms: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(s) = it.next() {
        let mut num = |name: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} takes a number"))
        };
        match s.as_str() {
            "--pin" => a.pin = Some(num("--pin") as usize),
            "--why" => a.why = true,
            "--slow-us" => a.slow_ns = num("--slow-us") * 1000,
            "--hiccup-ms" => a.hiccup_ms = num("--hiccup-ms"),
            "--dir" => a.dir = PathBuf::from(it.next().expect("--dir takes a path")),
            w if !w.starts_with('-') && a.what.is_empty() => a.what = w.to_string(),
            other => panic!("unknown argument {other}"),
        }
    }
    if !["table", "store"].contains(&a.what.as_str()) {
        panic!("usage: tachyon_tails table|store [--pin CPU] [--why] [--slow-us US] [--dir D]");
    }
    a
}

/// The calling thread's counters.
#[derive(Clone, Copy, Default)]
struct Usage {
    minflt: i64,
    majflt: i64,
    nvcsw: i64,
    nivcsw: i64,
}

fn usage() -> Usage {
    // SAFETY: getrusage writes only into the zeroed struct passed.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        Usage {
            minflt: ru.ru_minflt,
            majflt: ru.ru_majflt,
            nvcsw: ru.ru_nvcsw,
            nivcsw: ru.ru_nivcsw,
        }
    }
}

fn mono_ns() -> u64 {
    // SAFETY: clock_gettime writes only into the struct passed.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

struct Slow {
    i: u64,
    ns: u64,
    at: u64,
    d: Usage,
}

/// Times `n` calls of `op(i)` (after `warmup` untimed ones, numbered
/// from 0): a histogram and the calls slower than `slow_ns`.
fn timed(a: &Args, warmup: u64, n: u64, mut op: impl FnMut(u64)) -> (Hist, Vec<Slow>) {
    for i in 0..warmup {
        op(i);
    }
    let from = mono_ns();
    let mut h = Hist::new();
    let mut slow = Vec::new();
    let mut u0 = if a.why { usage() } else { Usage::default() };
    for i in warmup..warmup + n {
        let t0 = Instant::now();
        op(i);
        let ns = t0.elapsed().as_nanos() as u64;
        h.record(ns);
        let u1 = if a.why { usage() } else { u0 };
        if ns > a.slow_ns {
            slow.push(Slow {
                i,
                ns,
                at: mono_ns(),
                d: Usage {
                    minflt: u1.minflt - u0.minflt,
                    majflt: u1.majflt - u0.majflt,
                    nvcsw: u1.nvcsw - u0.nvcsw,
                    nivcsw: u1.nivcsw - u0.nivcsw,
                },
            });
        }
        u0 = u1;
    }
    let to = mono_ns();
    println!(
        "timed calls from {}.{:06} to {}.{:06} (CLOCK_MONOTONIC)",
        from / 1_000_000_000,
        from % 1_000_000_000 / 1000,
        to / 1_000_000_000,
        to % 1_000_000_000 / 1000
    );
    (h, slow)
}

fn line(name: &str, h: &Hist) {
    println!(
        "{name:<28} n {:>9}  p50 {:>10}  p99.99 {:>10}  max {:>10}",
        h.count(),
        format_ns(h.value_at(50.0) as f64),
        format_ns(h.value_at(99.99) as f64),
        format_ns(h.value_at(100.0) as f64)
    );
}

fn explain(a: &Args, slow: &[Slow]) {
    println!(
        "{} calls over {} us{}",
        slow.len(),
        a.slow_ns / 1000,
        if a.why { "" } else { " (--why explains them)" }
    );
    if !a.why {
        return;
    }
    let preempted = slow.iter().filter(|s| s.d.nivcsw > 0).count();
    let waited = slow.iter().filter(|s| s.d.nvcsw > 0).count();
    let faulted = slow
        .iter()
        .filter(|s| s.d.minflt + s.d.majflt > 0 && s.d.nivcsw + s.d.nvcsw == 0)
        .count();
    let neither = slow
        .iter()
        .filter(|s| s.d.minflt + s.d.majflt + s.d.nivcsw + s.d.nvcsw == 0)
        .count();
    println!(
        "  switched out involuntarily (another thread took the CPU): {preempted}; \
         waited (voluntary switch): {waited}; only page faults: {faulted}; none of these: {neither}"
    );
    let mut worst: Vec<&Slow> = slow.iter().collect();
    worst.sort_by_key(|s| std::cmp::Reverse(s.ns));
    for s in worst.iter().take(12) {
        println!(
            "  call {:>8} {:>10} at {}.{:06}: minflt {} majflt {} nvcsw {} nivcsw {}",
            s.i,
            format_ns(s.ns as f64),
            s.at / 1_000_000_000,
            s.at % 1_000_000_000 / 1000,
            s.d.minflt,
            s.d.majflt,
            s.d.nvcsw,
            s.d.nivcsw
        );
    }
}

fn dir(a: &Args, what: &str) -> PathBuf {
    let d = a
        .dir
        .join(format!("tachyon-tails-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `mix tachyon.bench table --procs 1 --engines tachyon.memory`: 1,000,000
/// puts of 256-byte values under 12-byte keys into a table opened with the
/// bench's options; the first half timed call by call.
fn table(a: &Args) {
    let d = dir(a, "table");
    let cfg = table::Config {
        mode: ValueMode::Memory,
        capacity: 1_000_000,
        compaction_interval: None,
        max_value_size: 1 << 20,
        segment_size: 64 << 20,
        initial_segment_size: 64 << 20,
        ..table::Config::default()
    };
    let t = Table::open(&d, cfg).expect("open");
    let mut v = vec![0xA5u8; 256];
    let mut put = |i: u64| {
        let mut k = *b"key:\0\0\0\0\0\0\0\0";
        k[4..].copy_from_slice(&i.to_be_bytes());
        v[..8].copy_from_slice(&i.to_be_bytes());
        t.put(&k, &v).expect("put");
    };
    let (h, slow) = timed(a, 0, 500_000, &mut put);
    let t0 = Instant::now();
    for i in 500_000..1_000_000 {
        put(i);
    }
    let rest = t0.elapsed();
    line("table put (memory, 256 B)", &h);
    println!(
        "  second half untimed: {:.0} ns per put",
        rest.as_nanos() as f64 / 500_000.0
    );
    explain(a, &slow);
    t.close().expect("close");
    let _ = std::fs::remove_dir_all(&d);
}

/// `mix tachyon.bench store`: 20,000 untimed then 200,000 timed appends of
/// 256 bytes into a store opened with the bench's options.
fn store(a: &Args) {
    let d = dir(a, "store");
    let cfg = store::Config {
        segment_size: 64 << 20,
        initial_segment_size: 64 << 20,
        ..store::Config::default()
    };
    let s = Store::open(&d, cfg).expect("open");
    let m = vec![0xA5u8; 256];
    let (h, slow) = timed(a, 20_000, 200_000, |_| {
        s.append(&m).expect("append");
    });
    line("store append (256 B)", &h);
    explain(a, &slow);
    s.close();
    let _ = std::fs::remove_dir_all(&d);
}

fn main() {
    let a = args();
    if let Some(cpu) = a.pin {
        // SAFETY: a zeroed cpu_set_t with one bit set, for this thread (and
        // the threads it starts from now on).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let hic = tachyon_core::bench::hiccup::measure(Duration::from_millis(a.hiccup_ms));
    line("machine.hiccup", &hic.gaps);
    match a.what.as_str() {
        "table" => table(&a),
        _ => store(&a),
    }
    let hic = tachyon_core::bench::hiccup::measure(Duration::from_millis(a.hiccup_ms));
    line("machine.hiccup (after)", &hic.gaps);
}
