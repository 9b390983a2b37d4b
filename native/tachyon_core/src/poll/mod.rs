//! The decisions of a poll mode: a process (in the NIF, a BEAM process on
//! its own scheduler) reads a source itself instead of a receive thread
//! handing it what came. No BEAM here: the NIF's `udp::poll::Poller` runs
//! these decisions and does the `enif_` calls they ask for.
//!
//! * [`Plan`]: how one poll call spends its time by the wait strategy and
//!   the spin window left: poll again for at most [`MAX_SPIN`], then say
//!   [`Polled::Empty`] (poll again: the caller yields in between) or
//!   [`Polled::Sleep`] (select, then sleep until readable).
//! * [`Plan::run`]: the poll loop itself and what each attempt's result
//!   means (datagrams, nothing yet, closed, failed).
//! * [`timeslice_percent`]: how much of a scheduler's time slice (about
//!   1 ms) a call used, for the VM.
//! * [`PollState`]: the receive buffers (one receiver at a time) and what
//!   the VM's poll set knows of the descriptor: whether it was ever
//!   selected (then only the VM's stop may let it be closed), the process
//!   waiting for readiness (woken by a close), and whether it is closed
//!   (once; a select after a close is refused, so a close never misses a
//!   waiter: either the waiter selected first and is woken, or its select
//!   says closed).

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::wait::WaitStrategy;

#[cfg(test)]
mod tests;

/// The longest a single poll call keeps polling: a NIF call on a normal
/// scheduler stays far below a millisecond, and a process that wants to
/// poll longer calls again (and is preempted in between when its
/// reductions run out).
pub const MAX_SPIN: Duration = Duration::from_micros(100);

/// What one poll call found.
#[derive(Debug)]
pub enum Polled {
    /// Datagrams were received (handed to the caller's sink; some may have
    /// been dropped as oversized).
    Got,
    /// Nothing yet: poll again (the spin window is not used up).
    Empty,
    /// Nothing: sleep until readable ([`PollState::select`]).
    Sleep,
    /// The source is closed.
    Closed,
    Failed(io::Error),
}

/// What a poll call says when nothing came within its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// [`Polled::Empty`]: poll again.
    Empty,
    /// [`Polled::Sleep`]: select, then sleep.
    Sleep,
}

impl From<Idle> for Polled {
    #[inline]
    fn from(i: Idle) -> Polled {
        match i {
            Idle::Empty => Polled::Empty,
            Idle::Sleep => Polled::Sleep,
        }
    }
}

/// How one poll call spends its time: it tries once, then again until
/// `budget` has passed, then answers `then`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub budget: Duration,
    pub then: Idle,
}

impl Plan {
    /// The plan of a call by the wait strategy, the spin window (`spin`)
    /// and how long the caller has polled for this receive so far
    /// (`polled`):
    ///
    /// * `BusySpin`: poll for [`MAX_SPIN`], then poll again (never sleeps);
    /// * `Park`: one try, then sleep;
    /// * `Yield`: one try per call (the caller yields between calls) while
    ///   the window lasts, then sleep;
    /// * `Backoff`: poll for what is left of the window (at most
    ///   [`MAX_SPIN`] per call) while it lasts, then sleep.
    #[inline]
    pub fn new(wait: WaitStrategy, spin: Duration, polled: Duration) -> Plan {
        let left = spin.saturating_sub(polled);
        let (budget, then) = match wait {
            WaitStrategy::BusySpin => (MAX_SPIN, Idle::Empty),
            WaitStrategy::Park => (Duration::ZERO, Idle::Sleep),
            WaitStrategy::Yield if !left.is_zero() => (Duration::ZERO, Idle::Empty),
            WaitStrategy::Backoff if !left.is_zero() => (left.min(MAX_SPIN), Idle::Empty),
            WaitStrategy::Yield | WaitStrategy::Backoff => (Duration::ZERO, Idle::Sleep),
        };
        Plan { budget, then }
    }

