//! The options of an async store.

use std::time::Duration;

use crate::wait::WaitStrategy;

/// What an append does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFull {
    /// Return [`AppendError::Full`](super::AppendError::Full) at once.
    Error,
    /// Spin (with a pause hint) for at most this long waiting for room, then
    /// return [`AppendError::Full`](super::AppendError::Full).
    Spin(Duration),
}

/// Options of [`AsyncStore::open`](super::AsyncStore::open).
#[derive(Debug, Clone)]
pub struct Config {
    /// Ring bytes: a power of two between 4 KiB and 1 GiB.
    pub ring_size: usize,
    /// What the writer does when the ring is empty.
    pub wait: WaitStrategy,
    /// The longest nap of `Backoff` / `Park`.
    pub max_park: Duration,
    /// Pin the writer thread to this core.
    pub core: Option<usize>,
    pub on_full: OnFull,
    /// At most this many messages per store batch.
    pub batch_count: usize,
    /// About this many payload bytes per store batch.
    pub batch_bytes: usize,
    /// How often the writer calls the reporter with
    /// [`Report::Stats`](super::Report::Stats).
    pub stats_interval: Option<Duration>,
    /// After a batch smaller than `batch_count`, the writer naps this long
    /// before it polls again, so that messages accumulate into larger
    /// batches and the writer does not hold a core under a steady trickle.
    /// `flush`, `drain`, `close` and a ring past half full wake it early.
    /// Zero: poll again at once (then wait per `wait`).
    pub linger: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_size: 256 << 10,
            wait: WaitStrategy::machine_default(),
            max_park: Duration::from_millis(1),
            core: None,
            on_full: OnFull::Spin(Duration::from_micros(100)),
            batch_count: 1024,
            batch_bytes: 1 << 20,
            stats_interval: None,
            linger: Duration::ZERO,
        }
    }
}
