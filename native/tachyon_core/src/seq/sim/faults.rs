//! The nemesis: which faults exist, and how the simulation injects and
//! heals them (node crashes, power losses and disk faults, pauses, link
//! faults, clocks, members killed and closed), at random or as a
//! [`Scenario`](super::Scenario) says.

use super::engine::{Sim, RECV_BATCH};
use super::members::Start;
use super::net::Link;
use super::Disk;
use crate::seq::core::{MemLog, Nanos, MILLI};

/// The faults the nemesis picks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A node is killed (-9: its page cache survives), and restarted
    /// later on its log.
    Crash,
    /// A node's host loses power: writes not synced (nor written back)
    /// are lost or torn; it restarts on what reached the disk.
    PowerLoss,
    /// A node's disk is replaced by an empty one.
    ReplaceDisk,
    /// A record on a node's disk rots; the node's host reboots and reads
    /// it back (its recovery cuts the log there).
    Corrupt,
    /// A node's disk is full for a while (appends fail).
    DiskFull,
    /// A record of a node's log cannot be read back (a latent sector
    /// error), until the node finds it (a replay reads it) and copies it
    /// again from its peers.
    ReadError,
    /// A process is frozen; resumed, it reads what waited, then ticks.
    Pause,
    /// A process is frozen between a read and its clock check; resumed,
    /// it ticks first (a thread that waited for a CPU).
    Stall,
    /// A process cut off from every other.
    Partition,
    /// The processes split in two groups that do not hear each other.
    Split,
    /// One direction of a link cut.
    OneWay,
    /// Two processes cut from each other only (each still hears the
    /// others: a non-transitive partition).
    PairCut,
    /// Loss of 10-50% on the links of two processes.
    Lossy,
    /// Delays up to 5 ms (reordering) and 5% duplicates on two processes' links.
    Reorder,
    /// A process's clock jumps forward.
    ClockJump,
    /// A process's clock runs fast or slow for a while.
    Drift,
    /// The primary adds a node to the group (one joins in a spare slot),
    /// or removes one (a random voter, itself perhaps): one at a time.
    Membership,
    /// A member's process is killed (no goodbye); it opens again later.
    MemberKill,
    /// A member closes with publishes in flight; it opens again later.
    MemberClose,
    /// In a group of two: the witness says a live node is down (a monitor
    /// that lost only its own link).
    FalseWitness,
    /// A stranger sends what it captured on the wire again (some with a
    /// bit flipped), and plain datagrams claiming to be a node or a member
    /// (runs with keys only: without, nothing tells them apart).
    Forge,
}

/// A fault to undo when its time comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heal {
    Link(usize, usize),
    DiskFull(usize),
    Rate(usize),
}

/// How a node goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    Kill,
    PowerLoss,
    Replace,
    Corrupt,
}

impl Fault {
    pub const ALL: [Fault; 21] = [
        Fault::Crash,
        Fault::PowerLoss,
        Fault::ReplaceDisk,
        Fault::Corrupt,
        Fault::DiskFull,
        Fault::ReadError,
        Fault::Pause,
        Fault::Stall,
        Fault::Partition,
        Fault::Split,
        Fault::OneWay,
        Fault::PairCut,
        Fault::Lossy,
        Fault::Reorder,
        Fault::ClockJump,
        Fault::Drift,
        Fault::Membership,
        Fault::MemberKill,
        Fault::MemberClose,
        Fault::FalseWitness,
        Fault::Forge,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::PowerLoss => "power_loss",
            Fault::ReplaceDisk => "replace_disk",
            Fault::Corrupt => "corrupt",
            Fault::DiskFull => "disk_full",
            Fault::ReadError => "read_error",
            Fault::Pause => "pause",
            Fault::Stall => "stall",
            Fault::Partition => "partition",
            Fault::Split => "split",
            Fault::OneWay => "one_way",
            Fault::PairCut => "pair_cut",
            Fault::Lossy => "lossy_link",
            Fault::Reorder => "reorder_link",
            Fault::ClockJump => "clock_jump",
            Fault::Drift => "drift",
            Fault::Membership => "membership",
            Fault::MemberKill => "member_kill",
            Fault::MemberClose => "member_close",
            Fault::FalseWitness => "false_witness",
            Fault::Forge => "forge",
        }
    }

    /// A fault by name, or by a prefix of one name only.
    pub fn parse(s: &str) -> Option<Fault> {
        if let Some(f) = Fault::ALL.into_iter().find(|f| f.name() == s) {
            return Some(f);
        }
        let mut m = Fault::ALL.into_iter().filter(|f| f.name().starts_with(s));
        match (m.next(), m.next()) {
            (Some(f), None) => Some(f),
            _ => None,
        }
    }
}

