//! A node's options, counters and roles.

use super::*;

/// What a two-node group does when it cannot tell a dead peer from a cut
/// link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TwoNodes {
    /// The primary commits only with the standby's acknowledgement, and the
    /// standby takes over only with a third vote: its witness (the
    /// primary's BEAM node reported down, [`Node::witness_down`]). A
    /// partition stops the bus instead of forking it.
    Safe,
    /// A silent peer is taken for dead after the election timeout: the
    /// standby takes over if the primary does not answer a pre-vote, the
    /// primary commits alone. A partition can fork the bus (members report
    /// it).
    Available,
}

/// What a node's acknowledgement of an entry promises, and so what
/// "committed" means: held by a majority in their page cache, or on their
/// disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// An entry is acknowledged once appended (in the page cache: it
    /// survives a process crash, not a power loss). A node that restarts
    /// after its host rebooted cannot vouch for what it acknowledged: it
    /// is a learner until it caught up.
    Replicated,
    /// An entry is acknowledged once on the node's disk (one sync per
    /// receive batch, group commit, off the sequencing thread): committed
    /// entries survive the power loss of every host.
    Fsync,
}

impl Durability {
    pub fn on_disk(self) -> bool {
        self == Durability::Fsync
    }
}

/// [`NodeConfig::ack_fanout`] by default (docs/ARCHITECTURE.md, "Commit
/// in three hops": measured).
pub const ACK_FANOUT: usize = 8;

/// A node's options.
#[derive(Debug, Clone, Hash)]
pub struct NodeConfig {
    /// Which members may publish, and from where each may read (with keys,
    /// each member id is bound to its credential).
    pub acl: Acl,
    /// This node's id in the initial group: its index in `group` (a node
    /// that joins a running group gets one from its primary).
    pub id: u8,
    /// The initial group: every node's command address, by id (the same
    /// list on every node; changed later by membership changes in the
    /// log). Empty for a node that joins a running group.
    pub group: Vec<SocketAddr>,
    /// This node's own command address (`group[id]` for a node of the
    /// initial group).
    pub addr: SocketAddr,
    /// A node that joins a running group: addresses of nodes to ask.
    pub join: Vec<SocketAddr>,
    pub bus: BusMode,
    /// Largest bus datagram.
    pub max_datagram: usize,
    /// Several messages per bus datagram when several are waiting.
    pub batching: bool,
    /// The longest gap between two datagrams of an idle primary.
    pub heartbeat: Nanos,
    /// The first heartbeat after data (then ten times longer each time, up
    /// to `heartbeat`).
    pub heartbeat_after: Nanos,
    /// The minimum election timeout; each wait is drawn in `[t, 2t)`.
    pub election_timeout: Nanos,
    pub two_nodes: TwoNodes,
    /// Entries appended and not committed at most: beyond, commands wait
    /// (members resend them).
    pub max_uncommitted: u64,
    /// Commands held per member when an earlier one is missing.
    pub window: usize,
    /// Most entries one replay request is answered with.
    pub replay_max: u64,
    /// A follower's gap fill: entries per request, first repeat after.
    pub replay_chunk: u64,
    pub retransmit_after: Nanos,
    /// A member id is bound to its member while heard within this.
    pub binding_lease: Nanos,
    /// Start an election at once (the preferred primary).
    pub eager: bool,
    /// The session of a new log (the first primary of a group writes it).
    pub new_session: u64,
    pub durability: Durability,
    /// The host's boot (`/proc/sys/kernel/random/boot_id`, hashed): a
    /// node whose last start was under another boot was rebooted.
    pub boot: u64,
    /// The identity a new log gets (random).
    pub new_log_id: u64,
    /// This start of the node (random): acknowledgements of an earlier
    /// start do not count.
    pub incarnation: u32,
    /// How often retention looks (running time; 0: never). What it cuts
    /// is the log's policy ([`crate::seq::core::Log::retention_point`]).
    pub retention_every: Nanos,
    /// Commit in three hops (`acks.rs`): on a unicast bus, a follower
    /// sends its acknowledgements to the unicast members too while they
    /// are at most this many (0: never; a multicast bus: one datagram to
    /// the group whenever it is not 0).
    pub ack_fanout: usize,
    pub seed: u64,
}

impl NodeConfig {
    /// A node of a group of one at `addr`.
    pub fn single(addr: SocketAddr) -> NodeConfig {
        NodeConfig::new(0, vec![addr])
    }

    pub fn new(id: u8, group: Vec<SocketAddr>) -> NodeConfig {
        let addr = group
            .get(id as usize)
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        NodeConfig {
            id,
            group,
            addr,
            join: Vec::new(),
            bus: BusMode::Unicast,
            max_datagram: 1472,
            batching: true,
            heartbeat: 10 * MILLI,
            heartbeat_after: 10_000,
            election_timeout: 50 * MILLI,
            two_nodes: TwoNodes::Safe,
            max_uncommitted: 1 << 16,
            window: 1024,
            replay_max: 1024,
            replay_chunk: 1024,
            retransmit_after: MILLI,
            binding_lease: 3_000 * MILLI,
            eager: true,
            new_session: 1,
            durability: Durability::Replicated,
            boot: 0,
            new_log_id: 1,
            incarnation: 1,
            retention_every: 1_000 * MILLI,
            ack_fanout: ACK_FANOUT,
            seed: 1,
            acl: Acl::default(),
        }
    }

