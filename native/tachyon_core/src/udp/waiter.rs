//! How a UDP loop waits when a non-blocking receive found nothing.
//!
//! Built on [`crate::wait`]: `BusySpin` and `Yield` call [`Idle::idle`]
//! between receives; `Backoff` spins and yields like `Idle` does, then blocks
//! in `poll(2)` on the socket (so the next datagram wakes it at once, rather
//! than a timer); `Park` (`:block`) blocks in `poll(2)` right away. Every
//! blocking wait also watches an eventfd ([`super::sys::Waker`]) so that a
//! stop request wakes the thread immediately.

use std::os::fd::RawFd;
use std::time::Duration;

use super::sys::poll_fds;
use crate::wait::{Idle, WaitStrategy};

/// Rounds `Backoff` spends spinning and yielding (as `Idle` does: 200 spins,
/// 300 yields) before it blocks in `poll`.
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
        if self.rounds != 0 {
            self.rounds = 0;
            self.idle.reset();
        }
    }

    /// Waits once. `sock` is the socket to block on, `waker` the stop eventfd
    /// (or -1); `limit` caps a blocking wait (a deadline the caller keeps).
    #[inline]
    pub fn wait(&mut self, sock: RawFd, waker: RawFd, limit: Option<Duration>) {
        match self.strategy {
            WaitStrategy::BusySpin | WaitStrategy::Yield => self.idle.idle(),
            WaitStrategy::Backoff if self.rounds < BACKOFF_ROUNDS => {
                self.rounds += 1;
                self.idle.idle();
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
