//! An asynchronous front for a [`Store`]: callers copy a message into an SPSC
//! byte ring ([`crate::ring`]) and return; a writer thread drains the ring
//! into the store in batches.
//!
//! * Index at enqueue time: the store's next index is read once at open
//!   (`base`); the n-th message enqueued gets `base + n`. The writer checks
//!   before and after every batch that the store agrees (nobody else appended
//!   to it) and stops with [`Failure::IndexConflict`] if not. Two
//!   `AsyncStore`s cannot wrap the same store at once.
//! * Producers: the ring has one producer end, kept behind a short mutex, so
//!   any number of threads may call [`AsyncStore::append`]; each thread's
//!   messages keep their order. No allocation per message.
//! * Sequence numbers: `enqueued` (producer) and `written` (writer) count
//!   messages. [`AsyncStore::flush`] waits until `written` reaches the
//!   `enqueued` it saw at the call; [`AsyncStore::drain`] until the ring is
//!   empty.
//! * Waiting: the writer is a [`Worker`] and waits with a
//!   [`crate::wait::Waiter`] when the ring is empty, and may nap for
//!   `linger` after a small batch so that messages accumulate (fewer, larger
//!   batches; a core left to the BEAM under a steady trickle). Before it
//!   naps or sleeps it says so on its [`Wake`] line, which a producer reads
//!   after each push (a plain load of a line written only at those
//!   transitions, no fence: a wake-up missed in the race costs at most one
//!   nap). A producer wakes the writer only when the ring is past half full,
//!   or, with [`WaitStrategy::Park`], when the writer sleeps on an empty
//!   ring: the steady producer path makes no system call. `flush`, `drain`
//!   and `close` always wake the writer. Otherwise a message waits at most
//!   one nap (`linger`, or `max_park` after an idle spell) before the
//!   writer takes it.
//! * Failures: a store error (disk full, a segment that cannot be created,
//!   the store closed under it) stops the writer. Messages already written
//!   stay valid in the store (the store never leaves a partial record);
//!   messages still in the ring are not written ("lost", counted in
//!   [`Stats`]); later appends and flushes get the failure.
//! * Close: refuses new appends, lets the writer write everything queued,
//!   then joins it. [`AsyncStore::close_in_background`] and `Drop` do the
//!   same without waiting (the writer finishes on its own; its join goes to
//!   the worker reaper), so a BEAM destructor or monitor callback never
//!   waits for a thread or the disk.
//! * Reports: an optional callback, called on the writer thread only, gets
//!   periodic [`Stats`], the failure, and a final report when the thread
//!   stops.

mod attach;
mod config;
mod error;
mod report;
mod shared;
mod stats;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::ring::{self, Producer, PushError, Ring};
use crate::spin::SpinMutex;
use crate::store::{Mode, Store};
use crate::sys::lock;
use crate::wait::{Sleep, WaitStrategy, Wake};
use crate::worker::Worker;

use attach::Attach;
use shared::{ProducerCounters, Shared, WriterCounters, CLOSED, CLOSING, FAILED, RUNNING};

pub use config::{Config, OnFull};
pub use error::{AppendError, Failure, OpenError, State, WaitError};
pub use report::{Report, Reporter};
pub use stats::Stats;

/// An asynchronous appender in front of a [`Store`].
pub struct AsyncStore {
    shared: Arc<Shared>,
    producer: SpinMutex<Producer>,
    /// The writer's wake-up line (producers read its [`Sleep`] state).
    wake: Arc<Wake>,
    worker: Mutex<Option<Worker>>,
    max_message_size: usize,
    on_full: OnFull,
    wake_on_push: bool,
}

