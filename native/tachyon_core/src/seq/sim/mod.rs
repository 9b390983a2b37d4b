//! A deterministic simulator for the bus's protocol: sequencer nodes and
//! members (the real cores of `seq::core`) exchange datagrams through a
//! simulated network, in simulated time, with faults injected: lost,
//! duplicated, delayed and reordered datagrams, partitions that heal,
//! crashes and restarts from the log (what was appended survives, what was
//! only in memory does not), pauses (a process frozen, then resumed with
//! its stale view, as SIGSTOP or a long wait for a CPU would), clock jumps.
//! One seed drives everything: a failing seed replays bit for bit. The
//! invariants ([`check`]) are checked after every step.
//!
//! `cargo run --release --bin tachyon_sim -- --seeds N` runs many seeds;
//! `cargo test` runs a bounded number.

pub mod actors;
pub mod check;
mod faults;
pub mod group;
pub mod net;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use crate::seq::core::member::MemberConfig;
use crate::seq::core::{Nanos, Outbox, Rng, MICRO, MILLI};
use crate::seq::wire::{self, Bus, BusKind, Msg, CONTROL};

pub use actors::{Actor, Disk, Event, Workload};
use check::Checker;
pub use check::Violation;
pub use faults::Fault;
pub use group::Group;
pub use net::Capacity;
use net::{Link, Net, NetStats};

/// How the protocol under test is set up.
pub trait Protocol {
    fn name(&self) -> &'static str;
    /// Sequencer nodes.
    fn nodes(&self) -> usize;
    /// Node `i`'s disk before its first start (`session` for a new log).
    fn initial_disk(&self, i: usize, session: u64) -> Disk;
    /// Starts node `i` on `disk` (`restart`: after a crash; `primary`: the
    /// node that was primary last, a hint for protocols that need one).
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
}

/// A simulation's settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub members: usize,
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
    /// Time between two faults: uniform in this range.
    pub fault_every: (Nanos, Nanos),
    /// Every member's link to every node carries this much at most.
    pub uplink: Option<Capacity>,
    pub trace: bool,
}

impl SimConfig {
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            members: 3,
            fault_time: 3_000 * MILLI,
            settle_time: 5_000 * MILLI,
            gap: (200 * MICRO, 2 * MILLI),
            large: 0.02,
            base_loss: 0.0,
            faults: Fault::ALL.to_vec(),
            fault_every: (100 * MILLI, 400 * MILLI),
            uplink: None,
            trace: false,
        }
    }
}

/// What one simulation did and found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seed: u64,
    pub steps: u64,
    pub sim_time: Nanos,
    pub faults: BTreeMap<&'static str, u64>,
    pub checks: u64,
    pub violations: Vec<Violation>,
    pub accepted: u64,
    pub delivered: u64,
    pub takeovers: u64,
    pub forks_reported: u64,
    /// From the heal to the last member's last delivery.
    pub converge_after_heal: Option<Nanos>,
    pub net: NetStats,
    /// Publish-to-delivery time over every member's deliveries: p50, p99,
    /// p99.9, max (`None`: nothing delivered).
    pub latency: Option<[Nanos; 4]>,
    /// The members' command datagrams sent, and resent.
    pub commands: u64,
    pub resent: u64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

struct Proc {
    addr: SocketAddr,
    actor: Option<Box<dyn Actor>>,
    /// While crashed: its disk, and when it restarts.
    disk: Option<Disk>,
    restart_at: Nanos,
    /// Frozen until then; `true`: it ticks before reading on resume.
    paused: Option<(Nanos, bool)>,
    inbox: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Its clock reads the simulation's time plus this.
    offset: Nanos,
    next_tick: Nanos,
    /// A fault touched it (or its links) until then.
    unhealthy_until: Nanos,
    member_id: u32,
}

/// A paused process keeps at most this many datagrams (its socket buffer).
const INBOX: usize = 4096;

