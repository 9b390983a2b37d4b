//! The bounds of a run and how the group is laid out: which actor is
//! which process, at which address, with which options (the simulator's
//! `seq::sim::group` and `seq::sim::members`, scaled down in time so that
//! one tick of a node is one step of Raft's timers).

use std::net::SocketAddr;

use stateright::actor::Id;
use tachyon_core::seq::core::member::MemberConfig;
use tachyon_core::seq::core::node::{Durability, NodeConfig, TwoNodes};
use tachyon_core::seq::core::{Nanos, MICRO, MILLI};

/// The faults a run may inject (each kind on or off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultKinds {
    /// kill -9: the page cache survives, the node restarts on its log.
    pub crash: bool,
    /// The host loses power: writes not on the platter are lost.
    pub power_loss: bool,
    /// The disk is replaced by an empty one.
    pub replace_disk: bool,
    /// In a group of two: the witness says a live node is down.
    pub false_witness: bool,
}

impl FaultKinds {
    pub const ALL: FaultKinds = FaultKinds {
        crash: true,
        power_loss: true,
        replace_disk: true,
        false_witness: false,
    };

    pub const NONE: FaultKinds = FaultKinds {
        crash: false,
        power_loss: false,
        replace_disk: false,
        false_witness: false,
    };

    /// From a comma-separated list (`crash,power,replace,false_witness`,
    /// `all`, `none`).
    pub fn parse(s: &str) -> Option<FaultKinds> {
        let mut k = FaultKinds::NONE;
        for w in s.split(',').filter(|w| !w.is_empty()) {
            match w {
                "all" => k = FaultKinds::ALL,
                "none" => {}
                "crash" => k.crash = true,
                "power" | "power_loss" => k.power_loss = true,
                "replace" | "replace_disk" => k.replace_disk = true,
                "false_witness" => k.false_witness = true,
                _ => return None,
            }
        }
        Some(k)
    }

    pub fn names(&self) -> String {
        let mut v = Vec::new();
        for (on, n) in [
            (self.crash, "crash"),
            (self.power_loss, "power_loss"),
            (self.replace_disk, "replace_disk"),
            (self.false_witness, "false_witness"),
        ] {
            if on {
                v.push(n);
            }
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

/// What a power loss leaves on the platter (the kernel writes back the
/// oldest writes first: what it keeps is a prefix of the log, from what
/// was synced on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLoss {
    /// Every write not synced is lost (one outcome).
    Unsynced,
    /// Every write not synced is lost, or only the last one (two
    /// outcomes).
    Tail,
    /// Any prefix (one outcome per length).
    Prefixes,
}

/// Which of stateright's networks carries the datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// A set of every datagram sent: any of them is delivered any number
    /// of times, in any order, or never (loss, duplication, reordering).
    Duplicating,
    /// A multiset: each datagram delivered at most once (loss and
    /// reordering, no duplicates).
    NonDuplicating,
}

/// The bounds and options of one check.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Nodes of the initial group (2 or 3).
    pub nodes: usize,
    pub members: usize,
    /// Messages each member publishes at most.
    pub messages: u8,
    /// Faults per run at most (crash, power loss, disk replacement, false
    /// witness); restarts are free.
    pub faults: u8,
    pub kinds: FaultKinds,
    pub power_loss: PowerLoss,
    pub durability: Durability,
    pub two_nodes: TwoNodes,
    /// One membership change may happen: the primary removes a node, or
    /// a spare node asks to join.
    pub membership: bool,
    pub net: NetKind,
    /// A node that goes down restarts in the same step (3 nodes: no
    /// step depends on its being down; see the crate's doc), or later,
    /// by a step of its own (2 nodes: the witness speaks while it is
    /// down).
    pub eager_restart: bool,
    /// Explicit drops of datagrams besides never delivering them.
    pub lossy: bool,
    /// How far each process's clock may run beyond where the prologue
    /// left it.
    pub horizon: Nanos,
    /// Steps past the initial state at most (0: no bound but the others).
    pub depth: usize,
    /// Actors that take no step in the search (a scenario's choice: a
    /// member whose deliveries are the history checked, say): no tick, no
    /// publish, nothing delivered to them.
    pub frozen: Vec<usize>,
    /// Actors whose timers never fire in the search (a scenario's choice:
    /// a primary whose clock stalls after its last heartbeat): they still
    /// read and answer datagrams, at their current time.
    pub paused: Vec<usize>,
    /// The prologue's stopping point: the member's message published,
    /// sequenced and delivered (`Delivered`), or only the group elected
    /// and the members welcomed (`Joined`).
    pub prologue: Prologue,
    /// Timers of the nodes: the minimum election timeout and the
    /// heartbeat (each tick of an idle primary).
    pub election_timeout: Nanos,
    pub heartbeat: Nanos,
    /// A follower's gap fill and sync retries (`retransmit_after`).
    pub retransmit: Nanos,
}

