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
//! * Waiting: the writer takes a [`WaitStrategy`] when the ring is empty,
//!   and may nap for `linger` after a small batch so that messages
//!   accumulate (fewer, larger batches; a core left to the BEAM under a
//!   steady trickle). Before it naps it publishes `sleeping` (LINGERING or
//!   PARKED), which a producer reads after each push (a plain load of a line
//!   written only at those transitions). A producer unparks the writer only
//!   when the ring is past half full, or, with [`WaitStrategy::Park`], when
//!   the writer is parked on an empty ring: the steady producer path makes
//!   no system call. `flush`, `drain` and `close` always wake the writer.
//!   Otherwise a message waits at most one nap (`linger`, or `max_park` after
//!   an idle spell) before the writer takes it.
//! * Failures: a store error (disk full, a segment that cannot be created,
//!   the store closed under it) stops the writer. Messages already written
//!   stay valid in the store (the store never leaves a partial record);
//!   messages still in the ring are not written ("lost", counted in
//!   [`Stats`]); later appends and flushes get the failure.
//! * Close: refuses new appends, lets the writer write everything queued,
//!   then joins it. `Drop` does the same.
//! * Reports: an optional callback, called on the writer thread only, gets
//!   periodic [`Stats`], the failure, and a final report when the thread
//!   stops.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::ring::{self, Batch, Consumer, Producer, PushError, Ring};
use crate::spin::SpinMutex;
use crate::store::{Mode, Store, StoreError};
use crate::sys::lock;
use crate::wait::{online_cores, pin_to_core, Idle, WaitStrategy};

/// What an append does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFull {
    /// Return [`AppendError::Full`] at once.
    Error,
    /// Spin (with a pause hint) for at most this long waiting for room, then
    /// return [`AppendError::Full`].
    Spin(Duration),
}

/// Options of [`AsyncStore::open`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Ring bytes: a power of two between 4 KiB and 1 GiB.
    pub ring_size: usize,
    /// What the writer does when the ring is empty.
    pub wait: WaitStrategy,
    /// The longest nap of `Backoff` / `Park`.
    pub max_park: Duration,
    /// Pin the writer thread to this core.
    pub core: Option<usize>,
    pub on_full: OnFull,
    /// At most this many messages per store batch.
    pub batch_count: usize,
    /// About this many payload bytes per store batch.
    pub batch_bytes: usize,
    /// How often the writer calls the reporter with [`Report::Stats`].
    pub stats_interval: Option<Duration>,
    /// After a batch smaller than `batch_count`, the writer naps this long
    /// before it polls again, so that messages accumulate into larger
    /// batches and the writer does not hold a core under a steady trickle.
    /// `flush`, `drain`, `close` and a ring past half full wake it early.
    /// Zero: poll again at once (then wait per `wait`).
    pub linger: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_size: 256 << 10,
            wait: WaitStrategy::default_for_cores(online_cores()),
            max_park: Duration::from_millis(1),
            core: None,
            on_full: OnFull::Spin(Duration::from_micros(100)),
            batch_count: 1024,
            batch_bytes: 1 << 20,
            stats_interval: None,
            linger: Duration::ZERO,
        }
    }
}

/// Why the writer stopped. `Clone`, unlike [`StoreError`], so that every
/// later caller can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    NoSpace,
    Closed,
    ReadOnly,
    Corrupt {
        segment: u64,
        offset: u64,
    },
    /// Another I/O error (`errno` when the OS gave one).
    Io {
        errno: Option<i32>,
        message: String,
    },
    /// The store's next index is not the one the writer expected: something
    /// else appended to the store.
    IndexConflict {
        expected: u64,
        found: u64,
    },
    /// The writer thread panicked (a bug).
    Panicked,
}

impl Failure {
    pub fn from_store(e: StoreError) -> Failure {
        match e {
            StoreError::NoSpace => Failure::NoSpace,
            StoreError::Closed => Failure::Closed,
            StoreError::ReadOnly => Failure::ReadOnly,
            StoreError::Corrupt { segment, offset } => Failure::Corrupt { segment, offset },
            StoreError::Io(e) => Failure::Io {
                errno: e.raw_os_error(),
                message: e.to_string(),
            },
            other => Failure::Io {
                errno: None,
                message: other.to_string(),
            },
        }
    }

