//! The processes a resource's thread delivers to besides its owner: a bus
//! member's subscribers (`Tachyon.Bus.subscribe/1`). Generic over the pid
//! type `P` (the NIF's `LocalPid`) and tested here, without a runtime.
//!
//! * Changes (a subscribe, an unsubscribe) are rare; they take a lock and
//!   bump a version.
//! * The delivering thread reads the list once per batch through its own
//!   [`View`], which copies the list only when the version moved: one
//!   atomic load per batch otherwise, and no allocation once the view's
//!   buffer has grown to the largest list it saw. The thread then builds
//!   each message once and sends it to every pid of the view (the NIF's
//!   `ProcessSender::send_all`): with one receiver that is the same single
//!   send as delivering to the owner.
//! * Who watches the receivers (and removes a dead one) is the caller's
//!   business: `Tachyon.Bus.Subscribers` monitors them. A message sent to a
//!   pid that died meanwhile is dropped by the VM.
//!
//! [`Unheard`] decides when a thread that delivered messages to nobody (no
//! receiver, and no owner that reads them) says so: at once the first
//! time, then at most once per period, with the count since the last
//! notice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The receivers of one resource.
#[derive(Debug)]
pub struct Receivers<P> {
    list: Mutex<Vec<P>>,
    /// Bumped (under the lock) by every change of `list`.
    version: AtomicU64,
}

/// A delivering thread's copy of the receivers (see [`Receivers::refresh`]).
#[derive(Debug)]
pub struct View<P> {
    pids: Vec<P>,
    /// The version copied; `u64::MAX`: none yet.
    version: u64,
}

impl<P> View<P> {
    /// The receivers as of the last refresh.
    pub fn pids(&self) -> &[P] {
        &self.pids
    }

    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
    }
}

impl<P: Copy + PartialEq> Receivers<P> {
    /// Receivers `initial` (duplicates dropped).
    pub fn new(initial: impl IntoIterator<Item = P>) -> Receivers<P> {
        let mut list: Vec<P> = Vec::new();
        for p in initial {
            if !list.contains(&p) {
                list.push(p);
            }
        }
        Receivers {
            list: Mutex::new(list),
            version: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<P>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `p`; false if it already was a receiver (nothing changes).
    pub fn add(&self, p: P) -> bool {
        let mut l = self.lock();
        if l.contains(&p) {
            return false;
        }
        l.push(p);
        self.version.fetch_add(1, Ordering::Release);
        true
    }

    /// Removes `p`; false if it was not a receiver.
    pub fn remove(&self, p: &P) -> bool {
        let mut l = self.lock();
        match l.iter().position(|q| q == p) {
            Some(i) => {
                l.swap_remove(i);
                self.version.fetch_add(1, Ordering::Release);
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the receivers now (rare uses: events, tests).
    pub fn to_vec(&self) -> Vec<P> {
        self.lock().clone()
    }

    /// An empty view; the first [`Receivers::refresh`] fills it.
    pub fn view(&self) -> View<P> {
        View {
            pids: Vec::new(),
            version: u64::MAX,
        }
    }

    /// Brings `view` up to date: one atomic load when nothing changed since
    /// its last refresh, else a copy under the lock (into the view's own
    /// buffer). Returns true if it copied.
    #[inline]
    pub fn refresh(&self, view: &mut View<P>) -> bool {
        if self.version.load(Ordering::Acquire) == view.version {
            return false;
        }
        let l = self.lock();
        view.pids.clear();
        view.pids.extend_from_slice(&l);
        // Changed only under the lock: this is the version of what was copied.
        view.version = self.version.load(Ordering::Relaxed);
        true
    }
}

/// When to report messages delivered to nobody: the first at once, then at
/// most one notice per `every`, carrying the count since the last one.
/// Owned by the delivering thread (no atomics); time is a plain value.
#[derive(Debug)]
pub struct Unheard {
    every: Duration,
    last: Option<Instant>,
    pending: u64,
}

impl Unheard {
    pub fn new(every: Duration) -> Unheard {
        Unheard {
            every,
            last: None,
            pending: 0,
        }
    }

    /// `n` more messages went to nobody at `now`: `Some(count)` when a
    /// notice is due (the count since the previous notice), else `None`
    /// (they are counted for the next one).
    pub fn count(&mut self, n: u64, now: Instant) -> Option<u64> {
        self.pending += n;
        if self.pending == 0 {
            return None;
        }
        let due = match self.last {
            None => true,
            Some(t) => now.saturating_duration_since(t) >= self.every,
        };
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn add_and_remove_change_the_list_once() {
        let r = Receivers::new([1u32, 2, 2]);
        assert_eq!(r.to_vec(), vec![1, 2]);
        assert!(!r.add(1));
        assert!(r.add(3));
        assert!(r.remove(&1));
        assert!(!r.remove(&1));
        let mut got = r.to_vec();
        got.sort();
        assert_eq!(got, vec![2, 3]);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_view_copies_only_when_the_list_changed() {
        let r = Receivers::new([7u32]);
        let mut v = r.view();
        assert!(v.is_empty());
        assert!(r.refresh(&mut v));
        assert_eq!(v.pids(), &[7]);
        assert!(!r.refresh(&mut v), "nothing changed: no copy");
        // A refused change is no change.
        assert!(!r.add(7));
        assert!(!r.remove(&9));
        assert!(!r.refresh(&mut v));
        r.add(8);
        assert!(r.refresh(&mut v));
        assert_eq!(v.pids(), &[7, 8]);
        r.remove(&7);
        r.remove(&8);
        assert!(r.refresh(&mut v));
        assert!(v.is_empty());
        // The buffer is kept: refreshing to a list no larger allocates nothing.
        let cap = v.pids.capacity();
        r.add(1);
        r.refresh(&mut v);
        assert_eq!(v.pids.capacity(), cap);
    }

    #[test]
    fn a_view_never_sees_a_half_made_change() {
        // A writer moves one receiver between two values; every view the
        // reader takes holds exactly one of them.
        let r = Arc::new(Receivers::new([0u32]));
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut cur = 0;
                while !stop.load(Ordering::Relaxed) {
                    let next = 1 - cur;
                    // Add before remove: the list holds one or two, never none.
                    r.add(next);
                    r.remove(&cur);
                    cur = next;
                }
            })
        };
        let mut v = r.view();
        let mut copies = 0;
        for _ in 0..200_000 {
            if r.refresh(&mut v) {
                copies += 1;
            }
            let n = v.pids().len();
            assert!(n == 1 || n == 2, "{:?}", v.pids());
            assert!(v.pids().iter().all(|&p| p <= 1));
        }
        stop.store(true, Ordering::Relaxed);
        w.join().unwrap();
        assert!(copies > 0);
    }

    #[test]
    fn unheard_notices_the_first_at_once_then_once_per_period() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut u = Unheard::new(10 * s);
        assert_eq!(u.count(0, t0), None, "nothing to say");
        assert_eq!(u.count(3, t0), Some(3));
        assert_eq!(u.count(2, t0 + s), None);
        assert_eq!(u.count(4, t0 + 9 * s), None);
        assert_eq!(
            u.count(1, t0 + 10 * s),
            Some(7),
            "the count since the last notice"
        );
        assert_eq!(u.count(1, t0 + 11 * s), None);
        // A clock that went back counts as no time passed.
        assert_eq!(u.count(1, t0), None);
        assert_eq!(u.count(0, t0 + 20 * s), Some(2));
        assert_eq!(u.count(0, t0 + 40 * s), None, "nothing pending");
    }
}
