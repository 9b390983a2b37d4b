//! A sequencer node's options: the defaults, the checks, and the protocol's
//! options derived from them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::seq::core::nanos;
use crate::seq::core::node::{Acl, Durability, NodeConfig, TwoNodes};
use crate::seq::guard::{self, Auth};
use crate::seq::wire;
use crate::seq::{BusMode, SeqError};
use crate::store;
use crate::udp::sys::SocketOptions;
use crate::wait::WaitStrategy;

/// Sequencer options (`SequencerConfig::new` holds the defaults).
#[derive(Debug, Clone)]
pub struct SequencerConfig {
    /// This node's command address (the bus leaves from it too).
    pub bind: SocketAddr,
    /// Every node's command address, this one's included, the same list on
    /// every node (empty: a group of one).
    pub group: Vec<SocketAddr>,
    /// A node that joins a running group (`group` empty, a new directory):
    /// addresses of nodes of the group to ask. The node is a non-voter
    /// until it has caught up; its id and the group come from the log.
    pub join: Vec<SocketAddr>,
    pub bus: BusMode,
    /// The log's directory.
    pub dir: PathBuf,
    pub store: store::Config,
    pub core: Option<usize>,
    pub wait: WaitStrategy,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// Largest bus datagram (messages of one batch share datagrams up to it).
    pub max_datagram: usize,
    /// Several messages per bus datagram when several are waiting.
    pub batching: bool,
    /// A heartbeat this long after the last datagram, when idle.
    pub heartbeat: Duration,
    /// A heartbeat this soon after the last data datagram (then ten times
    /// later each time, up to `heartbeat`).
    pub heartbeat_after: Duration,
    /// Most messages one replay request is answered with.
    pub replay_max: usize,
    pub socket: SocketOptions,
    /// The minimum election timeout (each wait is drawn in `[t, 2t)`).
    pub election_timeout: Duration,
    pub two_nodes: TwoNodes,
    /// Hold an election at start (the preferred primary).
    pub eager: bool,
    /// What an acknowledgement promises: the page cache, or the disk.
    pub durability: Durability,
    /// Packet protection (`None`: datagrams as they are): every datagram
    /// sealed and opened by a [`crate::seq::guard::Guard`].
    pub auth: Option<Auth>,
    /// The group's access control (which members may publish, from where
    /// each may read).
    pub acl: Acl,
}

impl SequencerConfig {
    pub fn new(bind: SocketAddr, dir: impl Into<PathBuf>) -> SequencerConfig {
        SequencerConfig {
            bind,
            group: Vec::new(),
            join: Vec::new(),
            bus: BusMode::Unicast,
            dir: dir.into(),
            store: store::Config::default(),
            core: None,
            wait: WaitStrategy::machine_default(),
            batch: 32,
            max_datagram: 1472,
            batching: true,
            heartbeat: Duration::from_millis(10),
            heartbeat_after: Duration::from_micros(10),
            replay_max: 1024,
            socket: crate::seq::socket_options(),
            election_timeout: Duration::from_millis(50),
            two_nodes: TwoNodes::Safe,
            eager: true,
            durability: Durability::Replicated,
            auth: None,
            acl: Acl::default(),
        }
    }

    /// The largest protocol datagram: `max_datagram` less what sealing adds
    /// (the wire's datagrams stay within `max_datagram`).
    pub fn inner_max_datagram(&self) -> usize {
        let seal = if self.auth.is_some() {
            guard::OVERHEAD
        } else {
            0
        };
        self.max_datagram.saturating_sub(seal)
    }

    pub(super) fn check(&self) -> Result<(), SeqError> {
        let in_group = self.group.is_empty() || self.group.contains(&self.bind);
        if self.inner_max_datagram() < wire::BUS_HEADER + wire::MSG_HEADER + 1
            || self.max_datagram > crate::udp::MAX_UDP_PAYLOAD
            || self.batch == 0
            || self.batch > crate::udp::MAX_BATCH
            || self.group.len() > 64
            || !in_group
            || (self.group.len() > 1 && self.bind.port() == 0)
            || (!self.join.is_empty()
                && (!self.group.is_empty()
                    || self.bind.port() == 0
                    || self.bind.ip().is_unspecified()
                    || self.join.contains(&self.bind)))
        {
            return Err(SeqError::BadConfig);
        }
        Ok(())
    }

    /// The protocol's options, for the node at `local` (its bound address).
    pub(super) fn node(&self, local: SocketAddr) -> NodeConfig {
        let group = if self.group.is_empty() {
            vec![local]
        } else {
            self.group.clone()
        };
        let mut c = if self.join.is_empty() {
            let id = group.iter().position(|a| *a == self.bind).unwrap_or(0) as u8;
            NodeConfig::new(id, group)
        } else {
            let mut c = NodeConfig::new(u8::MAX, Vec::new());
            c.join = self.join.clone();
            c
        };
        c.addr = if self.group.is_empty() && self.join.is_empty() {
            local
        } else {
            self.bind
        };
        c.bus = self.bus;
        c.max_datagram = self.inner_max_datagram();
        c.batching = self.batching;
        c.heartbeat = nanos(self.heartbeat);
        c.heartbeat_after = nanos(self.heartbeat_after);
        c.election_timeout = nanos(self.election_timeout).max(1_000_000);
        c.two_nodes = self.two_nodes;
        c.replay_max = self.replay_max.max(1) as u64;
        c.eager = self.eager;
        c.durability = self.durability;
        c.acl = self.acl.clone();
        c.new_session = crate::seq::new_session();
        c.new_log_id = crate::seq::new_session();
        c.incarnation = (crate::seq::new_session() >> 16) as u32 | 1;
        c.boot = boot_id();
        c.seed = c.new_session ^ std::process::id() as u64;
        c
    }
}

/// The host's boot, as the kernel names it (`/proc/sys/kernel/random/
/// boot_id`, a random UUID made at each boot), hashed; 0 where there is
/// none (then a reboot cannot be told from a process restart, and a node
/// with `durability: :replicated` trusts its page cache as before).
pub fn boot_id() -> u64 {
    match std::fs::read("/proc/sys/kernel/random/boot_id") {
        Ok(b) => {
            let h = crate::crc::crc32c(&b) as u64;
            let l = crate::crc::crc32c(&b.iter().rev().copied().collect::<Vec<_>>()) as u64;
            (h << 32 | l).max(1)
        }
        Err(_) => 0,
    }
}
