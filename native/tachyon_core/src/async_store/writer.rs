//! The async store's writer thread: batches from the ring into the store.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::report::Ticker;
use crate::ring::{Batch, Consumer};
use crate::sys::lock;
use crate::worker::Ctx;

use super::{Attach, Config, Failure, Report, Reporter, Shared, CLOSED, CLOSING, FAILED, RUNNING};

/// Sets `exited` and wakes waiters when the writer ends, even by a panic.
struct ExitGuard(Arc<Shared>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.exited.store(true, Ordering::Release);
        let _g = lock(&self.0.wake);
        self.0.cv.notify_all();
    }
}

/// The writer's body (runs on its [`crate::worker::Worker`]). Ends when the
/// store fails or, once closing, when the ring is empty; the worker's stop
/// flag alone does not end it, so nothing queued is dropped.
pub(super) fn run(
    ctx: &Ctx,
    sh: Arc<Shared>,
    mut cons: Consumer,
    cfg: Config,
    mut reporter: Option<Reporter>,
    attach: Attach,
) {
    let guard = ExitGuard(sh.clone());
    let mut report = |r: Report| {
        if let Some(f) = reporter.as_mut() {
            f(r);
        }
    };
    let mut waiter = ctx.waiter(cfg.wait, cfg.max_park);
    let mut clock = Ticker::new(cfg.stats_interval);
    let failure = loop {
        if !sh.paused.load(Ordering::Acquire) {
            let b = cons.batch(cfg.batch_count, cfg.batch_bytes);
            if !b.is_empty() {
                waiter.reset();
                let used = b.backlog();
                sh.wr.high_water.raise_to(used);
                let n = b.len();
                if let Err(f) = write_batch(&sh, &b) {
                    break Some(f);
                }
                b.release();
                sh.notify_waiters();
                if clock.due() {
                    report(Report::Stats(sh.stats()));
                }
                if !cfg.linger.is_zero()
                    && n < cfg.batch_count
                    && sh.waiters.load(Ordering::Relaxed) == 0
                    && sh.state.load(Ordering::Relaxed) == RUNNING
                {
                    waiter.nap(cfg.linger);
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
        if clock.due() {
            report(Report::Stats(sh.stats()));
        }
        // The waiter announces a sleep on the wake line, then checks once
        // more: a push that raced with the announcement is not slept over.
        waiter.idle(|| {
            (!cons.is_empty() && !sh.paused.load(Ordering::Acquire))
                || sh.state.load(Ordering::Acquire) != RUNNING
        });
    };
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
    // Another async store may claim the store from here on.
    drop(attach);
    if sh.close_store.load(Ordering::Acquire) {
        sh.store.close();
    }
    drop(guard);
}

/// Writes one batch; updates `written`. On a failure, `written` counts the
/// messages of the batch that did reach the store.
fn write_batch(sh: &Shared, b: &Batch<'_>) -> Result<(), Failure> {
    let done = sh.wr.written.load(Ordering::Relaxed);
    let expected = sh.base + done;
    match sh.store.next_index() {
        Ok(n) if n != expected => return Err(Failure::IndexConflict { expected, found: n }),
        Ok(_) => {}
        Err(e) => return Err(Failure::from_store(e)),
    }
    let n = b.len() as u64;
    let (stored, result) = match sh.store.append_many(b.iter()) {
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
        b.iter().take(stored as usize).map(|s| s.len() as u64).sum()
    };
    sh.wr.written_bytes.bump(bytes);
    sh.wr.batches.bump(1);
    sh.wr.written.store(done + stored, Ordering::SeqCst);
    result
}
