//! The owner of a resource: the process its thread delivers to, monitored
//! so that its death closes the resource (`Tachyon.UDP` sockets, bus
//! members). One mechanism for every part with an owner: the rules are
//! `tachyon_core::owner`'s (tested there), with the VM's pids and monitors.

use rustler::{Env, LocalPid, Monitor};
use tachyon_core::owner;

pub use tachyon_core::owner::Transfer;

use crate::res::{Handle, HotResource, Obj};

/// The owner pid and its monitor, behind a lock taken once per delivered
/// batch at most.
pub struct Owner(owner::Owner<LocalPid, Monitor>);

impl Owner {
    pub fn new(pid: LocalPid) -> Owner {
        Owner(owner::Owner::new(pid))
    }

    pub fn pid(&self) -> LocalPid {
        self.0.pid()
    }

    /// Monitors the owner (call once, before any thread delivers): false if
    /// it is not alive.
    pub fn watch<T: HotResource>(&self, res: &Handle<T>, env: Env<'_>) -> bool {
        self.0.watch(|pid| res.monitor(env, pid))
    }

    /// `monitor` (from a `down` callback) went down: true, once, if it is
    /// the owner's (close the resource).
    pub fn down(&self, monitor: &Monitor) -> bool {
        self.0.down(monitor)
    }

    /// Stops watching (an explicit close).
    pub fn unwatch<T: HotResource>(&self, res: &Obj<'_, T>, env: Env<'_>) {
        if let Some(m) = self.0.unwatch() {
            res.demonitor(env, &m);
        }
    }

    /// Makes `pid` the owner; only the current owner (the calling process)
    /// may.
    pub fn transfer<T: HotResource>(
        &self,
        res: &Obj<'_, T>,
        env: Env<'_>,
        pid: LocalPid,
    ) -> Result<(), Transfer> {
        self.0.transfer(
            env.pid(),
            pid,
            |to| res.monitor(env, to),
            |old| {
                res.demonitor(env, &old);
            },
        )
    }
}
