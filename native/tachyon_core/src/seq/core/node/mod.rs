//! A node of a sequencer group, after Raft (Ongaro and Ousterhout, "In
//! Search of an Understandable Consensus Algorithm", and Ongaro's thesis
//! for pre-vote and leader stickiness), rule by rule; docs/ARCHITECTURE.md,
//! "Failover", maps each rule to the code.
//!
//! * Terms are the bus's epochs: every datagram carries one, an epoch
//!   record opens each term in the log (Raft's no-op entry of a new
//!   leader), and the term of an entry is that of the last epoch record at
//!   or before it.
//! * The primary (Raft's leader) sequences: the bus's data datagrams are
//!   its AppendEntries, sent to members and followers at once; followers
//!   append and acknowledge; an entry is committed once a majority holds it
//!   ([`election`], [`leader`]); every bus datagram carries the commit
//!   position and members deliver only below it.
//! * A follower starting to follow a primary (or after a restart) syncs
//!   its log through the epochs (Raft's consistency check, done once per
//!   term) and truncates a tail the primary's log does not hold
//!   ([`follower`]).
//! * Elections: pre-vote, then vote; a vote once per term, persisted before
//!   it is answered, only for a log at least as up to date; a node that
//!   heard a primary within the minimum election timeout grants neither.
//! * Time is counted only while the node runs: a tick long after the last
//!   one (a paused process, a thread waiting for a CPU, a clock jump) adds
//!   at most [`TICK_CAP`] to any timer.
//! * A node that cannot vouch for what it acknowledged (a new or replaced
//!   disk, a log its recovery cut, a reboot when acknowledgements promise
//!   only the page cache) is a learner: it votes for nobody until it has
//!   caught up with a primary, or heard every node when none can lead
//!   ([`learner`]). Acknowledgements carry the node's log identity and
//!   incarnation: the primary counts none of an earlier start.
//! * With [`Durability::Fsync`] a node acknowledges only what is on its
//!   disk (one sync per receive batch), the primary counts its own log
//!   only that far ([`durable`]).

mod acks;
mod changes;
pub mod checkpoint;
mod commands;
mod config;
mod dispatch;
mod durable;
mod election;
mod fingerprint;
mod follower;
mod leader;
mod learner;
pub mod logstate;
pub mod membership;
pub mod quorum;
mod retention;
pub mod snapshots;
#[cfg(test)]
mod testnet;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::{Env, Log, LogError, Meta, Nanos, NodeEvent, Rng, MILLI};
use crate::counter::Counter;
use crate::seq::wire;
use crate::seq::BusMode;
use logstate::LogState;

pub use commands::Window;
pub use config::{Acl, Durability, NodeConfig, NodeCounters, Role, TwoNodes, ACK_FANOUT};
pub use membership::{ChangeError, Membership, NodeEntry, MAX_NODES};

/// The most a tick adds to any timer, however long since the last one.
pub const TICK_CAP: Nanos = 5 * MILLI;

/// Most members in the unicast fan-out.
pub const MAX_MEMBERS: usize = 4096;

/// An install of a primary's checkpoint that a crash cut short: the
/// checkpoint is saved first ([`Log::install`]), so a log that ends below
/// the checkpoint's first entry was not reset yet. It is finished now:
/// the entries it still holds are below the checkpoint, summed up in it.
/// (Without this the node took the checkpoint's first index for its log's
/// end, and every entry it appended landed at another index:
/// `tachyon_sim --scenario crash_in_install`, `log_matching`.)
fn finish_install<L: Log>(log: &mut L) -> Result<(), LogError> {
    let Some(bytes) = log.load_checkpoint() else {
        return Ok(());
    };
    let first = checkpoint::Checkpoint::decode(&bytes).map_or(0, |c| c.first);
    if log.next_index() < first {
        log.install(first, &bytes)?;
    }
    Ok(())
}

