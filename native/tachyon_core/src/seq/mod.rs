//! A total-order message bus over UDP, after CoralSequencer, with
//! failover after Raft.
//!
//! * [`wire`]: the datagrams (docs/FORMAT.md, "Sequencer and bus").
//! * [`core`]: the protocol as state machines without I/O: a node of a
//!   sequencer group ([`core::node`]: Raft's follower, candidate and
//!   primary; the primary stamps every message with the next index of its
//!   log, sends it on the bus and commits it once a majority holds it) and
//!   a member ([`core::member`]: publishes, resends, delivers in order below
//!   the commit position exactly once, fills gaps, rewinds, reassembles,
//!   follows new primaries and reports forks).
//! * [`sequencer`]: [`Sequencer`], a node's shell (a thread, its socket, a
//!   replayer thread, a [`nodelog::NodeLog`]).
//! * [`member`]: [`Member`], a member's shell.
//! * [`sim`]: the deterministic simulator that checks the protocol.
//!
//! The bus is UDP multicast, or a unicast fan-out to the members that said
//! hello (for networks without multicast).

pub mod core;
pub mod guard;
pub mod member;
pub mod nodelog;
pub mod sequencer;
pub mod sim;
pub mod wire;

#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};

pub use core::node::TwoNodes;
pub use member::{Member, MemberConfig, MemberEvent, MemberStats};

/// The shells' clock: nanoseconds since the first call in this process
/// (the protocol's [`core::Nanos`]).
pub mod clock {
    use std::sync::OnceLock;
    use std::time::Instant;

    pub fn now() -> super::core::Nanos {
        static BASE: OnceLock<Instant> = OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}
pub use sequencer::{
    Change, MembershipError, MembershipView, Sequencer, SequencerConfig, SequencerStats,
};

use crate::store::StoreError;
use crate::udp::SocketOptions;

/// `SO_RCVBUF` and `SO_SNDBUF` of a node's and a member's sockets by
/// default (`Tachyon.Sequencer`'s `:recbuf` and `:sndbuf`; the kernel caps
/// them at `net.core.rmem_max` and `wmem_max`). A member's socket takes
/// the bus in bursts: a primary answers a receive batch of commands (up to
/// `batch` datagrams of `max_datagram` bytes) with as many bus datagrams at
/// once, and a window of commands comes back as one such burst. The
/// kernel's default (208 KiB) holds three 65,000-byte bus datagrams; what
/// overflows is lost, asked for again and replayed: in
/// `tachyon.sequencer.throughput.batched.native` with the default buffer
/// the primary replayed 0.9 messages for every message sequenced
/// (docs/BENCHMARKS.md, "Where a batched message's time goes").
pub const SOCKET_BUFFER: usize = 4 << 20;

/// [`SOCKET_BUFFER`] both ways.
pub fn socket_options() -> SocketOptions {
    SocketOptions {
        recbuf: Some(SOCKET_BUFFER),
        sndbuf: Some(SOCKET_BUFFER),
        ..SocketOptions::default()
    }
}

/// How the bus reaches the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BusMode {
    /// To every member that said hello, one datagram each.
    Unicast,
    /// To an IPv4 multicast group, through the interface with address
    /// `iface`.
    Multicast {
        group: SocketAddr,
        iface: Ipv4Addr,
        ttl: u8,
        /// Looped back to members on the sequencer's host.
        looped: bool,
    },
}

/// Why a sequencer or member could not start.
#[derive(Debug)]
pub enum SeqError {
    Io(std::io::Error),
    Store(StoreError),
    /// The log is not a sequencer's (no session record at index 0, or an
    /// entry that is not a message).
    BadLog,
    BadConfig,
    /// No welcome from the sequencer in time.
    Timeout,
    /// The member id is bound to another member.
    Taken,
    /// The log was written by an older version of the sequencer (another
    /// entry format): left as it is.
    OldFormat,
    /// A member asked to start below the first entry the log keeps
    /// (retention removed those below it).
    Trimmed(u64),
}

/// A session id (a new log's): the clock, the pid and an address, mixed.
pub fn new_session() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = t ^ ((std::process::id() as u64) << 32) ^ (&t as *const u64 as u64).rotate_left(17);
    core::Rng::new(x).next_u64().max(1)
}

impl From<StoreError> for SeqError {
    fn from(e: StoreError) -> SeqError {
        SeqError::Store(e)
    }
}

impl From<nodelog::NodeLogError> for SeqError {
    fn from(e: nodelog::NodeLogError) -> SeqError {
        match e {
            nodelog::NodeLogError::Store(e) => SeqError::Store(e),
            nodelog::NodeLogError::OldFormat => SeqError::OldFormat,
        }
    }
}

impl std::fmt::Display for SeqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SeqError::Io(e) => write!(f, "{e}"),
            SeqError::Store(e) => write!(f, "the log: {e}"),
            SeqError::BadLog => write!(f, "the log is not a sequencer's"),
            SeqError::BadConfig => write!(f, "a configuration the sequencer or member refuses"),
            SeqError::Timeout => write!(f, "no welcome from the sequencer in time"),
            SeqError::Taken => write!(f, "the member id is bound to another member"),
            SeqError::Trimmed(first) => write!(f, "the log starts at {first} (retention)"),
            SeqError::OldFormat => write!(
                f,
                "the log was written by an older version of the sequencer (another entry format); start the group on new directories"
            ),
        }
    }
}

impl std::error::Error for SeqError {}
