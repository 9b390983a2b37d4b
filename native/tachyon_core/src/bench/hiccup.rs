//! The machine's own hiccups: a loop that does nothing but read the clock,
//! recording the time between two reads. Whatever it sees (timer ticks,
//! interrupts, the hypervisor taking the vCPU away, the OS scheduling
//! another thread) every other loop on this machine sees too, so its tail
//! is the floor of any latency tail measured here (the idea of jHiccup).
//!
//! On a 2-vCPU Firecracker guest, for example, such a loop sees a 10-20 us
//! gap about every millisecond that no guest interrupt counter shows: the
//! host's, not the guest's.

use std::time::{Duration, Instant};

use crate::hist::Hist;

/// What [`measure`] saw.
pub struct Hiccups {
    /// Every gap between two clock reads, in nanoseconds.
    pub gaps: Hist,
    /// How long the loop ran.
    pub elapsed: Duration,
}

impl Hiccups {
    /// Gaps longer than `ns` per second of loop time.
    pub fn rate_above(&self, ns: u64) -> f64 {
        self.gaps.count_above(ns) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Reads the clock in a tight loop on the calling thread for `duration`.
/// The thread is busy the whole time: call it on a thread that may spin
/// (a dirty scheduler, a benchmark thread), never on a shared one.
pub fn measure(duration: Duration) -> Hiccups {
    let mut gaps = Hist::new();
    let start = Instant::now();
    let mut last = start;
    loop {
        // Check the deadline every 1024 reads only: the loop body stays a
        // clock read and a histogram increment.
        for _ in 0..1024 {
            let now = Instant::now();
            gaps.record(now.duration_since(last).as_nanos() as u64);
            last = now;
        }
        if last.duration_since(start) >= duration {
            break;
        }
    }
    Hiccups {
        gaps,
        elapsed: last.duration_since(start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_for_the_duration_and_counts_every_read() {
        let h = measure(Duration::from_millis(20));
        assert!(h.elapsed >= Duration::from_millis(20));
        assert!(h.elapsed < Duration::from_secs(2));
        // Far more than one read per microsecond on any machine.
        assert!(h.gaps.count() > 20_000, "{}", h.gaps.count());
        // Every gap is at most the whole run, and the sum of gaps is the run.
        assert!(h.gaps.report().max as u128 <= h.elapsed.as_nanos() + 1_000);
        assert!(h.rate_above(0) > 0.0);
        assert_eq!(h.gaps.count_above(Hist::HIGHEST), 0);
    }
}