    pub fn check(&self) -> bool {
        self.group.len() <= super::membership::MAX_NODES
            && ((self.id as usize) < self.group.len()
                || (self.group.is_empty() && !self.join.is_empty() && self.id == u8::MAX))
            && self.max_datagram > wire::BUS_HEADER + wire::MSG_HEADER
            && self.max_datagram <= crate::udp::MAX_UDP_PAYLOAD
            && self.election_timeout > 0
            && self.heartbeat > 0
            && self.new_session != 0
            && self.new_log_id != 0
    }
}

/// The group's access control (`Tachyon.Sequencer`'s `auth: [acl: ...]`):
/// which members may publish (the others read only), and the lowest
/// sequence number each may read (below it, the log begins there for that
/// member: its open from below and its replays below are answered as
/// retention's). Ids bound to credentials make it hold against a member
/// that claims another's id (`seq::guard`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Acl {
    /// Members that may publish (`None`: every member).
    pub publishers: Option<std::collections::BTreeSet<u32>>,
    /// The lowest sequence number a member may read, by id...
    pub read_from: std::collections::BTreeMap<u32, u64>,
    /// ...and for the others.
    pub default_read_from: u64,
}

/// Member ids above this are the nodes' own (a follower's gap fill).
const NODE_IDS: u32 = u32::MAX - 256;

impl Acl {
    pub fn may_publish(&self, member: u32) -> bool {
        self.publishers.as_ref().is_none_or(|p| p.contains(&member))
    }

    /// The lowest sequence number `member` may read (0 for a node).
    pub fn floor(&self, member: u32) -> u64 {
        if member > NODE_IDS {
            return 0;
        }
        self.read_from
            .get(&member)
            .copied()
            .unwrap_or(self.default_read_from)
    }
}

/// A node's counters (one writer: the thread driving the node).
#[derive(Debug, Default, Clone)]
pub struct NodeCounters {
    pub messages: Counter,
    /// Publishes of members that may only read, and replays below a
    /// member's floor (the access control), refused.
    pub forbidden: Counter,
    /// Datagrams of a member after its goodbye (late, reordered), dropped.
    pub departed: Counter,
    pub datagrams: Counter,
    pub heartbeats: Counter,
    pub duplicates: Counter,
    /// Commands held until an earlier one of their member arrives.
    pub held: Counter,
    /// Commands dropped: too far ahead of their member's next.
    pub out_of_order: Counter,
    pub nacks: Counter,
    pub replays: Counter,
    pub malformed: Counter,
    /// Bus or peer datagrams not from a node of the group.
    pub strangers: Counter,
    pub wrong_session: Counter,
    pub oversized: Counter,
    pub send_errors: Counter,
    pub store_errors: Counter,
    pub members: Counter,
    /// Commands dropped: `max_uncommitted` entries not committed yet.
    pub backpressure: Counter,
    /// Commands to a node that is not the primary, dropped.
    pub not_primary: Counter,
    /// Hellos and commands refused: the member id is bound to another.
    pub taken: Counter,
    pub elections: Counter,
    pub terms_led: Counter,
    pub stepped_down: Counter,
    pub truncated: Counter,
    pub copied: Counter,
    pub acks: Counter,
    pub syncs: Counter,
    pub stale: Counter,
    pub replay_requests: Counter,
    /// Syncs asked of the disk (`durability: fsync`: one per receive batch
    /// at most), and completed.
    pub sync_requests: Counter,
    pub syncs_done: Counter,
    /// Appends refused for want of space (the primary then steps down).
    pub full: Counter,
    /// Probes sent while a learner.
    pub probes: Counter,
    /// Membership changes appended (as primary).
    pub changes: Counter,
    /// Votes and pre-votes refused as a learner.
    pub learner_refusals: Counter,
    /// Retention cuts (a checkpoint saved, segments removed below it).
    pub trims: Counter,
    /// Checkpoints installed from the primary (too far behind to fill).
    pub installs: Counter,
    /// The first entry the log holds.
    pub first: Counter,
    /// Mirrors of the node's state, for stats without a lock.
    pub term: Counter,
    /// 0 follower, 1 pre-candidate, 2 candidate, 3 primary.
    pub role: Counter,
    pub next_seq: Counter,
    pub commit: Counter,
    pub leader: Counter,
    /// 1 while a learner (no vote until caught up).
    pub learner: Counter,
    /// Entries on the disk (`durability: fsync`), else the log end.
    pub durable: Counter,
}

/// Raft's roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::PreCandidate => "pre_candidate",
            Role::Candidate => "candidate",
            Role::Leader => "primary",
        }
    }
}
