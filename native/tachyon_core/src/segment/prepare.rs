//! The queue of prepared segments and the thread that fills it.
//!
//! A writer that reaches the end of its segment takes the next one from a
//! [`Prepared`] queue: created, allocated and faulted in whole by a
//! background thread ([`run`], the body of a [`Worker`](crate::worker)),
//! so that neither `fallocate` nor page faults land on the writer's path.
//! The same thread faults the active segment in ahead of the writer where
//! it was not prepared whole. The first segments are made during `open`
//! ([`fill`] on the opening thread, a dirty scheduler): a writer that starts
//! at once must not catch up with the thread.
//!
//! Preparing starts with use: the queue holds one segment from the open
//! on, and one more after every roll, up to its `max`
//! ([`Prepared::target`]). Each prepared segment is disk space allocated
//! ahead of need; a part that is opened and not written to keeps one.
//!
//! The thread sleeps on its worker's wake-up line (woken by a roll or a
//! writer that wants pages, and by the stop), and when stopped removes the
//! segments left in the queue.
//!
//! It is also where a part's retired segments go ([`Prepare::retire`],
//! [`Prepare::tidy`]): off the writer's path, a retired file is reused as
//! the next prepared segment (the store: its pages are still in the page
//! cache, so faulting them in zeroes nothing) or removed.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::sys::lock;
use crate::worker::Ctx;

/// What a part's prepare thread does with its segments.
pub trait Prepare: Send + 'static {
    /// A prepared segment.
    type Seg: Send;

    /// The queue the thread fills.
    fn queue(&self) -> &Prepared<Self::Seg>;

    /// Makes the next segment ready (created, allocated, faulted in whole),
    /// with `queued` segments ahead of it in the queue. An error (a full
    /// disk) is retried at most once a second; the writer's roll reports it.
    fn make(&self, queued: usize) -> io::Result<Self::Seg>;

    /// Whether `seg`, made by [`Prepare::make`], may still join `queue`
    /// (called with the queue locked): a store's segment must still be next
    /// in line. Otherwise it is discarded.
    fn still_next(&self, _seg: &Self::Seg, _queue: &VecDeque<Self::Seg>) -> bool {
        true
    }

    /// Removes a prepared segment that will not be used.
    fn discard(&self, seg: Self::Seg);

    /// Applies the part's retention (by age: time passes without a roll),
    /// before the queue is filled, so that [`Prepare::make`] can reuse the
    /// files of what it retired.
    fn retire(&mut self) {}

    /// Removes the retired segments [`Prepare::make`] did not reuse (also
    /// when the thread stops).
    fn tidy(&mut self) {}

    /// Faults the active segment in ahead of the writer. Returns whether
    /// the writer is busy (the thread then looks again in a millisecond
    /// rather than waiting to be woken).
    fn touch_ahead(&mut self) -> bool;

    /// How long the thread sleeps when the writer is idle (it is woken
    /// earlier by a roll, a wake-up or the stop).
    fn idle_nap(&self) -> Duration {
        Duration::from_millis(100)
    }
}

/// Next segments, in order, at most `target` of them: 1 (if `max` allows)
/// until the writer first rolls, then one more at every roll, up to `max`.
pub struct Prepared<S> {
    queue: Mutex<VecDeque<S>>,
    max: usize,
    target: AtomicUsize,
    /// Held while a segment is made: a writer that finds none ready may
    /// wait for that one ([`Prepared::pop_or_wait`]) rather than create its
    /// own (and fail for the disk space the other one takes).
    creating: Mutex<()>,
}

impl<S> Prepared<S> {
    /// An empty queue of at most `max` segments.
    pub fn new(max: usize) -> Self {
        Prepared {
            queue: Mutex::new(VecDeque::with_capacity(max)),
            max,
            target: AtomicUsize::new(max.min(1)),
            creating: Mutex::new(()),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// How many segments the thread keeps ready now.
    pub fn target(&self) -> usize {
        self.target.load(Ordering::Relaxed)
    }

    /// A roll: one more segment is kept ready from now on (up to `max`).
    fn used(&self) {
        let t = self.target.load(Ordering::Relaxed);
        if t < self.max {
            self.target.store(t + 1, Ordering::Relaxed);
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.queue).len()
    }

    pub fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    /// The next segment, if one is ready (the writer rolls: see
    /// [`Prepared::target`]).
    pub fn pop(&self) -> Option<S> {
        self.used();
        lock(&self.queue).pop_front()
    }

    /// The next segment; if none is ready but one is being made, waits for
    /// that one.
    pub fn pop_or_wait(&self) -> Option<S> {
        if let Some(s) = self.pop() {
            return Some(s);
        }
        let _c = lock(&self.creating);
        lock(&self.queue).pop_front()
    }

    /// Takes every queued segment (they are out of line, or the part
    /// closes).
    pub fn drain(&self) -> Vec<S> {
        lock(&self.queue).drain(..).collect()
    }

    /// The queue itself.
    pub fn lock(&self) -> MutexGuard<'_, VecDeque<S>> {
        lock(&self.queue)
    }
}

/// Makes segments until the queue holds its [`Prepared::target`] or
/// `stop()` says so. Stops at the first error, and (without an error) at a
/// segment that was no longer next when it was ready.
pub fn fill<P: Prepare>(p: &mut P, stop: impl Fn() -> bool) -> io::Result<()> {
    loop {
        let queued = p.queue().len();
        if queued >= p.queue().target() || stop() {
            return Ok(());
        }
        let creating = lock(&p.queue().creating);
        let seg = p.make(queued)?;
        let mut q = p.queue().lock();
        if p.still_next(&seg, &q) {
            q.push_back(seg);
            continue;
        }
        drop(q);
        drop(creating);
        p.discard(seg);
        return Ok(());
    }
}

/// Nap while the writer is busy.
const BUSY_NAP: Duration = Duration::from_millis(1);
/// Least time between two attempts after a segment could not be made.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The prepare thread's body: faults in ahead of the writer and keeps the
/// queue full until the worker is stopped, then removes what is queued.
pub fn run<P: Prepare>(ctx: &Ctx, mut p: P) {
    // Its populates go in paced pieces (a writer may share its core).
    crate::worker::background();
    let mut failed_at: Option<Instant> = None;
    while !ctx.stopped() {
        let busy = p.touch_ahead();
        p.retire();
        if failed_at.is_none_or(|t| t.elapsed() >= RETRY_AFTER) {
            failed_at = fill(&mut p, || ctx.stopped()).err().map(|_| Instant::now());
        }
        p.tidy();
        ctx.sleep(if busy { BUSY_NAP } else { p.idle_nap() });
    }
    for s in p.queue().drain() {
        p.discard(s);
    }
    p.tidy();
}
