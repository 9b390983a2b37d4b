//! A total-order message bus over UDP, after CoralSequencer.
//!
//! * [`wire`]: the datagrams (docs/FORMAT.md, "Sequencer and bus").
//! * [`sequencer`]: [`Sequencer`], a thread that stamps every message a
//!   member publishes with the next index of its log (a
//!   [`crate::store::Store`]), appends it and sends it on the bus, drops
//!   duplicates by `(member_id, member_seq)` and answers replay requests.
//! * [`member`]: [`Member`], a member of the bus: publishes commands,
//!   resends the ones it does not see sequenced in time, delivers every
//!   message in sequence order exactly once, fills gaps by asking the
//!   sequencer (one round trip), rewinds from any sequence number, and
//!   reassembles fragmented messages.
//!
//! * [`standby`]: [`Standby`], a sequencer that follows the primary and
//!   takes over (a new epoch) when it falls silent.
//!
//! The bus is UDP multicast, or a unicast fan-out to the members that said
//! hello (for networks without multicast).

pub mod core;
pub mod member;
pub mod sequencer;
pub mod sim;
pub mod standby;
pub mod wire;

#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};

pub use member::{Member, MemberConfig, MemberStats};

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
pub use sequencer::{Sequencer, SequencerConfig, SequencerStats};
pub use standby::{Standby, StandbyConfig, StandbyStats};

use crate::store::StoreError;

/// How the bus reaches the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl SeqError {
    /// The reason as an atom name.
    pub fn reason(&self) -> String {
        match self {
            SeqError::Io(e) => crate::errno::name(e).to_string(),
            SeqError::Store(StoreError::Locked) => "locked".into(),
            SeqError::Store(StoreError::Corrupt { .. }) => "corrupt".into(),
            SeqError::Store(StoreError::Io(e)) => crate::errno::name(e).to_string(),
            SeqError::Store(_) => "store".into(),
            SeqError::BadLog => "bad_log".into(),
            SeqError::BadConfig => "badarg".into(),
            SeqError::Timeout => "timeout".into(),
        }
    }
}

impl From<StoreError> for SeqError {
    fn from(e: StoreError) -> SeqError {
        SeqError::Store(e)
    }
}

impl std::fmt::Display for SeqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.reason())
    }
}

impl std::error::Error for SeqError {}