/// A member that said goodbye: from where, as which incarnation, when.
#[derive(Debug, Clone, Copy, Hash)]
struct Departed {
    addr: SocketAddr,
    incarnation: u64,
    at: Nanos,
}

/// A member as the nodes know it (soft state: a new primary learns it
/// from the member's next hello or command).
#[derive(Debug, Clone, Copy, Hash)]
pub(crate) struct Binding {
    addr: SocketAddr,
    incarnation: u64,
    heard: Nanos,
    unicast: bool,
    /// The next entry the member delivers, as its last hello said
    /// (`u64::MAX`: not said; retention keeps what it still reads).
    next: u64,
}

/// A sequencer node.
pub struct Node<L: Log> {
    cfg: NodeConfig,
    log: L,
    ls: LogState,
    term: u32,
    vote: Option<u8>,
    role: Role,
    leader: Option<u8>,
    /// Every entry below this one is committed.
    commit: u64,
    rng: Rng,
    last_tick: Option<Nanos>,
    /// Running time since a primary was last heard (followers) or since the
    /// election began (candidates).
    silent: Nanos,
    /// This wait's election timeout.
    timeout: Nanos,
    /// Running time since a datagram of a primary (not reset by elections).
    since_leader: Nanos,
    el: election::Election,
    ld: leader::Lead,
    fl: follower::Follow,
    /// What is kept beside the log: its identity, the boot, learner.
    meta: Meta,
    lr: learner::Learn,
    dur: durable::Durable,
    bindings: HashMap<u32, Binding>,
    /// Members that said goodbye, for a lease: their late datagrams (a
    /// command reordered behind the Bye) must not bind the id again.
    departed: HashMap<u32, Departed>,
    /// Where the bus goes: the multicast group, or the followers and the
    /// unicast members.
    targets: Vec<SocketAddr>,
    /// Unicast members among `targets` (the fan-out; the stats' `members`).
    unicast_members: usize,
    /// Where a follower's acknowledgements go besides its primary: the
    /// members (`acks.rs`).
    ack_to: Vec<SocketAddr>,
    scratch: Vec<u8>,
    started_as: Option<&'static str>,
    /// The membership before any change in the log (`cfg.group`).
    initial: membership::Membership,
    /// The log index of the membership the bus's targets follow.
    memb_at: Option<u64>,
    /// A node joining a running group: the id its primary gave it, and
    /// the primary's id and address (its datagrams are taken before the
    /// log says who is who).
    joined: Option<(u8, u8, SocketAddr)>,
    /// Addresses of nodes of a newer membership than this node's log has
    /// (their datagrams carry this group's session): a node that missed a
    /// change still hears, and answers, a primary the change added (Raft:
    /// a server takes RPCs from servers outside its configuration).
    learned: Vec<Option<SocketAddr>>,
    join_at: Option<Nanos>,
    rt: retention::Retain,
    c: Arc<CachePadded<NodeCounters>>,
}

