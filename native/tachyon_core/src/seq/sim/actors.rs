//! The processes of a simulation behind one small trait: sequencer nodes
//! (here: the real `Node` on a [`MemLog`] with its replayer run
//! asynchronously, as the shell's thread does) and members
//! (`super::members`).

use std::net::SocketAddr;

use crate::seq::core::node::{Membership, Node, NodeConfig};
use crate::seq::core::{
    replay_datagrams, CheckpointJob, Env, LogError, MemLog, Nanos, NodeEvent, Outbox, Replay, Rng,
    Sink,
};

pub use super::members::{SimMember, Start, Workload};

/// What a process reports to the simulation.
#[derive(Debug)]
pub enum Event {
    Delivered {
        seq: u64,
        member_id: u32,
        data: Vec<u8>,
    },
    Accepted {
        counter: u64,
    },
    /// A member moved back to `resume` after a fork: it delivers the
    /// primary's order from there.
    MovedBack {
        resume: u64,
    },
    /// A member was told `[from, first)` is gone (retention).
    Skipped {
        from: u64,
        first: u64,
    },
    /// A member's incarnation `inc` was welcomed (its open returned).
    Joined {
        inc: u32,
        start: Start,
    },
    /// A member's incarnation `inc` ended: killed (`undelivered: None`:
    /// what it had not seen delivered may be lost), or closed, telling its
    /// caller that `n` publishes were not delivered (`Some(n)`).
    MemberGone {
        inc: u32,
        undelivered: Option<u64>,
    },
    /// A member's state machine reached `hash` after every message below
    /// `next` ([`super::machine`]).
    State {
        next: u64,
        hash: u64,
    },
    /// Something retention did (`trim`, `install`, `member_skip`,
    /// `trimmed_open`), or a node cut its whole log (`log_cut_whole`),
    /// counted in the report.
    Retention(&'static str),
    /// What a node reported ([`NodeEvent`]): counted, traced, and what a
    /// scenario's triggers wait for.
    Node(NodeEvent),
    Trace(String),
}

/// A node's disk: its log (with the vote), and the boot of its host
/// (changed by a power loss: a node can tell a reboot from a process
/// crash, as `/proc/sys/kernel/random/boot_id` tells the shell).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub log: MemLog,
    pub boot: u64,
}

/// A process: the protocol core and its workload.
pub trait Actor {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    );
    /// After the datagrams of one receive batch.
    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>);
    /// Timed work; returns the next deadline.
    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos;
    /// What survives a crash (a node's disk).
    fn crash(self: Box<Self>) -> Option<Disk>;
    /// A node's log.
    fn log(&self) -> Option<&MemLog>;
    /// The term it sends the bus in, if it acts as primary.
    fn primary_term(&self) -> Option<u64>;
    /// The witness says node `down` is down (its BEAM node, say).
    fn witness(&mut self, _now: Nanos, _down: u8) {}
    /// Forks a member reported.
    fn forks(&self) -> u64 {
        0
    }
    /// A member's next sequence number, a node's commit position.
    fn position(&self) -> u64 {
        0
    }
    /// Its state in a line (traces).
    fn describe(&self) -> String {
        String::new()
    }
    /// A member's command datagrams sent, and resent.
    fn tx_counts(&self) -> (u64, u64) {
        (0, 0)
    }
    /// A member's incarnation (its opens so far).
    fn incarnation(&self) -> u32 {
        0
    }
    /// A member's process is killed (no goodbye); it opens again at
    /// `reopen_at`.
    fn kill_member(&mut self, _reopen_at: Nanos, _ev: &mut Vec<Event>) {}
    /// A member closes (with publishes in flight); it opens again at
    /// `reopen_at`.
    fn close_member(
        &mut self,
        _now: Nanos,
        _reopen_at: Nanos,
        _out: &mut Outbox,
        _ev: &mut Vec<Event>,
    ) {
    }
    /// A member that is down opens again now, starting at `start`.
    fn reopen_member(&mut self, _now: Nanos, _start: Start) {}
    /// A node's log, to change (the nemesis's disk faults).
    fn log_mut(&mut self) -> Option<&mut MemLog> {
        None
    }
    /// A node's view of the group's membership.
    fn membership(&self) -> Option<Membership> {
        None
    }
    /// Asks a node (a primary) to remove node `id` from the group.
    fn remove_node(
        &mut self,
        _now: Nanos,
        _id: u8,
        _out: &mut Outbox,
        _ev: &mut Vec<Event>,
    ) -> bool {
        false
    }
}

