//! The owner of a resource: the process its thread delivers to, monitored
//! so that its death closes the resource (`Tachyon.UDP` sockets, bus
//! members). One mechanism for every part with an owner.

use std::sync::Mutex;

use rustler::{Env, LocalPid, Monitor};

use crate::res::{Handle, HotResource, Obj};

struct Inner {
    pid: LocalPid,
    monitor: Option<Monitor>,
}

/// The owner pid and its monitor, behind a lock taken once per delivered
/// batch at most.
pub struct Owner(Mutex<Inner>);

/// Why [`Owner::transfer`] refused.
pub enum Transfer {
    NotOwner,
    /// The new owner is not alive.
    Dead,
}

impl Owner {
    pub fn new(pid: LocalPid) -> Owner {
        Owner(Mutex::new(Inner { pid, monitor: None }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pid(&self) -> LocalPid {
        self.lock().pid
    }

    /// Monitors the owner (call once, before any thread delivers): false if
    /// it is not alive.
    pub fn watch<T: HotResource>(&self, res: &Handle<T>, env: Env<'_>) -> bool {
        let mut o = self.lock();
        match res.monitor(env, &o.pid) {
            Some(m) => {
                o.monitor = Some(m);
                true
            }
            None => false,
        }
    }

    /// Whether `monitor` (from a `down` callback) is the owner's.
    pub fn is_watched_by(&self, monitor: &Monitor) -> bool {
        self.lock().monitor.as_ref() == Some(monitor)
    }

    /// Stops watching (an explicit close).
    pub fn unwatch<T: HotResource>(&self, res: &Obj<'_, T>, env: Env<'_>) {
        let m = self.lock().monitor.take();
        if let Some(m) = m {
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
        let mut o = self.lock();
        if o.pid != env.pid() {
            return Err(Transfer::NotOwner);
        }
        if o.pid == pid {
            return Ok(());
        }
        let m = res.monitor(env, &pid).ok_or(Transfer::Dead)?;
        if let Some(old) = o.monitor.take() {
            res.demonitor(env, &old);
        }
        o.pid = pid;
        o.monitor = Some(m);
        Ok(())
    }
}
