//! Arbitrary datagrams fed to the real state machines, past the parsers:
//! a sequencer node ([`node`]: `Node<MemLog>`, node 0 or 1 of a group of
//! 3, with retention on) and a member ([`member`]: `Join`, then `Rx` and
//! `Tx` from its welcome, with the handover between them), each driven by
//! an operation sequence ([`crate::ops`]). What a datagram says (lengths,
//! offsets, ranges, counts, node ids) must never index, allocate or loop
//! unchecked.
//!
//! The node's replays and checkpoint chunks are run too (against its
//! log), as the shell's threads would. The seeds are traffic recorded in a
//! small lossless world of three such nodes and a member
//! ([`crate::seeds`]): replayed, they take the actor through elections,
//! sequencing, a member's join and publishes, a change of primary.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use tachyon_core::seq::core::member::{self, Join, Mark, MemberConfig, Rx, Tx};
use tachyon_core::seq::core::node::{Node, NodeConfig};
use tachyon_core::seq::core::{
    replay_datagrams, CheckpointJob, Env, MemLog, Nanos, NodeEvent, Replay, Sink,
};

use crate::ops::{self, Op};

pub use crate::ops::node_addr as addr;

/// Datagrams sent: `(to, bytes)`.
pub type Sent = Vec<(SocketAddr, Vec<u8>)>;

/// An environment that keeps what a node asks of its shell (what it
/// sends only if `keep`: the fuzz targets look at it, not the world of
/// the seeds).
#[derive(Default)]
pub struct Quiet {
    pub keep: bool,
    pub sent: Sent,
    pub replays: Vec<Replay>,
    pub checkpoints: Vec<CheckpointJob>,
}

impl Sink for Quiet {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        if self.keep {
            self.sent.extend(to.iter().map(|a| (*a, d.to_vec())));
        } else {
            black_box((to, d));
        }
    }
}

impl Env for Quiet {
    fn replay(&mut self, job: Replay) {
        self.replays.push(job);
    }
    fn event(&mut self, e: NodeEvent) {
        black_box(e);
    }
    fn sync(&mut self, _: u64, _: u64) {}
    fn trim(&mut self, _: u64, checkpoint: Arc<Vec<u8>>) {
        black_box(checkpoint);
    }
    fn send_checkpoint(&mut self, job: CheckpointJob) {
        self.checkpoints.push(job);
    }
}

/// A node of the group of 3 (`id` 0, eager, or 1) on a `MemLog` that
/// keeps 64 entries (in segments of 16) once retention looks.
pub struct NodeActor {
    pub node: Node<MemLog>,
    pub now: Nanos,
    /// Keep what it sends (the world of the seeds), or not (the target).
    pub keep: bool,
}

impl NodeActor {
    pub fn new(id: u8) -> NodeActor {
        let mut cfg = NodeConfig::new(id, (0..3).map(addr).collect());
        cfg.eager = id == 0;
        cfg.seed = 1 + id as u64;
        cfg.incarnation = 100 + id as u32;
        cfg.new_log_id = 1000 + id as u64;
        let mut log = MemLog::new();
        log.retain = 64;
        log.segment = 16;
        NodeActor {
            node: Node::new(cfg, log, 0).expect("a node on an empty log"),
            now: 0,
            keep: false,
        }
    }

    /// Applies `op`; what the node sends (replays and checkpoint chunks
    /// made as the shell would) goes to `sent`.
    pub fn apply(&mut self, op: &Op<'_>, sent: &mut Sent) {
        let mut env = Quiet {
            keep: self.keep,
            ..Quiet::default()
        };
        match *op {
            Op::Datagram { from, bytes } => {
                self.node
                    .on_datagram(self.now, ops::sender(from), bytes, &mut env)
            }
            Op::Advance(d) => {
                self.now += d;
                black_box(self.node.tick(self.now, &mut env));
            }
            Op::EndBatch => self.node.end_batch(self.now, &mut env),
            Op::Extra { arg, .. } => {
                let down = (arg < 3).then_some(arg);
                self.node.witness_down(self.now, down);
            }
        }
        let mut buf = Vec::new();
        let keep = self.keep;
        for job in &env.replays {
            let to = job.to_addr;
            let _ = replay_datagrams(self.node.log(), job, &mut buf, &mut |d| {
                if keep {
                    sent.push((to, d.to_vec()))
                }
            });
        }
        for job in &env.checkpoints {
            job.each_datagram(&mut buf, &mut |d| {
                if keep {
                    sent.push((job.to, d.to_vec()))
                }
            });
        }
        sent.append(&mut env.sent);
    }
}