// -- nodes ---------------------------------------------------------------------

/// A sequencer node: the core on its log, and its replayer, which answers
/// replay jobs a little later from the log as it is then (the shell's
/// replayer thread wakes up after the job is queued).
pub struct SimNode {
    node: Node<MemLog>,
    /// Replay jobs and when the replayer gets to each.
    replays: Vec<(Nanos, Replay)>,
    queued: Vec<Replay>,
    /// A sync asked (`durability: fsync`) and when the disk is done.
    sync: Option<(Nanos, u64, u64)>,
    /// An entry a replay could not read back (the node is told at its next
    /// step).
    damaged: Option<u64>,
    asked: Option<(u64, u64)>,
    trims: Vec<(u64, std::sync::Arc<Vec<u8>>)>,
    events: Vec<NodeEvent>,
    buf: Vec<u8>,
    rng: Rng,
}

struct SimEnv<'a> {
    out: &'a mut Outbox,
    replays: &'a mut Vec<Replay>,
    events: &'a mut Vec<NodeEvent>,
    asked: &'a mut Option<(u64, u64)>,
    trims: &'a mut Vec<(u64, std::sync::Arc<Vec<u8>>)>,
}

impl Sink for SimEnv<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.out.send(to, d)
    }
}

impl Env for SimEnv<'_> {
    fn replay(&mut self, job: Replay) {
        self.replays.push(job);
    }

    fn event(&mut self, e: NodeEvent) {
        self.events.push(e);
    }

    fn sync(&mut self, upto: u64, gen: u64) {
        *self.asked = Some((upto, gen));
    }

    fn trim(&mut self, first: u64, checkpoint: std::sync::Arc<Vec<u8>>) {
        self.trims.push((first, checkpoint));
    }

    fn send_checkpoint(&mut self, job: CheckpointJob) {
        let mut buf = Vec::new();
        let out = &mut *self.out;
        job.each_datagram(&mut buf, &mut |d| out.send(&[job.to], d));
    }
}

/// The replayer's wake-up: a job waits this long at most.
const REPLAYER_LAG: Nanos = 300_000;

impl SimNode {
    pub fn new(cfg: NodeConfig, disk: Disk, now: Nanos) -> SimNode {
        let rng = Rng::new(cfg.seed ^ 0x5eed_0f2e_91a7);
        let mut log = disk.log;
        log.now = now;
        SimNode {
            node: Node::new(cfg, log, now).expect("node config"),
            replays: Vec::new(),
            queued: Vec::new(),
            sync: None,
            damaged: None,
            asked: None,
            trims: Vec::new(),
            events: Vec::new(),
            buf: Vec::new(),
            rng,
        }
    }

