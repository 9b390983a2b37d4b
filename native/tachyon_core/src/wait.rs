//! How every loop in Tachyon waits when it found no work, and how it is
//! woken: one mechanism for the store's pre-touch thread, the async store's
//! writer, the table's background threads and the UDP loops.
//!
//! * [`WaitStrategy`]: what a loop does between empty polls (spin, yield,
//!   back off, or sleep). On a machine with few cores a busy-spinning thread
//!   starves everything else, so every polling loop takes one.
//! * [`Wake`]: the loop's wake-up line, shared with whoever has work for it
//!   (producers, a stop request). An eventfd plus a cache-padded word in
//!   which the loop announces that it is about to sleep. A waker that sees
//!   the loop awake makes no system call: this is the protocol the async
//!   store's producers depend on to stay off the kernel on their steady path
//!   (an "event count": the loop publishes `Sleeping`, checks for work once
//!   more, then blocks; a producer publishes work, then reads the word).
//! * [`Waiter`]: a loop's own state (rounds since the last work) that turns
//!   the strategy into spins, yields and sleeps. A sleep blocks in `ppoll`
//!   on the wake-up eventfd and, for a UDP loop, on its socket too, so a
//!   datagram, a producer or a stop request ends it at once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// How a polling loop waits when it found no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Spin with a CPU pause hint: lowest latency, burns a whole core.
    BusySpin,
    /// `sched_yield` between polls: gives the core away when others want it.
    Yield,
    /// Spin, then yield, then sleep with growing naps up to the loop's
    /// longest nap (a socket loop skips the spin phase: see [`Waiter`]).
    Backoff,
    /// Sleep until woken (or the longest nap passes): lowest CPU use.
    Park,
}

impl WaitStrategy {
    /// Every strategy, in the order the docs list them.
    pub const ALL: [WaitStrategy; 4] = [
        WaitStrategy::BusySpin,
        WaitStrategy::Yield,
        WaitStrategy::Backoff,
        WaitStrategy::Park,
    ];

    /// Parses the Elixir-side atom name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The Elixir-side atom name.
    pub fn name(self) -> &'static str {
        match self {
            Self::BusySpin => "busy_spin",
            Self::Yield => "yield",
            Self::Backoff => "backoff",
            Self::Park => "park",
        }
    }

    /// The default for this machine: busy-spin only when there are more than
    /// two cores to spare, back-off otherwise.
    pub fn default_for_cores(cores: usize) -> Self {
        if cores > 2 {
            Self::BusySpin
        } else {
            Self::Backoff
        }
    }

    /// [`WaitStrategy::default_for_cores`] for this machine.
    pub fn machine_default() -> Self {
        Self::default_for_cores(online_cores())
    }
}

/// What a loop told its wakers about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Sleep {
    /// Polling (or about to): work published now will be seen.
    Awake = 0,
    /// Napping briefly on purpose (the async store's linger): it will look
    /// again soon without being woken.
    Napping = 1,
    /// Sleeping until woken or until its longest nap passes.
    Sleeping = 2,
}

/// A loop's wake-up line: an eventfd and the loop's [`Sleep`] word, each on
/// its own cache line. Shared (in an `Arc`) between the loop and its wakers.
#[derive(Debug)]
pub struct Wake {
    state: CachePadded<AtomicU8>,
    fd: OwnedFd,
}