struct Sim<'a> {
    cfg: &'a SimConfig,
    proto: &'a dyn Protocol,
    rng: Rng,
    net: Net,
    procs: Vec<Proc>,
    by_addr: HashMap<SocketAddr, usize>,
    node_addrs: Vec<SocketAddr>,
    check: Checker,
    now: Nanos,
    out: Outbox,
    ev: Vec<Event>,
    /// Link faults to undo: (when, a, b).
    heals: Vec<(Nanos, usize, usize)>,
    /// The node believed primary (last to take over).
    primary: usize,
    faults: BTreeMap<&'static str, u64>,
    steps: u64,
    dumped: Nanos,
}

/// Runs one simulation.
pub fn run(cfg: &SimConfig, proto: &dyn Protocol) -> Report {
    let mut rng = Rng::new(cfg.seed);
    let session = rng.next_u64() | 1;
    let n = proto.nodes();
    let node_addrs: Vec<SocketAddr> = (0..n)
        .map(|i| SocketAddr::from(([127, 0, 1, i as u8 + 1], 7000)))
        .collect();
    let mut procs = Vec::new();
    for (i, a) in node_addrs.iter().enumerate() {
        let disk = proto.initial_disk(i, session);
        procs.push(Proc::new(
            *a,
            proto.start_node(i, &node_addrs, disk, false, 0, 0),
            0,
        ));
    }
    let work = Workload {
        until: cfg.fault_time,
        gap: cfg.gap,
        large: cfg.large,
    };
    for m in 0..cfg.members {
        let id = m as u32 + 1;
        let addr = SocketAddr::from(([127, 0, 2, m as u8 + 1], 8000));
        let mut mc = proto.member_config(id, &node_addrs);
        mc.bind = addr;
        let a = actors::SimMember::new(id, mc, work.clone(), rng.next_u64());
        procs.push(Proc::new(addr, Box::new(a), id));
    }
    let by_addr: HashMap<SocketAddr, usize> =
        procs.iter().enumerate().map(|(i, p)| (p.addr, i)).collect();
    let mut net = Net::new(Link::healthy(cfg.base_loss));
    if let Some(c) = cfg.uplink {
        for m in n..procs.len() {
            for node in 0..n {
                net.set_capacity(m, node, c);
            }
        }
    }
    let sim = Sim {
        cfg,
        proto,
        net,
        rng,
        procs,
        by_addr,
        node_addrs,
        check: Checker::new(proto.forks_allowed()),
        now: 0,
        out: Outbox::new(),
        ev: Vec::new(),
        heals: Vec::new(),
        primary: 0,
        faults: BTreeMap::new(),
        steps: 0,
        dumped: 0,
    };
    sim.run()
}

impl Proc {
    fn new(addr: SocketAddr, actor: Box<dyn Actor>, member_id: u32) -> Proc {
        Proc {
            addr,
            actor: Some(actor),
            disk: None,
            restart_at: 0,
            paused: None,
            inbox: VecDeque::new(),
            offset: 0,
            next_tick: 0,
            unhealthy_until: 0,
            member_id,
        }
    }

    fn runs(&self) -> bool {
        self.actor.is_some() && self.paused.is_none()
    }
}

