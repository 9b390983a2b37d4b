//! The async store's errors and life-cycle states.

use std::io;

use crate::store::StoreError;

use super::{CLOSING, FAILED, RUNNING};

/// Why the writer stopped. `Clone`, unlike [`StoreError`], so that every
/// later caller can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    NoSpace,
    Closed,
    ReadOnly,
    Corrupt {
        segment: u64,
        offset: u64,
    },
    /// Another I/O error (`errno` when the OS gave one).
    Io {
        errno: Option<i32>,
        message: String,
    },
    /// The store's next index is not the one the writer expected: something
    /// else appended to the store.
    IndexConflict {
        expected: u64,
        found: u64,
    },
    /// The writer thread panicked (a bug).
    Panicked,
}

impl Failure {
    pub fn from_store(e: StoreError) -> Failure {
        match e {
            StoreError::NoSpace => Failure::NoSpace,
            StoreError::Closed => Failure::Closed,
            StoreError::ReadOnly => Failure::ReadOnly,
            StoreError::Corrupt { segment, offset } => Failure::Corrupt { segment, offset },
            StoreError::Io(e) => Failure::Io {
                errno: e.raw_os_error(),
                message: e.to_string(),
            },
            other => Failure::Io {
                errno: None,
                message: other.to_string(),
            },
        }
    }

    /// The failure's name (an atom on the BEAM side): `enospc`, `closed`,
    /// `read_only`, `corrupt`, an errno name, `index_conflict` or
    /// `writer_panicked`.
    pub fn reason(&self) -> &'static str {
        use crate::error::Reason;
        match crate::error::Error::from(self).reason() {
            Reason::Atom(a) => a,
            Reason::Corrupt { .. } | Reason::Damaged { .. } | Reason::BadManifest => "corrupt",
            Reason::WrongKind(_) => "wrong_kind",
            Reason::UnsupportedFormat(_) => "unsupported_format",
            Reason::BadConfig(_) => "bad_config",
            Reason::Trimmed(_) => "trimmed",
            Reason::NotPrimary(_) => "not_primary",
        }
    }

    /// The equivalent store error, for failures that are store errors.
    pub fn to_store_error(&self) -> Option<StoreError> {
        Some(match self {
            Failure::NoSpace => StoreError::NoSpace,
            Failure::Closed => StoreError::Closed,
            Failure::ReadOnly => StoreError::ReadOnly,
            Failure::Corrupt { segment, offset } => StoreError::Corrupt {
                segment: *segment,
                offset: *offset,
            },
            Failure::Io { errno: Some(n), .. } => StoreError::Io(io::Error::from_raw_os_error(*n)),
            Failure::Io {
                errno: None,
                message,
            } => StoreError::Io(io::Error::other(message.clone())),
            Failure::IndexConflict { .. } | Failure::Panicked => return None,
        })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::IndexConflict { expected, found } => {
                write!(
                    f,
                    "index conflict: expected next index {expected}, the store is at {found}"
                )
            }
            Failure::Io { message, .. } => write!(f, "{message}"),
            Failure::NoSpace => write!(f, "no space left on device"),
            Failure::Closed => write!(f, "the store was closed"),
            Failure::ReadOnly => write!(f, "the store is read-only"),
            Failure::Corrupt { segment, offset } => {
                write!(f, "corrupt record in segment {segment} at offset {offset}")
            }
            Failure::Panicked => write!(f, "the writer thread panicked"),
        }
    }
}

/// Why [`AsyncStore::open`] failed.
#[derive(Debug)]
pub enum OpenError {
    /// The store is a reader.
    ReadOnly,
    Closed,
    /// Another `AsyncStore` already writes to this store.
    Busy,
    /// `ring_size` is not a power of two in range.
    BadRingSize,
    NoMemory,
    /// Spawning the writer thread failed.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for OpenError {}

/// Why an append did not enqueue the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// [`AsyncStore::close`] was called.
    Closed,
    /// The ring stayed full (see [`OnFull`]).
    Full,
    /// Larger than [`AsyncStore::max_message_size`].
    TooLarge,
    /// The writer failed earlier; nothing more is accepted.
    Failed(Failure),
}

/// Why a flush or drain returned without reaching its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    Timeout,
    Closed,
    Failed(Failure),
}

/// Life cycle of the writer as seen by callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Failed,
    Closing,
    Closed,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Failed => "failed",
            State::Closing => "closing",
            State::Closed => "closed",
        }
    }

    pub(super) fn from_u8(v: u8) -> State {
        match v {
            RUNNING => State::Running,
            FAILED => State::Failed,
            CLOSING => State::Closing,
            _ => State::Closed,
        }
    }
}