impl Wake {
    /// A new wake-up line (one eventfd).
    pub fn new() -> io::Result<Wake> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Wake {
            state: CachePadded::new(AtomicU8::new(Sleep::Awake as u8)),
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// What the loop said it is doing (a plain load: cheap on a hot path).
    #[inline]
    pub fn state(&self) -> Sleep {
        match self.state.load(Ordering::Relaxed) {
            0 => Sleep::Awake,
            1 => Sleep::Napping,
            _ => Sleep::Sleeping,
        }
    }

    /// Wakes the loop whatever it is doing (a system call). Never blocks.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; a full
        // counter (EAGAIN) already means "woken".
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            );
        }
    }

    /// Wakes the loop only if it announced a sleep (or a nap, with
    /// `naps_too`). Call it after publishing the work the loop must see:
    /// the fence orders that publication before the read of the state,
    /// against the loop's store of the state before its last look for work.
    /// Returns whether it woke the loop.
    #[inline]
    pub fn wake_if_sleeping(&self, naps_too: bool) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        let s = self.state();
        let wake = s == Sleep::Sleeping || (naps_too && s == Sleep::Napping);
        if wake {
            self.wake();
        }
        wake
    }

    /// The eventfd (readable while a wake-up is pending).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn announce(&self, s: Sleep) {
        self.state.store(s as u8, Ordering::SeqCst);
    }

    /// Consumes pending wake-ups.
    fn clear(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            );
        }
    }

    /// Blocks until woken, until `extra` (a socket) is readable, or until
    /// `timeout`, with `state` announced meanwhile. `ready` is checked
    /// after the announcement and before blocking, so work published by a
    /// waker that saw the loop awake is never slept over.
    pub fn sleep(
        &self,
        state: Sleep,
        timeout: Duration,
        extra: Option<RawFd>,
        ready: impl FnOnce() -> bool,
    ) {
        self.announce(state);
        if !ready() {
            let _ = poll_fds(
                &[
                    (self.fd(), libc::POLLIN),
                    (extra.unwrap_or(-1), libc::POLLIN),
                ],
                Some(timeout),
            );
        }
        self.clear();
        self.announce(Sleep::Awake);
    }
}

