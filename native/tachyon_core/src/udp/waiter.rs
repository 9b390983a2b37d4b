//! How a UDP loop waits when a non-blocking receive found nothing.
//!
//! Built on [`crate::wait`]: `BusySpin` and `Yield` call [`Idle::idle`]
//! between receives; `Park` (`:block`) blocks in `poll(2)` on the socket right
//! away, so the next datagram wakes it (rather than a timer). `Backoff` yields
//! between receives for a while after the last datagram, then blocks in
//! `poll(2)`.
//!
//! Unlike [`Idle`]'s back-off, the UDP back-off has no pure-spin phase: every
//! poll of a socket is already a system call (a `recvmmsg` that finds nothing
//! costs a few hundred nanoseconds), so a `sched_yield` between polls costs
//! little on an idle core, and on a busy one it lets the thread that must
//! handle the datagram (often a BEAM scheduler) run. Measured on 2 cores, a
//! spinning phase there made Tachyon.UDP round trips several times slower.
//!
//! Every blocking wait also watches an eventfd ([`super::sys::Waker`]) so that
//! a stop request wakes the thread immediately.

use std::os::fd::RawFd;
use std::time::Duration;

use super::sys::poll_fds;
use crate::wait::{Idle, WaitStrategy};

/// Polls `Backoff` makes, yielding between them, before it blocks in `poll`
/// (a few hundred microseconds).
const BACKOFF_ROUNDS: u32 = 500;

/// Upper bound of one blocking `poll`: only a safety net, since datagrams and
/// stop requests both wake the poll.
const BLOCK_TIMEOUT: Duration = Duration::from_millis(100);

/// Per-loop wait state.
#[derive(Debug)]
pub struct Waiter {
    strategy: WaitStrategy,
    idle: Idle,
    rounds: u32,
}

impl Waiter {
    pub fn new(strategy: WaitStrategy) -> Waiter {
        Waiter {
            strategy,
            idle: Idle::new(strategy, BLOCK_TIMEOUT),
            rounds: 0,
        }
    }

    pub fn strategy(&self) -> WaitStrategy {
        self.strategy
    }

    /// Work was found: the next wait starts from the cheapest phase again.
    #[inline]
    pub fn reset(&mut self) {
        self.rounds = 0;
    }

    /// Waits once. `sock` is the socket to block on, `waker` the stop eventfd
    /// (or -1); `limit` caps a blocking wait (a deadline the caller keeps).
    #[inline]
    pub fn wait(&mut self, sock: RawFd, waker: RawFd, limit: Option<Duration>) {
        match self.strategy {
            WaitStrategy::BusySpin | WaitStrategy::Yield => self.idle.idle(),
            WaitStrategy::Backoff if self.rounds < BACKOFF_ROUNDS => {
                self.rounds += 1;
                std::thread::yield_now();
            }
            WaitStrategy::Backoff | WaitStrategy::Park => {
                let timeout = limit.map_or(BLOCK_TIMEOUT, |l| l.min(BLOCK_TIMEOUT));
                let _ = poll_fds(
                    &[(sock, libc::POLLIN), (waker, libc::POLLIN)],
                    Some(timeout),
                );
            }
        }
    }
}