    /// The equivalent store error, for failures that are store errors.
    pub fn to_store_error(&self) -> Option<StoreError> {
        Some(match self {
            Failure::NoSpace => StoreError::NoSpace,
            Failure::Closed => StoreError::Closed,
            Failure::ReadOnly => StoreError::ReadOnly,
            Failure::Corrupt { segment, offset } => StoreError::Corrupt {
                segment: *segment,
                offset: *offset,
            },
            Failure::Io { errno: Some(n), .. } => StoreError::Io(io::Error::from_raw_os_error(*n)),
            Failure::Io {
                errno: None,
                message,
            } => StoreError::Io(io::Error::other(message.clone())),
            Failure::IndexConflict { .. } | Failure::Panicked => return None,
        })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::IndexConflict { expected, found } => {
                write!(
                    f,
                    "index conflict: expected next index {expected}, the store is at {found}"
                )
            }
            Failure::Io { message, .. } => write!(f, "{message}"),
            Failure::NoSpace => write!(f, "no space left on device"),
            Failure::Closed => write!(f, "the store was closed"),
            Failure::ReadOnly => write!(f, "the store is read-only"),
            Failure::Corrupt { segment, offset } => {
                write!(f, "corrupt record in segment {segment} at offset {offset}")
            }
            Failure::Panicked => write!(f, "the writer thread panicked"),
        }
    }
}

/// Why [`AsyncStore::open`] failed.
#[derive(Debug)]
pub enum OpenError {
    /// The store is a reader.
    ReadOnly,
    Closed,
    /// Another `AsyncStore` already writes to this store.
    Busy,
    /// `ring_size` is not a power of two in range.
    BadRingSize,
    NoMemory,
    /// Spawning the writer thread failed.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for OpenError {}

/// Why an append did not enqueue the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// [`AsyncStore::close`] was called.
    Closed,
    /// The ring stayed full (see [`OnFull`]).
    Full,
    /// Larger than [`AsyncStore::max_message_size`].
    TooLarge,
    /// The writer failed earlier; nothing more is accepted.
    Failed(Failure),
}

/// Why a flush or drain returned without reaching its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    Timeout,
    Closed,
    Failed(Failure),
}

/// Life cycle of the writer as seen by callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Failed,
    Closing,
    Closed,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Failed => "failed",
            State::Closing => "closing",
            State::Closed => "closed",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            RUNNING => State::Running,
            FAILED => State::Failed,
            CLOSING => State::Closing,
            _ => State::Closed,
        }
    }
}

const AWAKE: u8 = 0;
const LINGERING: u8 = 1;
const PARKED: u8 = 2;

const RUNNING: u8 = 0;
const FAILED: u8 = 1;
const CLOSING: u8 = 2;
const CLOSED: u8 = 3;

/// Counters of one `AsyncStore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages accepted by `append`.
    pub enqueued: u64,
    /// Messages written to the store by the writer.
    pub written: u64,
    /// Payload bytes written to the store.
    pub written_bytes: u64,
    /// Store batches (`append_many` calls) the writer made.
    pub batches: u64,
    /// Appends that found the ring full (whether or not a spin then found
    /// room).
    pub full_events: u64,
    /// Appends that returned `Full`.
    pub rejected: u64,
    /// The most ring bytes in use the writer saw when it took a batch.
    pub high_water_bytes: u64,
    pub ring_size: u64,
    /// Ring bytes in use now.
    pub ring_used: u64,
    /// The store index of the first message of this `AsyncStore`.
    pub base_index: u64,
    /// The index the next append gets.
    pub next_index: u64,
    pub state: &'static str,
    pub wait: &'static str,
    /// `Some(true)` if the writer is pinned to `core`, `Some(false)` if the
    /// kernel refused, `None` if no core was asked for.
    pub pinned: Option<bool>,
}

impl Stats {
    /// Enqueued but not (yet, or ever, after a failure) written.
    pub fn pending(&self) -> u64 {
        self.enqueued - self.written.min(self.enqueued)
    }
}

/// What the writer tells its reporter.
#[derive(Debug, Clone)]
pub enum Report {
    /// Periodic, every `stats_interval`.
    Stats(Stats),
    /// The writer stopped on this failure (the last report).
    Failed(Failure, Stats),
    /// The writer stopped after a close, everything written (the last report).
    Stopped(Stats),
}

/// Called on the writer thread.
pub type Reporter = Box<dyn FnMut(Report) + Send>;

/// Producer-written counters, on their own cache line.
#[derive(Default)]
struct ProducerCounters {
    enqueued: AtomicU64,
    full_events: AtomicU64,
    rejected: AtomicU64,
}

