//! Tachyon's core table against RocksDB, in Rust, on the workload of the
//! Corfu "large table" benchmark: put `--records` records of each value
//! size, then random gets, with 1 and several threads.
//!
//! RocksDB is configured as Corfu did: WAL off, 256 MB write buffer, 4 write
//! buffers. Tachyon runs with its defaults (every put in its log before it
//! returns, no fsync), in each value mode.
//!
//! Each case has two passes: one timed call by call (the latency
//! percentiles) and one timed as a whole (ops/s, free of clock reads). For
//! puts, the first half of the records is the first pass and the second
//! half the second.
//!
//! Output: a human-readable report, and one `CASE k=v ...` line per case
//! for `mix tachyon.bench table --rocksdb` to parse.
//!
//!     ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu cargo run --release -- \
//!         --records 1000000 --gets 1000000 --value-sizes 256 --threads 1,4 --dir /tmp/rb

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use tachyon_core::hist::Hist;
use tachyon_core::table::{Config, Table, ValueMode};

struct Args {
    records: u64,
    gets: u64,
    sizes: Vec<usize>,
    threads: Vec<usize>,
    engines: Vec<String>,
    dir: PathBuf,
}

fn parse_list<T: std::str::FromStr>(s: &str, what: &str) -> Vec<T> {
    s.split(',')
        .map(|x| {
            x.trim().parse().unwrap_or_else(|_| {
                eprintln!("bad {what}: {s}");
                std::process::exit(2)
            })
        })
        .collect()
}

fn args() -> Args {
    let mut a = Args {
        records: 1_000_000,
        gets: 1_000_000,
        sizes: vec![256],
        threads: vec![1, 4],
        engines: [
            "tachyon.memory",
            "tachyon.mapped",
            "tachyon.file",
            "rocksdb",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        dir: std::env::temp_dir().join(format!("bench_rocksdb-{}", std::process::id())),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let val = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--records" => a.records = parse_list(&val, "--records")[0],
            "--gets" => a.gets = parse_list(&val, "--gets")[0],
            "--value-sizes" => a.sizes = parse_list(&val, "--value-sizes"),
            "--threads" => a.threads = parse_list(&val, "--threads"),
            "--engines" => a.engines = val.split(',').map(|s| s.to_string()).collect(),
            "--dir" => a.dir = PathBuf::from(val),
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(2)
            }
        }
        i += 2;
    }
    a
}

enum Engine {
    Tachyon(Table),
    Rocks(rocksdb::DB, rocksdb::WriteOptions),
}

impl Engine {
    fn open(name: &str, dir: &Path, records: u64) -> Engine {
        let _ = std::fs::remove_dir_all(dir);
        if let Some(mode) = name.strip_prefix("tachyon.") {
            let cfg = Config {
                mode: ValueMode::parse(mode).expect("mode"),
                capacity: records as usize,
                compaction_interval: None,
                ..Config::default()
            };
            Engine::Tachyon(Table::open(dir, cfg).expect("open table"))
        } else {
            let mut o = rocksdb::Options::default();
            o.create_if_missing(true);
            o.set_write_buffer_size(256 << 20);
            o.set_max_write_buffer_number(4);
            let db = rocksdb::DB::open(&o, dir).expect("open rocksdb");
            let mut w = rocksdb::WriteOptions::default();
            w.disable_wal(true);
            Engine::Rocks(db, w)
        }
    }

    #[inline]
    fn put(&self, k: &[u8], v: &[u8]) {
        match self {
            Engine::Tachyon(t) => t.put(k, v).expect("put"),
            Engine::Rocks(db, w) => db.put_opt(k, v, w).expect("put"),
        }
    }

    /// Copies the value into `buf`; returns its length.
    #[inline]
    fn get(&self, k: &[u8], buf: &mut [u8]) -> usize {
        match self {
            Engine::Tachyon(t) => t
                .get_with(k, |v| {
                    let n = v.len();
                    v.copy_to(&mut buf[..n]).map(|_| n)
                })
                .expect("get")
                .expect("present")
                .expect("read"),
            Engine::Rocks(db, _) => {
                let v = db.get_pinned(k).expect("get").expect("present");
                buf[..v.len()].copy_from_slice(&v);
                v.len()
            }
        }
    }
}

