//! A node actor's state: the real [`Node`] on a [`MemLog`], driven as
//! the simulator's `SimNode` drives it (`seq::sim::actors`), and what a
//! fault leaves of it.
//!
//! * A datagram is one receive batch at the node's current time:
//!   `on_datagram`, `end_batch`, then the tick the simulator gives every
//!   process after a batch (at the same time).
//! * A tick advances the node's clock to the deadline its last tick
//!   returned and calls `tick`.
//! * Replays are answered at once from the log as it is then, after the
//!   call that asked (the logs a check reaches are far below
//!   [`INLINE_REPLAY`](tachyon_core::seq::core::INLINE_REPLAY) entries:
//!   every replay is one the node's own thread answers).
//! * A sync (`durability: fsync`) is pending until its completion step:
//!   the entries it covers reach the platter (`MemLog::sync_to`), then
//!   `synced`, then a tick.
//! * Faults: a crash keeps the log's page cache; a power loss keeps what
//!   the platter holds (a prefix of the unsynced writes, or none) and
//!   changes the boot; a replaced disk is an empty log and another boot.
//!   A restart is `Node::new` on what is left, as a new incarnation.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;

use tachyon_core::seq::core::node::{Node, Role};
use tachyon_core::seq::core::{
    replay_datagrams, CheckpointJob, Env, MemLog, Nanos, NodeEvent, Replay, Rng, Sink,
};
use tachyon_core::seq::wire::Msg;

use crate::config::{ms, node_config, Bounds, Layout, PowerLoss};
use crate::datagram::entry;

/// What a step sent, and (for traces only) what happened.
#[derive(Default)]
pub struct Effects {
    pub sent: Vec<(SocketAddr, Vec<u8>)>,
    /// `Some` when a trace is being written: the events, in words.
    pub notes: Option<Vec<String>>,
}

/// What the state machines send goes into the step's effects.
impl Sink for Effects {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        for a in to {
            self.sent.push((*a, d.to_vec()));
        }
    }
}

impl Effects {
    pub fn traced() -> Effects {
        Effects {
            sent: Vec::new(),
            notes: Some(Vec::new()),
        }
    }

    pub fn note(&mut self, f: impl FnOnce() -> String) {
        if let Some(n) = &mut self.notes {
            n.push(f());
        }
    }
}

/// A node's process.
#[derive(Clone)]
pub enum Life {
    /// A spare node slot not started yet.
    Absent,
    Up(Box<Up>),
    /// Down, its disk waiting for a restart.
    Down(Box<MemLog>),
}

#[derive(Clone)]
pub struct Up {
    pub node: Node<MemLog>,
    /// A sync the node asked for that the disk has not finished: (upto,
    /// gen).
    pub sync: Option<(u64, u64)>,
}

/// A node actor's state.
#[derive(Clone)]
pub struct NodeState {
    pub life: Life,
    /// The host's monotonic clock.
    pub now: Nanos,
    /// When the node asked to be ticked next.
    pub due: Nanos,
    /// The host's boot (a power loss or a new disk reboots it).
    pub boot: u64,
    /// Starts so far (0: the first is running).
    pub starts: u32,
    fp: u64,
}

/// The node's environment for one call: what it sends, asks and reports.
struct McEnv<'a> {
    fx: &'a mut Effects,
    id: usize,
    replays: Vec<Replay>,
    sync: Option<(u64, u64)>,
    checkpoints: Vec<CheckpointJob>,
    trims: Vec<(u64, Arc<Vec<u8>>)>,
}

impl Sink for McEnv<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.fx.send(to, d);
    }
}

impl Env for McEnv<'_> {
    fn replay(&mut self, job: Replay) {
        self.replays.push(job);
    }

    fn event(&mut self, e: NodeEvent) {
        let id = self.id;
        self.fx.note(|| format!("n{id}: {e:?}"));
    }

    fn sync(&mut self, upto: u64, gen: u64) {
        self.sync = Some((upto, gen));
    }

    fn trim(&mut self, first: u64, checkpoint: Arc<Vec<u8>>) {
        self.trims.push((first, checkpoint));
    }

    fn send_checkpoint(&mut self, job: CheckpointJob) {
        self.checkpoints.push(job);
    }
}

impl NodeState {
    /// Node `i`'s first start, on an empty disk, at time 0 (a spare slot
    /// is absent until the membership change starts it).
    pub fn start(b: &Bounds, l: &Layout, i: usize) -> NodeState {
        let mut s = NodeState {
            life: Life::Absent,
            now: 0,
            due: 0,
            boot: 0,
            starts: 0,
            fp: 0,
        };
        if i < l.nodes {
            s.boot_on(b, l, i, MemLog::new(), 0);
        }
        s.seal();
        s
    }

