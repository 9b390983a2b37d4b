//! A table's options, and how values are kept ([`ValueMode`]).

use std::time::Duration;

use super::format::*;
use super::{Result, TableError};
use crate::segment::{Growth, MAX_PREPARED_SEGMENTS};

/// How values are stored and read (Krati's Memory / Mapped / Channel
/// segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueMode {
    /// Values in RAM too; reads never touch the log.
    Memory,
    /// Values read from memory-mapped segment files.
    Mapped,
    /// No mapping: `pwrite` to append, `pread` to read.
    File,
}

impl ValueMode {
    pub fn parse(s: &str) -> Option<ValueMode> {
        match s {
            "memory" => Some(ValueMode::Memory),
            "mapped" => Some(ValueMode::Mapped),
            "file" => Some(ValueMode::File),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueMode::Memory => "memory",
            ValueMode::Mapped => "mapped",
            ValueMode::File => "file",
        }
    }

    pub(super) fn maps(self) -> bool {
        self != ValueMode::File
    }
}

/// Table options.
#[derive(Debug, Clone)]
pub struct Config {
    pub mode: ValueMode,
    /// Bytes of the largest segment files (preallocated for the active
    /// one).
    pub segment_size: usize,
    /// Bytes of the first segment of a new table (raised to fit the
    /// largest pair); each next one has twice the one before it, up to
    /// `segment_size` (see [`Growth`]).
    pub initial_segment_size: usize,
    pub max_key_size: usize,
    pub max_value_size: usize,
    /// Periodic `sync` by the background thread.
    pub sync_interval: Option<Duration>,
    /// A sealed segment whose live bytes / total bytes fall under this is
    /// compacted.
    pub compaction_threshold: f64,
    /// How often the background thread looks for segments to compact
    /// (`None`: only on `compact`).
    pub compaction_interval: Option<Duration>,
    /// Index shards (rounded up to a power of two).
    pub shards: usize,
    /// Expected number of keys (index preallocation).
    pub capacity: usize,
    /// Fault pages of the active segment in ahead of the writer.
    pub pretouch: bool,
    /// Segments kept ready (created, allocated, faulted in whole) ahead of
    /// the writer with `pretouch`, the first ones during `open`.
    pub prepared_segments: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: ValueMode::Mapped,
            segment_size: 64 << 20,
            initial_segment_size: 2 << 20,
            max_key_size: 64 * 1024,
            max_value_size: 1 << 20,
            sync_interval: None,
            compaction_threshold: 0.5,
            compaction_interval: Some(Duration::from_secs(5)),
            shards: 256,
            capacity: 0,
            pretouch: true,
            prepared_segments: 4,
        }
    }
}

pub const MIN_SEGMENT: usize = 64 * 1024;
pub const MAX_SEGMENT: usize = 1 << 30;

impl Config {
    pub(super) fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&self.segment_size) {
            return Err(TableError::BadConfig(
                "segment_size must be between 64 KiB and 1 GiB",
            ));
        }
        if self.max_key_size == 0 || self.max_key_size > u32::MAX as usize {
            return Err(TableError::BadConfig("max_key_size must be positive"));
        }
        if self.max_pair() > self.segment_size {
            return Err(TableError::BadConfig(
                "max_key_size + max_value_size must fit in a segment",
            ));
        }
        if !(self.compaction_threshold >= 0.0 && self.compaction_threshold <= 1.0) {
            return Err(TableError::BadConfig(
                "compaction_threshold must be between 0.0 and 1.0",
            ));
        }
        if self.prepared_segments > MAX_PREPARED_SEGMENTS {
            return Err(TableError::BadConfig(
                "prepared_segments must be at most 16",
            ));
        }
        if self.shards == 0 || self.shards > 65536 {
            return Err(TableError::BadConfig("shards must be between 1 and 65536"));
        }
        if !(MIN_SEGMENT..=MAX_SEGMENT).contains(&self.initial_segment_size) {
            return Err(TableError::BadConfig(
                "initial_segment_size must be between 64 KiB and 1 GiB",
            ));
        }
        Ok(())
    }

    /// The largest record of one pair.
    pub(super) fn max_pair(&self) -> usize {
        SEG_HEADER + REC_HEADER + ENTRY_HEADER + self.max_key_size + self.max_value_size
    }

    /// The sizes of the segments the writer appends to: from
    /// `initial_segment_size`, raised to hold the largest pair, doubling
    /// up to `segment_size`.
    pub fn growth(&self) -> Growth {
        Growth::new(
            self.initial_segment_size.max(self.max_pair()),
            self.segment_size,
        )
    }
}