/// Writer-written counters, on their own cache line.
#[derive(Default)]
struct WriterCounters {
    written: AtomicU64,
    written_bytes: AtomicU64,
    batches: AtomicU64,
    high_water: AtomicU64,
}

struct Shared {
    store: Arc<Store>,
    base: u64,
    ring: Arc<Ring>,
    ring_size: usize,
    wait: WaitStrategy,
    prod: CachePadded<ProducerCounters>,
    wr: CachePadded<WriterCounters>,
    /// RUNNING / FAILED / CLOSING / CLOSED. Read by every append.
    state: CachePadded<AtomicU8>,
    /// AWAKE, LINGERING (napping after a small batch) or PARKED (napping
    /// on an empty ring). Written by the writer at those transitions only;
    /// read by every append.
    sleeping: CachePadded<AtomicU8>,
    /// Test hook: the writer takes nothing from the ring while set.
    paused: AtomicBool,
    /// 0: no core asked, 1: pinned, 2: refused.
    pinned: AtomicU8,
    failure: Mutex<Option<Failure>>,
    /// Set (also on a panic) when the writer thread is about to end.
    exited: AtomicBool,
    waiters: AtomicUsize,
    wake: Mutex<()>,
    cv: Condvar,
    thread: OnceLock<Thread>,
}

impl Shared {
    fn failure(&self) -> Option<Failure> {
        lock(&self.failure).clone()
    }

    fn wake_writer(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    fn notify_waiters(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.wake);
            self.cv.notify_all();
        }
    }

    fn stats(&self) -> Stats {
        let enqueued = self.prod.enqueued.load(Ordering::Acquire);
        Stats {
            enqueued,
            written: self.wr.written.load(Ordering::Acquire),
            written_bytes: self.wr.written_bytes.load(Ordering::Relaxed),
            batches: self.wr.batches.load(Ordering::Relaxed),
            full_events: self.prod.full_events.load(Ordering::Relaxed),
            rejected: self.prod.rejected.load(Ordering::Relaxed),
            high_water_bytes: self.wr.high_water.load(Ordering::Relaxed),
            ring_size: self.ring_size as u64,
            ring_used: self.ring.used() as u64,
            base_index: self.base,
            next_index: self.base + enqueued,
            state: State::from_u8(self.state.load(Ordering::Acquire)).name(),
            wait: self.wait.name(),
            pinned: match self.pinned.load(Ordering::Relaxed) {
                1 => Some(true),
                2 => Some(false),
                _ => None,
            },
        }
    }
}