    /// Calls `once` (one non-blocking receive into `batch`: how many
    /// datagrams it took) until it gets something, the source is closed
    /// (`NotConnected`), it fails, or `elapsed()` (time since the call
    /// began) reaches the budget; always at least once. Nothing yet
    /// (`Ok(0)`, `WouldBlock`, `Interrupted`) tries again.
    #[inline]
    pub fn run<B>(
        self,
        batch: &mut B,
        mut once: impl FnMut(&mut B) -> io::Result<usize>,
        mut elapsed: impl FnMut() -> Duration,
    ) -> Polled {
        loop {
            match once(batch) {
                Ok(n) if n > 0 => return Polled::Got,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Polled::Closed,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Polled::Failed(e),
            }
            if elapsed() >= self.budget {
                return self.then.into();
            }
            std::hint::spin_loop();
        }
    }
}

/// The share of a scheduler's time slice (about 1 ms) that `used` took,
/// in percent (0 to 100), for `enif_consume_timeslice` (report only
/// above 0).
#[inline]
pub fn timeslice_percent(used: Duration) -> i32 {
    (used.as_micros() / 10).min(100) as i32
}

/// Why [`PollState::select`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectError {
    /// Closed (or no descriptor).
    Closed,
    /// The runtime refused to watch the descriptor.
    Refused,
}

/// What the runtime's poll set knows of the descriptor.
#[derive(Debug)]
struct Select<P> {
    /// The descriptor was handed to the runtime's select at least once: it
    /// may only be closed once the runtime let go of it (its stop).
    selected: bool,
    /// The last process that asked to be told of readiness (woken by a
    /// close so that its receive says closed).
    waiting: Option<P>,
    closed: bool,
}

/// The state of one source's poll mode: its receive buffers `B` (taken by
/// one receiver at a time) and its select state; `P` names a process (the
/// NIF's `LocalPid`).
#[derive(Debug)]
pub struct PollState<B, P> {
    wait: WaitStrategy,
    spin: Duration,
    batch: Mutex<B>,
    sel: Mutex<Select<P>>,
}

impl<B, P> PollState<B, P> {
    pub fn new(wait: WaitStrategy, spin: Duration, batch: B) -> PollState<B, P> {
        PollState {
            wait,
            spin,
            batch: Mutex::new(batch),
            sel: Mutex::new(Select {
                selected: false,
                waiting: None,
                closed: false,
            }),
        }
    }

    /// One poll call ([`Plan::new`], then [`Plan::run`] on the buffers):
    /// `polled` is how long the caller has polled for this receive so far.
    /// Returns what it found and how long it took (for
    /// [`timeslice_percent`]).
    #[inline]
    pub fn recv(
        &self,
        polled: Duration,
        once: impl FnMut(&mut B) -> io::Result<usize>,
    ) -> (Polled, Duration) {
        let plan = Plan::new(self.wait, self.spin, polled);
        let mut batch = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let result = plan.run(&mut *batch, once, || t0.elapsed());
        drop(batch);
        (result, t0.elapsed())
    }

    /// A process asks to be told once `fd` (the source's descriptor, `None`
    /// once closed) is readable: `arm(fd)` hands it to the runtime's select
    /// and returns the process (`None`: refused). Not called once closed.
    /// The process is the one a close wakes (the last to select).
    pub fn select(
        &self,
        fd: Option<RawFd>,
        arm: impl FnOnce(RawFd) -> Option<P>,
    ) -> Result<(), SelectError> {
        let mut sel = self.sel.lock().unwrap_or_else(|e| e.into_inner());
        let fd = match fd {
            Some(fd) if !sel.closed => fd,
            _ => return Err(SelectError::Closed),
        };
        let me = arm(fd).ok_or(SelectError::Refused)?;
        sel.selected = true;
        sel.waiting = Some(me);
        Ok(())
    }

    /// Closes, once (later calls do nothing and return `None`): a
    /// descriptor the runtime's poll set knows is taken out of it
    /// (`stop(fd)`; false if the runtime refused, and then it is closed
    /// now), any other is closed now (`close_fd`). Returns the process
    /// waiting for readiness, to wake (after this returns: no lock held)
    /// so that its receive says closed.
    pub fn close(
        &self,
        fd: Option<RawFd>,
        stop: impl FnOnce(RawFd) -> bool,
        close_fd: impl FnOnce(),
    ) -> Option<P> {
        let mut sel = self.sel.lock().unwrap_or_else(|e| e.into_inner());
        if sel.closed {
            return None;
        }
        sel.closed = true;
        let waiting = sel.waiting.take();
        match fd {
            Some(fd) if sel.selected => {
                if !stop(fd) {
                    close_fd();
                }
            }
            _ => close_fd(),
        }
        waiting
    }
}
