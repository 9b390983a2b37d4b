//! The one thread type of Tachyon: every OS thread a part starts (the
//! store's pre-touch thread, the async store's writer, the table's
//! background threads, the UDP receive and echo loops) is a [`Worker`].
//!
//! A worker has a name, may be pinned to a core, and carries a stop flag and
//! a [`Wake`] line. [`Worker::spawn`] returns once the thread runs (named and
//! pinned), so callers can count it and report where it landed; on a thread
//! that must not wait (a normal BEAM scheduler, e.g. inside a resource
//! destructor) it returns at once and [`Worker::placement`] says what is
//! known so far.
//!
//! Slow work that a caller that must not wait has to start (the last close
//! of a resource collected on a normal scheduler, a close that would wait
//! behind a publisher) goes to [`defer`]: the reaper runs it.
//!
//! Ending a worker:
//! * [`Worker::join`] asks it to stop, wakes it and waits for it. It blocks:
//!   from the BEAM, call it on a dirty scheduler or a Rust thread.
//! * Dropping a worker asks it to stop and hands its join to the reaper, a
//!   single background thread that joins what it is given. A resource
//!   destructor runs on whichever scheduler collected the resource, often a
//!   normal one, which must never wait for a thread (nor for the disk work a
//!   stopping thread may still do). The thread still ends and is still
//!   joined, shortly after.
//! * A worker dropped or joined on its own thread (the last owner went away
//!   inside its loop) is detached, never self-joined.
//!
//! The reaper also takes other slow work a destructor must not do on the
//! thread that runs it: [`defer`] hands it a job (unmapping a segment's
//! pages, closing a table), run in the order given.
//!
//! Background work gives its CPU up often ([`pace`]). The threads that
//! prepare segments, write hints and fault memory in ahead of a writer
//! (marked with [`background`]) share the machine's cores with that writer,
//! and on a 2-core machine whose other core is busy they share its core:
//! the scheduler (EEVDF) then lets a thread that slept a while run several
//! milliseconds before the writer gets the core back. Traced on the 2-core
//! KVM guest (`cargo run --release -p tachyon_core --bin tachyon_tails --
//! table --pin 0`, sched_switch events): the table's prepare thread ran
//! for up to 11.8 ms at a time (faulting a 64 MiB segment in, 1 MiB per
//! call), its maintenance thread 4.9 ms (a segment's hints), the reaper
//! 2.0 ms (the node arena's pages), each of them a put that long. So
//! such work goes in pieces of [`PACE_RUN`] at most, between which
//! [`pace`] sleeps [`PACE_NAP`]: the writer waits one piece at worst, and
//! the background work still gets its share of the core.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::wait::{pin_to_core, Sleep, WaitStrategy, Waiter, Wake};

/// What a worker's body gets: its stop flag and wake-up line.
#[derive(Debug)]
pub struct Ctx {
    stop: CachePadded<AtomicBool>,
    wake: Arc<Wake>,
    pinned: AtomicU8,
    started: AtomicBool,
    finished: AtomicBool,
}

impl Ctx {
    /// Whether the worker was asked to stop.
    #[inline]
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The wake-up line (for a [`Waiter`], or to publish [`Sleep`] states).
    pub fn wake(&self) -> &Arc<Wake> {
        &self.wake
    }

    /// A waiter on this worker's wake-up line.
    pub fn waiter(&self, strategy: WaitStrategy, max_park: Duration) -> Waiter {
        Waiter::new(strategy, self.wake.clone(), max_park)
    }

    /// Sleeps for `d`, or until woken or asked to stop.
    pub fn sleep(&self, d: Duration) {
        self.wake.sleep(Sleep::Sleeping, d, None, || self.stopped());
        rested();
    }
}

/// Longest a [`background`] thread runs between two naps of [`pace`].
pub const PACE_RUN: Duration = Duration::from_micros(100);
/// How long [`pace`] sleeps (the kernel's default timer slack adds up to
/// 50 us).
pub const PACE_NAP: Duration = Duration::from_micros(20);
/// Bytes of memory work (faulting in, writing out, checksumming) per piece
/// of background work between two [`pace`] calls: 128 KiB, tens of
/// microseconds.
pub const PACE_BYTES: usize = 128 << 10;

