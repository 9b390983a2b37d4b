//! A deterministic simulator for the bus's protocol: sequencer nodes and
//! members (the real cores of `seq::core`) exchange datagrams through a
//! simulated network, in simulated time, with faults injected (after
//! TigerBeetle's simulator: `testing/packet_simulator.zig`,
//! `testing/storage.zig`, `cluster/state_checker.zig`):
//!
//! * the network: lost, duplicated, delayed and reordered datagrams; a
//!   process cut off, the group split in two, one direction of a link
//!   cut, two processes cut from each other only (non-transitive);
//! * processes: a node killed (-9: its page cache survives) and restarted
//!   on its log; its host losing power (unsynced writes lost, some torn:
//!   the disk of [`MemLog`](crate::seq::core::MemLog)); its disk replaced
//!   by an empty one; a record rotting at rest; a full disk; pauses
//!   (SIGSTOP, a long wait for a CPU); clocks that jump and drift;
//! * members that join (live, or rewinding from a sequence number) at
//!   random times, are killed and open again, close with publishes in
//!   flight.
//!
//! Each seed picks its own mix of the fault kinds (swarm testing) unless
//! told not to, and [`scenarios`] replay the combinations random faults
//! rarely make. One seed drives everything: a failing seed replays bit for
//! bit. The invariants ([`check`], [`logcheck`]) are checked after every
//! step.
//!
//! `cargo run --release --bin tachyon_sim -- --seeds N` runs many seeds;
//! `cargo test` runs a bounded number.

pub mod actors;
mod auth;
pub mod check;
mod clock;
mod end;
mod engine;
mod faults;
pub mod group;
pub mod logcheck;
mod machine;
pub mod members;
pub mod net;
pub mod scenarios;
mod script;
#[cfg(test)]
mod tests;
mod triggers;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::seq::core::member::MemberConfig;
use crate::seq::core::{Nanos, MICRO, MILLI};
use crate::seq::wire::{self, Msg, CONTROL};

pub use actors::{Actor, Disk, Event, Start, Workload};
pub use check::Violation;
pub use faults::Fault;
pub use group::{Durability, Group};
pub use net::Capacity;
use net::NetStats;
pub use scenarios::Scenario;
pub use script::Action;
pub use triggers::Trigger;

/// How the protocol under test is set up.
pub trait Protocol {
    fn name(&self) -> &'static str;
    /// Sequencer nodes of the initial group.
    fn nodes(&self) -> usize;
    /// Node slots beyond them, for nodes that join during a run.
    fn spare_nodes(&self) -> usize {
        0
    }
    /// Node `i`'s disk before its first start (`session` for a new log).
    fn initial_disk(&self, i: usize, session: u64) -> Disk;
    /// Starts node `i` on `disk` (`addrs`: every node slot's address, the
    /// initial group's first; a slot past them is a node that joins the
    /// running group; `restart`: after a crash; `primary`: the node that
    /// was primary last, a hint for protocols that need one).
    fn start_node(
        &self,
        i: usize,
        addrs: &[SocketAddr],
        disk: Disk,
        restart: bool,
        primary: usize,
        now: Nanos,
    ) -> Box<dyn Actor>;
    fn member_config(&self, id: u32, addrs: &[SocketAddr]) -> MemberConfig;
    /// Whether forks are possible by design (they must be reported).
    fn forks_allowed(&self) -> bool {
        false
    }
    /// How long a primary must be silent before a takeover is justified.
    fn takeover_window(&self) -> Nanos;
    /// What an acknowledgement promises: the page cache, or the disk.
    fn durability(&self) -> Durability {
        Durability::Replicated
    }
}

