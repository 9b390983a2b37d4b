//! The owner of a resource: the process its thread delivers to (or that
//! polls it), monitored so that its death closes the resource. The rules,
//! without a runtime: `P` names a process and `M` a monitor (the NIF's
//! `LocalPid` and `Monitor`), and the monitoring itself is done by the
//! caller's closures.
//!
//! * One owner at a time; only the owner may hand the resource to another
//!   process ([`Owner::transfer`]), which must be alive (monitored first:
//!   a refused monitor leaves everything as it was).
//! * Only the current owner's monitor closes the resource: the DOWN of a
//!   monitor replaced by a transfer (it may be delivered after the
//!   transfer when the old owner died meanwhile) is ignored, and so is any
//!   DOWN after an explicit close ([`Owner::unwatch`]).
//! * The owner's DOWN closes once ([`Owner::down`] forgets the monitor).

use std::sync::{Mutex, MutexGuard};

#[derive(Debug)]
struct Inner<P, M> {
    pid: P,
    monitor: Option<M>,
}

/// The owner and its monitor, behind a lock taken once per delivered batch
/// at most.
#[derive(Debug)]
pub struct Owner<P, M>(Mutex<Inner<P, M>>);

/// Why [`Owner::transfer`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// The caller is not the owner.
    NotOwner,
    /// The new owner is not alive.
    Dead,
}

impl<P: Copy + PartialEq, M: PartialEq> Owner<P, M> {
    /// Owned by `pid`, not watched yet ([`Owner::watch`]).
    pub fn new(pid: P) -> Owner<P, M> {
        Owner(Mutex::new(Inner { pid, monitor: None }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner<P, M>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pid(&self) -> P {
        self.lock().pid
    }

    /// Watches the owner with the monitor `monitor(pid)` makes (call once,
    /// before any thread delivers): false if it is not alive (no monitor).
    pub fn watch(&self, monitor: impl FnOnce(&P) -> Option<M>) -> bool {
        let mut o = self.lock();
        match monitor(&o.pid) {
            Some(m) => {
                o.monitor = Some(m);
                true
            }
            None => false,
        }
    }

    /// A monitor went down: true if it is the owner's (close the resource),
    /// once; any other (a replaced owner's, or after
    /// [`Owner::unwatch`]) is ignored.
    pub fn down(&self, monitor: &M) -> bool {
        let mut o = self.lock();
        if o.monitor.as_ref() == Some(monitor) {
            o.monitor = None;
            true
        } else {
            false
        }
    }

    /// Stops watching (an explicit close): the monitor to remove, if any
    /// (removed by the caller, outside the lock).
    pub fn unwatch(&self) -> Option<M> {
        self.lock().monitor.take()
    }

    /// `caller` makes `to` the owner; only the owner may. `monitor(to)`
    /// watches the new owner (`None`: not alive, and nothing changes), then
    /// `demonitor` removes the old owner's monitor (a DOWN of it that comes
    /// anyway is ignored). Handing it to the owner itself changes nothing.
    pub fn transfer(
        &self,
        caller: P,
        to: P,
        monitor: impl FnOnce(&P) -> Option<M>,
        demonitor: impl FnOnce(M),
    ) -> Result<(), Transfer> {
        let mut o = self.lock();
        if o.pid != caller {
            return Err(Transfer::NotOwner);
        }
        if o.pid == to {
            return Ok(());
        }
        let m = monitor(&to).ok_or(Transfer::Dead)?;
        if let Some(old) = o.monitor.take() {
            demonitor(old);
        }
        o.pid = to;
        o.monitor = Some(m);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;

    /// A runtime of processes 1..: monitors are numbered from 100 and a
    /// process in `dead` cannot be monitored.
    #[derive(Default)]
    struct Runtime {
        dead: RefCell<HashSet<u32>>,
        next: Cell<u32>,
        /// (monitor, process) of every live monitor.
        monitors: RefCell<Vec<(u32, u32)>>,
        demonitored: RefCell<Vec<u32>>,
    }

    impl Runtime {
        fn monitor(&self, pid: &u32) -> Option<u32> {
            if self.dead.borrow().contains(pid) {
                return None;
            }
            let m = 100 + self.next.get();
            self.next.set(self.next.get() + 1);
            self.monitors.borrow_mut().push((m, *pid));
            Some(m)
        }

        fn demonitor(&self, m: u32) {
            self.monitors.borrow_mut().retain(|&(x, _)| x != m);
            self.demonitored.borrow_mut().push(m);
        }

        /// `pid` dies: the DOWNs of its monitors (as delivered).
        fn kill(&self, pid: u32) -> Vec<u32> {
            self.dead.borrow_mut().insert(pid);
            let mut mons = self.monitors.borrow_mut();
            let downs = mons.iter().filter(|&&(_, p)| p == pid).map(|&(m, _)| m);
            let downs: Vec<u32> = downs.collect();
            mons.retain(|&(_, p)| p != pid);
            downs
        }

        fn transfer(&self, o: &Owner<u32, u32>, caller: u32, to: u32) -> Result<(), Transfer> {
            o.transfer(caller, to, |p| self.monitor(p), |m| self.demonitor(m))
        }
    }

    fn owned(rt: &Runtime, pid: u32) -> Owner<u32, u32> {
        let o = Owner::new(pid);
        assert!(o.watch(|p| rt.monitor(p)));
        o
    }

    #[test]
    fn the_owners_death_closes_once() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(o.pid(), 1);
        let downs = rt.kill(1);
        assert_eq!(downs, [100]);
        assert!(o.down(&100));
        // The same DOWN again (never sent twice by a runtime, but harmless).
        assert!(!o.down(&100));
        // Nothing left to demonitor on an explicit close afterwards.
        assert_eq!(o.unwatch(), None);
    }

    #[test]
    fn watching_a_dead_owner_fails_and_nothing_is_watched() {
        let rt = Runtime::default();
        rt.dead.borrow_mut().insert(1);
        let o: Owner<u32, u32> = Owner::new(1);
        assert!(!o.watch(|p| rt.monitor(p)));
        assert_eq!(o.unwatch(), None);
        assert!(!o.down(&100));
    }

    #[test]
    fn an_unrelated_monitors_down_is_ignored() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert!(!o.down(&999));
        // Still watched by its own.
        assert!(o.down(&100));
    }

    #[test]
    fn an_explicit_close_stops_watching_once() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(o.unwatch(), Some(100));
        assert_eq!(o.unwatch(), None);
        // The owner dies after the close (its DOWN raced the demonitor).
        assert!(!o.down(&100));
        assert_eq!(o.pid(), 1);
    }

    #[test]
    fn transfer_moves_the_monitor_to_the_new_owner() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(rt.transfer(&o, 1, 2), Ok(()));
        assert_eq!(o.pid(), 2);
        assert_eq!(*rt.demonitored.borrow(), [100]);
        assert_eq!(*rt.monitors.borrow(), [(101, 2)]);
        // The new owner's death closes.
        assert_eq!(rt.kill(2), [101]);
        assert!(o.down(&101));
    }