impl Sim<'_> {
    pub(super) fn restarts_and_resumes(&mut self) {
        for i in 0..self.procs.len() {
            if self.procs[i].actor.is_none() && self.procs[i].restart_at <= self.now {
                let disk = self.procs[i].disk.take().unwrap_or_default();
                let primary = self.primary;
                let a =
                    self.proto
                        .start_node(i, &self.node_addrs, disk, true, primary, self.local(i));
                self.trace(|| format!("node {i} restarts"));
                self.procs[i].actor = Some(a);
                self.procs[i].guards = self.new_guards(i);
                self.procs[i].next_tick = self.now;
                self.after(i);
            }
            if let Some((until, tick_first)) = self.procs[i].paused {
                if until <= self.now {
                    self.procs[i].paused = None;
                    self.trace(|| format!("process {i} resumes"));
                    if tick_first {
                        self.tick(i);
                    }
                    // What waited, read in receive batches one after another.
                    while !self.procs[i].inbox.is_empty() && self.procs[i].runs() {
                        let k = self.procs[i].inbox.len().min(RECV_BATCH);
                        let b: Vec<_> = self.procs[i].inbox.drain(..k).collect();
                        self.batch(i, b);
                    }
                    self.procs[i].next_tick = self.now;
                }
            }
        }
    }

    pub(super) fn undo_faults(&mut self) {
        let now = self.now;
        let (due, keep): (Vec<_>, Vec<_>) = self.heals.drain(..).partition(|h| h.0 <= now);
        self.heals = keep;
        for (_, h) in due {
            self.undo(h);
        }
    }

    pub(super) fn undo(&mut self, h: Heal) {
        match h {
            Heal::Link(a, b) => {
                self.net.heal(a, b);
                self.net.heal(b, a);
            }
            Heal::DiskFull(i) => self.set_full(i, false),
            Heal::Rate(i) => {
                let now = self.now;
                self.procs[i].clock.set_rate(now, 1.0);
            }
        }
    }

    pub(super) fn mark(&mut self, i: usize, until: Nanos) {
        let p = &mut self.procs[i];
        p.unhealthy_until = p.unhealthy_until.max(until);
    }

    pub(super) fn set_full(&mut self, i: usize, full: bool) {
        let p = &mut self.procs[i];
        if let Some(l) = p.actor.as_mut().and_then(|a| a.log_mut()) {
            l.full = full;
        }
        if let Some(d) = p.disk.as_mut() {
            d.log.full = full;
        }
    }

    /// Whether node `i` may lose data it acknowledged now: at most a
    /// minority of the nodes lack what they acknowledged at once (what
    /// the modes promise to survive).
    fn may_lose_data(&self, i: usize) -> bool {
        let voters = self.voters_of(self.primary);
        let lacking = |j: usize| self.fates[j].amnesiac_until.is_some() || self.fates[j].latent;
        let others = voters.iter().filter(|&&j| j != i && lacking(j)).count();
        let me = voters.contains(&i) as usize;
        others + me <= (voters.len().max(1) - 1) / 2
    }

    /// Takes node `i` down as `how` says, until `restart_at`.
    pub(super) fn take_down(&mut self, i: usize, how: Down, restart_at: Nanos) -> bool {
        let Some(a) = self.procs[i].actor.take() else {
            return false;
        };
        let mut disk = a.crash().unwrap_or_default();
        let f = &mut self.fates[i];
        let lost = match how {
            Down::Kill => false,
            Down::PowerLoss => {
                f.before_loss = Some(disk.log.chains());
                f.boot += 1;
                let wb = self.rng.range(20, 1_000) * MILLI;
                disk.log.power_loss(&mut self.rng, wb, 0.3, 0.1);
                !self.proto.durability().on_disk()
            }
            Down::Replace => {
                f.before_loss = Some(disk.log.chains());
                f.boot += 1;
                disk = Disk::default();
                true
            }
            Down::Corrupt => {
                f.before_loss = Some(disk.log.chains());
                f.boot += 1;
                let durable = disk.log.durable();
                if durable > 2 {
                    let at = self.rng.range(1, durable);
                    disk.log.corrupt(at);
                }
                disk.log.power_loss(&mut self.rng, 0, 1.0, 0.0);
                true
            }
        };
        let f = &mut self.fates[i];
        disk.boot = f.boot;
        if lost {
            f.amnesiac_until = Some(self.logs.max_commit);
        } else if how != Down::Kill {
            f.before_loss = None;
        }
        let (len, cut) = (disk.log.len(), disk.log.recovery_lost());
        self.trace(|| format!("node {i} down ({how:?}): log {len} entries, {cut} cut"));
        let p = &mut self.procs[i];
        p.disk = Some(disk);
        p.restart_at = restart_at;
        p.paused = None;
        p.inbox.clear();
        self.mark(i, restart_at.min(self.now + 1_000 * MILLI));
        // The witness (BEAM node monitoring) sees a node go down at once,
        // in a group of two.
        if self.initial_nodes == 2 {
            let at = self.procs[1 - i].clock.local(self.now);
            if let Some(a) = self.procs[1 - i].actor.as_mut() {
                a.witness(at, i as u8);
            }
        }
        true
    }

    pub(super) fn cut(&mut self, a: usize, b: usize, both: bool, until: Nanos) {
        let cut = Link {
            cut: true,
            ..self.net.default
        };
        self.net.set_link(a, b, cut);
        if both {
            self.net.set_link(b, a, cut);
        }
        if until != Nanos::MAX {
            self.heals.push((until, Heal::Link(a, b)));
        }
        self.mark(a, until);
        self.mark(b, until);
    }

    fn other(&mut self, i: usize, n: usize) -> usize {
        (i + 1 + self.rng.range(0, n as u64 - 1) as usize) % n
    }

    pub(super) fn inject(&mut self) {
        if self.mix.is_empty() {
            return;
        }
        let f = self.mix[self.rng.range(0, self.mix.len() as u64) as usize];
        let n_nodes = self.node_addrs.len();
        let n = self.procs.len();
        let now = self.now;
        let node = self.rng.range(0, n_nodes as u64) as usize;
        let i = match f {
            Fault::Crash
            | Fault::PowerLoss
            | Fault::ReplaceDisk
            | Fault::Corrupt
            | Fault::DiskFull
            | Fault::ReadError => node,
            Fault::MemberKill | Fault::MemberClose if n > n_nodes => {
                n_nodes + self.rng.range(0, (n - n_nodes) as u64) as usize
            }
            Fault::MemberKill | Fault::MemberClose => return,
            _ => self.rng.range(0, n as u64) as usize,
        };
        let d = match f {
            Fault::Crash | Fault::PowerLoss | Fault::ReplaceDisk | Fault::Corrupt => {
                self.rng.range(50, 500) * MILLI
            }
            Fault::Pause | Fault::Stall => self.rng.range(50, 800) * MILLI,
            Fault::ClockJump => self.rng.range(20, 300) * MILLI,
            Fault::MemberKill | Fault::MemberClose => self.rng.range(20, 2_000) * MILLI,
            _ => self.rng.range(100, 1000) * MILLI,
        };
        let injected = match f {
            Fault::Crash => self.take_down(i, Down::Kill, now + d),
            Fault::PowerLoss => {
                (self.proto.durability().on_disk() || self.may_lose_data(i))
                    && self.take_down(i, Down::PowerLoss, now + d)
            }
            Fault::ReplaceDisk => {
                self.may_lose_data(i) && self.take_down(i, Down::Replace, now + d)
            }
            Fault::Corrupt => self.may_lose_data(i) && self.take_down(i, Down::Corrupt, now + d),
            Fault::ReadError => {
                if !self.may_lose_data(i) || self.fates[i].latent {
                    return;
                }
                let Some(log) = self.procs[i].actor.as_mut().and_then(|a| a.log_mut()) else {
                    return;
                };
                let len = log.len();
                let at = self.rng.range(1, len.max(2));
                let chains = log.chains();
                if !log.add_read_error(at) {
                    return;
                }
                self.trace(|| format!("entry {at} of node {i} unreadable"));
                self.fates[i].latent = true;
                self.fates[i].before_loss = Some(chains);
                true
            }
            Fault::DiskFull => {
                self.trace(|| format!("disk of node {i} full for {} ms", d / MILLI));
                self.set_full(i, true);
                self.heals.push((now + d, Heal::DiskFull(i)));
                self.mark(i, now + d);
                true
            }
            Fault::FalseWitness => {
                // Only while the two nodes reach each other: a witness that
                // lies during a partition is the limit of two nodes (both
                // sides commit; docs/FAILOVER.md), not a monitor glitch.
                if n_nodes != 2 || i >= 2 || self.procs[..2].iter().any(|p| p.unhealthy_until > now)
                {
                    return;
                }
                self.trace(|| format!("false witness: node {i} told node {} is down", 1 - i));
                let at = self.local(i);
                if let Some(a) = self.procs[i].actor.as_mut() {
                    a.witness(at, (1 - i) as u8);
                }
                true
            }
            Fault::Pause | Fault::Stall => {
                if !self.procs[i].runs() {
                    return;
                }
                self.trace(|| format!("{} process {i} for {} ms", f.name(), d / MILLI));
                self.procs[i].paused = Some((now + d, f == Fault::Stall));
                self.mark(i, now + d);
                true
            }
            Fault::ClockJump => {
                self.trace(|| format!("clock of process {i} jumps {} ms", d / MILLI));
                self.procs[i].clock.jump(now, d);
                self.mark(i, now);
                true
            }
            Fault::Drift => {
                let rates = [0.5, 0.8, 0.95, 1.05, 1.25, 2.0];
                let r = rates[self.rng.range(0, rates.len() as u64) as usize];
                self.trace(|| format!("clock of process {i} runs at {r} for {} ms", d / MILLI));
                self.procs[i].clock.set_rate(now, r);
                self.heals.push((now + d, Heal::Rate(i)));
                self.mark(i, now + d);
                true
            }
            Fault::Partition => {
                self.trace(|| format!("partition process {i} for {} ms", d / MILLI));
                for j in 0..n {
                    if j != i {
                        self.cut(i, j, true, now + d);
                    }
                }
                true
            }
            Fault::Split => {
                let side: Vec<bool> = (0..n).map(|_| self.rng.chance(0.5)).collect();
                if side.iter().all(|s| *s) || side.iter().all(|s| !*s) {
                    return;
                }
                self.trace(|| format!("split {side:?} for {} ms", d / MILLI));
                for a in 0..n {
                    for b in a + 1..n {
                        if side[a] != side[b] {
                            self.cut(a, b, true, now + d);
                        }
                    }
                }
                true
            }
            Fault::OneWay | Fault::PairCut => {
                let j = self.other(i, n);
                let both = f == Fault::PairCut;
                self.trace(|| format!("{} {i}->{j} for {} ms", f.name(), d / MILLI));
                self.cut(i, j, both, now + d);
                true
            }
            Fault::Lossy | Fault::Reorder => {
                let j = self.other(i, n);
                let l = if f == Fault::Lossy {
                    Link {
                        loss: 0.1 + 0.4 * self.rng.unit(),
                        ..self.net.default
                    }
                } else {
                    Link {
                        reorder: 0.2,
                        reorder_window: self.rng.range(500, 5_000) * crate::seq::core::MICRO,
                        dup: 0.05,
                        ..self.net.default
                    }
                };
                self.trace(|| format!("{} {i}<->{j} for {} ms: {l:?}", f.name(), d / MILLI));
                self.net.set_link(i, j, l);
                self.net.set_link(j, i, l);
                self.heals.push((now + d, Heal::Link(i, j)));
                self.mark(i, now + d);
                self.mark(j, now + d);
                true
            }
            Fault::Membership => self.change_membership(),
            Fault::Forge => self.forge(now),
            Fault::MemberKill => {
                let at = self.local(i) + d;
                self.with_member(i, |a, _, _, ev| a.kill_member(at, ev));
                true
            }
            Fault::MemberClose => {
                let at = self.local(i) + d;
                self.with_member(i, |a, now, out, ev| a.close_member(now, at, out, ev));
                true
            }
        };
        if injected {
            *self.faults.entry(f.name()).or_default() += 1;
        }
    }

    /// The primary adds a node (a spare slot starts, and asks to join) if
    /// the group has no more voters than it began with, else removes a
    /// random voter.
    fn change_membership(&mut self) -> bool {
        let p = self.primary;
        let Some(a) = self.procs[p].actor.as_ref() else {
            return false;
        };
        let (Some(m), Some(_)) = (a.membership(), a.primary_term()) else {
            return false;
        };
        if m.n_voters() <= self.initial_nodes {
            let Some(k) =
                (self.initial_nodes..self.node_addrs.len()).find(|k| self.fates[*k].unused)
            else {
                return false;
            };
            self.fates[k].unused = false;
            self.procs[k].restart_at = self.now;
            self.trace(|| format!("node {k} starts and asks to join"));
            return true;
        }
        let ids: Vec<u8> = m.voters().collect();
        let id = ids[self.rng.range(0, ids.len() as u64) as usize];
        let mut ok = false;
        self.with_member(p, |a, now, out, ev| ok = a.remove_node(now, id, out, ev));
        self.trace(|| format!("primary {p} removes node id {id}: {ok}"));
        ok
    }

    pub(super) fn member_proc(&self, id: u32) -> usize {
        self.procs
            .iter()
            .position(|p| p.member_id == id)
            .expect("a member of the scenario")
    }

    pub(super) fn heal_everything(&mut self) {
        self.trace(|| "heal everything".to_string());
        self.net.heal_all();
        let heals: Vec<_> = self.heals.drain(..).map(|h| h.1).collect();
        for h in heals {
            self.undo(h);
        }
        for i in 0..self.procs.len() {
            let now = self.now;
            self.procs[i].clock.set_rate(now, 1.0);
            if self.procs[i].actor.is_none() && !self.fates.get(i).is_some_and(|f| f.unused) {
                self.procs[i].restart_at = self.now;
            }
            if let Some((_, t)) = self.procs[i].paused {
                self.procs[i].paused = Some((self.now, t));
            }
            if self.procs[i].member_id > 0 {
                self.with_member(i, |a, now, _, _| a.reopen_member(now, Start::From(1)));
            }
        }
        self.restarts_and_resumes();
    }
}

impl MemLog {
    /// The prefix hashes of every entry (a snapshot for the checks).
    pub fn chains(&self) -> Vec<u64> {
        (0..self.len()).filter_map(|i| self.chain(i)).collect()
    }
}