    fn boot_on(&mut self, b: &Bounds, l: &Layout, i: usize, log: MemLog, starts: u32) {
        let cfg = node_config(b, l, i, starts, self.boot);
        self.starts = starts;
        self.life = match Node::new(cfg, log, self.now) {
            Ok(node) => Life::Up(Box::new(Up { node, sync: None })),
            // A MemLog never refuses; were it to, the node stays down.
            Err(_) => Life::Down(Box::default()),
        };
        self.due = self.now;
    }

    pub fn fingerprint(&self) -> u64 {
        self.fp
    }

    /// Recomputes the fingerprint after a change.
    pub fn seal(&mut self) {
        let mut h = crate::fp_hasher();
        match &self.life {
            Life::Absent => 0u8.hash(&mut h),
            Life::Up(up) => {
                1u8.hash(&mut h);
                up.node.fingerprint(&mut h);
                up.sync.hash(&mut h);
            }
            Life::Down(log) => {
                2u8.hash(&mut h);
                log.hash(&mut h);
            }
        }
        (self.now, self.due, self.boot, self.starts).hash(&mut h);
        self.fp = h.finish();
    }

    pub fn node(&self) -> Option<&Node<MemLog>> {
        match &self.life {
            Life::Up(up) => Some(&up.node),
            _ => None,
        }
    }

    pub fn is_up(&self) -> bool {
        matches!(self.life, Life::Up(_))
    }

    pub fn is_down(&self) -> bool {
        matches!(self.life, Life::Down(_))
    }

