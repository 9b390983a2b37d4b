//! Wait strategies for loops that poll (writer threads, UDP loops).
//!
//! On a machine with few cores a busy-spinning thread starves everything else,
//! so every polling loop in Tachyon takes one of these.

use std::time::Duration;

/// How a polling loop waits when it found no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Spin with a CPU pause hint: lowest latency, burns a whole core.
    BusySpin,
    /// `sched_yield` between polls: gives the core away when others want it.
    Yield,
    /// Spin, then yield, then sleep with growing naps up to `max_park`.
    Backoff,
    /// Sleep (park / block) until woken or until a timeout; lowest CPU use.
    Park,
}

impl WaitStrategy {
    /// Parses the Elixir-side atom name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "busy_spin" => Some(Self::BusySpin),
            "yield" => Some(Self::Yield),
            "backoff" => Some(Self::Backoff),
            "park" | "block" => Some(Self::Park),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::BusySpin => "busy_spin",
            Self::Yield => "yield",
            Self::Backoff => "backoff",
            Self::Park => "park",
        }
    }

    /// The default for this machine: busy-spin only when there are more than
    /// two cores to spare, back-off otherwise.
    pub fn default_for_cores(cores: usize) -> Self {
        if cores > 2 {
            Self::BusySpin
        } else {
            Self::Backoff
        }
    }
}

/// Per-loop idle state: call [`Idle::idle`] each time a poll found nothing and
/// [`Idle::reset`] when it found work.
#[derive(Debug)]
pub struct Idle {
    strategy: WaitStrategy,
    rounds: u32,
    max_park: Duration,
}

impl Idle {
    const SPIN_ROUNDS: u32 = 200;
    const YIELD_ROUNDS: u32 = 300;

    pub fn new(strategy: WaitStrategy, max_park: Duration) -> Self {
        Idle {
            strategy,
            rounds: 0,
            max_park,
        }
    }

    #[inline]
    pub fn reset(&mut self) {
        self.rounds = 0;
    }

    /// Waits once according to the strategy. `Park` sleeps with
    /// `std::thread::park_timeout`, so an `unpark` from a producer wakes it.
    #[inline]
    pub fn idle(&mut self) {
        match self.strategy {
            WaitStrategy::BusySpin => std::hint::spin_loop(),
            WaitStrategy::Yield => std::thread::yield_now(),
            WaitStrategy::Backoff => {
                self.rounds = self.rounds.saturating_add(1);
                if self.rounds < Self::SPIN_ROUNDS {
                    std::hint::spin_loop();
                } else if self.rounds < Self::SPIN_ROUNDS + Self::YIELD_ROUNDS {
                    std::thread::yield_now();
                } else {
                    let extra = (self.rounds - Self::SPIN_ROUNDS - Self::YIELD_ROUNDS).min(10);
                    let nap = Duration::from_micros(20u64 << extra).min(self.max_park);
                    std::thread::park_timeout(nap);
                }
            }
            WaitStrategy::Park => std::thread::park_timeout(self.max_park),
        }
    }
}

/// Pins the calling thread to `core`. Returns false if the kernel refused.
pub fn pin_to_core(core: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it and
    // sched_setaffinity reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        if core >= libc::CPU_SETSIZE as usize {
            return false;
        }
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Number of online cores.
pub fn online_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        for s in [
            WaitStrategy::BusySpin,
            WaitStrategy::Yield,
            WaitStrategy::Backoff,
            WaitStrategy::Park,
        ] {
            assert_eq!(WaitStrategy::parse(s.name()), Some(s));
        }
        assert_eq!(WaitStrategy::parse("block"), Some(WaitStrategy::Park));
        assert_eq!(WaitStrategy::parse("nope"), None);
    }

    #[test]
    fn backoff_eventually_sleeps_briefly() {
        let mut idle = Idle::new(WaitStrategy::Backoff, Duration::from_millis(1));
        let t = std::time::Instant::now();
        for _ in 0..600 {
            idle.idle();
        }
        assert!(t.elapsed() < Duration::from_secs(2));
        idle.reset();
    }
}