impl Sim<'_> {
    fn trace(&self, s: impl FnOnce() -> String) {
        if self.cfg.trace {
            eprintln!("{:>10.3} ms  {}", self.now as f64 / 1e6, s());
        }
    }

    fn run(mut self) -> Report {
        let heal_at = self.cfg.fault_time;
        let end = heal_at + self.cfg.settle_time;
        let mut next_fault = 200 * MILLI;
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
            for (at, _, _) in &self.heals {
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
            if self.cfg.trace && self.now >= self.dumped + 50 * MILLI {
                self.dumped = self.now;
                for i in 0..self.procs.len() {
                    let d = self.procs[i]
                        .actor
                        .as_ref()
                        .map_or("down".into(), |a| a.describe());
                    self.trace(|| format!("process {i}: {d}"));
                }
            }
            self.undo_link_faults();
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
            for (i, p) in self.procs.iter().enumerate() {
                let d = p.actor.as_ref().map_or("down".into(), |a| a.describe());
                self.trace(|| format!("process {i}: {d}"));
            }
        }
        let members: Vec<u32> = self
            .procs
            .iter()
            .filter(|p| p.member_id > 0)
            .map(|p| p.member_id)
            .collect();
        let mut converge = None;
        if self.check.violations.is_empty()
            && !self.check.forks_allowed
            && self.check.forks_reported > 0
        {
            // Where forks cannot be, a member that reports one is wrong.
            let d = format!(
                "{} forks reported where none can be",
                self.check.forks_reported
            );
            self.check.wedge_kind("false_fork", self.now, d);
        }
        if self.check.violations.is_empty() && self.check.forks_allowed {
            // Forks lose what the losing side delivered: every member must
            // have moved back and caught up with the final primary's log.
            let commit = self.procs[self.primary]
                .actor
                .as_ref()
                .map_or(0, |a| a.position());
            for p in self.procs.iter().filter(|p| p.member_id > 0) {
                let at = p.actor.as_ref().map_or(0, |a| a.position());
                if at != commit {
                    let d = format!(
                        "member {} at {at}, the final commit at {commit}",
                        p.member_id
                    );
                    self.check.wedge(self.now, d);
                    break;
                }
            }
            if self.check.violations.is_empty() {
                converge = Some(self.check.last_delivery.saturating_sub(heal_at));
            }
        } else if self.check.violations.is_empty() {
            match self.check.converged(&members) {
                Ok(()) => converge = Some(self.check.last_delivery.saturating_sub(heal_at)),
                Err(e) => self.check.wedge(self.now, e),
            }
        }
        if self.check.violations.is_empty() && self.check.forks_allowed {
            let forks: HashMap<u32, u64> = self
                .procs
                .iter()
                .filter(|p| p.member_id > 0)
                .map(|p| (p.member_id, p.actor.as_ref().map_or(0, |a| a.forks())))
                .collect();
            let p = self.primary;
            if let Some(log) = self.procs[p].actor.as_ref().and_then(|a| a.log()).cloned() {
                self.check.views_in_log(self.now, &log, &forks);
                self.check.publishes_kept(self.now, &log);
            }
        }
        if self.check.violations.is_empty() {
            // Every delivered message is in every node's final log.
            for p in 0..self.node_addrs.len() {
                if let Some(log) = self.procs[p].actor.as_ref().and_then(|a| a.log()).cloned() {
                    let what = format!("node {p} at the end");
                    if !self.check.log_holds_delivered(self.now, &log, &what) {
                        break;
                    }
                }
            }
        }
        let (commands, resent) = self.tx_counts();
        Report {
            seed: self.cfg.seed,
            steps: self.steps,
            sim_time: self.now,
            faults: self.faults,
            checks: self.check.checks,
            accepted: self.check.accepted_total(),
            delivered: self.check.delivered_total(),
            takeovers: self.check.takeovers,
            forks_reported: self.check.forks_reported,
            converge_after_heal: converge,
            latency: check::percentiles(&mut self.check.latencies),
            net: self.net.stats.clone(),
            commands,
            resent,
            violations: self.check.violations,
        }
    }

    /// The members' command datagrams sent and resent.
    fn tx_counts(&self) -> (u64, u64) {
        self.procs
            .iter()
            .filter_map(|p| p.actor.as_ref())
            .map(|a| a.tx_counts())
            .fold((0, 0), |(c, r), (a, b)| (c + a, r + b))
    }

    fn local(&self, i: usize) -> Nanos {
        self.now + self.procs[i].offset
    }

    /// Sends what process `i` queued, and handles what it reported.
    fn after(&mut self, i: usize) {
        let from = self.procs[i].addr;
        let is_node = self.procs[i].member_id == 0;
        let out = std::mem::take(&mut self.out);
        for (to, d) in out.iter() {
            if is_node {
                if let Ok(b) = Bus::parse(d) {
                    if matches!(b.kind, BusKind::Data | BusKind::Heartbeat) {
                        self.check.primary(self.now, b.h.term as u64, from);
                    }
                }
            }
            if self.cfg.trace && !is_node {
                if let Ok(c) = wire::Cmd::parse(d) {
                    if c.kind == wire::CmdKind::Hello {
                        let h = c.hello();
                        self.trace(|| format!("member {} hello to {to}: {h:?}", c.member_id));
                    }
                }
            }
            if let Some(&j) = self.by_addr.get(&to) {
                self.net.send(&mut self.rng, self.now, i, from, j, to, d);
            }
        }
        self.out = out;
        self.out.clear();
        let ev = std::mem::take(&mut self.ev);
        for e in ev {
            match e {
                Event::Delivered {
                    seq,
                    member_id,
                    data,
                } => {
                    let m = self.procs[i].member_id;
                    self.check.delivered(self.now, m, seq, member_id, &data);
                }
                Event::Accepted { counter } => {
                    self.check
                        .accepted(self.now, self.procs[i].member_id, counter);
                }
                Event::MovedBack { resume } => {
                    self.check.moved_back(self.procs[i].member_id, resume);
                }
                Event::Leader { term } => self.took_over(i, term),
                Event::Trace(s) => self.trace(|| s),
            }
        }
    }

    fn took_over(&mut self, i: usize, term: u64) {
        self.check.takeovers += 1;
        self.trace(|| format!("node {i} primary of term {term}"));
        let p = self.primary;
        let w = self.proto.takeover_window();
        if p != i {
            let old = &self.procs[p];
            let healthy = old.runs()
                && old
                    .actor
                    .as_ref()
                    .is_some_and(|a| a.primary_term().is_some())
                && old.unhealthy_until + w <= self.now
                && !self.net.link_impaired(p, i)
                && !self.net.link_impaired(i, p);
            if healthy {
                let d = format!(
                    "node {i} took over (term {term}) from node {p}, up and reachable for {} ms",
                    (self.now - old.unhealthy_until) / MILLI
                );
                self.check.false_takeover(self.now, d);
            }
        }
        self.primary = i;
        if let Some(log) = self.procs[i].actor.as_ref().and_then(|a| a.log()).cloned() {
            self.check.log_holds_delivered(
                self.now,
                &log,
                &format!("node {i}, primary of term {term}"),
            );
        }
    }

    fn deliveries(&mut self) {
        let mut batches: BTreeMap<usize, Vec<(SocketAddr, Vec<u8>)>> = BTreeMap::new();
        while let Some(f) = self.net.pop_due(self.now) {
            if self.procs[f.to].actor.is_none() {
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
        for (i, b) in batches {
            self.batch(i, b);
        }
    }

    /// Process `i` reads `b` (one receive batch); it ticks right after.
    fn batch(&mut self, i: usize, b: Vec<(SocketAddr, Vec<u8>)>) {
        let now = self.local(i);
        let Some(mut a) = self.procs[i].actor.take() else {
            return;
        };
        for (from, d) in &b {
            a.on_datagram(now, *from, d, &mut self.out, &mut self.ev);
        }
        a.end_batch(now, &mut self.out, &mut self.ev);
        self.procs[i].actor = Some(a);
        self.procs[i].next_tick = self.now;
        self.after(i);
    }

    fn tick(&mut self, i: usize) {
        let now = self.local(i);
        let Some(mut a) = self.procs[i].actor.take() else {
            return;
        };
        let due = a.tick(now, &mut self.out, &mut self.ev);
        self.procs[i].actor = Some(a);
        // At least a microsecond on: a core asking for `now` again is
        // ticked again in the next step.
        let off = self.procs[i].offset;
        self.procs[i].next_tick = due.saturating_sub(off).max(self.now + MICRO);
        self.after(i);
    }

    fn ticks(&mut self) {
        for i in 0..self.procs.len() {
            if self.procs[i].runs() && self.procs[i].next_tick <= self.now {
                self.tick(i);
            }
        }
    }
}

/// The session record a new log starts with.
pub fn session_log(session: u64) -> crate::seq::core::MemLog {
    use crate::seq::core::Log;
    let mut log = crate::seq::core::MemLog::new();
    let mut e = Vec::new();
    wire::write_msg(&mut e, 0, session, CONTROL, &[]);
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
