//! UDP loops on non-blocking sockets, for `Tachyon.Echo` and `Tachyon.UDP`.
//!
//! * [`sys`]: the libc layer: [`Socket`], `recvmmsg`/`sendmmsg` batches
//!   ([`Batch`]).
//! * [`echo`]: [`EchoServer`], a thread that sends every datagram back to its
//!   sender (the pong of the round-trip benchmark, whose ping client is
//!   [`crate::bench::ping`]).
//! * [`endpoint`]: [`Endpoint`], a socket whose receive thread hands every
//!   datagram to a [`Sink`] (the BEAM owner, in the NIF) and that any thread
//!   can send on, with an optional bound on unacknowledged deliveries.
//!
//! Every loop polls its socket without blocking and, when nothing is
//! waiting, waits according to a [`crate::wait::WaitStrategy`] (a
//! [`crate::wait::Waiter`] on the socket): `BusySpin` for the lowest latency
//! on a core of its own, `Yield`, `Backoff` (yield, then block in `ppoll` on
//! the socket), or `Park` (block at once: no CPU while idle). Every thread is
//! a [`crate::worker::Worker`] and can be pinned to a core.
//!
//! Loops take every datagram waiting in one `recvmmsg` (up to `batch`), and
//! the echo server answers them with one `sendmmsg`. Nothing is allocated per
//! datagram: buffers, addresses and message headers are preallocated.

pub mod echo;
pub mod endpoint;
mod multi;
pub mod sys;

#[cfg(test)]
mod tests;

pub use echo::{EchoConfig, EchoServer, EchoStats};
pub use endpoint::{Endpoint, EndpointConfig, EndpointStats, SendError, Sink};
pub use sys::{errno_name, Batch, Socket, SocketOptions, MAX_UDP_PAYLOAD};

use crate::wait::WaitStrategy;

/// Most datagrams per batch.
pub const MAX_BATCH: usize = 1024;

/// Where a loop's thread runs and how it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The core asked for (`None`: not pinned).
    pub core: Option<usize>,
    /// Whether pinning to `core` succeeded.
    pub pinned: bool,
    pub wait: WaitStrategy,
}

impl Placement {
    /// `"core 1 busy_spin"`, `"unpinned park"`, `"core 7 (pinning failed) yield"`.
    pub fn describe(&self) -> String {
        match (self.core, self.pinned) {
            (Some(c), true) => format!("core {c} {}", self.wait.name()),
            (Some(c), false) => format!("core {c} (pinning failed) {}", self.wait.name()),
            (None, _) => format!("unpinned {}", self.wait.name()),
        }
    }
}

pub(crate) fn validate_sizes(batch: usize, max_datagram: usize) -> std::io::Result<()> {
    if batch == 0 || batch > MAX_BATCH {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "batch must be in 1..=1024",
        ));
    }
    if max_datagram == 0 || max_datagram > MAX_UDP_PAYLOAD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "max_datagram must be in 1..=65507",
        ));
    }
    Ok(())
}
