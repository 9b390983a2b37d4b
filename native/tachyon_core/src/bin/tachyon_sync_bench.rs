//! What a store's sync costs against the disk's own floor, on one thread
//! (no sequencer, no other thread to wake): rounds of `raw.fdatasync`
//! (`bench::fsync::latency`: a 276-byte pwrite, then fdatasync) and of
//! `Store::append` + `Store::sync` of one 276-byte message
//! (`bench::store::append_sync`), alternating so that both see the same
//! minutes of a shared disk. Prints p50 and p90 of each, in microseconds.
//!
//!     cargo run --release -p tachyon_core --bin tachyon_sync_bench -- [DIR] [N] [ROUNDS]
//!
//! DIR defaults to the system's tmp dir (a directory made there and
//! removed), N to 500 per round, ROUNDS to 4.

use tachyon_core::bench::{fsync, store};
use tachyon_core::hist::Hist;
use tachyon_core::store::{Config, Store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let base = args
        .first()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(500);
    let rounds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let dir = base.join(format!("tachyon-sync-bench-{}", std::process::id()));
    let entry = fsync::entry_size(256);
    let s = Store::open(dir.join("store"), Config::default()).expect("store");
    let (mut floor, mut synced) = (Hist::new(), Hist::new());
    for _ in 0..rounds {
        floor.merge(&fsync::latency(&dir, n, n / 10, 256).expect("floor"));
        synced.merge(&store::append_sync(&s, n, n / 10, entry).expect("store"));
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    for (name, h) in [("raw.fdatasync", floor), ("store.append+sync", synced)] {
        let r = h.report();
        println!(
            "{name:18} {} x {entry} bytes: p50 {:.1} us, p90 {:.1} us",
            r.count,
            r.p50 as f64 / 1e3,
            r.p90 as f64 / 1e3
        );
    }
}