impl AsyncStore {
    /// Starts a writer thread for `store` (a writer-mode store that nobody
    /// else appends to while this exists).
    pub fn open(
        store: Arc<Store>,
        cfg: Config,
        reporter: Option<Reporter>,
    ) -> Result<AsyncStore, OpenError> {
        if store.is_closed() {
            return Err(OpenError::Closed);
        }
        if store.config().mode == Mode::Read {
            return Err(OpenError::ReadOnly);
        }
        let ring = Ring::with_capacity(cfg.ring_size).map_err(|e| match e {
            ring::RingError::BadCapacity => OpenError::BadRingSize,
            ring::RingError::NoMemory => OpenError::NoMemory,
        })?;
        let max_message_size = store.config().max_message_size.min(ring.max_payload());
        let attach = Attach::claim(&store).ok_or(OpenError::Busy)?;
        let base = store.next_index().map_err(|_| OpenError::Closed)?;
        let (producer, consumer) = ring.split();
        let shared = Arc::new(Shared {
            store,
            base,
            ring: producer.ring_arc(),
            ring_size: cfg.ring_size,
            wait: cfg.wait,
            prod: CachePadded::new(ProducerCounters::default()),
            wr: CachePadded::new(WriterCounters::default()),
            state: CachePadded::new(AtomicU8::new(RUNNING)),
            paused: AtomicBool::new(false),
            pinned: AtomicU8::new(0),
            failure: Mutex::new(None),
            exited: AtomicBool::new(false),
            close_store: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            wake: Mutex::new(()),
            cv: Condvar::new(),
        });
        let sh = shared.clone();
        let wcfg = cfg.clone();
        let worker = Worker::spawn("tachyon-async", cfg.core, move |ctx| {
            writer::run(ctx, sh, consumer, wcfg, reporter, attach)
        })
        .map_err(OpenError::Io)?;
        let (core, pinned) = worker.placement();
        if core.is_some() {
            shared
                .pinned
                .store(if pinned { 1 } else { 2 }, Ordering::Relaxed);
        }
        Ok(AsyncStore {
            shared,
            producer: SpinMutex::new(producer),
            wake: worker.wake_line().clone(),
            worker: Mutex::new(Some(worker)),
            max_message_size,
            on_full: cfg.on_full,
            wake_on_push: cfg.wait == WaitStrategy::Park,
        })
    }

    /// The store written to.
    pub fn store(&self) -> &Arc<Store> {
        &self.shared.store
    }

    /// The largest message accepted: the store's limit, or half the ring
    /// less a header if that is smaller.
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    pub fn state(&self) -> State {
        State::from_u8(self.shared.state.load(Ordering::Acquire))
    }

    /// The writer's failure, if it failed.
    pub fn failure(&self) -> Option<Failure> {
        self.shared.failure()
    }

    #[cold]
    fn refused(&self, state: u8) -> AppendError {
        match state {
            FAILED => AppendError::Failed(self.shared.failure().unwrap_or(Failure::Panicked)),
            _ => AppendError::Closed,
        }
    }

    /// Enqueues a copy of `data`; returns the index it will have in the
    /// store. Never blocks longer than the `OnFull::Spin` limit (plus the
    /// wait for the producer mutex, which other appends hold for as long).
    #[inline]
    pub fn append(&self, data: &[u8]) -> Result<u64, AppendError> {
        if data.len() > self.max_message_size {
            return Err(AppendError::TooLarge);
        }
        let sh = &*self.shared;
        let mut p = self.producer.lock();
        // Closing changes the state under this mutex, so no push follows it.
        let st = sh.state.load(Ordering::Relaxed);
        if st != RUNNING {
            return Err(self.refused(st));
        }
        // Only written under the producer mutex: a plain load/store pair.
        let seq = sh.prod.enqueued.load(Ordering::Relaxed);
        if p.try_push(data).is_err() {
            self.push_slow(&mut p, data)?;
        }
        sh.prod.enqueued.store(seq + 1, Ordering::Release);
        // A writer parked on an empty ring is woken by the next push with
        // `Park` (the strategy that trades producer cost for CPU). Otherwise
        // a napping writer is only woken when the ring passes half full: no
        // syscall on a producer's steady path; the writer's naps are short.
        let nap = self.wake.state();
        let wake = nap != Sleep::Awake
            && ((nap == Sleep::Sleeping && self.wake_on_push)
                || p.backlog_over(sh.ring_size as u64 / 2));
        drop(p);
        if wake {
            self.wake.wake();
        }
        Ok(sh.base + seq)
    }

