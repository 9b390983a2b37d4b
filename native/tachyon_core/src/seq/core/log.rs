//! The log a sequencer appends to and replays from: a [`Store`] in the
//! shells, a [`MemLog`] in the simulator (whose "disk" survives a crash).

use crate::store::{Store, StoreError};

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

/// An append-only log of entries indexed from 0.
pub trait Log {
    /// Appends one entry; returns its index.
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError>;
    /// The index the next append gets.
    fn next_index(&self) -> u64;
    /// Calls `f(index, entry)` for up to `max` entries from `from`; returns
    /// how many.
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError>;
}

/// An in-memory log (tests, the simulator).
#[derive(Debug, Clone, Default)]
pub struct MemLog {
    entries: Vec<Vec<u8>>,
    /// Test aid: appends fail while set.
    pub full: bool,
}

impl MemLog {
    pub fn new() -> MemLog {
        MemLog::default()
    }

    pub fn entry(&self, i: u64) -> Option<&[u8]> {
        self.entries.get(i as usize).map(|e| e.as_slice())
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Log for MemLog {
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        if self.full {
            return Err(LogError::NoSpace);
        }
        self.entries.push(entry.to_vec());
        Ok(self.entries.len() as u64 - 1)
    }

    fn next_index(&self) -> u64 {
        self.entries.len() as u64
    }

    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        let mut n = 0;
        for (i, e) in self
            .entries
            .iter()
            .enumerate()
            .skip(from as usize)
            .take(max)
        {
            f(i as u64, e);
            n += 1;
        }
        Ok(n)
    }
}

/// A [`Store`] as a log (the shells').
impl Log for Store {
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        Ok(Store::append(self, entry)?)
    }

    fn next_index(&self) -> u64 {
        Store::next_index(self).unwrap_or(0)
    }

    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        Ok(Store::read_range(self, from, max, usize::MAX, f)?)
    }
}
