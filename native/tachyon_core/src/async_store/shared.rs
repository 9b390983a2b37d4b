//! What the handle, the producers and the writer share: the state word,
//! the counters (producers' and writer's, each on its own cache line), the
//! failure, and the flush waiters' wake-up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_utils::CachePadded;

use super::{Failure, State, Stats};
use crate::counter::Counter;
use crate::ring::Ring;
use crate::store::Store;
use crate::sys::lock;
use crate::wait::WaitStrategy;

/// The state word: appends are taken while `RUNNING`.
pub(super) const RUNNING: u8 = 0;
pub(super) const FAILED: u8 = 1;
pub(super) const CLOSING: u8 = 2;
pub(super) const CLOSED: u8 = 3;

/// Producer-written counters (under the producer mutex: one writer at a
/// time), on their own cache line.
#[derive(Default)]
pub(super) struct ProducerCounters {
    /// Messages enqueued; the release store that publishes a push.
    pub(super) enqueued: AtomicU64,
    pub(super) full_events: Counter,
    pub(super) rejected: Counter,
}

/// Writer-written counters, on their own cache line.
#[derive(Default)]
pub(super) struct WriterCounters {
    /// Messages in the store; what flushes wait for.
    pub(super) written: AtomicU64,
    pub(super) written_bytes: Counter,
    pub(super) batches: Counter,
    pub(super) high_water: Counter,
}

pub(super) struct Shared {
    pub(super) store: Arc<Store>,
    pub(super) base: u64,
    pub(super) ring: Arc<Ring>,
    pub(super) ring_size: usize,
    pub(super) wait: WaitStrategy,
    pub(super) prod: CachePadded<ProducerCounters>,
    pub(super) wr: CachePadded<WriterCounters>,
    /// RUNNING / FAILED / CLOSING / CLOSED. Read by every append.
    pub(super) state: CachePadded<AtomicU8>,
    /// Test hook: the writer takes nothing from the ring while set.
    pub(super) paused: AtomicBool,
    /// 0: no core asked, 1: pinned, 2: refused.
    pub(super) pinned: AtomicU8,
    pub(super) failure: Mutex<Option<Failure>>,
    /// Set (also on a panic) when the writer thread is about to end.
    pub(super) exited: AtomicBool,
    /// Close the store when the writer ends (set by a background close).
    pub(super) close_store: AtomicBool,
    pub(super) waiters: AtomicUsize,
    pub(super) wake: Mutex<()>,
    pub(super) cv: Condvar,
}

impl Shared {
    pub(super) fn failure(&self) -> Option<Failure> {
        lock(&self.failure).clone()
    }

    pub(super) fn notify_waiters(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.wake);
            self.cv.notify_all();
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let enqueued = self.prod.enqueued.load(Ordering::Acquire);
        Stats {
            enqueued,
            written: self.wr.written.load(Ordering::Acquire),
            written_bytes: self.wr.written_bytes.get(),
            batches: self.wr.batches.get(),
            full_events: self.prod.full_events.get(),
            rejected: self.prod.rejected.get(),
            high_water_bytes: self.wr.high_water.get(),
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
