//! A standby sequencer: follows the primary like a member, copying every
//! entry of its log into a log of its own at the same index, and takes
//! over when the primary falls silent (or when told to): it then starts a
//! [`Sequencer`] on that log with the next epoch, on its own command port.
//!
//! The rules (docs/ARCHITECTURE.md, "Failover"):
//! * every datagram carries the sender's epoch; members follow the highest
//!   epoch they have heard and send their commands to its sender;
//! * a takeover writes an epoch record (the next epoch) as the first entry
//!   of the new epoch: numbering continues after the last entry the standby
//!   holds;
//! * a standby whose log is of another session, or of an older epoch than
//!   its primary's (a deposed primary rejoining), sets that log aside
//!   (renamed `<dir>.epoch<N>.<nanos>`) and copies the primary's from 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::member::Deliver;
use super::sequencer::{Sequencer, SequencerConfig};
use super::wire::{Msg, CONTROL, EPOCH};
use super::{Member, MemberConfig, SeqError};
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
    next: Counter,
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
            next: Counter::default(),
            takeover_now: AtomicBool::new(false),
            following: AtomicBool::new(false),
            promoted: Mutex::new(None),
            error: Mutex::new(None),
        });
        // Opened here: a log that cannot be opened fails the start.
        let store = Store::open(&cfg.seq.dir, cfg.seq.store.clone())?;
        inspect(&store)?;
        let sh = shared.clone();
        let worker = Worker::spawn("tachyon-standby", cfg.seq.core, move |ctx| {
            if let Err(e) = follow_then_take_over(ctx, &cfg, &sh, store) {
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
            next_seq: self.shared.next.get(),
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

/// The session (entry 0) and last epoch of a log, `None` if empty.
fn inspect(store: &Store) -> Result<Option<(u64, u32)>, SeqError> {
    let next = store.next_index()?;
    if next == 0 {
        return Ok(None);
    }
    let session = store.read_with(0, |e| Msg::from_entry(e).map(|m| m.member_seq))??;
    let mut epoch = 0u32;
    let mut at = 1;
    while at < next {
        let n = store.read_range(at, 4096, 16 << 20, |_, e| {
            if let Ok(m) = Msg::from_entry(e) {
                if m.member_id == 0 && m.flags & (CONTROL | EPOCH) == CONTROL | EPOCH {
                    epoch = m.member_seq as u32;
                }
            }
        })?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Ok(Some((session, epoch)))
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

fn follow_then_take_over(
    ctx: &Ctx,
    cfg: &StandbyConfig,
    sh: &Shared,
    first: Store,
) -> Result<(), SeqError> {
    let mut first = Some(first);
    // When the primary was last heard (across rebuilds).
    let mut last_heard: Option<Instant> = None;
    let mut mcfg = MemberConfig::new(cfg.primary, cfg.follower_id);
    mcfg.bus = cfg.seq.bus;
    mcfg.raw = true;
    mcfg.max_datagram = cfg.seq.max_datagram;
    mcfg.max_message_size = cfg.seq.max_datagram;
    mcfg.connect_timeout = Duration::from_millis(200);
    // Room for bursts while it appends: a datagram it loses is one it
    // must get again from the primary, which may be dying.
    mcfg.socket.recbuf = Some(cfg.seq.socket.recbuf.unwrap_or(4 << 20));
    let mut waiter = ctx.waiter(cfg.seq.wait, Duration::from_millis(1));
    'log: loop {
        let store = match first.take() {
            Some(s) => s,
            None => Store::open(&cfg.seq.dir, cfg.seq.store.clone())?,
        };
        let held = inspect(&store)?;
        let next = store.next_index()?;
        sh.next.raise_to(next);
        mcfg.from = Some(next);
        // Until the primary answers (or the standby is told to take over).
        let member = loop {
            if ctx.stopped() {
                return Ok(());
            }
            if sh.takeover_now.load(Ordering::Acquire) && held.is_some() {
                return take_over(cfg, sh, store, Instant::now());
            }
            match Member::open(mcfg.clone()) {
                Ok(m) => break m,
                Err(SeqError::Timeout) => {
                    // A primary heard before and silent since: take over.
                    if held.is_some()
                        && last_heard.is_some_and(|t: Instant| t.elapsed() >= cfg.takeover_after)
                    {
                        return take_over(cfg, sh, store, last_heard.expect("heard"));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        last_heard = Some(Instant::now());
        sh.following.store(true, Ordering::Release);
        if let Some((session, epoch)) = held {
            if session != member.session() || epoch < member.epoch() {
                // Another session, or a deposed primary rejoining.
                drop(member);
                drop(store);
                set_aside(&cfg.seq.dir, epoch)?;
                sh.counters.rebuilt.add(1);
                sh.next.raise_to(0);
                continue 'log;
            }
        }
        let mut bad = false;
        // One buffer for every entry copied.
        let mut e = Vec::with_capacity(cfg.seq.max_datagram);
        loop {
            let mut copy = |seq: u64, m: &Msg<'_>| {
                e.clear();
                m.write(&mut e);
                match store.append(&e) {
                    Ok(i) if i == seq => {
                        // This thread is the only writer.
                        sh.counters.copied.bump(1);
                        sh.next.raise_to(seq + 1);
                    }
                    _ => bad = true,
                }
            };
            let n = member.poll_into(64, &mut Deliver::Entries(&mut copy))?;
            if bad {
                // The log and the primary's disagree: copy it again.
                drop(member);
                drop(store);
                set_aside(&cfg.seq.dir, 0)?;
                sh.counters.rebuilt.add(1);
                continue 'log;
            }
            if ctx.stopped() {
                return Ok(());
            }
            if n > 0 {
                last_heard = Some(Instant::now());
                waiter.reset();
                continue;
            }
            let silence = member.silence();
            if silence >= cfg.takeover_after || sh.takeover_now.load(Ordering::Acquire) {
                let last_heard = Instant::now() - silence;
                drop(member);
                return take_over(cfg, sh, store, last_heard);
            }
            let due = member.tick().min(cfg.takeover_after - silence);
            waiter.idle_at_most(Some(due), || false);
        }
    }
}

fn take_over(
    cfg: &StandbyConfig,
    sh: &Shared,
    store: Store,
    last_heard: Instant,
) -> Result<(), SeqError> {
    let mut scfg = cfg.seq.clone();
    scfg.new_epoch = true;
    let s = Sequencer::start_on(scfg, store)?;
    sh.counters
        .takeover_ns
        .add(last_heard.elapsed().as_nanos() as u64);
    *sh.promoted.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    Ok(())
}