thread_local! {
    /// On a [`background`] thread: when it last slept.
    static RESTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Marks the calling thread as one doing background work, which [`pace`]
/// pauses (see the module doc). Other threads (a BEAM scheduler, a
/// part's hot loop) are never paused.
pub fn background() {
    RESTED.with(|r| r.set(Some(Instant::now())));
}

/// Called by background work between pieces of at most about
/// [`PACE_RUN`]: on a [`background`] thread that has run for `PACE_RUN`
/// since it last slept, sleeps [`PACE_NAP`], so that a writer waiting for
/// this core gets it. Elsewhere it does nothing (a clock read).
#[inline]
pub fn pace() {
    RESTED.with(|r| {
        if let Some(t) = r.get() {
            if t.elapsed() >= PACE_RUN {
                std::thread::sleep(PACE_NAP);
                r.set(Some(Instant::now()));
            }
        }
    });
}

/// Frees `v` a [`PACE_BYTES`] piece at a time, [`pace`] between them: a
/// large buffer's free is one `munmap` of all its pages (0.3-0.7 ms for
/// the 7-9 MB of a 64 MiB segment's hints, traced), each shrink a short
/// one of its tail.
pub fn drop_paced<T>(mut v: Vec<T>) {
    let piece = (PACE_BYTES / std::mem::size_of::<T>().max(1)).max(1);
    v.clear();
    while v.capacity() > piece {
        v.shrink_to(v.capacity() - piece);
        pace();
    }
}

/// A [`background`] thread slept (waiting for work): its run starts anew.
fn rested() {
    RESTED.with(|r| {
        if r.get().is_some() {
            r.set(Some(Instant::now()));
        }
    });
}

/// A named OS thread with a stop flag, a wake-up line and a join that never
/// blocks a caller that must not block (see the module doc).
#[derive(Debug)]
pub struct Worker {
    ctx: Arc<Ctx>,
    handle: Option<JoinHandle<()>>,
    core: Option<usize>,
}

/// The worker's body panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// Marks the worker finished when its body ends, even by a panic.
struct Finish(Arc<Ctx>);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
    }
}

impl Worker {
    /// Starts thread `name` (pinned to `core` if given) running `body`, and
    /// returns once it runs, unless the calling thread must not wait (see
    /// [`set_blocking_check`]): then it returns as soon as the thread is
    /// created.
    pub fn spawn<F>(name: &str, core: Option<usize>, body: F) -> io::Result<Worker>
    where
        F: FnOnce(&Ctx) + Send + 'static,
    {
        Self::spawn_with_wake(name, core, Arc::new(Wake::new()?), body)
    }

    /// [`Worker::spawn`] with a wake-up line made beforehand: for a part
    /// whose shared state wakes the thread and exists before it.
    pub fn spawn_with_wake<F>(
        name: &str,
        core: Option<usize>,
        wake: Arc<Wake>,
        body: F,
    ) -> io::Result<Worker>
    where
        F: FnOnce(&Ctx) + Send + 'static,
    {
        let ctx = Arc::new(Ctx {
            stop: CachePadded::new(AtomicBool::new(false)),
            wake,
            pinned: AtomicU8::new(0),
            started: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        });
        let (ready_tx, ready_rx) = mpsc::sync_channel::<()>(1);
        let c = ctx.clone();
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let finish = Finish(c.clone());
                if let Some(core) = core {
                    let ok = pin_to_core(core);
                    c.pinned.store(if ok { 1 } else { 2 }, Ordering::Release);
                }
                c.started.store(true, Ordering::Release);
                let _ = ready_tx.send(());
                drop(ready_tx);
                body(&c);
                drop(finish);
            })?;
        // The sender is dropped if the thread dies before it sends: recv
        // returns either way. A caller that must not wait does not.
        if may_block() {
            let _ = ready_rx.recv();
        }
        Ok(Worker {
            ctx,
            handle: Some(handle),
            core,
        })
    }

    /// Asks the worker to stop and wakes it. Never blocks.
    pub fn stop(&self) {
        self.ctx.stop.store(true, Ordering::Release);
        self.ctx.wake.wake();
    }

    /// Wakes the worker (a system call; see [`Wake::wake_if_sleeping`] for
    /// the one that is free while the worker is awake).
    pub fn wake(&self) {
        self.ctx.wake.wake();
    }

    /// The worker's wake-up line.
    pub fn wake_line(&self) -> &Arc<Wake> {
        &self.ctx.wake
    }

    /// Whether the body has returned (or panicked).
    pub fn is_finished(&self) -> bool {
        self.ctx.finished.load(Ordering::Acquire)
    }

    /// Whether the thread has started its body (always true after a
    /// [`Worker::spawn`] that was allowed to wait).
    pub fn is_started(&self) -> bool {
        self.ctx.started.load(Ordering::Acquire)
    }

    /// The core asked for, and whether pinning to it worked (false while
    /// not [`Worker::is_started`]).
    pub fn placement(&self) -> (Option<usize>, bool) {
        (self.core, self.ctx.pinned.load(Ordering::Acquire) == 1)
    }

    /// Stops the worker and waits for it. Blocks: not on a normal BEAM
    /// scheduler. Called on the worker's own thread it only asks it to stop;
    /// called where the [`set_blocking_check`] says the thread must not wait
    /// (a normal BEAM scheduler), it does not wait either: the join goes to
    /// the reaper and is counted in [`refused_joins`] (a bug in the caller,
    /// which tests look for).
    pub fn join(mut self) -> Result<(), Panicked> {
        self.stop();
        let Some(h) = self.handle.take() else {
            return Ok(());
        };
        if h.thread().id() == std::thread::current().id() {
            return Ok(());
        }
        if !may_block() {
            REFUSED_JOINS.fetch_add(1, Ordering::Relaxed);
            reap(h);
            return Ok(());
        }
        h.join().map_err(|_| Panicked)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.handle.take() {
            if h.thread().id() != std::thread::current().id() {
                reap(h);
            }
        }
    }
}

