//! The native floor of the store benchmark (`tachyon.store.append.native`):
//! the same appends as the Elixir case, in a Rust loop with no BEAM; and
//! [`append_sync`], an append and a `sync` per message (what a sequencer
//! node with `durability: :fsync` asks of its log per entry when entries
//! come one at a time).

use std::time::Instant;

use crate::hist::Hist;
use crate::store::{Store, StoreError};

/// Minor and major page faults taken so far by the calling thread.
pub fn thread_page_faults() -> (u64, u64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass, which
    // lives for the whole call.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) == 0 {
            (ru.ru_minflt as u64, ru.ru_majflt as u64)
        } else {
            (0, 0)
        }
    }
}

/// Result of [`append`].
pub struct BenchResult {
    pub hist: Hist,
    /// Page faults (minor + major) the appending thread took while measured.
    pub page_faults: u64,
}

/// `warmup + count` appends of `size`-byte messages to `store` in a Rust
/// loop, each of the last `count` timed with `Instant`.
pub fn append(
    store: &Store,
    count: u64,
    warmup: u64,
    size: usize,
) -> Result<BenchResult, StoreError> {
    let msg = vec![0xA5u8; size];
    let mut h = Hist::new();
    for _ in 0..warmup {
        store.append(&msg)?;
    }
    let (min0, maj0) = thread_page_faults();
    for _ in 0..count {
        let t0 = Instant::now();
        store.append(&msg)?;
        h.record(t0.elapsed().as_nanos() as u64);
    }
    let (min1, maj1) = thread_page_faults();
    Ok(BenchResult {
        hist: h,
        page_faults: (min1 - min0) + (maj1 - maj0),
    })
}

/// `warmup + count` times: one `size`-byte append to `store`, then
/// [`Store::sync`]; the histogram of the last `count` (each append and
/// its sync, in nanoseconds).
pub fn append_sync(
    store: &Store,
    count: u64,
    warmup: u64,
    size: usize,
) -> Result<Hist, StoreError> {
    let msg = vec![0xA5u8; size];
    let mut h = Hist::new();
    for i in 0..warmup + count {
        let t0 = Instant::now();
        store.append(&msg)?;
        store.sync()?;
        if i >= warmup {
            h.record(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(h)
}