/// The node target: the first byte picks node 0 or 1, the rest are
/// operations.
pub fn node(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let mut a = NodeActor::new(which & 1);
    let mut sent = Vec::new();
    for op in ops::parse(rest) {
        a.apply(&op, &mut sent);
        sent.clear();
    }
    black_box((a.node.term(), a.node.commit(), a.node.next_seq()));
}

enum State {
    Joining(Join),
    Joined {
        tx: Box<Tx>,
        rx: Box<Rx>,
        mark: Option<Mark>,
    },
}

/// Member 1 of the group of 3 (nodes 0, 1, 2; unicast bus), joining from
/// the next message on.
pub struct MemberActor {
    cfg: MemberConfig,
    state: State,
    pub now: Nanos,
    /// Messages delivered.
    pub delivered: u64,
    /// Welcomes refused (its id taken, a bad start): it joins again.
    rejoins: u32,
    /// Keep what it sends (the world of the seeds), or not (the target).
    pub keep: bool,
}

impl Default for MemberActor {
    fn default() -> Self {
        Self::new()
    }
}

impl MemberActor {
    pub fn new() -> MemberActor {
        let mut cfg = MemberConfig::new(addr(0), 1);
        cfg.alternates = vec![addr(1), addr(2)];
        cfg.incarnation = 0x5eed_0001;
        MemberActor {
            state: State::Joining(Join::new(&cfg, true)),
            cfg,
            now: 0,
            delivered: 0,
            rejoins: 0,
            keep: false,
        }
    }

    pub fn is_joined(&self) -> bool {
        matches!(self.state, State::Joined { .. })
    }

    /// Applies `op`; what the member sends goes to `sent`.
    pub fn apply(&mut self, op: &Op<'_>, sent: &mut Sent) {
        let mut out = Quiet {
            keep: self.keep,
            ..Quiet::default()
        };
        let now = self.now;
        let delivered = &mut self.delivered;
        let mut deliver = |seq: u64, member: u32, snap: u8, data: &[u8]| {
            *delivered += 1;
            black_box((seq, member, snap, data));
        };
        match (&mut self.state, *op) {
            (State::Joining(j), Op::Datagram { from, bytes }) => {
                j.on_datagram(now, bytes, Some(ops::sender(from)))
            }
            (State::Joined { tx, rx, mark }, Op::Datagram { from, bytes }) => {
                if mark.is_none() {
                    *mark = Some(rx.mark());
                    member::looked(tx.counters(), now);
                }
                rx.on_datagram(now, bytes, Some(ops::sender(from)), &mut deliver);
                black_box(rx.take_events());
            }
            (State::Joined { tx, rx, mark }, Op::EndBatch) => {
                if let Some(m) = mark.take() {
                    if let Some(h) = rx.finish(now, m, &mut out) {
                        black_box(h.apply(tx, now, &mut out));
                    }
                }
                black_box(rx.take_events());
            }
            (State::Joined { tx, .. }, Op::Extra { bytes, .. }) => {
                black_box(tx.publish_many(now, [bytes], &mut out).is_ok());
            }
            (_, Op::Advance(d)) => {
                self.now += d;
                self.tick(&mut out);
            }
            _ => {}
        }
        sent.append(&mut out.sent);
    }

    fn tick(&mut self, out: &mut Quiet) {
        let now = self.now;
        match &mut self.state {
            State::Joining(j) => {
                let Ok(w) = j.tick(now, out) else { return };
                match member::from_welcome(&self.cfg, &w, true, now) {
                    Ok((tx, rx)) => {
                        self.state = State::Joined {
                            tx: Box::new(tx),
                            rx: Box::new(rx),
                            mark: None,
                        }
                    }
                    Err(_) if self.rejoins < 8 => {
                        self.rejoins += 1;
                        self.state = State::Joining(Join::new(&self.cfg, true));
                    }
                    Err(_) => {}
                }
            }
            State::Joined { tx, rx, .. } => {
                black_box(rx.tick(now, out));
                black_box(tx.tick(now, out));
            }
        }
    }
}

/// The member target: operations only.
pub fn member(data: &[u8]) {
    let mut m = MemberActor::new();
    let mut sent = Vec::new();
    for op in ops::parse(data) {
        m.apply(&op, &mut sent);
        sent.clear();
    }
    black_box(m.delivered);
}