/// Stores that currently have an `AsyncStore` writing to them (by address of
/// the shared `Store`, which stays alive while the `AsyncStore` holds it).
static ATTACHED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// An asynchronous appender in front of a [`Store`].
pub struct AsyncStore {
    shared: Arc<Shared>,
    producer: SpinMutex<Producer>,
    handle: Mutex<Option<JoinHandle<()>>>,
    max_message_size: usize,
    on_full: OnFull,
    wake_on_push: bool,
    attached: AtomicBool,
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
        let key = Arc::as_ptr(&store) as usize;
        {
            let mut a = lock(&ATTACHED);
            if a.contains(&key) {
                return Err(OpenError::Busy);
            }
            a.push(key);
        }
        let detach = || lock(&ATTACHED).retain(|k| *k != key);
        let base = match store.next_index() {
            Ok(n) => n,
            Err(_) => {
                detach();
                return Err(OpenError::Closed);
            }
        };
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
            sleeping: CachePadded::new(AtomicU8::new(AWAKE)),
            paused: AtomicBool::new(false),
            pinned: AtomicU8::new(0),
            failure: Mutex::new(None),
            exited: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            wake: Mutex::new(()),
            cv: Condvar::new(),
            thread: OnceLock::new(),
        });
        let sh = shared.clone();
        let wcfg = cfg.clone();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("tachyon-async".into())
            .spawn(move || writer_main(sh, consumer, wcfg, reporter, started_tx));
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                detach();
                return Err(OpenError::Io(e));
            }
        };
        // Return once the thread runs (named, pinned): callers can count it.
        let _ = started_rx.recv_timeout(Duration::from_secs(5));
        let _ = shared.thread.set(handle.thread().clone());
        Ok(AsyncStore {
            shared,
            producer: SpinMutex::new(producer),
            handle: Mutex::new(Some(handle)),
            max_message_size,
            on_full: cfg.on_full,
            wake_on_push: cfg.wait == WaitStrategy::Park,
            attached: AtomicBool::new(true),
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
        let nap = sh.sleeping.load(Ordering::Relaxed);
        let wake = nap != AWAKE
            && ((nap == PARKED && self.wake_on_push) || p.backlog_over(sh.ring_size as u64 / 2));
        drop(p);
        if wake {
            sh.wake_writer();
        }
        Ok(sh.base + seq)
    }

    #[cold]
    #[inline(never)]
    fn push_slow(&self, p: &mut Producer, data: &[u8]) -> Result<(), AppendError> {
        let sh = &*self.shared;
        let c = &sh.prod.full_events;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        sh.wake_writer();
        let reject = || {
            let r = &sh.prod.rejected;
            r.store(r.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        };
        let limit = match self.on_full {
            OnFull::Error => {
                reject();
                return Err(AppendError::Full);
            }
            OnFull::Spin(limit) => limit,
        };
        let deadline = Instant::now() + limit;
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
            if Instant::now() >= deadline {
                reject();
                return Err(AppendError::Full);
            }
        }
    }

    /// Waits until every message enqueued before the call is in the store.
    /// Returns the store's next index covered by the flush (`base +
    /// enqueued`).
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
        let deadline = Instant::now() + timeout;
        sh.waiters.fetch_add(1, Ordering::SeqCst);
        sh.wake_writer();
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
            if now >= deadline {
                break Err(WaitError::Timeout);
            }
            let g = lock(&sh.wake);
            if done(sh) {
                break Ok(());
            }
            let nap = (deadline - now).min(Duration::from_millis(2));
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
        self.shared.wake_writer();
    }

    /// Refuses further appends, lets the writer write everything queued,
    /// stops and joins it. Returns the writer's failure if it had one (the
    /// messages it had not written are then lost). Idempotent. Does not
    /// close the store.
    pub fn close(&self) -> Result<(), Failure> {
        {
            let _p = self.producer.lock();
            let _ = self.shared.state.compare_exchange(
                RUNNING,
                CLOSING,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            let _ = self.shared.state.compare_exchange(
                FAILED,
                CLOSING,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        self.shared.paused.store(false, Ordering::Release);
        self.shared.wake_writer();
        if let Some(h) = lock(&self.handle).take() {
            if h.join().is_err() {
                let mut f = lock(&self.shared.failure);
                if f.is_none() {
                    *f = Some(Failure::Panicked);
                }
            }
        }
        self.shared.state.store(CLOSED, Ordering::Release);
        self.shared.notify_waiters();
        if self.attached.swap(false, Ordering::AcqRel) {
            let key = Arc::as_ptr(&self.shared.store) as usize;
            lock(&ATTACHED).retain(|k| *k != key);
        }
        match self.shared.failure() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Whether the writer thread has ended.
    pub fn writer_exited(&self) -> bool {
        self.shared.exited.load(Ordering::Acquire)
    }
}

impl Drop for AsyncStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Sets `exited` and wakes waiters when the writer ends, even by a panic.
struct ExitGuard(Arc<Shared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.exited.store(true, Ordering::Release);
        let _g = lock(&self.0.wake);
        self.0.cv.notify_all();
    }
}

/// Empty polls after which `Backoff` leaves its spin and yield phases
/// (200 + 300 in `wait.rs`) and starts to sleep: raise `sleeping` a little
/// before, so producers unpark the writer.
const BACKOFF_SLEEPS_AFTER: u32 = 480;

fn writer_main(
    sh: Arc<Shared>,
    mut cons: Consumer,
    cfg: Config,
    mut reporter: Option<Reporter>,
    started: std::sync::mpsc::Sender<()>,
) {
    let _guard = ExitGuard(sh.clone());
    if let Some(core) = cfg.core {
        let ok = pin_to_core(core);
        sh.pinned.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
    }
    let _ = started.send(());
    drop(started);
    let mut report = |r: Report| {
        if let Some(f) = reporter.as_mut() {
            f(r);
        }
    };
    let mut idle = Idle::new(cfg.wait, cfg.max_park);
    let mut empty_polls = 0u32;
    let mut sleeping = AWAKE;
    let mut next_stats = cfg.stats_interval.map(|d| (Instant::now() + d, d));
    let mut stats_due = |report: &mut dyn FnMut(Report)| {
        if let Some((at, every)) = next_stats.as_mut() {
            let now = Instant::now();
            if now >= *at {
                *at = now + *every;
                report(Report::Stats(sh.stats()));
            }
        }
    };
    let failure = loop {
        if !sh.paused.load(Ordering::Acquire) {
            let b = cons.batch(cfg.batch_count, cfg.batch_bytes);
            if !b.is_empty() {
                if sleeping != AWAKE {
                    sh.sleeping.store(AWAKE, Ordering::Relaxed);
                    sleeping = AWAKE;
                }
                empty_polls = 0;
                idle.reset();
                let used = cons.backlog();
                if used > sh.wr.high_water.load(Ordering::Relaxed) {
                    sh.wr.high_water.store(used, Ordering::Relaxed);
                }
                let r = write_batch(&sh, &cons, &b);
                if let Err(f) = r {
                    break Some(f);
                }
                cons.release(&b);
                sh.notify_waiters();
                stats_due(&mut report);
                if !cfg.linger.is_zero()
                    && b.len() < cfg.batch_count
                    && sh.waiters.load(Ordering::Relaxed) == 0
                    && sh.state.load(Ordering::Relaxed) == RUNNING
                {
                    sh.sleeping.store(LINGERING, Ordering::SeqCst);
                    sleeping = LINGERING;
                    std::thread::park_timeout(cfg.linger);
                }
                continue;
            }
        }
        let st = sh.state.load(Ordering::Acquire);
        if st == CLOSING || st == CLOSED {
            // Every push happened before the state change (same mutex), so
            // an empty ring now means everything was written.
            if cons.is_empty() {
                break None;
            }
            continue;
        }
        stats_due(&mut report);
        empty_polls = empty_polls.saturating_add(1);
        let may_sleep = match cfg.wait {
            WaitStrategy::Park => true,
            WaitStrategy::Backoff => empty_polls >= BACKOFF_SLEEPS_AFTER,
            WaitStrategy::BusySpin | WaitStrategy::Yield => false,
        };
        if may_sleep && sleeping != PARKED {
            sh.sleeping.store(PARKED, Ordering::SeqCst);
            sleeping = PARKED;
            // A push that raced with the flag may not have seen it.
            if !cons.is_empty() && !sh.paused.load(Ordering::Acquire) {
                continue;
            }
        }
        idle.idle();
    };
    if sleeping != AWAKE {
        sh.sleeping.store(AWAKE, Ordering::Relaxed);
    }
    match failure {
        Some(f) => {
            *lock(&sh.failure) = Some(f.clone());
            let _ = sh
                .state
                .compare_exchange(RUNNING, FAILED, Ordering::AcqRel, Ordering::Acquire);
            sh.notify_waiters();
            report(Report::Failed(f, sh.stats()));
        }
        None => report(Report::Stopped(sh.stats())),
    }
}

/// Writes one batch; updates `written`. On a failure, `written` counts the
/// messages of the batch that did reach the store.
fn write_batch(sh: &Shared, cons: &Consumer, b: &Batch) -> Result<(), Failure> {
    let done = sh.wr.written.load(Ordering::Relaxed);
    let expected = sh.base + done;
    match sh.store.next_index() {
        Ok(n) if n != expected => return Err(Failure::IndexConflict { expected, found: n }),
        Ok(_) => {}
        Err(e) => return Err(Failure::from_store(e)),
    }
    let n = b.len() as u64;
    let (stored, result) = match sh.store.append_many(cons.iter(b)) {
        Ok(Some(last)) if last == expected + n - 1 => (n, Ok(())),
        Ok(Some(last)) => (
            n,
            Err(Failure::IndexConflict {
                expected: expected + n - 1,
                found: last,
            }),
        ),
        Ok(None) => (0, Ok(())),
        Err(e) => {
            let stored = sh
                .store
                .next_index()
                .map(|x| x.saturating_sub(expected).min(n))
                .unwrap_or(0);
            (stored, Err(Failure::from_store(e)))
        }
    };
    let bytes: u64 = if stored == n {
        b.payload_bytes() as u64
    } else {
        cons.iter(b)
            .take(stored as usize)
            .map(|s| s.len() as u64)
            .sum()
    };
    let wb = &sh.wr.written_bytes;
    wb.store(wb.load(Ordering::Relaxed) + bytes, Ordering::Relaxed);
    let nb = &sh.wr.batches;
    nb.store(nb.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    sh.wr.written.store(done + stored, Ordering::SeqCst);
    result
}

#[cfg(test)]
mod tests;