/// A simulation's settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    /// Members there from the start (rewinding from sequence 1).
    pub members: usize,
    /// Members that join later, at random times (live, or from a point).
    pub late_members: usize,
    /// Faults are injected until then (and members publish), then healed.
    pub fault_time: Nanos,
    /// After the heal, every member must have delivered everything
    /// accepted within this long.
    pub settle_time: Nanos,
    pub gap: (Nanos, Nanos),
    pub large: f64,
    /// Loss on every link, all the time.
    pub base_loss: f64,
    pub faults: Vec<Fault>,
    /// Each seed draws its own subset of `faults` (swarm testing).
    pub swarm: bool,
    /// Time between two faults: uniform in this range.
    pub fault_every: (Nanos, Nanos),
    /// Every member's link to every node carries this much at most.
    pub uplink: Option<Capacity>,
    /// A scripted run instead of random faults.
    pub scenario: Option<Scenario>,
    pub trace: bool,
    /// Packet protection (`Some(encrypt)`): every process seals and opens
    /// with the shells' guards, and `forge` faults send what a stranger
    /// captured and made up.
    pub auth: Option<bool>,
    /// The stranger acts without keys too (`--forge-without-keys`: what
    /// the keys are for).
    pub forge_without_keys: bool,
    /// The latency model's CPU cost of each datagram a process reads or
    /// sends (0: none, every step takes no time): a process is busy that
    /// long after each receive batch or tick (what arrives meanwhile waits
    /// and is read as one batch), and what it sends leaves when its work
    /// is done.
    pub cost: Nanos,
}

impl SimConfig {
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            members: 3,
            late_members: 2,
            fault_time: 3_000 * MILLI,
            settle_time: 5_000 * MILLI,
            gap: (200 * MICRO, 2 * MILLI),
            large: 0.02,
            base_loss: 0.0,
            faults: Fault::ALL.to_vec(),
            swarm: true,
            fault_every: (100 * MILLI, 400 * MILLI),
            uplink: None,
            scenario: None,
            trace: false,
            auth: None,
            forge_without_keys: false,
            cost: 0,
        }
    }
}

/// What one simulation did and found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seed: u64,
    pub steps: u64,
    pub sim_time: Nanos,
    /// The fault kinds this seed drew (swarm testing).
    pub mix: Vec<&'static str>,
    pub faults: BTreeMap<&'static str, u64>,
    pub checks: u64,
    pub violations: Vec<Violation>,
    pub accepted: u64,
    pub delivered: u64,
    pub takeovers: u64,
    pub forks_reported: u64,
    /// Member incarnations opened (joins, reopens).
    pub joins: u64,
    /// From the heal to the last member's last delivery.
    pub converge_after_heal: Option<Nanos>,
    pub net: NetStats,
    /// Publish-to-delivery time over every member's deliveries: p50, p99,
    /// p99.9, max (`None`: nothing delivered).
    pub latency: Option<[Nanos; 4]>,
    /// The members' command datagrams sent, and resent.
    pub commands: u64,
    pub resent: u64,
    /// Keys given: datagrams the guards rejected, and what the stranger
    /// sent.
    pub rejected: u64,
    pub forged: u64,
    /// What retention did: `trim`, `install`, `member_skip`,
    /// `trimmed_open` (empty: the run had none).
    pub retention: BTreeMap<&'static str, u64>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs one simulation.
pub fn run(cfg: &SimConfig, proto: &dyn Protocol) -> Report {
    engine::Sim::new(cfg, proto).run()
}

/// The session record a new log starts with.
pub fn session_log(session: u64) -> crate::seq::core::MemLog {
    use crate::seq::core::Log;
    let mut log = crate::seq::core::MemLog::new();
    let mut e = Vec::new();
    wire::write_msg(&mut e, 0, session, CONTROL, 1, &[]);
    log.append(&e).expect("memory log");
    log
}

/// The entries of a log as messages (for reports).
pub fn messages(log: &crate::seq::core::MemLog) -> Vec<(u64, u32, u64)> {
    (0..log.len())
        .filter_map(|i| {
            let m = Msg::from_entry(log.entry(i)?).ok()?;
            Some((i, m.member_id, m.member_seq))
        })
        .collect()
}
