//! An async store's counters, and their names.

use crate::report::Value;

/// Counters of one `AsyncStore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages accepted by `append`.
    pub enqueued: u64,
    /// Messages written to the store by the writer.
    pub written: u64,
    /// Payload bytes written to the store.
    pub written_bytes: u64,
    /// Store batches (`append_many` calls) the writer made.
    pub batches: u64,
    /// Appends that found the ring full (whether or not a spin then found
    /// room).
    pub full_events: u64,
    /// Appends that returned `Full`.
    pub rejected: u64,
    /// The most ring bytes in use the writer saw when it took a batch.
    pub high_water_bytes: u64,
    pub ring_size: u64,
    /// Ring bytes in use now.
    pub ring_used: u64,
    /// The store index of the first message of this `AsyncStore`.
    pub base_index: u64,
    /// The index the next append gets.
    pub next_index: u64,
    pub state: &'static str,
    pub wait: &'static str,
    /// `Some(true)` if the writer is pinned to `core`, `Some(false)` if the
    /// kernel refused, `None` if no core was asked for.
    pub pinned: Option<bool>,
}

impl Stats {
    /// Enqueued but not (yet, or ever, after a failure) written.
    pub fn pending(&self) -> u64 {
        self.enqueued - self.written.min(self.enqueued)
    }

    /// The counters as named values: what `stats/1` returns and the stats
    /// reports carry (one list of names for both).
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("enqueued", self.enqueued.into()),
            ("written", self.written.into()),
            ("pending", self.pending().into()),
            ("written_bytes", self.written_bytes.into()),
            ("batches", self.batches.into()),
            ("full_events", self.full_events.into()),
            ("rejected", self.rejected.into()),
            ("high_water_bytes", self.high_water_bytes.into()),
            ("ring_size", self.ring_size.into()),
            ("ring_used", self.ring_used.into()),
            ("base_index", self.base_index.into()),
            ("next_index", self.next_index.into()),
            ("state", Value::Atom(self.state)),
            ("wait", Value::Atom(self.wait)),
            ("pinned", self.pinned.into()),
        ]
    }
}
