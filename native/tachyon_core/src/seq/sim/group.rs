//! The protocol under test: a sequencer group of N nodes (Raft), members
//! knowing every node.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::actors::{Actor, Disk, SimNode};
use super::Protocol;
use crate::seq::core::member::MemberConfig;
pub use crate::seq::core::node::Durability;
use crate::seq::core::node::{NodeConfig, TwoNodes};
use crate::seq::core::{Nanos, Prefixes, Rng, MILLI};

/// A run's retention: keep `retain` entries at least, cut in segments of
/// `segment`, look every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub retain: u64,
    pub segment: u64,
    pub every: Nanos,
}

pub struct Group {
    pub nodes: usize,
    pub two_nodes: TwoNodes,
    pub durability: Durability,
    pub election_timeout: Nanos,
    /// Retention in half of the runs (drawn per run; never where forks
    /// are allowed: the end checks read the whole log there).
    pub retention: bool,
    /// Every run's retention instead (a scenario's).
    pub fixed_retention: Option<Retention>,
    /// The nodes' `ack_fanout` (commit in three hops; 0: four hops).
    pub ack_fanout: usize,
    session: Cell<u64>,
    starts: Cell<u64>,
    run_retention: Cell<Option<Retention>>,
    prefixes: RefCell<Arc<Mutex<Prefixes>>>,
}

impl Group {
    pub fn new(nodes: usize) -> Group {
        Group {
            nodes,
            two_nodes: TwoNodes::Safe,
            durability: Durability::Replicated,
            election_timeout: 50 * MILLI,
            retention: true,
            fixed_retention: None,
            ack_fanout: crate::seq::core::node::ACK_FANOUT,
            session: Cell::new(1),
            starts: Cell::new(0),
            run_retention: Cell::new(None),
            prefixes: RefCell::new(Arc::default()),
        }
    }

    /// This run's retention, if any.
    pub fn run_retention(&self) -> Option<Retention> {
        self.run_retention.get()
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
            *self.prefixes.borrow_mut() = Arc::default();
            let mut r = Rng::new(session ^ 0x7e7e_11d5);
            let on = self.retention && !self.forks_allowed() && r.chance(0.5);
            let drawn = on.then(|| Retention {
                retain: r.range(16, 1_500),
                segment: r.range(1, 200),
                every: r.range(5, 200) * MILLI,
            });
            self.run_retention.set(self.fixed_retention.or(drawn));
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
            // A node that joins the running group, through its first nodes
            // (the followers among them pass the request on to their
            // primary: JOIN_VIA).
            let mut c = NodeConfig::new(u8::MAX, Vec::new());
            c.addr = addrs[i];
            c.join = group.to_vec();
            c
        };
        cfg.two_nodes = self.two_nodes;
        cfg.election_timeout = self.election_timeout;
        cfg.eager = i == 0 && !restart;
        // Each node draws its own session for a new log, as a real one
        // does: two first primaries of an empty group write two sessions.
        cfg.new_session =
            (self.session.get() ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
        cfg.durability = self.durability;
        cfg.ack_fanout = self.ack_fanout;
        self.starts.set(self.starts.get() + 1);
        cfg.seed = self.session.get() ^ self.starts.get().wrapping_mul(0x9e37_79b9_7f4a_7c15);
        cfg.boot = disk.boot;
        cfg.new_log_id = crate::seq::core::Rng::new(cfg.seed ^ 0x1d).next_u64() | 1;
        cfg.incarnation = (cfg.seed >> 7) as u32 | 1;
        let mut disk = disk;
        cfg.retention_every = 0;
        if let Some(r) = self.run_retention.get() {
            cfg.retention_every = r.every;
            disk.log.retain = r.retain;
            disk.log.segment = r.segment;
            disk.log.prefixes = Some(self.prefixes.borrow().clone());
        }
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
