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
    /// The entry at this index cannot be read back as written (a latent
    /// sector error, a record that does not verify): never read as data.
    Damaged(u64),
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

/// What a node keeps beside its log, on stable storage: Raft's
/// `currentTerm` and `votedFor`, and what the node knows of its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Meta {
    pub term: u32,
    pub vote: Option<u8>,
    /// The log's identity: random, made when the log was created (a
    /// replaced disk has another).
    pub log_id: u64,
    /// The host's boot when the node last started: another boot is a
    /// reboot or a power loss (the page cache is gone).
    pub boot: u64,
    /// The node lacks, or cannot prove it holds, what it acknowledged: it
    /// grants no vote until it has caught up with a primary (or heard
    /// every node, when none can lead).
    pub learner: bool,
    /// The disk has never held a group's log (written `true` with a new
    /// disk's first metadata, `false` before its first entry): only such
    /// nodes, all of a group's, start a new group. A disk whose log was
    /// lost is not fresh: the group it belonged to is not started again
    /// beside what other nodes may hold.
    pub fresh: bool,
}

/// An append-only log of entries indexed from 0, with the node's [`Meta`]
/// beside it.
pub trait Log: Entries {
    /// Appends one entry; returns its index.
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError>;
    /// The index the next append gets.
    fn next_index(&self) -> u64;
    /// Removes the entries from `from` on (a follower's uncommitted tail
    /// that the primary's log does not hold), durably: the removal is on
    /// the disk when this returns, so that nothing appended after it can
    /// be read back followed by what it removed.
    fn truncate(&mut self, from: u64) -> Result<(), LogError>;
    /// The node's metadata (`None`: none on the disk, a new or replaced
    /// disk).
    fn load_meta(&self) -> Option<Meta>;
    /// Records the metadata durably before the node answers anyone.
    fn save_meta(&mut self, m: &Meta) -> Result<(), LogError>;
    /// Entries the log's recovery cut at open (a record that did not
    /// verify, and what followed it).
    fn recovery_lost(&self) -> u64 {
        0
    }
    /// Whether an append would find room (asked by a node whose disk was
    /// full, to know when to lead again).
    fn has_space(&mut self) -> bool {
        true
    }
    /// The first entry the log holds (entries below were removed after a
    /// checkpoint summed them up).
    fn first_index(&self) -> u64 {
        0
    }
    /// The last checkpoint saved ([`Env::trim`](super::Env::trim), or
    /// [`Log::install`]).
    fn load_checkpoint(&self) -> Option<Vec<u8>> {
        None
    }
    /// Where the log's retention would cut it, at `floor` at most (the
    /// lowest entry still needed): the first entry to keep. The log's own
    /// policy (bytes, age) decides; whole segments go.
    fn retention_point(&self, floor: u64) -> u64 {
        let _ = floor;
        self.first_index()
    }
    /// Replaces the whole log by an empty one whose next index is `base`,
    /// with `checkpoint` (the state below `base`) saved durably: a node
    /// too far behind to be filled installs its primary's checkpoint.
    fn install(&mut self, base: u64, checkpoint: &[u8]) -> Result<(), LogError> {
        let _ = (base, checkpoint);
        Err(LogError::NotFound)
    }
}

/// A store's entries (the replayer's reads).
impl Entries for crate::store::Store {
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        crate::seq::nodelog::read_checked(self, from, max, f)
    }
}
