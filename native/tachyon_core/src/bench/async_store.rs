//! The native producer loop of the async store benchmark
//! (`tachyon.async_store.append.native`), modelled on CoralStore's
//! AsyncBench.

use std::time::{Duration, Instant};

use crate::async_store::{AppendError, AsyncStore, WaitError};
use crate::hist::Hist;
use crate::ring;

/// `warmup + count` appends of a `size`-byte message to `a`, each timed
/// with `Instant` (the last `count` recorded). Like AsyncBench it drains the
/// ring (outside the timed region) before it could fill, since it measures
/// latency, not throughput. Returns the histogram and the number of drains.
pub fn append(
    a: &AsyncStore,
    count: u64,
    warmup: u64,
    size: usize,
) -> Result<(Hist, u64), AppendError> {
    let msg = vec![0xA5u8; size];
    let per_fill = (a.stats().ring_size as usize / ring::record_size(size))
        .saturating_sub(1)
        .max(1) as u64;
    let mut h = Hist::new();
    let mut since_drain = 0u64;
    let mut drains = 0u64;
    let drain = |drains: &mut u64| -> Result<(), AppendError> {
        *drains += 1;
        a.drain(Duration::from_secs(60)).map_err(|e| match e {
            WaitError::Failed(f) => AppendError::Failed(f),
            _ => AppendError::Closed,
        })
    };
    for i in 0..warmup + count {
        if since_drain == per_fill {
            drain(&mut drains)?;
            since_drain = 0;
        }
        let t0 = Instant::now();
        let r = a.append(&msg);
        let ns = t0.elapsed().as_nanos() as u64;
        r?;
        since_drain += 1;
        if i >= warmup {
            h.record(ns);
        }
    }
    drain(&mut drains)?;
    Ok((h, drains))
}
