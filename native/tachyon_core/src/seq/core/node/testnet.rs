//! A lossless network of nodes for the node's unit tests: each
//! millisecond every datagram in flight is delivered, then every node
//! ticks.

use std::net::SocketAddr;

use super::{Node, NodeConfig};
use crate::seq::core::{
    replay_datagrams, CheckpointJob, Env, MemLog, Nanos, NodeEvent, Replay, Sink, MILLI,
};

/// What one step of a node sends and asks for.
#[derive(Default)]
pub struct Out {
    pub sent: Vec<(SocketAddr, Vec<u8>)>,
    pub replays: Vec<Replay>,
}

impl Sink for Out {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.sent.extend(to.iter().map(|a| (*a, d.to_vec())));
    }
}

impl Env for Out {
    fn replay(&mut self, job: Replay) {
        self.replays.push(job);
    }
    fn event(&mut self, _: NodeEvent) {}
    fn sync(&mut self, _: u64, _: u64) {}
    fn trim(&mut self, _: u64, _: std::sync::Arc<Vec<u8>>) {}
    fn send_checkpoint(&mut self, _: CheckpointJob) {}
}

pub fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 7000 + i as u16))
}

/// Nodes on a lossless network: each millisecond every datagram in
/// flight is delivered, then every node ticks.
pub struct Net {
    pub nodes: Vec<Node<MemLog>>,
    pub wire: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    pub now: Nanos,
    /// What node `i` sends is lost while `muted[i]`.
    pub muted: Vec<bool>,
}

impl Net {
    /// `voters` nodes, and a node that joins by asking those of
    /// `joiner_asks` (none if empty).
    pub fn new(voters: usize, joiner_asks: &[usize]) -> Net {
        let group: Vec<SocketAddr> = (0..voters).map(addr).collect();
        let mut nodes = Vec::new();
        for i in 0..voters {
            let mut c = NodeConfig::new(i as u8, group.clone());
            c.eager = i == 0;
            c.seed = 1 + i as u64;
            nodes.push(Node::new(c, MemLog::new(), 0).unwrap());
        }
        if !joiner_asks.is_empty() {
            let mut c = NodeConfig::new(u8::MAX, Vec::new());
            c.addr = addr(voters);
            c.join = joiner_asks.iter().map(|i| addr(*i)).collect();
            c.seed = 99;
            nodes.push(Node::new(c, MemLog::new(), 0).unwrap());
        }
        Net {
            muted: vec![false; nodes.len()],
            nodes,
            wire: Vec::new(),
            now: 0,
        }
    }

    pub fn take(&mut self, i: usize, mut out: Out) {
        let from = self.nodes[i].config().addr;
        let mut buf = Vec::new();
        for job in out.replays.drain(..) {
            let _ = replay_datagrams(self.nodes[i].log(), &job, &mut buf, &mut |d| {
                out.sent.push((job.to_addr, d.to_vec()))
            });
        }
        if self.muted[i] {
            return;
        }
        for (to, d) in out.sent {
            self.wire.push((from, to, d));
        }
    }

    pub fn step(&mut self) {
        self.now += MILLI;
        let now = self.now;
        let wire = std::mem::take(&mut self.wire);
        for i in 0..self.nodes.len() {
            let me = self.nodes[i].config().addr;
            let mut out = Out::default();
            for (from, _, d) in wire.iter().filter(|w| w.1 == me) {
                self.nodes[i].on_datagram(now, *from, d, &mut out);
            }
            self.nodes[i].end_batch(now, &mut out);
            self.nodes[i].tick(now, &mut out);
            self.take(i, out);
        }
    }

    pub fn run_until(&mut self, ms: u64, mut done: impl FnMut(&Net) -> bool) -> bool {
        for _ in 0..ms {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }
}