    /// The log, up or down.
    pub fn log(&self) -> Option<&MemLog> {
        match &self.life {
            Life::Up(up) => Some(up.node.log()),
            Life::Down(log) => Some(log),
            Life::Absent => None,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.node().is_some_and(|n| n.is_leader())
    }

    pub fn sync_pending(&self) -> bool {
        matches!(&self.life, Life::Up(up) if up.sync.is_some())
    }

    /// One call into the node, as `SimNode::call` makes it: then the
    /// replays it asked for are answered from its log, a sync it asked for
    /// is pending.
    fn call(
        &mut self,
        i: usize,
        fx: &mut Effects,
        f: impl FnOnce(&mut Node<MemLog>, Nanos, &mut dyn Env),
    ) {
        let now = self.now;
        let Life::Up(up) = &mut self.life else { return };
        let mut env = McEnv {
            fx,
            id: i,
            replays: Vec::new(),
            sync: None,
            checkpoints: Vec::new(),
            trims: Vec::new(),
        };
        f(&mut up.node, now, &mut env);
        let McEnv {
            fx,
            replays,
            sync,
            checkpoints,
            trims,
            ..
        } = env;
        for (first, cp) in trims {
            // Never with retention off (every check); as the shell would.
            up.node.log_mut().trim(first, &cp);
        }
        let mut buf = Vec::new();
        for job in replays {
            // A read error is never injected: no entry is damaged.
            let _ = replay_datagrams(up.node.log(), &job, &mut buf, &mut |d| {
                fx.sent.push((job.to_addr, d.to_vec()))
            });
        }
        for job in checkpoints {
            job.each_datagram(&mut buf, &mut |d| fx.sent.push((job.to, d.to_vec())));
        }
        if sync.is_some() {
            up.sync = sync;
        }
    }

    /// A tick at the current time.
    fn tick_now(&mut self, i: usize, fx: &mut Effects) {
        let mut due = self.due;
        self.call(i, fx, |n, now, env| due = n.tick(now, env));
        self.due = due;
    }

    /// A datagram from `from`: one receive batch, then a tick.
    pub fn deliver(&mut self, i: usize, from: SocketAddr, d: &[u8], fx: &mut Effects) {
        if !self.is_up() {
            return;
        }
        self.call(i, fx, |n, now, env| n.on_datagram(now, from, d, env));
        self.call(i, fx, |n, now, env| n.end_batch(now, env));
        self.tick_now(i, fx);
        self.seal();
    }

    /// The clock runs to the deadline; the node ticks.
    pub fn tick(&mut self, i: usize, fx: &mut Effects) {
        if !self.is_up() {
            return;
        }
        self.now = self.now.max(self.due);
        self.tick_now(i, fx);
        self.seal();
    }

    /// The disk finished the pending sync.
    pub fn complete_sync(&mut self, i: usize, fx: &mut Effects) {
        let Life::Up(up) = &mut self.life else { return };
        let Some((upto, gen)) = up.sync.take() else {
            return;
        };
        up.node.log_mut().sync_to(upto);
        self.call(i, fx, |n, now, env| n.synced(now, upto, gen, env));
        self.tick_now(i, fx);
        self.seal();
    }

    /// kill -9: the page cache survives.
    pub fn crash(&mut self) {
        if let Life::Up(up) = std::mem::replace(&mut self.life, Life::Absent) {
            self.life = Life::Down(Box::new(up.node.into_log()));
        }
        self.seal();
    }

    /// What a power loss may leave: the platter keeps the log up to each
    /// of these lengths (the synced part at least).
    pub fn power_loss_outcomes(&self, mode: PowerLoss) -> Vec<u64> {
        let Some(log) = self.node().map(|n| n.log()) else {
            return Vec::new();
        };
        let (durable, len) = (log.durable(), log.len());
        match mode {
            PowerLoss::Unsynced => vec![durable],
            PowerLoss::Tail if len > durable + 1 => vec![durable, len - 1],
            PowerLoss::Tail => vec![durable],
            PowerLoss::Prefixes => (durable..=len).collect(),
        }
    }

    /// The host loses power: the platter keeps the log up to `keep` (the
    /// kernel wrote back that much), every other unsynced write is lost;
    /// the host boots again.
    pub fn power_loss(&mut self, keep: u64) {
        if let Life::Up(up) = std::mem::replace(&mut self.life, Life::Absent) {
            let mut log = up.node.into_log();
            log.sync_to(keep);
            // Nothing older than `Nanos::MAX` was written back by age, and
            // every write left is lost (neither written nor torn): the
            // outcome does not depend on the generator.
            log.power_loss(&mut Rng::new(0), Nanos::MAX, 0.0, 0.0);
            self.life = Life::Down(Box::new(log));
            self.boot += 1;
        }
        self.seal();
    }

    /// The disk is replaced by an empty one; the host boots again.
    pub fn replace_disk(&mut self) {
        if self.is_up() {
            self.life = Life::Down(Box::default());
            self.boot += 1;
        }
        self.seal();
    }

    /// A down node starts again on its disk (a new incarnation), and
    /// ticks; an absent spare starts for the first time.
    pub fn restart(&mut self, b: &Bounds, l: &Layout, i: usize, fx: &mut Effects) {
        match std::mem::replace(&mut self.life, Life::Absent) {
            Life::Down(log) => {
                let starts = self.starts + 1;
                self.boot_on(b, l, i, *log, starts);
            }
            Life::Absent => self.boot_on(b, l, i, MemLog::new(), 0),
            up => self.life = up,
        }
        fx.note(|| {
            format!(
                "n{i}: started as {:?}",
                self.node().and_then(|n| n.started_as())
            )
        });
        self.tick_now(i, fx);
        self.seal();
    }

    /// The witness says node `down` is down.
    pub fn witness(&mut self, down: u8) {
        let now = self.now;
        if let Life::Up(up) = &mut self.life {
            up.node.witness_down(now, Some(down));
        }
        self.seal();
    }

    /// As the primary, removes node `id` from the group; false if the node
    /// refused (not the primary, a change pending).
    pub fn remove_node(&mut self, i: usize, id: u8, fx: &mut Effects) -> bool {
        let mut ok = false;
        self.call(i, fx, |n, now, env| {
            ok = n.remove_node(now, id, env).is_ok()
        });
        if ok {
            self.tick_now(i, fx);
        }
        self.seal();
        ok
    }
}

impl PartialEq for NodeState {
    fn eq(&self, other: &NodeState) -> bool {
        self.fp == other.fp
    }
}

impl Eq for NodeState {}

impl Hash for NodeState {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.fp.hash(h);
    }
}

/// A log in a line: its entries.
pub fn log_line(log: &MemLog) -> String {
    let es: Vec<String> = (log.first()..log.len())
        .map(|i| {
            log.entry(i)
                .and_then(|e| Msg::from_entry(e).ok())
                .map_or("?".into(), |m| entry(&m))
        })
        .collect();
    format!("[{}]", es.join(" "))
}

impl fmt::Debug for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.life {
            Life::Absent => write!(f, "absent"),
            Life::Down(log) => write!(
                f,
                "DOWN (boot {}) disk {} durable {}",
                self.boot,
                log_line(log),
                log.durable()
            ),
            Life::Up(up) => {
                let n = &up.node;
                let role = match n.role() {
                    Role::Leader => "PRIMARY",
                    Role::Follower => "follower",
                    Role::PreCandidate => "pre-candidate",
                    Role::Candidate => "candidate",
                };
                write!(
                    f,
                    "{} {role} term {} leader {:?} commit {} t={} due {} log {}{}{}",
                    n.id(),
                    n.term(),
                    n.leader(),
                    n.commit(),
                    ms(self.now),
                    ms(self.due),
                    log_line(n.log()),
                    if n.is_learner() { " learner" } else { "" },
                    match up.sync {
                        Some((u, _)) => format!(" syncing<{u}"),
                        None => String::new(),
                    }
                )
            }
        }
    }
}
