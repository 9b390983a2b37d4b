//! The standby's shell: follows the primary through a member's sockets,
//! feeds the standby's protocol ([`StandbyCore`]), copies into a [`Store`],
//! and when the protocol takes over, runs the sequencer it became on the
//! standby's own command port.
//!
//! The rules: docs/ARCHITECTURE.md, "Failover".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::core::member::MemberConfig;
use super::core::standby::{Action, StandbyCore};
use super::core::{nanos, Nanos};
use super::member::{SockSink, Sockets};
use super::sequencer::{Sequencer, SequencerConfig};
use super::{clock, SeqError};
use crate::counter::Counter;
use crate::store::Store;
use crate::worker::{Ctx, Worker};

/// Standby options.
#[derive(Debug, Clone)]
pub struct StandbyConfig {
    /// What it becomes on takeover (its command port, log, bus, thread).
    pub seq: SequencerConfig,
    /// The primary's command address.
    pub primary: std::net::SocketAddr,
    /// The member id it follows the bus with (it never publishes).
    pub follower_id: u32,
    /// Silence of the primary (no datagram) before taking over.
    pub takeover_after: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    /// Entries copied from the primary.
    copied: Counter,
    /// Logs set aside (another session, or a deposed primary's).
    rebuilt: Counter,
    /// Time from the primary's last datagram to the new primary running.
    takeover_ns: Counter,
    next: Counter,
    send_errors: Counter,
    malformed: Counter,
}

/// A snapshot of a standby's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbyStats {
    pub copied: u64,
    pub rebuilt: u64,
    /// The standby's next index (entries held).
    pub next_seq: u64,
    pub promoted: bool,
    pub takeover_ns: u64,
    /// It follows a primary (was welcomed).
    pub following: bool,
}

struct Shared {
    counters: Counters,
    takeover_now: AtomicBool,
    /// It has heard the primary (its welcome) at least once.
    following: AtomicBool,
    promoted: Mutex<Option<Sequencer>>,
    error: Mutex<Option<String>>,
}

/// A running standby (and, after a takeover, the primary it became).
pub struct Standby {
    shared: Arc<Shared>,
    worker: Option<Worker>,
}

impl Standby {
    pub fn start(cfg: StandbyConfig) -> Result<Standby, SeqError> {
        if cfg.follower_id == 0 {
            return Err(SeqError::BadConfig);
        }
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            takeover_now: AtomicBool::new(false),
            following: AtomicBool::new(false),
            promoted: Mutex::new(None),
            error: Mutex::new(None),
        });
        // Opened here: a log that cannot be opened fails the start.
        let store = Store::open(&cfg.seq.dir, cfg.seq.store.clone())?;
        let mut mcfg = MemberConfig::new(cfg.primary, cfg.follower_id);
        mcfg.bus = cfg.seq.bus;
        mcfg.max_datagram = cfg.seq.max_datagram;
        mcfg.max_message_size = cfg.seq.max_datagram;
        // Room for bursts while it appends: a datagram it loses is one it
        // must get again from the primary, which may be dying.
        mcfg.socket.recbuf = Some(cfg.seq.socket.recbuf.unwrap_or(4 << 20));
        let socks = Sockets::bind(&mcfg)?;
        let core = StandbyCore::new(
            mcfg.clone(),
            cfg.seq.core(),
            nanos(cfg.takeover_after),
            store,
            clock::now(),
        )?;
        shared.counters.next.raise_to(core.next_index());
        let sh = shared.clone();
        let worker = Worker::spawn("tachyon-standby", cfg.seq.core, move |ctx| {
            if let Err(e) = follow(ctx, &cfg, &mcfg, &sh, core, socks) {
                *sh.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.reason());
            }
        })?;
        Ok(Standby {
            shared,
            worker: Some(worker),
        })
    }

    /// Takes over now (the primary's node went down, say).
    pub fn take_over(&self) {
        self.shared.takeover_now.store(true, Ordering::Release);
        if let Some(w) = &self.worker {
            w.wake();
        }
    }

    /// The sequencer it became, if it took over.
    pub fn promoted(&self) -> std::sync::MutexGuard<'_, Option<Sequencer>> {
        self.shared
            .promoted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Why the standby stopped following, if it failed.
    pub fn error(&self) -> Option<String> {
        self.shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn stats(&self) -> StandbyStats {
        let c = &self.shared.counters;
        StandbyStats {
            copied: c.copied.get(),
            rebuilt: c.rebuilt.get(),
            next_seq: c.next.get(),
            promoted: self.promoted().is_some(),
            takeover_ns: c.takeover_ns.get(),
            following: self.shared.following.load(Ordering::Acquire),
        }
    }

    /// Stops following (joins the thread) and stops the sequencer it
    /// became, if any. Blocks: from the BEAM, on a dirty scheduler.
    pub fn stop(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        if let Some(s) = self.promoted().as_mut() {
            s.stop();
        }
    }
}

/// Moves a log aside: `<dir>.epoch<N>.<nanos>`.
fn set_aside(dir: &std::path::Path, epoch: u32) -> Result<(), SeqError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut to = dir.as_os_str().to_owned();
    to.push(format!(".epoch{epoch}.{nanos}"));
    std::fs::rename(dir, &to)?;
    Ok(())
}

fn follow(
    ctx: &Ctx,
    cfg: &StandbyConfig,
    mcfg: &MemberConfig,
    sh: &Shared,
    mut core: StandbyCore<Store>,
    socks: Sockets,
) -> Result<(), SeqError> {
    let mut batches = socks.batches(mcfg);
    let mut waiter = ctx.waiter(cfg.seq.wait, Duration::from_millis(1));
    let c = &sh.counters;
    while !ctx.stopped() {
        let mut sink = SockSink {
            sock: &socks.sock,
            connected: false,
            errors: &c.send_errors,
        };
        let n = socks.recv(&mut batches, 64, &c.malformed, &mut |d, from| {
            core.on_datagram(clock::now(), from, d, &mut sink)
        })?;
        let now = clock::now();
        if sh.takeover_now.load(Ordering::Acquire) {
            core.take_over();
        }
        let due: Nanos = if n > 0 {
            waiter.reset();
            core.end_batch(now, &mut sink);
            now
        } else {
            core.tick(now, &mut sink)
        };
        c.copied.set(core.copied);
        c.rebuilt.set(core.rebuilt);
        c.next.set(core.next_index());
        if core.following() {
            sh.following.store(true, Ordering::Release);
        }
        match core.take_action() {
            Some(Action::ResetLog { epoch }) => {
                drop(core.take_log());
                set_aside(&cfg.seq.dir, epoch)?;
                let store = Store::open(&cfg.seq.dir, cfg.seq.store.clone())?;
                core.set_log(store, clock::now());
                continue;
            }
            Some(Action::TookOver { last_heard }) => {
                let Some(s) = core.into_promoted() else {
                    return Err(SeqError::BadLog);
                };
                drop(socks);
                let s = Sequencer::run_core(cfg.seq.clone(), s)?;
                c.takeover_ns.set(clock::now().saturating_sub(last_heard));
                *sh.promoted.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
                return Ok(());
            }
            None => {}
        }
        if n == 0 {
            let now = clock::now();
            if due > now {
                waiter.idle_at_most(Some(Duration::from_nanos(due - now)), || false);
            }
        }
    }
    Ok(())
}
