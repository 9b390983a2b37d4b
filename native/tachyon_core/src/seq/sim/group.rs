//! The protocol under test: a sequencer group of N nodes (Raft), members
//! knowing every node.

use std::cell::Cell;
use std::net::SocketAddr;

use super::actors::{Actor, Disk, SimNode};
use super::Protocol;
use crate::seq::core::member::MemberConfig;
pub use crate::seq::core::node::Durability;
use crate::seq::core::node::{NodeConfig, TwoNodes};
use crate::seq::core::{Nanos, MILLI};

pub struct Group {
    pub nodes: usize,
    pub two_nodes: TwoNodes,
    pub durability: Durability,
    pub election_timeout: Nanos,
    session: Cell<u64>,
    starts: Cell<u64>,
}

impl Group {
    pub fn new(nodes: usize) -> Group {
        Group {
            nodes,
            two_nodes: TwoNodes::Safe,
            durability: Durability::Replicated,
            election_timeout: 50 * MILLI,
            session: Cell::new(1),
            starts: Cell::new(0),
        }
    }
}

impl Protocol for Group {
    fn name(&self) -> &'static str {
        "sequencer group (Raft)"
    }

    fn nodes(&self) -> usize {
        self.nodes
    }

    fn initial_disk(&self, i: usize, session: u64) -> Disk {
        // A new run: nothing carries over from the last (a seed replays
        // alone as in a batch).
        if i == 0 {
            self.starts.set(0);
        }
        self.session.set(session);
        Disk::default()
    }

    fn start_node(
        &self,
        i: usize,
        addrs: &[SocketAddr],
        disk: Disk,
        restart: bool,
        _primary: usize,
        now: Nanos,
    ) -> Box<dyn Actor> {
        let group = &addrs[..self.nodes.min(addrs.len())];
        let mut cfg = if i < self.nodes {
            NodeConfig::new(i as u8, group.to_vec())
        } else {
            // A node that joins the running group, through its first nodes.
            let mut c = NodeConfig::new(u8::MAX, Vec::new());
            c.addr = addrs[i];
            c.join = group.to_vec();
            c
        };
        cfg.two_nodes = self.two_nodes;
        cfg.election_timeout = self.election_timeout;
        cfg.eager = i == 0 && !restart;
        cfg.new_session = self.session.get();
        cfg.durability = self.durability;
        self.starts.set(self.starts.get() + 1);
        cfg.seed = self.session.get() ^ self.starts.get().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        cfg.boot = disk.boot;
        cfg.new_log_id = crate::seq::core::Rng::new(cfg.seed ^ 0x1d).next_u64() | 1;
        cfg.incarnation = (cfg.seed >> 7) as u32 | 1;
        Box::new(SimNode::new(cfg, disk, now))
    }

    fn spare_nodes(&self) -> usize {
        if self.nodes >= 3 {
            2
        } else {
            0
        }
    }

    fn member_config(&self, id: u32, addrs: &[SocketAddr]) -> MemberConfig {
        let mut c = MemberConfig::new(addrs[0], id);
        c.alternates = addrs[1..].to_vec();
        // From the start: every member must deliver every message, whenever
        // its welcome came (a rewind under live traffic).
        c.from = Some(1);
        c.incarnation = (id as u64).wrapping_mul(0x9e37_79b9) ^ self.session.get();
        c
    }

    fn forks_allowed(&self) -> bool {
        self.nodes == 2 && self.two_nodes == TwoNodes::Available
    }

    fn takeover_window(&self) -> Nanos {
        2 * self.election_timeout
    }

    fn durability(&self) -> Durability {
        self.durability
    }
}