impl<L: Log> Node<L> {
    /// A node on `log` (recovered: its epochs, members and vote), a
    /// follower until it is elected.
    pub fn new(cfg: NodeConfig, mut log: L, now: Nanos) -> Result<Node<L>, LogError> {
        if !cfg.check() {
            return Err(LogError::NotFound);
        }
        finish_install(&mut log)?;
        let (mut ls, bad) = LogState::recover(&log)?;
        let mut cut = log.recovery_lost() > 0;
        if let Some(at) = bad {
            // Entries a crash mixed up (terms that go back) or garbage:
            // cut there, durably, and know it.
            log.truncate(at)?;
            ls = LogState::recover(&log)?.0;
            cut = true;
        }
        let rt = retention::Retain::new(log.first_index(), log.load_checkpoint());
        let saved = log.load_meta();
        let (meta, reason) = learner::at_start(&cfg, saved, cut);
        let term = meta.term.max(ls.last_term());
        let vote = if term == meta.term { meta.vote } else { None };
        let n = MAX_NODES;
        let mut node = Node {
            meta,
            lr: learner::Learn::new(n),
            dur: durable::Durable::new(),
            rng: Rng::new(cfg.seed ^ (cfg.id as u64) << 56 ^ cfg.addr.port() as u64),
            ld: leader::Lead::new(n, cfg.max_datagram),
            fl: follower::Follow::default(),
            el: election::Election::default(),
            log,
            ls,
            term,
            vote,
            role: Role::Follower,
            leader: None,
            commit: 0,
            last_tick: None,
            silent: 0,
            timeout: 0,
            since_leader: Nanos::MAX / 2,
            bindings: HashMap::new(),
            departed: HashMap::new(),
            targets: Vec::new(),
            ack_to: Vec::new(),
            unicast_members: 0,
            scratch: Vec::with_capacity(64),
            started_as: None,
            initial: membership::Membership::initial(&cfg.group),
            memb_at: None,
            joined: None,
            join_at: None,
            learned: vec![None; MAX_NODES],
            rt,
            c: Arc::new(CachePadded::new(NodeCounters::default())),
            cfg,
        };
        node.new_timeout();
        if node.cfg.eager {
            node.silent = node.timeout;
        }
        node.retarget();
        if saved != Some(node.meta_now()) && !node.persist() {
            return Err(LogError::NoSpace);
        }
        node.started_as = reason;
        node.mirror();
        let _ = now;
        Ok(node)
    }

