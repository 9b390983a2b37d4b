//! The simulation's loop: processes, their clocks and inboxes, the
//! network between them, the nemesis ([`super::faults`]) and the checks
//! after every step.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use super::check::{self, Checker};
use super::clock::Clock;
use super::faults::{Fault, Heal};
use super::logcheck::LogChecker;
use super::members::{SimMember, Start, Workload};
use super::net::{Link, Net};
use super::{Action, Disk, Event, Protocol, Report, SimConfig};
use crate::seq::core::{Nanos, NodeEvent, Outbox, Rng, MICRO, MILLI};

pub(super) struct Proc {
    pub addr: SocketAddr,
    pub actor: Option<Box<dyn Actor>>,
    /// While a node is down: its disk, and when it restarts.
    pub disk: Option<Disk>,
    pub restart_at: Nanos,
    /// Frozen until then; `true`: it ticks before reading on resume.
    pub paused: Option<(Nanos, bool)>,
    pub inbox: VecDeque<(SocketAddr, Vec<u8>)>,
    pub clock: Clock,
    pub next_tick: Nanos,
    /// A fault touched it (or its links) until then.
    pub unhealthy_until: Nanos,
    pub member_id: u32,
    /// Keys given: its guards (a node's made anew at each start).
    pub guards: Option<super::auth::Guards>,
}

use super::Actor;

/// A node's disk history, as the nemesis and the checks need it.
#[derive(Default)]
pub(super) struct NodeFate {
    /// The host's boot (a power loss reboots it).
    pub boot: u64,
    /// The node lost data it may have acknowledged, and does not hold
    /// what was committed then (this position) yet.
    pub amnesiac_until: Option<u64>,
    /// Its log's prefix hashes before it lost data (it held those when it
    /// acknowledged them).
    pub before_loss: Option<Vec<u64>>,
    /// A spare slot no node has started in yet.
    pub unused: bool,
    /// An entry of its log cannot be read back (found when a replay reads
    /// it: then the node cuts its log there).
    pub latent: bool,
}

/// A paused process keeps at most this many datagrams (its socket buffer).
const INBOX: usize = 4096;

/// Datagrams per receive batch at most, as the shells' `recvmmsg` reads
/// them (`Tachyon.Sequencer`'s `:batch`, 32).
pub(super) const RECV_BATCH: usize = 32;

pub(super) struct Sim<'a> {
    pub cfg: &'a SimConfig,
    pub proto: &'a dyn Protocol,
    pub rng: Rng,
    pub net: Net,
    pub procs: Vec<Proc>,
    by_addr: HashMap<SocketAddr, usize>,
    pub node_addrs: Vec<SocketAddr>,
    /// Nodes of the initial group (the first of `node_addrs`; the others
    /// are spare slots for nodes that join).
    pub initial_nodes: usize,
    pub check: Checker,
    pub logs: LogChecker,
    pub fates: Vec<NodeFate>,
    pub now: Nanos,
    pub(super) out: Outbox,
    pub(super) ev: Vec<Event>,
    pub heals: Vec<(Nanos, Heal)>,
    /// The node believed primary (last to take over).
    pub primary: usize,
    /// When the first primary was elected.
    pub(super) first_primary: Option<Nanos>,
    /// A scenario mutes the next node elected ([`Action::MuteNextPrimary`]).
    pub(super) mute_next_primary: bool,
    /// When the process being handled starts sending what it queued (the
    /// latency model: after reading its batch; 0: no cost, all leaves
    /// now); each datagram leaves once its own send is done.
    send_at: Nanos,
    pub faults: BTreeMap<&'static str, u64>,
    pub(super) retention: BTreeMap<&'static str, u64>,
    /// The fault kinds this seed draws from.
    pub mix: Vec<Fault>,
    pub script: VecDeque<(Nanos, Action)>,
    /// Actions waiting for a protocol event ([`Action::When`]).
    pub(super) armed: Vec<(super::Trigger, Vec<Action>)>,
    /// The script's node indices, cast ([`Action::PrimaryIs0`]).
    pub(super) roles: Vec<usize>,
    /// A stranger on the wire (`Fault::Forge`, runs with keys).
    pub(super) stranger: super::auth::Stranger,
    steps: u64,
    dumped: Nanos,
}

