//! One error type for what every part returns to its callers, and one
//! mapping from it to the reason the BEAM sees (an atom, or one of two
//! tuples). Each part keeps its own narrow error enum where that helps its
//! code (a [`PushError`](crate::ring::PushError) is `Full` or `TooLarge`,
//! nothing else); each converts into [`Error`], and the NIF encodes only
//! [`Error::reason`]. The errno names come from [`crate::errno`].

use std::fmt;
use std::io;

use crate::async_store::{AppendError, Failure, OpenError as AsyncOpenError, WaitError};
use crate::poll::SelectError;
use crate::ring::{PushError, RingError};
use crate::segment::dir::DirError;
use crate::seq::core::member::config::PublishError;
use crate::seq::core::LogError;
use crate::seq::{MembershipError, SeqError};
use crate::store::StoreError;
use crate::table::TableError;
use crate::udp::SendError;

/// Why an operation of any part failed.
#[derive(Debug)]
pub enum Error {
    /// The handle was closed (or is closing).
    Closed,
    /// No such entry (a store index at/after the end).
    NotFound,
    /// A message, key, value or batch over the configured limits.
    TooLarge,
    /// The disk is full (ENOSPC / EDQUOT): nothing was written.
    NoSpace,
    /// Another handle (in this or another process) has it open.
    Locked,
    /// A reader was asked to write.
    ReadOnly,
    /// Someone else holds what was asked for (a second `AsyncStore` on one
    /// store; a publish with `max_pending` commands waiting).
    Busy,
    /// A ring stayed full.
    Full,
    /// A wait ran out.
    Timeout,
    /// An allocation failed.
    NoMemory,
    /// A record or segment header that does not verify, and where.
    Corrupt { segment: u64, offset: u64 },
    /// A record that does not verify in the middle of a store's log, found
    /// at open, and what `repair: true` would cut there.
    Damaged {
        segment: u64,
        offset: u64,
        records: u64,
        bytes: u64,
    },
    /// A directory of another kind, of a newer format, or whose manifest
    /// does not verify (see [`crate::segment::dir`]).
    Dir(DirError),
    /// A configuration the part refuses, and why.
    BadConfig(&'static str),
    /// An argument the part refuses, without more to say.
    BadArg,
    /// An `AsyncStore`'s ring size is not a power of two in range.
    BadRingSize,
    /// A sequencer's log that is not one.
    BadLog,
    /// The bus member id is bound to another member.
    MemberIdTaken,
    /// The member may not do this (the group's access control: a member
    /// that may only read, publishing).
    Forbidden,
    /// An `AsyncStore` found the store at another index than its own.
    IndexConflict,
    /// An `AsyncStore`'s writer thread panicked.
    WriterPanicked,
    /// What was asked for is below the first entry kept: retention
    /// removed it (`first` is the first one there is).
    Trimmed { first: u64 },
    /// A sequencer's membership change that did not happen.
    Membership(MembershipError),
    /// The operating system refused (the errno names the reason).
    Io(io::Error),
}

/// The reason as the BEAM sees it: `{:error, reason}` with `reason` an
/// atom, `{:corrupt, segment, offset}`, `{:corrupt, segment, offset,
/// records, bytes}` (what a repair would cut), `{:corrupt, :manifest}`,
/// `{:wrong_kind, kind}`, `{:unsupported_format, version}`,
/// `{:trimmed, first}`, `{:not_primary, address | nil}` or `{:bad_config,
/// message}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Atom(&'static str),
    Corrupt {
        segment: u64,
        offset: u64,
    },
    Damaged {
        segment: u64,
        offset: u64,
        records: u64,
        bytes: u64,
    },
    BadManifest,
    WrongKind(&'static str),
    UnsupportedFormat(u32),
    BadConfig(&'static str),
    Trimmed(u64),
    /// Not the sequencer group's primary; the primary's address if known.
    NotPrimary(Option<std::net::SocketAddr>),
}

impl Error {
    /// The reason the BEAM gets.
    pub fn reason(&self) -> Reason {
        Reason::Atom(match self {
            Error::Closed => "closed",
            Error::NotFound => "not_found",
            Error::TooLarge => "too_large",
            Error::NoSpace => "enospc",
            Error::Locked => "locked",
            Error::ReadOnly => "read_only",
            Error::Busy => "busy",
            Error::Full => "full",
            Error::Timeout => "timeout",
            Error::NoMemory => "enomem",
            Error::BadArg => "badarg",
            Error::BadRingSize => "bad_ring_size",
            Error::BadLog => "bad_log",
            Error::MemberIdTaken => "member_id_taken",
            Error::Forbidden => "forbidden",
            Error::IndexConflict => "index_conflict",
            Error::WriterPanicked => "writer_panicked",
            Error::Io(e) => crate::errno::name(e),
            Error::Corrupt { segment, offset } => {
                return Reason::Corrupt {
                    segment: *segment,
                    offset: *offset,
                }
            }
            Error::Damaged {
                segment,
                offset,
                records,
                bytes,
            } => {
                return Reason::Damaged {
                    segment: *segment,
                    offset: *offset,
                    records: *records,
                    bytes: *bytes,
                }
            }
            Error::Dir(DirError::WrongKind(k)) => {
                return Reason::WrongKind(DirError::kind_name(*k))
            }
            Error::Dir(DirError::UnsupportedFormat(v)) => return Reason::UnsupportedFormat(*v),
            Error::Trimmed { first } => return Reason::Trimmed(*first),
            Error::Membership(MembershipError::NotPrimary(a)) => return Reason::NotPrimary(*a),
            Error::Membership(e) => e.name(),
            Error::Dir(DirError::BadManifest) => return Reason::BadManifest,
            Error::BadConfig(m) => return Reason::BadConfig(m),
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt { segment, offset } => {
                write!(f, "corrupt data in segment {segment} at offset {offset}")
            }
            Error::Damaged {
                segment,
                offset,
                records,
                bytes,
            } => write!(
                f,
                "corrupt data in segment {segment} at offset {offset} \
                 (a repair would cut {records} records, {bytes} bytes)"
            ),
            Error::Dir(d) => write!(f, "{d}"),
            Error::Trimmed { first } => write!(f, "trimmed: the first index available is {first}"),
            Error::BadConfig(m) => write!(f, "bad config: {m}"),
            Error::Io(e) => write!(f, "{e}"),
            other => match other.reason() {
                Reason::Atom(a) => write!(f, "{a}"),
                _ => write!(f, "{other:?}"),
            },
        }
    }
}

impl std::error::Error for Error {}

impl From<MembershipError> for Error {
    fn from(e: MembershipError) -> Error {
        Error::Membership(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::NoSpace,
            _ => Error::Io(e),
        }
    }
}

impl From<&io::Error> for Error {
    /// A copy of a borrowed error (its errno, or its kind and message).
    fn from(e: &io::Error) -> Error {
        Error::from(match e.raw_os_error() {
            Some(n) => io::Error::from_raw_os_error(n),
            None => io::Error::new(e.kind(), e.to_string()),
        })
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        match e {
            StoreError::Closed => Error::Closed,
            StoreError::NotFound => Error::NotFound,
            StoreError::Trimmed(first) => Error::Trimmed { first },
            StoreError::MessageTooLarge => Error::TooLarge,
            StoreError::NoSpace => Error::NoSpace,
            StoreError::Locked => Error::Locked,
            StoreError::ReadOnly => Error::ReadOnly,
            StoreError::Corrupt { segment, offset } => Error::Corrupt { segment, offset },
            StoreError::Damaged {
                segment,
                offset,
                records,
                bytes,
            } => Error::Damaged {
                segment,
                offset,
                records,
                bytes,
            },
            StoreError::Dir(d) => Error::Dir(d),
            StoreError::BadConfig(m) => Error::BadConfig(m),
            StoreError::Io(e) => Error::from(e),
        }
    }
}

impl From<TableError> for Error {
    fn from(e: TableError) -> Error {
        match e {
            TableError::Closed => Error::Closed,
            TableError::TooLarge => Error::TooLarge,
            TableError::NoSpace => Error::NoSpace,
            TableError::Locked => Error::Locked,
            TableError::Corrupt { segment, offset } => Error::Corrupt { segment, offset },
            TableError::Dir(d) => Error::Dir(d),
            TableError::BadConfig(m) => Error::BadConfig(m),
            TableError::Io(e) => Error::from(e),
        }
    }
}

impl From<&Failure> for Error {
    fn from(f: &Failure) -> Error {
        match f {
            Failure::IndexConflict { .. } => Error::IndexConflict,
            Failure::Panicked => Error::WriterPanicked,
            other => other.to_store_error().map_or(
                Error::Io(io::Error::from_raw_os_error(libc::EIO)),
                Error::from,
            ),
        }
    }
}

impl From<AsyncOpenError> for Error {
    fn from(e: AsyncOpenError) -> Error {
        match e {
            AsyncOpenError::ReadOnly => Error::ReadOnly,
            AsyncOpenError::Closed => Error::Closed,
            AsyncOpenError::Busy => Error::Busy,
            AsyncOpenError::BadRingSize => Error::BadRingSize,
            AsyncOpenError::NoMemory => Error::NoMemory,
            AsyncOpenError::Io(e) => Error::Io(e),
        }
    }
}

impl From<&AppendError> for Error {
    fn from(e: &AppendError) -> Error {
        match e {
            AppendError::Closed => Error::Closed,
            AppendError::Full => Error::Full,
            AppendError::TooLarge => Error::TooLarge,
            AppendError::Failed(f) => f.into(),
        }
    }
}

impl From<&WaitError> for Error {
    fn from(e: &WaitError) -> Error {
        match e {
            WaitError::Timeout => Error::Timeout,
            WaitError::Closed => Error::Closed,
            WaitError::Failed(f) => f.into(),
        }
    }
}

impl From<PushError> for Error {
    fn from(e: PushError) -> Error {
        match e {
            PushError::Full => Error::Full,
            PushError::TooLarge => Error::TooLarge,
        }
    }
}

impl From<RingError> for Error {
    fn from(e: RingError) -> Error {
        match e {
            RingError::BadCapacity => Error::BadRingSize,
            RingError::NoMemory => Error::NoMemory,
        }
    }
}

impl From<PublishError> for Error {
    fn from(e: PublishError) -> Error {
        match e {
            PublishError::TooLarge => Error::TooLarge,
            PublishError::Busy => Error::Busy,
            PublishError::Closed => Error::Closed,
            PublishError::Taken => Error::MemberIdTaken,
            PublishError::Forbidden => Error::Forbidden,
            PublishError::NoSpace => Error::NoSpace,
        }
    }
}

impl From<SeqError> for Error {
    fn from(e: SeqError) -> Error {
        match e {
            SeqError::Io(e) => Error::from(e),
            SeqError::Store(e) => Error::from(e),
            SeqError::BadLog => Error::BadLog,
            SeqError::BadConfig => Error::BadArg,
            SeqError::Timeout => Error::Timeout,
            SeqError::Taken => Error::MemberIdTaken,
            // An older format than this release reads: version 0.
            SeqError::OldFormat => Error::Dir(DirError::UnsupportedFormat(0)),
            SeqError::Trimmed(first) => Error::Trimmed { first },
        }
    }
}

impl From<LogError> for Error {
    fn from(e: LogError) -> Error {
        match e {
            LogError::NoSpace => Error::NoSpace,
            LogError::NotFound => Error::NotFound,
            LogError::Damaged(at) => Error::Corrupt {
                segment: 0,
                offset: at,
            },
            LogError::Store(e) => Error::from(e),
        }
    }
}

impl From<SendError> for Error {
    fn from(e: SendError) -> Error {
        match e {
            SendError::Closed => Error::Closed,
            SendError::Io(e) => Error::Io(e),
        }
    }
}

impl From<SelectError> for Error {
    fn from(e: SelectError) -> Error {
        match e {
            SelectError::Closed => Error::Closed,
            SelectError::Refused => Error::Io(io::Error::from_raw_os_error(libc::EIO)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atom(e: impl Into<Error>) -> &'static str {
        match e.into().reason() {
            Reason::Atom(a) => a,
            other => panic!("not an atom: {other:?}"),
        }
    }

    #[test]
    fn every_part_maps_to_the_same_atoms() {
        assert_eq!(atom(StoreError::Closed), "closed");
        assert_eq!(atom(TableError::Closed), "closed");
        assert_eq!(atom(SendError::Closed), "closed");
        assert_eq!(atom(PublishError::Closed), "closed");
        assert_eq!(atom(&AppendError::Closed), "closed");
        assert_eq!(atom(&WaitError::Closed), "closed");
        assert_eq!(atom(SelectError::Closed), "closed");
        assert_eq!(atom(StoreError::MessageTooLarge), "too_large");
        assert_eq!(atom(TableError::TooLarge), "too_large");
        assert_eq!(atom(PublishError::TooLarge), "too_large");
        assert_eq!(atom(PushError::TooLarge), "too_large");
        assert_eq!(atom(StoreError::NoSpace), "enospc");
        assert_eq!(atom(TableError::NoSpace), "enospc");
        assert_eq!(atom(LogError::NoSpace), "enospc");
        assert_eq!(atom(&AppendError::Failed(Failure::NoSpace)), "enospc");
        // The sequencer's log full is ENOSPC too (it used to be `:store`).
        assert_eq!(atom(SeqError::Store(StoreError::NoSpace)), "enospc");
        assert_eq!(
            atom(SeqError::Io(io::Error::from_raw_os_error(libc::ENOSPC))),
            "enospc"
        );
        assert_eq!(atom(StoreError::Locked), "locked");
        assert_eq!(atom(TableError::Locked), "locked");
        assert_eq!(atom(StoreError::ReadOnly), "read_only");
        assert_eq!(atom(AsyncOpenError::ReadOnly), "read_only");
        assert_eq!(atom(StoreError::NotFound), "not_found");
        assert_eq!(atom(LogError::NotFound), "not_found");
        assert_eq!(atom(PublishError::Busy), "busy");
        assert_eq!(atom(AsyncOpenError::Busy), "busy");
        assert_eq!(atom(&AppendError::Full), "full");
        assert_eq!(atom(PushError::Full), "full");
        assert_eq!(atom(&WaitError::Timeout), "timeout");
        assert_eq!(atom(SeqError::Timeout), "timeout");
        assert_eq!(atom(AsyncOpenError::NoMemory), "enomem");
        assert_eq!(atom(RingError::NoMemory), "enomem");
        assert_eq!(atom(AsyncOpenError::BadRingSize), "bad_ring_size");
        assert_eq!(atom(RingError::BadCapacity), "bad_ring_size");
        assert_eq!(atom(SeqError::BadLog), "bad_log");
        assert_eq!(atom(SeqError::BadConfig), "badarg");
        assert_eq!(atom(SeqError::Taken), "member_id_taken");
        assert_eq!(atom(PublishError::Taken), "member_id_taken");
        assert_eq!(
            atom(&WaitError::Failed(Failure::IndexConflict {
                expected: 1,
                found: 2
            })),
            "index_conflict"
        );
        assert_eq!(
            atom(&WaitError::Failed(Failure::Panicked)),
            "writer_panicked"
        );
        assert_eq!(atom(SelectError::Refused), "eio");
        assert_eq!(
            atom(StoreError::Io(io::Error::from_raw_os_error(libc::EACCES))),
            "eacces"
        );
        assert_eq!(
            atom(TableError::Io(io::Error::from_raw_os_error(libc::EACCES))),
            "eacces"
        );
        assert_eq!(
            atom(SendError::Io(io::Error::from_raw_os_error(libc::EMSGSIZE))),
            "emsgsize"
        );
        assert_eq!(atom(io::Error::from_raw_os_error(libc::EDQUOT)), "enospc");
    }

    #[test]
    fn corruption_and_bad_configs_keep_their_detail() {
        let c = |e: Error| e.reason();
        assert_eq!(
            c(StoreError::Corrupt {
                segment: 3,
                offset: 64
            }
            .into()),
            Reason::Corrupt {
                segment: 3,
                offset: 64
            }
        );
        assert_eq!(
            c(TableError::Corrupt {
                segment: 1,
                offset: 0
            }
            .into()),
            Reason::Corrupt {
                segment: 1,
                offset: 0
            }
        );
        assert_eq!(
            c((&AppendError::Failed(Failure::Corrupt {
                segment: 2,
                offset: 8
            }))
                .into()),
            Reason::Corrupt {
                segment: 2,
                offset: 8
            }
        );
        assert_eq!(c(StoreError::BadConfig("x").into()), Reason::BadConfig("x"));
        assert_eq!(c(TableError::BadConfig("y").into()), Reason::BadConfig("y"));
        assert_eq!(Error::Closed.to_string(), "closed");
        assert_eq!(
            Error::Corrupt {
                segment: 1,
                offset: 2
            }
            .to_string(),
            "corrupt data in segment 1 at offset 2"
        );
    }
}