    #[cold]
    #[inline(never)]
    fn push_slow(&self, p: &mut Producer, data: &[u8]) -> Result<(), AppendError> {
        let sh = &*self.shared;
        sh.prod.full_events.bump(1);
        self.wake.wake();
        let reject = || sh.prod.rejected.bump(1);
        let limit = match self.on_full {
            OnFull::Error => {
                reject();
                return Err(AppendError::Full);
            }
            OnFull::Spin(limit) => limit,
        };
        let deadline = Instant::now().checked_add(limit);
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            match p.try_push(data) {
                Ok(()) => return Ok(()),
                Err(PushError::TooLarge) => return Err(AppendError::TooLarge),
                Err(PushError::Full) => {}
            }
            let st = sh.state.load(Ordering::Relaxed);
            if st != RUNNING {
                return Err(self.refused(st));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                reject();
                return Err(AppendError::Full);
            }
        }
    }

    /// Waits until every message enqueued before the call is in the store.
    /// Returns the store's next index covered by the flush (`base +
    /// enqueued`). A timeout too large to add to the clock waits without
    /// a deadline.
    pub fn flush(&self, timeout: Duration) -> Result<u64, WaitError> {
        let target = self.shared.prod.enqueued.load(Ordering::Acquire);
        self.wait_until(timeout, |sh| sh.wr.written.load(Ordering::SeqCst) >= target)?;
        Ok(self.shared.base + target)
    }

    /// Waits until the ring is empty (everything enqueued so far, including
    /// by appends racing with the drain, is in the store).
    pub fn drain(&self, timeout: Duration) -> Result<(), WaitError> {
        self.wait_until(timeout, |sh| {
            sh.wr.written.load(Ordering::SeqCst) >= sh.prod.enqueued.load(Ordering::SeqCst)
        })
    }

    fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&Shared) -> bool,
    ) -> Result<(), WaitError> {
        let sh = &*self.shared;
        let st = sh.state.load(Ordering::Acquire);
        if st == CLOSING || st == CLOSED {
            return Err(WaitError::Closed);
        }
        let deadline = Instant::now().checked_add(timeout);
        sh.waiters.fetch_add(1, Ordering::SeqCst);
        self.wake.wake();
        let r = loop {
            if done(sh) {
                break Ok(());
            }
            if let Some(f) = sh.failure() {
                break Err(WaitError::Failed(f));
            }
            if sh.exited.load(Ordering::Acquire) {
                // Stopped without reaching the target: closed meanwhile.
                break if done(sh) {
                    Ok(())
                } else {
                    Err(WaitError::Closed)
                };
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break Err(WaitError::Timeout);
            }
            let g = lock(&sh.wake);
            if done(sh) {
                break Ok(());
            }
            let nap = deadline.map_or(Duration::MAX, |d| d - now);
            let nap = nap.min(Duration::from_millis(2));
            let _ = sh.cv.wait_timeout(g, nap);
        };
        sh.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Current counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Test hook: while paused the writer takes nothing from the ring (so a
    /// test can fill it). `close` unpauses.
    #[doc(hidden)]
    pub fn set_paused(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::Release);
        self.wake.wake();
    }

    /// Refuses further appends and tells the writer to write what is
    /// queued and stop.
    fn begin_close(&self) {
        let _p = self.producer.lock();
        for from in [RUNNING, FAILED] {
            let _ = self.shared.state.compare_exchange(
                from,
                CLOSING,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        self.shared.paused.store(false, Ordering::Release);
    }

    /// Refuses further appends, lets the writer write everything queued,
    /// stops and joins it. Returns the writer's failure if it had one (the
    /// messages it had not written are then lost). Idempotent. Does not
    /// close the store. Blocks: from the BEAM, on a dirty scheduler.
    pub fn close(&self) -> Result<(), Failure> {
        self.begin_close();
        let worker = lock(&self.worker).take();
        if let Some(w) = worker {
            if w.join().is_err() {
                let mut f = lock(&self.shared.failure);
                if f.is_none() {
                    *f = Some(Failure::Panicked);
                }
            }
        }
        self.shared.state.store(CLOSED, Ordering::Release);
        self.shared.notify_waiters();
        match self.shared.failure() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// [`AsyncStore::close`] without waiting: the writer writes what is
    /// queued, then (with `close_store`) closes the store, and ends; its join
    /// goes to the worker reaper. For callers that must not block (a BEAM
    /// monitor callback or destructor).
    pub fn close_in_background(&self, close_store: bool) {
        if close_store {
            self.shared.close_store.store(true, Ordering::Release);
        }
        self.begin_close();
        // Dropping the worker wakes it and hands its join to the reaper.
        drop(lock(&self.worker).take());
    }

    /// Whether the writer thread has ended.
    pub fn writer_exited(&self) -> bool {
        self.shared.exited.load(Ordering::Acquire)
    }
}

impl Drop for AsyncStore {
    fn drop(&mut self) {
        self.close_in_background(false);
    }
}

#[cfg(test)]
mod tests;