/// `ppoll(2)` on `(fd, events)` pairs (at most four; a negative fd is
/// ignored); `None` waits forever. Returns how many descriptors are ready (0
/// on timeout). `EINTR` counts as a timeout. Nanosecond timeouts: `poll`'s
/// milliseconds would turn a 50 us nap into 1 ms.
pub fn poll_fds(fds: &[(RawFd, libc::c_short)], timeout: Option<Duration>) -> io::Result<usize> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 4];
    let n = fds.len().min(pfds.len());
    for (p, &(fd, events)) in pfds.iter_mut().zip(fds.iter()) {
        p.fd = fd;
        p.events = events;
    }
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds holds n initialised pollfd entries; tsp is null or points
    // to a live timespec; no signal mask is passed.
    let r = unsafe { libc::ppoll(pfds.as_mut_ptr(), n as libc::nfds_t, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// A loop's wait state: call [`Waiter::idle`] each time a poll found
/// nothing and [`Waiter::reset`] when it found work.
///
/// `Backoff` without a socket: 200 spins, 300 yields, then sleeps of
/// 20 us, 40 us, ... up to the longest nap. With a socket
/// ([`Waiter::with_socket`]) there is no spin phase: every poll of a socket
/// is already a system call (a `recvmmsg` that finds nothing costs a few
/// hundred nanoseconds), so a `sched_yield` between polls costs little on an
/// idle core, and on a busy one it lets the thread that must handle the
/// datagram (often a BEAM scheduler) run; measured on 2 cores, a spinning
/// phase there made Tachyon.UDP round trips several times slower. After 500
/// yields, or 30 us without work, it blocks in `ppoll` on the socket, so the
/// next datagram wakes it; and at once after a yield that gave the core away
/// for 20 us or more (the core is contended). With 500 yields and no time
/// bound, a group of three nodes, a member and a BEAM on two cores had every
/// node polling in turn: a p99 round trip of 548-671 us against 144-187 us
/// (docs/ARCHITECTURE.md, "The loop").
#[derive(Debug)]
pub struct Waiter {
    strategy: WaitStrategy,
    wake: std::sync::Arc<Wake>,
    socket: Option<RawFd>,
    max_park: Duration,
    rounds: u32,
    /// When a socket loop's yield phase began.
    idle_since: Option<std::time::Instant>,
}

impl Waiter {
    const SPIN_ROUNDS: u32 = 200;
    const YIELD_ROUNDS: u32 = 300;
    const SOCKET_YIELD_ROUNDS: u32 = 500;
    /// A socket loop's yield that gave the core away this long (others had
    /// work) ends its yield phase: it sleeps in `ppoll` until a datagram.
    const CONTENDED_YIELD: Duration = Duration::from_micros(20);
    /// A socket loop's yield phase lasts this long at most.
    const SOCKET_YIELD_FOR: Duration = Duration::from_micros(30);
    /// Longest nap of a socket loop: only a safety net, since datagrams and
    /// wake-ups both end the sleep.
    const SOCKET_MAX_PARK: Duration = Duration::from_millis(100);

    /// A waiter for a loop woken through `wake`, sleeping at most
    /// `max_park` at a time.
    pub fn new(strategy: WaitStrategy, wake: std::sync::Arc<Wake>, max_park: Duration) -> Waiter {
        Waiter {
            strategy,
            wake,
            socket: None,
            max_park,
            rounds: 0,
            idle_since: None,
        }
    }

    /// A waiter for a socket loop: sleeps end when `sock` is readable.
    pub fn with_socket(strategy: WaitStrategy, wake: std::sync::Arc<Wake>, sock: RawFd) -> Waiter {
        Waiter {
            socket: Some(sock),
            ..Waiter::new(strategy, wake, Self::SOCKET_MAX_PARK)
        }
    }

    pub fn strategy(&self) -> WaitStrategy {
        self.strategy
    }

    /// The loop's wake-up line.
    pub fn wake(&self) -> &std::sync::Arc<Wake> {
        &self.wake
    }

    /// Work was found: the next wait starts from the cheapest phase again.
    #[inline]
    pub fn reset(&mut self) {
        self.rounds = 0;
        self.idle_since = None;
    }

    /// Whether the next [`Waiter::idle`] may sleep (so wakers must be told:
    /// the loop announces it inside `idle`).
    pub fn will_sleep(&self) -> bool {
        match self.strategy {
            WaitStrategy::BusySpin | WaitStrategy::Yield => false,
            WaitStrategy::Park => true,
            WaitStrategy::Backoff => self.rounds >= self.sleep_after(),
        }
    }

    fn sleep_after(&self) -> u32 {
        if self.socket.is_some() {
            Self::SOCKET_YIELD_ROUNDS
        } else {
            Self::SPIN_ROUNDS + Self::YIELD_ROUNDS
        }
    }

    /// Waits once after an empty poll. `ready` is checked after the loop
    /// announced a sleep, before it blocks (see [`Wake::sleep`]).
    #[inline]
    pub fn idle(&mut self, ready: impl FnOnce() -> bool) {
        self.idle_at_most(None, ready)
    }

    /// [`Waiter::idle`], sleeping at most `limit` (a deadline the caller
    /// keeps).
    pub fn idle_at_most(&mut self, limit: Option<Duration>, ready: impl FnOnce() -> bool) {
        let cap = |d: Duration| limit.map_or(d, |l| l.min(d));
        match self.strategy {
            WaitStrategy::BusySpin => std::hint::spin_loop(),
            WaitStrategy::Yield => std::thread::yield_now(),
            WaitStrategy::Park => {
                self.wake
                    .sleep(Sleep::Sleeping, cap(self.max_park), self.socket, ready)
            }
            WaitStrategy::Backoff => {
                let r = self.rounds;
                self.rounds = r.saturating_add(1);
                if r < self.sleep_after() {
                    if self.socket.is_none() && r < Self::SPIN_ROUNDS {
                        std::hint::spin_loop();
                    } else if self.socket.is_some() {
                        let t = std::time::Instant::now();
                        let since = *self.idle_since.get_or_insert(t);
                        std::thread::yield_now();
                        if t.elapsed() >= Self::CONTENDED_YIELD
                            || t.duration_since(since) >= Self::SOCKET_YIELD_FOR
                        {
                            // The core went to others that had work (it is
                            // contended: polling on takes their time), or
                            // nothing came for a while: sleep in `ppoll`.
                            self.rounds = self.sleep_after();
                        }
                    } else {
                        std::thread::yield_now();
                    }
                } else {
                    let nap = if self.socket.is_some() {
                        self.max_park
                    } else {
                        let extra = (r - self.sleep_after()).min(10);
                        Duration::from_micros(20u64 << extra).min(self.max_park)
                    };
                    self.wake
                        .sleep(Sleep::Sleeping, cap(nap), self.socket, ready)
                }
            }
        }
    }

    /// Naps for `d` on purpose (announced as [`Sleep::Napping`]); a wake-up
    /// ends it early.
    pub fn nap(&mut self, d: Duration) {
        self.wake.sleep(Sleep::Napping, d, None, || false)
    }
}

/// Pins the calling thread to `core`. Returns false if the kernel refused.
pub fn pin_to_core(core: usize) -> bool {
    if core >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it
    // (core was checked against CPU_SETSIZE) and sched_setaffinity reads it
    // for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Number of online cores.
pub fn online_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn parse_names() {
        for s in WaitStrategy::ALL {
            assert_eq!(WaitStrategy::parse(s.name()), Some(s));
        }
        assert_eq!(WaitStrategy::parse("block"), None);
        assert_eq!(WaitStrategy::parse("nope"), None);
    }

    #[test]
    fn backoff_eventually_sleeps_briefly() {
        let wake = Arc::new(Wake::new().unwrap());
        let mut w = Waiter::new(WaitStrategy::Backoff, wake, Duration::from_millis(1));
        let t = Instant::now();
        for _ in 0..600 {
            w.idle(|| false);
        }
        assert!(w.will_sleep());
        // Each sleep is the 1 ms cap: 600 idles of which some hundreds
        // sleep take well under a second on an idle machine. The bound
        // keeps the margin a loaded 2-core machine needs (a 1 ms sleep took
        // 3-4 ms at load 15-19) and still catches a sleep of the wrong
        // unit (600 of 1 s).
        assert!(t.elapsed() < Duration::from_secs(15));
        w.reset();
        assert!(!w.will_sleep());
    }

    #[test]
    fn a_wake_ends_a_park_at_once() {
        let wake = Arc::new(Wake::new().unwrap());
        let w2 = wake.clone();
        let t = std::thread::spawn(move || {
            let mut w = Waiter::new(WaitStrategy::Park, w2, Duration::from_secs(10));
            let t0 = Instant::now();
            w.idle(|| false);
            t0.elapsed()
        });
        while wake.state() != Sleep::Sleeping {
            std::thread::yield_now();
        }
        assert!(wake.wake_if_sleeping(false));
        let slept = t.join().unwrap();
        assert!(slept < Duration::from_secs(5), "{slept:?}");
        assert_eq!(wake.state(), Sleep::Awake);
    }

    #[test]
    fn a_wake_before_the_sleep_is_not_lost() {
        let wake = Arc::new(Wake::new().unwrap());
        wake.wake();
        let mut w = Waiter::new(WaitStrategy::Park, wake.clone(), Duration::from_secs(10));
        let t0 = Instant::now();
        w.idle(|| false);
        assert!(t0.elapsed() < Duration::from_secs(5));
        // The pending wake-up was consumed: the next sleep times out.
        let t0 = Instant::now();
        let mut w = Waiter::new(WaitStrategy::Park, wake, Duration::from_millis(5));
        w.idle(|| false);
        assert!(t0.elapsed() >= Duration::from_millis(4));
    }

    #[test]
    fn ready_work_skips_the_sleep_and_awake_loops_are_not_woken() {
        let wake = Arc::new(Wake::new().unwrap());
        assert!(!wake.wake_if_sleeping(true));
        let mut w = Waiter::new(WaitStrategy::Park, wake, Duration::from_secs(10));
        let t0 = Instant::now();
        w.idle(|| true);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn naps_are_sub_millisecond() {
        let wake = Arc::new(Wake::new().unwrap());
        let mut w = Waiter::new(WaitStrategy::Backoff, wake, Duration::from_millis(1));
        let t0 = Instant::now();
        for _ in 0..20 {
            w.nap(Duration::from_micros(50));
        }
        // 20 naps of 50 us really sleep (a millisecond `poll` timeout would
        // round them to 0) and do not round up to milliseconds either.
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(1), "{took:?}");
        assert!(took < Duration::from_millis(200), "{took:?}");
    }
}