fn key(i: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(b"key:");
    k[4..].copy_from_slice(&i.to_be_bytes());
    k
}

struct Part {
    hist: Hist,
    ops: u64,
    ns: u64,
}

fn report(name: &str, engine: &str, size: usize, threads: usize, records: u64, parts: Vec<Part>) {
    let mut h = Hist::new();
    let mut rate = 0.0;
    for p in &parts {
        h.merge(&p.hist);
        if p.ns > 0 {
            rate += p.ops as f64 * 1e9 / p.ns as f64;
        }
    }
    let r = h.report();
    println!(
        "{name:<34} avg {:>9.1} ns  p50 {:>7} ns  p99 {:>8} ns  p99.9 {:>8} ns  max {:>10} ns  {:>12.0} ops/s",
        r.avg, r.p50, r.p99, r.p999, r.max, rate
    );
    println!(
        "CASE name={name} engine={engine} size={size} threads={threads} records={records} count={} avg={} stdev={} min={} max={} p50={} p75={} p90={} p99={} p999={} p9999={} p99999={} ops={}",
        r.count, r.avg, r.stdev, r.min, r.max, r.p50, r.p75, r.p90, r.p99, r.p999, r.p9999, r.p99999, rate
    );
}

fn run_case(a: &Args, engine: &str, size: usize, threads: usize) {
    let dir = a.dir.join(format!("{engine}-{size}-{threads}"));
    let db = Engine::open(engine, &dir, a.records);
    let value: Vec<u8> = (0..size).map(|i| (i * 131 + 7) as u8).collect();
    let chunk = a.records.div_ceil(threads as u64);

    // Puts: each thread its own range of keys.
    let barrier = Barrier::new(threads);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (db, value, barrier) = (&db, &value, &barrier);
                s.spawn(move || {
                    let first = t * chunk;
                    let last = (first + chunk).min(a.records);
                    let mid = first + (last - first) / 2;
                    let mut hist = Hist::new();
                    barrier.wait();
                    for i in first..mid {
                        let k = key(i);
                        let t0 = Instant::now();
                        db.put(&k, value);
                        hist.record(t0.elapsed().as_nanos() as u64);
                    }
                    let t0 = Instant::now();
                    for i in mid..last {
                        db.put(&key(i), value);
                    }
                    Part {
                        hist,
                        ops: last - mid,
                        ns: t0.elapsed().as_nanos() as u64,
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    report(
        &format!("rust.{engine}.put.{size}.{threads}t"),
        engine,
        size,
        threads,
        a.records,
        parts,
    );

    // Gets: uniform random keys (xorshift), warm-up first.
    let per = a.gets / threads as u64;
    let barrier = Barrier::new(threads);
    let parts: Vec<Part> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (db, barrier) = (&db, &barrier);
                s.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                    let mut next = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x % a.records
                    };
                    let mut buf = vec![0u8; size];
                    let mut sum = 0usize;
                    for _ in 0..per / 10 {
                        sum += db.get(&key(next()), &mut buf);
                    }
                    let mut hist = Hist::new();
                    barrier.wait();
                    for _ in 0..per {
                        let k = key(next());
                        let t0 = Instant::now();
                        sum += db.get(&k, &mut buf);
                        hist.record(t0.elapsed().as_nanos() as u64);
                    }
                    let t0 = Instant::now();
                    for _ in 0..per {
                        sum += db.get(&key(next()), &mut buf);
                    }
                    let ns = t0.elapsed().as_nanos() as u64;
                    assert_eq!(sum as u64, size as u64 * (per / 10 + 2 * per));
                    Part { hist, ops: per, ns }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    report(
        &format!("rust.{engine}.get.{size}.{threads}t"),
        engine,
        size,
        threads,
        a.records,
        parts,
    );
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let a = args();
    std::fs::create_dir_all(&a.dir).expect("create --dir");
    println!(
        "{} records, {} random gets per case, values {:?} bytes, threads {:?}, 12-byte keys",
        a.records, a.gets, a.sizes, a.threads
    );
    println!("RocksDB 7.8 (Debian): WAL off, 256 MB write buffer, 4 write buffers");
    for &size in &a.sizes {
        for &threads in &a.threads {
            for engine in &a.engines {
                run_case(&a, engine, size, threads);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&a.dir);
}