impl<'a> Sim<'a> {
    pub fn new(cfg: &'a SimConfig, proto: &'a dyn Protocol) -> Sim<'a> {
        let mut rng = Rng::new(cfg.seed);
        let session = rng.next_u64() | 1;
        let n = proto.nodes();
        let slots = n + proto.spare_nodes();
        let node_addrs: Vec<SocketAddr> = (0..slots)
            .map(|i| SocketAddr::from(([127, 0, 1, i as u8 + 1], 7000)))
            .collect();
        let mut procs = Vec::new();
        for (i, a) in node_addrs.iter().enumerate() {
            let disk = proto.initial_disk(i, session);
            if i < n {
                procs.push(Proc::new(
                    *a,
                    Some(proto.start_node(i, &node_addrs, disk, false, 0, 0)),
                    0,
                ));
            } else {
                // A spare slot: a node starts there when the nemesis adds
                // one to the group.
                let mut p = Proc::new(*a, None, 0);
                p.disk = Some(disk);
                p.restart_at = Nanos::MAX;
                procs.push(p);
            }
        }
        let work = Workload {
            until: cfg.fault_time,
            gap: cfg.gap,
            large: cfg.large,
        };
        let scripted = cfg.scenario.as_ref();
        let (members, late) = match scripted {
            Some(s) => (s.members, s.late_members.len()),
            None => (cfg.members, cfg.late_members),
        };
        for m in 0..members + late {
            let id = m as u32 + 1;
            let addr = SocketAddr::from(([127, 0, 2, m as u8 + 1], 8000));
            let mut mc = proto.member_config(id, &node_addrs[..n]);
            mc.bind = addr;
            let (open_at, start) = if m < members {
                (0, Start::From(1))
            } else if let Some(s) = scripted {
                s.late_members[m - members]
            } else {
                let at = rng.range(100 * MILLI, cfg.fault_time.max(200 * MILLI));
                let start = match rng.range(0, 4) {
                    0 => Start::From(1),
                    1 => Start::From(rng.range(2, 2_000)),
                    2 => Start::Snapshot,
                    _ => Start::Live,
                };
                (at, start)
            };
            let a = SimMember::new(id, mc, work.clone(), rng.next_u64(), open_at, start);
            procs.push(Proc::new(addr, Some(Box::new(a)), id));
        }
        let by_addr = procs.iter().enumerate().map(|(i, p)| (p.addr, i)).collect();
        let mut net = Net::new(Link::healthy(cfg.base_loss));
        if let Some(c) = cfg.uplink {
            for m in n..procs.len() {
                for node in 0..n {
                    net.set_capacity(m, node, c);
                }
            }
        }
        let mix = if cfg.swarm && cfg.scenario.is_none() && cfg.faults.len() > 1 {
            // Swarm testing: this seed's own subset, at least one kind.
            let mut m: Vec<Fault> = cfg
                .faults
                .iter()
                .copied()
                .filter(|_| rng.chance(0.5))
                .collect();
            if m.is_empty() {
                m.push(cfg.faults[rng.range(0, cfg.faults.len() as u64) as usize]);
            }
            m
        } else {
            cfg.faults.clone()
        };
        let script = scripted
            .map(|s| s.actions.iter().cloned().collect())
            .unwrap_or_default();
        Sim {
            cfg,
            proto,
            net,
            rng,
            procs,
            by_addr,
            node_addrs,
            initial_nodes: n,
            check: Checker::new(proto.forks_allowed()),
            logs: LogChecker::new(slots),
            fates: (0..slots)
                .map(|i| NodeFate {
                    unused: i >= n,
                    ..NodeFate::default()
                })
                .collect(),
            now: 0,
            out: Outbox::new(),
            ev: Vec::new(),
            heals: Vec::new(),
            primary: 0,
            first_primary: None,
            mute_next_primary: false,
            send_at: 0,
            faults: BTreeMap::new(),
            retention: BTreeMap::new(),
            mix,
            script,
            armed: Vec::new(),
            roles: Vec::new(),
            stranger: Default::default(),
            steps: 0,
            dumped: 0,
        }
    }

    /// Keys given: every running process's guards.
    fn arm_guards(mut self) -> Self {
        for i in 0..self.procs.len() {
            if self.procs[i].actor.is_some() {
                self.procs[i].guards = self.new_guards(i);
            }
        }
        self
    }

    pub fn trace(&self, s: impl FnOnce() -> String) {
        if self.cfg.trace {
            eprintln!("{:>10.3} ms  {}", self.now as f64 / 1e6, s());
        }
    }

    pub fn run(self) -> Report {
        let s = self.arm_guards();
        s.run_armed()
    }

    fn run_armed(mut self) -> Report {
        let heal_at = self.cfg.fault_time;
        let end = heal_at + self.cfg.settle_time;
        let mut next_fault = if self.cfg.scenario.is_some() {
            Nanos::MAX
        } else {
            200 * MILLI
        };
        let mut healed = false;
        while self.check.violations.is_empty() {
            let mut t = end;
            if let Some(a) = self.net.next_at() {
                t = t.min(a);
            }
            for p in &self.procs {
                match (&p.actor, p.paused) {
                    (None, _) => t = t.min(p.restart_at),
                    (Some(_), Some((until, _))) => t = t.min(until),
                    (Some(_), None) => t = t.min(p.next_tick),
                }
            }
            for (at, _) in &self.heals {
                t = t.min(*at);
            }
            if let Some((at, _)) = self.script.front() {
                t = t.min(*at);
            }
            if !healed {
                t = t.min(next_fault).min(heal_at);
            }
            if t >= end {
                break;
            }
            self.now = self.now.max(t);
            self.steps += 1;
            if !healed && self.now >= heal_at {
                healed = true;
                self.heal_everything();
            }
            if !healed && self.now >= next_fault {
                self.inject();
                next_fault = self.now
                    + self
                        .rng
                        .range(self.cfg.fault_every.0, self.cfg.fault_every.1);
            }
            while self.script.front().is_some_and(|(at, _)| *at <= self.now) {
                let (_, a) = self.script.pop_front().expect("front");
                self.act(a);
            }
            if self.cfg.trace && self.now >= self.dumped + 50 * MILLI {
                self.dumped = self.now;
                self.dump();
            }
            self.undo_faults();
            self.restarts_and_resumes();
            self.deliveries();
            self.ticks();
            self.check.forks_reported = self
                .procs
                .iter()
                .filter_map(|p| p.actor.as_ref())
                .map(|a| a.forks())
                .sum();
        }
        if self.cfg.trace {
            self.dump();
        }
        let converge = self.final_checks(heal_at);
        let (commands, resent) = self.tx_counts();
        let rejected = self.rejected();
        Report {
            seed: self.cfg.seed,
            steps: self.steps,
            sim_time: self.now,
            mix: self.mix.iter().map(|f| f.name()).collect(),
            faults: self.faults,
            checks: self.check.checks + self.logs.checks,
            accepted: self.check.accepted_total(),
            delivered: self.check.delivered_total(),
            takeovers: self.check.takeovers,
            forks_reported: self.check.forks_reported,
            joins: self.check.joins,
            converge_after_heal: converge,
            rejected,
            forged: self.stranger.sent,
            latency: check::percentiles(&mut self.check.latencies),
            net: self.net.stats.clone(),
            commands,
            resent,
            retention: std::mem::take(&mut self.retention),
            violations: self.check.violations,
        }
    }

    fn dump(&self) {
        for i in 0..self.procs.len() {
            let d = self.procs[i]
                .actor
                .as_ref()
                .map_or("down".into(), |a| a.describe());
            self.trace(|| format!("process {i}: {d}"));
        }
    }

    pub fn local(&self, i: usize) -> Nanos {
        self.procs[i].clock.local(self.now)
    }

    pub fn is_node(&self, i: usize) -> bool {
        i < self.node_addrs.len()
    }

    /// Sends what process `i` queued, and handles what it reported (after
    /// the scenario's triggers: what this step set off, [`super::triggers`]).
    pub fn after(&mut self, i: usize) {
        let from = self.procs[i].addr;
        let is_node = self.is_node(i);
        if is_node && self.crashed_in_install(i) {
            return;
        }
        let elected = || {
            self.ev
                .iter()
                .any(|e| matches!(e, Event::Node(NodeEvent::Leader { .. })))
        };
        if self.mute_next_primary && is_node && elected() {
            // Before what it sent as it was elected leaves.
            self.mute_next_primary = false;
            self.trace(|| format!("scenario: node {i} elected, muted"));
            for j in (0..self.procs.len()).filter(|j| *j != i) {
                self.cut(i, j, false, Nanos::MAX);
            }
        }
        let (lost, then) = self.fire_triggers(i);
        let out = std::mem::take(&mut self.out);
        for (k, (to, d)) in out.iter().enumerate() {
            if is_node {
                self.watch_node_datagram(i, from, to, d);
            }
            if lost.contains(&to) {
                self.net.stats.lost += 1;
                self.trace(|| format!("scenario: a datagram of process {i} to {to} lost"));
                continue;
            }
            if let Some(&j) = self.by_addr.get(&to) {
                let at = if self.send_at == 0 {
                    self.now
                } else {
                    self.send_at + self.cfg.cost * (k as u64 + 1)
                };
                let d = self.sealed(i, to, d);
                self.net.send(&mut self.rng, at, i, from, j, to, &d);
            }
        }
        self.out = out;
        self.out.clear();
        if is_node {
            self.node_log_changed(i);
        }
        let ev = std::mem::take(&mut self.ev);
        let m = self.procs[i].member_id;
        let inc = self.procs[i].actor.as_ref().map_or(0, |a| a.incarnation());
        for e in ev {
            match e {
                Event::Delivered {
                    seq,
                    member_id,
                    data,
                } => self
                    .check
                    .delivered(self.now, (m, inc), seq, member_id, &data),
                Event::Accepted { counter } => self.check.accepted(self.now, m, counter),
                Event::MovedBack { resume } => self.check.moved_back((m, inc), resume),
                Event::Skipped { from, first } => self.check.skipped((m, inc), from, first),
                Event::Joined { inc, start } => self.check.joined(self.now, (m, inc), start),
                Event::MemberGone { inc, undelivered } => self.check.gone((m, inc), undelivered),
                Event::Node(e) => self.node_event(i, e),
                Event::Retention(k) => self.count(k),
                Event::State { next, hash } => self.check.state(self.now, (m, inc), next, hash),
                Event::Trace(s) => self.trace(|| s),
            }
        }
        for a in then {
            self.act(a);
        }
    }

    /// Counts something retention (or a node) did, for the report.
    pub(super) fn count(&mut self, k: &'static str) {
        *self.retention.entry(k).or_default() += 1;
    }

    /// What is due, in receive batches of [`RECV_BATCH`] at most per
    /// process: the rest stays on the wire, read in the next step (at the
    /// same time), and a fault on the wire meanwhile still reaches it.
    fn deliveries(&mut self) {
        let mut batches: BTreeMap<usize, Vec<(SocketAddr, Vec<u8>)>> = BTreeMap::new();
        let mut later = Vec::new();
        while let Some(f) = self.net.pop_due(self.now) {
            if self.procs[f.to].actor.is_none() {
                continue;
            }
            if batches.get(&f.to).is_some_and(|b| b.len() >= RECV_BATCH) {
                later.push(f);
                continue;
            }
            let p = &mut self.procs[f.to];
            if p.paused.is_some() {
                if p.inbox.len() < INBOX {
                    p.inbox.push_back((f.from, f.bytes));
                } else {
                    self.net.stats.overflowed += 1;
                }
                continue;
            }
            self.net.stats.delivered += 1;
            batches.entry(f.to).or_default().push((f.from, f.bytes));
        }
        for f in later {
            self.net.requeue(f);
        }
        for (i, b) in batches {
            self.batch(i, b);
        }
    }

    /// Process `i` reads `b` (one receive batch); it ticks right after.
    pub fn batch(&mut self, i: usize, b: Vec<(SocketAddr, Vec<u8>)>) {
        let now = self.local(i);
        let Some(mut a) = self.procs[i].actor.take() else {
            return;
        };
        let n = b.len();
        for (from, d) in b {
            // Keys given: opened first; what fails never reaches the core.
            if let Some(d) = self.opened(i, from, d) {
                a.on_datagram(now, from, &d, &mut self.out, &mut self.ev);
            }
        }
        a.end_batch(now, &mut self.out, &mut self.ev);
        self.procs[i].actor = Some(a);
        self.procs[i].next_tick = self.now;
        self.busy(i, n);
        self.after(i);
        self.send_at = 0;
    }

    /// The latency model ([`SimConfig::cost`]): process `i` read `read`
    /// datagrams and queued `self.out`: it is busy for their cost, and
    /// what it queued leaves in order, each datagram once its own send is
    /// done (as `sendmmsg` hands them to the NIC one after another).
    fn busy(&mut self, i: usize, read: usize) {
        let cost = self.cfg.cost * (read + self.out.len()) as u64;
        if cost == 0 {
            return;
        }
        self.send_at = self.now + self.cfg.cost * read as u64;
        let p = &mut self.procs[i];
        if p.paused.is_none() {
            p.paused = Some((self.now + cost, false));
        }
    }

    pub fn tick(&mut self, i: usize) {
        let now = self.local(i);
        let Some(mut a) = self.procs[i].actor.take() else {
            return;
        };
        let due = a.tick(now, &mut self.out, &mut self.ev);
        self.procs[i].actor = Some(a);
        // At least a microsecond on: a core asking for `now` again is
        // ticked again in the next step.
        let at = self.procs[i].clock.to_sim(due);
        self.procs[i].next_tick = at.max(self.now + MICRO);
        self.busy(i, 0);
        self.after(i);
        self.send_at = 0;
    }

    fn ticks(&mut self) {
        for i in 0..self.procs.len() {
            if self.procs[i].runs() && self.procs[i].next_tick <= self.now {
                self.tick(i);
            }
        }
    }

    /// Calls `f` on member process `i` and handles what it did.
    pub fn with_member(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Actor, Nanos, &mut Outbox, &mut Vec<Event>),
    ) {
        let now = self.local(i);
        let Some(mut a) = self.procs[i].actor.take() else {
            return;
        };
        f(a.as_mut(), now, &mut self.out, &mut self.ev);
        self.procs[i].actor = Some(a);
        self.procs[i].next_tick = self.now;
        self.after(i);
    }
}

impl Proc {
    fn new(addr: SocketAddr, actor: Option<Box<dyn Actor>>, member_id: u32) -> Proc {
        Proc {
            addr,
            actor,
            disk: None,
            restart_at: 0,
            paused: None,
            inbox: VecDeque::new(),
            clock: Clock::default(),
            next_tick: 0,
            unhealthy_until: 0,
            member_id,
            guards: None,
        }
    }

    pub fn runs(&self) -> bool {
        self.actor.is_some() && self.paused.is_none()
    }
}