/// A worker owned by something shared (a resource): stopped and joined
/// through `&self`, with the lock held only to take the worker out, never
/// through the join, so that readers (`is_running`, `wake`) never wait
/// behind a stop.
#[derive(Debug, Default)]
pub struct Slot(Mutex<Option<Worker>>);

impl Slot {
    pub fn new(w: Worker) -> Slot {
        Slot(Mutex::new(Some(w)))
    }

    /// Puts `w` in (a worker already there is dropped: stopped, reaped).
    pub fn set(&self, w: Worker) {
        let old = crate::sys::lock(&self.0).replace(w);
        drop(old);
    }

    /// Whether a worker is in and its body has not returned.
    pub fn is_running(&self) -> bool {
        crate::sys::lock(&self.0)
            .as_ref()
            .is_some_and(|w| !w.is_finished())
    }

    /// Wakes the worker, if any.
    pub fn wake(&self) {
        if let Some(w) = crate::sys::lock(&self.0).as_ref() {
            w.wake();
        }
    }

    /// Takes the worker out: stopped and joined by [`Worker::join`] (which
    /// blocks where it may) or dropped (reaped) by the caller.
    pub fn take(&self) -> Option<Worker> {
        crate::sys::lock(&self.0).take()
    }

    /// Stops and joins the worker (idempotent; see [`Worker::join`]).
    pub fn join(&self) -> Result<(), Panicked> {
        match self.take() {
            Some(w) => w.join(),
            None => Ok(()),
        }
    }
}

static BLOCKING_CHECK: OnceLock<fn() -> bool> = OnceLock::new();
static REFUSED_JOINS: AtomicU64 = AtomicU64::new(0);

/// Installs the check [`Worker::join`] asks whether the calling thread may
/// wait for another one (the NIF library installs one that says no on a
/// normal BEAM scheduler). The first call wins.
pub fn set_blocking_check(may_block: fn() -> bool) {
    let _ = BLOCKING_CHECK.set(may_block);
}

/// Whether the calling thread may wait for another thread or a lock held
/// for long (by the installed check; yes when none is installed).
pub fn may_block() -> bool {
    BLOCKING_CHECK.get().is_none_or(|f| f())
}

/// Joins that [`Worker::join`] refused to wait for because the calling
/// thread must not block (each one a caller that should have run on a dirty
/// scheduler or dropped the worker instead).
pub fn refused_joins() -> u64 {
    REFUSED_JOINS.load(Ordering::Relaxed)
}

/// Starts the reaper thread (`tachyon-reaper`) now rather than at the first
/// dropped worker, so that a process's thread count does not change later
/// (the NIF library calls it when it loads). Idempotent.
pub fn start_reaper() -> bool {
    reaper().is_some()
}

/// Slow work handed to the reaper thread.
type Job = Box<dyn FnOnce() + Send>;

/// Hands `h` to the reaper thread, which joins it. If the reaper cannot be
/// started the thread is detached (it still stops: its stop flag is set).
fn reap(h: JoinHandle<()>) {
    let _ = to_reaper(Box::new(move || {
        let _ = h.join();
    }));
}

/// Runs `job` on the reaper thread (after the joins and jobs handed to it
/// before), so that the caller does not wait for it: for a destructor that
/// runs on a BEAM scheduler and holds something slow to let go (a mapped
/// segment, a table to close). Never blocks. If the reaper cannot be
/// started, `job` runs here (slow, but nothing is leaked).
pub fn defer(job: impl FnOnce() + Send + 'static) {
    if let Err(job) = to_reaper(Box::new(job)) {
        job();
    }
}

fn to_reaper(job: Job) -> Result<(), Job> {
    match reaper() {
        Some(tx) => crate::sys::lock(tx).send(job).map_err(|e| e.0),
        None => Err(job),
    }
}

fn reaper() -> Option<&'static Mutex<Sender<Job>>> {
    static REAPER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("tachyon-reaper".into())
                .spawn(move || {
                    background();
                    loop {
                        let job = match rx.try_recv() {
                            Ok(job) => job,
                            Err(mpsc::TryRecvError::Empty) => match rx.recv() {
                                Ok(job) => {
                                    rested();
                                    job
                                }
                                Err(_) => break,
                            },
                            Err(mpsc::TryRecvError::Disconnected) => break,
                        };
                        // A panicking job must not take the reaper down.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

#[cfg(test)]
mod tests;