/// Where the deterministic prologue stops and the exploration begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prologue {
    /// The group elected its first primary, every node follows it, the
    /// members are welcomed: nothing published yet.
    Joined,
    /// And the first member's first message was published and delivered
    /// everywhere.
    Delivered,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            nodes: 3,
            members: 1,
            messages: 1,
            faults: 2,
            kinds: FaultKinds::ALL,
            power_loss: PowerLoss::Tail,
            durability: Durability::Replicated,
            two_nodes: TwoNodes::Safe,
            membership: false,
            net: NetKind::Duplicating,
            eager_restart: true,
            lossy: false,
            horizon: 20 * MILLI,
            depth: 8,
            frozen: Vec::new(),
            paused: Vec::new(),
            prologue: Prologue::Joined,
            election_timeout: 2 * MILLI,
            heartbeat: MILLI,
            retransmit: MILLI,
        }
    }
}

/// Which actor is which process. Actors are numbered: the initial nodes
/// `0..nodes`, then the spare node (with `membership`), then the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub nodes: usize,
    pub spare: bool,
    pub members: usize,
}

impl Layout {
    pub fn of(b: &Bounds) -> Layout {
        Layout {
            nodes: b.nodes,
            spare: b.membership && b.nodes >= 3,
            members: b.members,
        }
    }

    /// Node slots (the initial nodes and the spare).
    pub fn node_slots(&self) -> usize {
        self.nodes + self.spare as usize
    }

    pub fn actors(&self) -> usize {
        self.node_slots() + self.members
    }

    pub fn is_node(&self, i: usize) -> bool {
        i < self.node_slots()
    }

    /// The actor index of member `j`.
    pub fn member(&self, j: usize) -> usize {
        self.node_slots() + j
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        if self.is_node(i) {
            SocketAddr::from(([10, 0, 0, 1], 7000 + i as u16))
        } else {
            let j = i - self.node_slots();
            SocketAddr::from(([10, 0, 1, 1], 8000 + j as u16))
        }
    }

    pub fn id_of(&self, a: SocketAddr) -> Option<Id> {
        (0..self.actors())
            .find(|&i| self.addr(i) == a)
            .map(Id::from)
    }

    /// The initial group's addresses.
    pub fn group(&self) -> Vec<SocketAddr> {
        (0..self.nodes).map(|i| self.addr(i)).collect()
    }

    /// A readable name: `n0`, `spare`, `m0`.
    pub fn name(&self, i: usize) -> String {
        if i < self.nodes {
            format!("n{i}")
        } else if self.is_node(i) {
            "spare".into()
        } else {
            format!("m{}", i - self.node_slots())
        }
    }
}

/// Node `i`'s options at its `starts`-th start (0: the first), as the
/// simulator's group sets them (`seq::sim::group`): each start has its
/// own incarnation, each disk its own log identity, each node its own
/// session for a new log; no retention.
pub fn node_config(b: &Bounds, l: &Layout, i: usize, starts: u32, boot: u64) -> NodeConfig {
    let group = l.group();
    let mut cfg = if i < l.nodes {
        NodeConfig::new(i as u8, group)
    } else {
        // The spare joins the running group through its nodes.
        let mut c = NodeConfig::new(u8::MAX, Vec::new());
        c.addr = l.addr(i);
        c.join = group;
        c
    };
    cfg.two_nodes = b.two_nodes;
    cfg.durability = b.durability;
    cfg.election_timeout = b.election_timeout;
    cfg.heartbeat = b.heartbeat;
    // No tail heartbeats (10 us, 100 us, ... after data): one heartbeat
    // per interval, each a tick of the primary.
    cfg.heartbeat_after = b.heartbeat;
    cfg.retransmit_after = b.retransmit;
    cfg.eager = i == 0 && starts == 0;
    cfg.new_session = 1_000 * (i as u64 + 1) + starts as u64;
    cfg.seed = 0x5eed ^ (i as u64) << 8 ^ starts as u64;
    cfg.boot = boot;
    cfg.new_log_id = 100 * (i as u64 + 1) + starts as u64;
    cfg.incarnation = starts + 1;
    cfg.retention_every = 0;
    cfg
}

/// Member `j`'s options: it knows every node of the initial group and
/// delivers from sequence number 1 (as the simulator's members do).
pub fn member_config(l: &Layout, j: usize) -> MemberConfig {
    let group = l.group();
    let mut c = MemberConfig::new(group[0], j as u32 + 1);
    c.alternates = group[1..].to_vec();
    c.from = Some(1);
    c.incarnation = 0x1000 + j as u64;
    c.resend_after = std::time::Duration::from_millis(5);
    c.hello_after = std::time::Duration::from_millis(5);
    c.retransmit_after = std::time::Duration::from_millis(1);
    c.keepalive = std::time::Duration::from_secs(1);
    c
}

/// Time in milliseconds, for traces.
pub fn ms(t: Nanos) -> String {
    format!("{}.{:03}ms", t / MILLI, (t % MILLI) / MICRO)
}