    fn call(
        &mut self,
        now: Nanos,
        out: &mut Outbox,
        ev: &mut Vec<Event>,
        f: impl FnOnce(&mut Node<MemLog>, &mut SimEnv<'_>),
    ) {
        self.node.log_mut().now = now;
        self.run_replays(now, out);
        let mut env = SimEnv {
            out,
            replays: &mut self.queued,
            events: &mut self.events,
            asked: &mut self.asked,
            trims: &mut self.trims,
        };
        if let Some(at) = self.damaged.take() {
            self.node.log_damaged(now, at, &mut env);
        }
        if let Some((at, upto, gen)) = self.sync {
            if at <= now {
                // The disk is done: what the sync covered is on it (the
                // page cache as it is now, if nothing cut it meanwhile:
                // a truncation makes the answer stale, `gen`).
                self.sync = None;
                self.node.log_mut().sync_to(upto);
                self.node.synced(now, upto, gen, &mut env);
            }
        }
        f(&mut self.node, &mut env);
        for (first, cp) in self.trims.drain(..) {
            // The shell saves the checkpoint and removes the segments off
            // the node's thread; what the node serves no longer depends
            // on them from the moment it asked.
            self.node.log_mut().trim(first, &cp);
        }
        for job in self.queued.drain(..) {
            if job.is_small() {
                // Answered by the node's own thread, as the shell does.
                let r = replay_datagrams(self.node.log(), &job, &mut self.buf, &mut |d| {
                    out.send(&[job.to_addr], d)
                });
                if let Err(LogError::Damaged(at)) = r {
                    self.damaged = Some(self.damaged.map_or(at, |d| d.min(at)));
                }
                continue;
            }
            // Now and then the replayer's thread waits for a CPU for long.
            let lag = if self.rng.chance(0.05) {
                self.rng.range(1_000_000, 20_000_000)
            } else {
                self.rng.range(1_000, REPLAYER_LAG)
            };
            self.replays.push((now + lag, job));
        }
        if let Some((upto, gen)) = self.asked.take() {
            // A sync takes 20 us to 1 ms (a slow one now and then).
            let lat = if self.rng.chance(0.05) {
                self.rng.range(1_000_000, 10_000_000)
            } else {
                self.rng.range(20_000, 300_000)
            };
            self.sync = Some((now + lat, upto, gen));
        }
        ev.extend(self.events.drain(..).map(Event::Node));
    }

    /// The replayer: the jobs due, from the log as it is now, unless the
    /// node's fence moved (another term, a truncation) since the job was
    /// made, as the shell's replayer does.
    fn run_replays(&mut self, now: Nanos, out: &mut Outbox) {
        let mut i = 0;
        while i < self.replays.len() {
            if self.replays[i].0 > now {
                i += 1;
                continue;
            }
            let (_, job) = self.replays.remove(i);
            if job.fence == 0 || job.fence != self.node.fence() {
                continue;
            }
            let r = replay_datagrams(self.node.log(), &job, &mut self.buf, &mut |d| {
                out.send(&[job.to_addr], d)
            });
            if let Err(LogError::Damaged(at)) = r {
                self.damaged = Some(self.damaged.map_or(at, |d| d.min(at)));
            }
        }
    }
}

impl Actor for SimNode {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        self.call(now, out, ev, |n, env| n.on_datagram(now, from, d, env));
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        self.call(now, out, ev, |n, env| n.end_batch(now, env));
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        let mut due = now;
        self.call(now, out, ev, |n, env| due = n.tick(now, env));
        let replay = self.replays.iter().map(|r| r.0).min();
        let sync = self.sync.map(|s| s.0);
        [replay, sync]
            .into_iter()
            .flatten()
            .fold(due, |d, x| d.min(x.max(now + 1)))
    }

    fn crash(self: Box<Self>) -> Option<Disk> {
        Some(Disk {
            log: self.node.into_log(),
            boot: 0,
        })
    }

    fn log(&self) -> Option<&MemLog> {
        Some(self.node.log())
    }

    fn log_mut(&mut self) -> Option<&mut MemLog> {
        Some(self.node.log_mut())
    }

    fn membership(&self) -> Option<Membership> {
        Some(self.node.membership().clone())
    }

    fn remove_node(&mut self, now: Nanos, id: u8, out: &mut Outbox, ev: &mut Vec<Event>) -> bool {
        let mut ok = false;
        self.call(now, out, ev, |n, env| {
            ok = n.remove_node(now, id, env).is_ok()
        });
        ok
    }

    fn primary_term(&self) -> Option<u64> {
        self.node.is_leader().then_some(self.node.term() as u64)
    }

    fn position(&self) -> u64 {
        self.node.commit()
    }

    fn witness(&mut self, now: Nanos, down: u8) {
        self.node.witness_down(now, Some(down));
    }

    fn describe(&self) -> String {
        let n = &self.node;
        let c = n.counters();
        format!(
            "{} term {} leader {:?} next {} commit {} messages {} held {} ooo {} nacks {} dup {} replays {} copied {} truncated {} elections {} not_primary {} backpressure {} store_errors {}",
            n.role().name(),
            n.term(),
            n.leader(),
            n.next_seq(),
            n.commit(),
            c.messages.get(),
            c.held.get(),
            c.out_of_order.get(),
            c.nacks.get(),
            c.duplicates.get(),
            c.replays.get(),
            c.copied.get(),
            c.truncated.get(),
            c.elections.get(),
            c.not_primary.get(),
            c.backpressure.get(),
            c.store_errors.get(),
        )
    }
}