    #[test]
    fn the_old_owners_down_after_a_transfer_is_ignored() {
        // The old owner dies as it hands over: its DOWN was on its way
        // before the demonitor and arrives after the transfer.
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        let downs = rt.kill(1);
        assert_eq!(rt.transfer(&o, 1, 2), Ok(()));
        for m in downs {
            assert!(!o.down(&m), "stale monitor {m}");
        }
        assert_eq!(o.pid(), 2);
        // The new owner is still watched.
        assert!(o.down(&101));
    }

    #[test]
    fn only_the_owner_transfers() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(rt.transfer(&o, 2, 3), Err(Transfer::NotOwner));
        // Even to itself.
        assert_eq!(rt.transfer(&o, 2, 2), Err(Transfer::NotOwner));
        assert_eq!(o.pid(), 1);
        assert_eq!(*rt.monitors.borrow(), [(100, 1)]);
        // The old owner, once it handed over, no longer may.
        assert_eq!(rt.transfer(&o, 1, 2), Ok(()));
        assert_eq!(rt.transfer(&o, 1, 3), Err(Transfer::NotOwner));
        assert_eq!(o.pid(), 2);
    }

    #[test]
    fn transfer_to_a_dead_process_changes_nothing() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        rt.dead.borrow_mut().insert(2);
        assert_eq!(rt.transfer(&o, 1, 2), Err(Transfer::Dead));
        assert_eq!(o.pid(), 1);
        assert!(rt.demonitored.borrow().is_empty());
        assert!(o.down(&100), "the owner is still watched");
    }

    #[test]
    fn transfer_to_the_owner_itself_changes_nothing() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(rt.transfer(&o, 1, 1), Ok(()));
        assert_eq!(*rt.monitors.borrow(), [(100, 1)]);
        assert!(rt.demonitored.borrow().is_empty());
        assert!(o.down(&100));
    }

    #[test]
    fn transfer_after_a_close_watches_the_new_owner_only() {
        // Whoever calls checks for a closed resource first; the owner alone
        // still follows the rules: nothing to demonitor, the new one watched.
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        assert_eq!(o.unwatch(), Some(100));
        assert_eq!(rt.transfer(&o, 1, 2), Ok(()));
        assert!(rt.demonitored.borrow().is_empty());
        assert!(o.down(&101));
    }

    #[test]
    fn a_chain_of_transfers_leaves_one_live_monitor() {
        let rt = Runtime::default();
        let o = owned(&rt, 1);
        for (from, to) in [(1, 2), (2, 3), (3, 1), (1, 4)] {
            assert_eq!(rt.transfer(&o, from, to), Ok(()));
        }
        assert_eq!(o.pid(), 4);
        assert_eq!(*rt.monitors.borrow(), [(104, 4)]);
        assert_eq!(*rt.demonitored.borrow(), [100, 101, 102, 103]);
        for stale in 100..104 {
            assert!(!o.down(&stale));
        }
        assert!(o.down(&104));
    }

    #[test]
    fn deliverers_read_the_owner_while_it_is_transferred() {
        // A delivering thread reads the owner once per batch while the
        // owner hands over: it sees one of the owners, never anything else.
        let o = Arc::new(Owner::<u32, u32>::new(1));
        assert!(o.watch(|_| Some(100)));
        let reader = {
            let o = o.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    let p = o.pid();
                    assert!((1..=100).contains(&p), "{p}");
                }
            })
        };
        for to in 2..=100 {
            let r = o.transfer(to - 1, to, |p| Some(100 + p), |_| {});
            assert_eq!(r, Ok(()));
        }
        reader.join().unwrap();
        assert_eq!(o.pid(), 100);
        assert!(o.down(&200));
    }
}
