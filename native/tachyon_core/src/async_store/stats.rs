//! An async store's counters, and their names.

crate::named_fields! {
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
    computed { pending }
}

impl Stats {
    /// Enqueued but not (yet, or ever, after a failure) written.
    pub fn pending(&self) -> u64 {
        self.enqueued - self.written.min(self.enqueued)
    }
}
