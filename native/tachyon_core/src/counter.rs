//! Statistics counters shared between a part's threads and its readers.
//!
//! Every part groups its counters by writer and puts each group on its own
//! cache lines (`CachePadded`): a loop thread's counters never share a line
//! with the ones BEAM processes bump, nor with a stop flag. A counter with a
//! single writer is bumped with a plain load and store ([`Counter::bump`]),
//! no locked instruction. Readers (`stats/1`) only load them, rarely.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing statistics counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

/// A copy of the value now: an independent counter (a state machine
/// cloned for a model checker counts on its own from there).
impl Clone for Counter {
    fn clone(&self) -> Counter {
        Counter(AtomicU64::new(self.get()))
    }
}

impl Counter {
    /// Adds `n` from any thread.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `n` when the calling thread is the only writer of this counter:
    /// a plain load and store, no locked instruction.
    #[inline]
    pub fn bump(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Raises the counter to `v` if it is lower (single writer).
    #[inline]
    pub fn raise_to(&self, v: u64) {
        if v > self.0.load(Ordering::Relaxed) {
            self.0.store(v, Ordering::Relaxed);
        }
    }

    /// Sets the value (one writer).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_adds_and_raises() {
        let c = Counter::default();
        c.add(2);
        c.bump(3);
        assert_eq!(c.get(), 5);
        c.raise_to(4);
        assert_eq!(c.get(), 5);
        c.raise_to(9);
        assert_eq!(c.get(), 9);
    }

    #[test]
    fn counter_add_is_atomic_across_threads() {
        let c = std::sync::Arc::new(Counter::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.add(1);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.get(), 40_000);
    }
}
