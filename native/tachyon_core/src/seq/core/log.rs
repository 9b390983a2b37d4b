//! The log a sequencer node appends to and replays from, with Raft's
//! persistent state beside it (the node's term and vote): a `Store` and a
//! small file in the shells (`seq::nodelog`), a [`MemLog`](super::MemLog)
//! over a simulated disk in the simulator.

use crate::store::StoreError;

/// Why a log operation failed.
#[derive(Debug)]
pub enum LogError {
    /// No space left: nothing was appended.
    NoSpace,
    /// The entry is not there (below the first index or at/after the end).
    NotFound,
    Store(StoreError),
}

impl From<StoreError> for LogError {
    fn from(e: StoreError) -> LogError {
        match e {
            StoreError::NoSpace => LogError::NoSpace,
            StoreError::NotFound => LogError::NotFound,
            e => LogError::Store(e),
        }
    }
}

/// What can be read of a log (a replayer needs no more).
pub trait Entries {
    /// Calls `f(index, entry)` for up to `max` entries from `from`; returns
    /// how many.
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError>;
}

/// An append-only log of entries indexed from 0, with Raft's persistent
/// term and vote beside it.
pub trait Log: Entries {
    /// Appends one entry; returns its index.
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError>;
    /// The index the next append gets.
    fn next_index(&self) -> u64;
    /// Removes the entries from `from` on (a follower's uncommitted tail
    /// that the primary's log does not hold).
    fn truncate(&mut self, from: u64) -> Result<(), LogError>;
    /// The node's last term and vote in it (`(0, None)` for a new node).
    fn load_vote(&self) -> (u32, Option<u8>);
    /// Records the term and vote durably before the node answers anyone.
    fn save_vote(&mut self, term: u32, vote: Option<u8>) -> Result<(), LogError>;
}

/// A store's entries (the replayer's reads).
impl Entries for crate::store::Store {
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        Ok(crate::store::Store::read_range(
            self,
            from,
            max,
            usize::MAX,
            f,
        )?)
    }
}