    /// Why this node started as a learner, if it did (`new_disk`,
    /// `rebooted`, `cut`, `restarted`): for the shell's first event.
    pub fn started_as(&self) -> Option<&'static str> {
        self.started_as
    }

    pub fn is_learner(&self) -> bool {
        self.meta.learner
    }

    pub fn counters(&self) -> &Arc<CachePadded<NodeCounters>> {
        &self.c
    }

    /// This node's id: from the membership (by its address), or what its
    /// primary said when it joined, or the initial group's.
    pub fn id(&self) -> u8 {
        self.membership()
            .id_of(self.cfg.addr)
            .or(self.joined.map(|j| j.0))
            .unwrap_or(self.cfg.id)
    }

    /// The group's membership now: the latest change in the log, committed
    /// or not (Raft thesis §4.1), or the initial group.
    pub fn membership(&self) -> &membership::Membership {
        self.ls.config().map_or(&self.initial, |c| c.1)
    }

    /// The log index of the latest membership change (`None`: the initial
    /// group): a change is committed once the commit index is past it.
    pub fn membership_index(&self) -> Option<u64> {
        self.ls.config().map(|c| c.0)
    }

    /// The membership change at log index `at`, if the log holds one
    /// there (a change appended, then cut by a truncation, is gone).
    pub fn membership_at(&self, at: u64) -> Option<&membership::Membership> {
        self.ls.config_at(at)
    }

    /// Whether this node is a voter of the membership now.
    pub(super) fn voter(&self) -> bool {
        self.membership().is_voter(self.id())
    }

    /// The other voters.
    pub(super) fn other_voters(&self) -> Vec<u8> {
        let me = self.id();
        self.membership().voters().filter(|i| *i != me).collect()
    }

    /// The other nodes, voters or not.
    pub(super) fn other_nodes(&self) -> Vec<u8> {
        let me = self.id();
        let m = self.membership();
        m.nodes()
            .iter()
            .map(|n| n.id)
            .filter(|i| *i != me)
            .collect()
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn term(&self) -> u32 {
        self.term
    }

    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// The primary this node follows (or itself).
    pub fn leader(&self) -> Option<u8> {
        self.leader
    }

    pub fn commit(&self) -> u64 {
        self.commit
    }

    pub fn session(&self) -> u64 {
        self.ls.session
    }

    pub fn next_seq(&self) -> u64 {
        self.ls.next
    }

    pub fn last_of(&self, member: u32) -> u64 {
        self.ls.last_of(member)
    }

    pub fn members(&self) -> usize {
        self.ls.members()
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    /// The log, to change under the node (the simulator's clock and disk
    /// faults; never the entries).
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    pub fn into_log(self) -> L {
        self.log
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    fn majority(&self) -> usize {
        self.membership().majority()
    }

    fn new_timeout(&mut self) {
        let t = self.cfg.election_timeout;
        self.timeout = t + self.rng.range(0, t);
    }

    /// Adds the running time since the last call (at most [`TICK_CAP`]) to
    /// the timers: the primary's silence of each peer, or this node's
    /// silence of a primary.
    fn observe(&mut self, now: Nanos) {
        let dt = match self.last_tick {
            Some(t) => now.saturating_sub(t).min(TICK_CAP),
            None => 0,
        };
        if self.last_tick.is_none_or(|t| now > t) {
            self.last_tick = Some(now);
        }
        if self.role == Role::Leader {
            self.age_peers(dt);
        } else {
            self.silent = self.silent.saturating_add(dt);
            self.since_leader = self.since_leader.saturating_add(dt);
        }
    }

    fn mirror(&self) {
        let c = &self.c;
        c.term.set(self.term as u64);
        c.role.set(match self.role {
            Role::Follower => 0,
            Role::PreCandidate => 1,
            Role::Candidate => 2,
            Role::Leader => 3,
        });
        c.next_seq.set(self.ls.next);
        c.commit.set(self.commit);
        c.leader.set(self.leader.map_or(u64::MAX, |l| l as u64));
        c.members.set(self.unicast_members as u64);
        c.learner.set(self.meta.learner as u64);
        c.durable.set(self.acked_end());
        c.first.set(self.ls.first);
    }

    /// Rebuilds where the bus goes.
    fn retarget(&mut self) {
        self.targets.clear();
        self.unicast_members = 0;
        match self.cfg.bus {
            BusMode::Multicast { group, .. } => self.targets.push(group),
            BusMode::Unicast => {
                let me = self.id();
                let nodes: Vec<SocketAddr> = self
                    .membership()
                    .nodes()
                    .iter()
                    .filter(|n| n.id != me)
                    .map(|n| n.addr)
                    .collect();
                self.targets.extend(nodes);
                let mut m: Vec<_> = self
                    .bindings
                    .values()
                    .filter(|b| b.unicast)
                    .map(|b| b.addr)
                    .collect();
                m.sort();
                m.dedup();
                m.truncate(MAX_MEMBERS);
                self.unicast_members = m.len();
                self.targets.extend(m);
            }
        }
        self.retarget_acks();
    }

    /// After the datagrams of one receive batch.
    pub fn end_batch(&mut self, now: Nanos, env: &mut dyn Env) {
        self.observe(now);
        self.follow_membership(now, env);
        match self.role {
            Role::Leader => self.leader_end_batch(now, env),
            Role::Follower => self.follower_end_batch(now, env),
            _ => {}
        }
        self.want_sync(env);
        self.mirror();
    }

    /// Timed work; returns when to tick again at the latest.
    pub fn tick(&mut self, now: Nanos, env: &mut dyn Env) -> Nanos {
        self.observe(now);
        self.check_space(now, env);
        self.follow_membership(now, env);
        let due = match self.role {
            Role::Leader => self.leader_tick(now, env),
            _ => self.election_tick(now, env),
        };
        self.retention_tick(now, env);
        self.installing_tick(now, env);
        self.want_sync(env);
        self.mirror();
        due.max(now + 1)
    }

    /// The primary's BEAM node (or this follower's peer's) is down, as its
    /// monitor says: in a group of two with [`TwoNodes::Safe`], the third
    /// vote a takeover needs; in any group, a reason to hold an election
    /// now rather than after the timeout.
    pub fn witness_down(&mut self, now: Nanos, node: Option<u8>) {
        match self.role {
            Role::Leader => {
                if let Some(n) = node {
                    self.ld.peer_down(n);
                }
            }
            _ => {
                // In sync: every entry the primary said was committed held
                // here (in safe mode it commits nothing the standby lacks
                // unless told the standby is down). The vote counts only
                // while the primary is silent on the bus too (`tally`): a
                // monitor's word against a primary still heard is ignored.
                // ...and heard the primary within two election timeouts
                // (a later witness may speak of commits it never heard);
                // ...and holds an entry of the primary's term (its epoch
                // record, so everything before it): a primary that
                // restarted announces no commit of an earlier term until
                // one of its own commits, yet it may have committed alone
                // in that term (the witness said this node was down), and
                // members delivered it.
                self.el.in_sync = self.fl.synced
                    && self.ls.next >= self.fl.commit_heard()
                    && self.ls.last_term() == self.term
                    && self.since_leader < 2 * self.cfg.election_timeout;
                self.el.witness_until = now + 4 * self.cfg.election_timeout;
                self.silent = self.silent.max(self.timeout);
            }
        }
    }

    /// A graceful stop: a primary tells the bus and the group that its term
    /// ends here (a follower then holds an election at once).
    pub fn stop(&mut self, now: Nanos, env: &mut dyn Env) {
        if self.role == Role::Leader {
            self.leader_flush(now, env);
            let h = self.bus_header(self.ls.next);
            wire::bus_header(&mut self.scratch, wire::BusKind::End, &h, 0);
            if let Some(s) = self.successor() {
                self.scratch.push(s);
            }
            env.send(&self.targets, &self.scratch);
            self.role = Role::Follower;
            self.leader = None;
            self.mirror();
        }
    }

    /// The voter a stopping primary names to campaign at once: the one
    /// whose acknowledged log reaches furthest among those heard within an
    /// election timeout (the lowest id on a tie), so that one election
    /// follows, not one per follower. Never a learner: it may not
    /// campaign, and the others would wait an election timeout for it.
    fn successor(&self) -> Option<u8> {
        let me = self.id();
        self.membership()
            .voters()
            .filter(|&v| v != me && !self.ld.learner[v as usize])
            .filter(|&v| self.ld.peer_silent[v as usize] < self.cfg.election_timeout)
            .max_by_key(|&v| (self.ld.matched[v as usize], std::cmp::Reverse(v)))
    }

    fn bus_header(&self, seq: u64) -> wire::BusHeader {
        wire::BusHeader {
            term: self.term,
            session: self.ls.session,
            seq,
            commit: self.commit,
            node: self.id(),
        }
    }

    /// The metadata as it is now.
    fn meta_now(&self) -> Meta {
        Meta {
            term: self.term,
            vote: self.vote,
            boot: self.cfg.boot,
            ..self.meta
        }
    }

    /// Records the term, the vote and the learner state before anything
    /// depends on them.
    fn persist(&mut self) -> bool {
        let m = self.meta_now();
        match self.log.save_meta(&m) {
            Ok(()) => {
                self.meta = m;
                true
            }
            Err(_) => {
                self.c.store_errors.bump(1);
                false
            }
        }
    }

    /// Raft: a message of a higher term makes any node a follower of it.
    fn adopt_term(&mut self, term: u32, leader: Option<u8>, env: &mut dyn Env) {
        self.term = term;
        self.vote = None;
        // A failed write is counted (`store_errors`); every vote is written
        // and checked before it is granted (`on_vote`), so a term lost here
        // can never let this node vote twice in one term.
        self.persist();
        self.become_follower(leader, env);
    }

    fn become_follower(&mut self, leader: Option<u8>, env: &mut dyn Env) {
        let was = self.role;
        self.role = Role::Follower;
        self.leader = leader;
        self.fl.reset();
        self.el.reset();
        if was == Role::Leader {
            self.ld.windows.clear();
        }
        self.new_timeout();
        if leader.is_some() {
            self.silent = 0;
        }
        self.mirror();
        env.event(NodeEvent::Follower {
            term: self.term,
            leader,
        });
    }
}
