//! The nemesis: which faults exist, and how the simulation injects and
//! heals them (crashes and restarts, pauses, link faults, clock jumps).

use super::*;

/// The faults the nemesis picks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A node is killed, and restarted later on its log.
    Crash,
    /// A process is frozen; resumed, it reads what waited, then ticks.
    Pause,
    /// A process is frozen between a read and its clock check; resumed,
    /// it ticks first (a thread that waited for a CPU).
    Stall,
    /// A process cut off from every other.
    Partition,
    /// Loss of 10-50% on the links of two processes.
    Lossy,
    /// Delays up to 5 ms (reordering) and 5% duplicates on two processes' links.
    Reorder,
    /// A process's clock jumps forward.
    ClockJump,
    /// In a group of two: the witness says a live node is down (a monitor
    /// that lost only its own link).
    FalseWitness,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::Crash,
        Fault::Pause,
        Fault::Stall,
        Fault::Partition,
        Fault::Lossy,
        Fault::Reorder,
        Fault::ClockJump,
        Fault::FalseWitness,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::Pause => "pause",
            Fault::Stall => "stall",
            Fault::Partition => "partition",
            Fault::Lossy => "lossy_link",
            Fault::Reorder => "reorder_link",
            Fault::ClockJump => "clock_jump",
            Fault::FalseWitness => "false_witness",
        }
    }

    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s || f.name().starts_with(s))
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
                self.procs[i].next_tick = self.now;
            }
            if let Some((until, tick_first)) = self.procs[i].paused {
                if until <= self.now {
                    self.procs[i].paused = None;
                    self.trace(|| format!("process {i} resumes"));
                    if tick_first {
                        self.tick(i);
                    }
                    let b: Vec<_> = self.procs[i].inbox.drain(..).collect();
                    if !b.is_empty() {
                        self.batch(i, b);
                    }
                    self.procs[i].next_tick = self.now;
                }
            }
        }
    }

    pub(super) fn undo_link_faults(&mut self) {
        let now = self.now;
        let (due, keep): (Vec<_>, Vec<_>) = self.heals.drain(..).partition(|h| h.0 <= now);
        self.heals = keep;
        for (_, a, b) in due {
            self.net.heal(a, b);
            self.net.heal(b, a);
        }
    }

    pub(super) fn mark(&mut self, i: usize, until: Nanos) {
        let p = &mut self.procs[i];
        p.unhealthy_until = p.unhealthy_until.max(until);
    }

    pub(super) fn inject(&mut self) {
        let kinds = &self.cfg.faults;
        if kinds.is_empty() {
            return;
        }
        let f = kinds[self.rng.range(0, kinds.len() as u64) as usize];
        let n_nodes = self.node_addrs.len();
        let n = self.procs.len();
        let now = self.now;
        let i = match f {
            Fault::Crash => self.rng.range(0, n_nodes as u64) as usize,
            _ => self.rng.range(0, n as u64) as usize,
        };
        let d = match f {
            Fault::Crash => self.rng.range(50, 500) * MILLI,
            Fault::Pause | Fault::Stall => self.rng.range(50, 800) * MILLI,
            Fault::ClockJump => self.rng.range(20, 300) * MILLI,
            _ => self.rng.range(100, 1000) * MILLI,
        };
        match f {
            Fault::Crash => {
                let Some(a) = self.procs[i].actor.take() else {
                    return;
                };
                self.trace(|| format!("crash node {i} for {} ms", d / MILLI));
                let p = &mut self.procs[i];
                p.disk = a.crash();
                p.restart_at = now + d;
                p.paused = None;
                p.inbox.clear();
                self.mark(i, now + d);
                // The witness (BEAM node monitoring) sees a killed node go
                // down at once, in a group of two.
                if n_nodes == 2 {
                    let at = self.now + self.procs[1 - i].offset;
                    if let Some(a) = self.procs[1 - i].actor.as_mut() {
                        a.witness(at, i as u8);
                    }
                }
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
                let at = self.now + self.procs[i].offset;
                if let Some(a) = self.procs[i].actor.as_mut() {
                    a.witness(at, (1 - i) as u8);
                }
            }
            Fault::Pause | Fault::Stall => {
                if !self.procs[i].runs() {
                    return;
                }
                self.trace(|| format!("{} process {i} for {} ms", f.name(), d / MILLI));
                self.procs[i].paused = Some((now + d, f == Fault::Stall));
                self.mark(i, now + d);
            }
            Fault::ClockJump => {
                self.trace(|| format!("clock of process {i} jumps {} ms", d / MILLI));
                self.procs[i].offset += d;
                self.mark(i, now);
            }
            Fault::Partition => {
                self.trace(|| format!("partition process {i} for {} ms", d / MILLI));
                for j in 0..n {
                    if j != i {
                        let cut = Link {
                            cut: true,
                            ..self.net.default
                        };
                        self.net.set_link(i, j, cut);
                        self.net.set_link(j, i, cut);
                        self.heals.push((now + d, i, j));
                        self.mark(j, now + d);
                    }
                }
                self.mark(i, now + d);
            }
            Fault::Lossy | Fault::Reorder => {
                let j = (i + 1 + self.rng.range(0, n as u64 - 1) as usize) % n;
                let l = if f == Fault::Lossy {
                    Link {
                        loss: 0.1 + 0.4 * self.rng.unit(),
                        ..self.net.default
                    }
                } else {
                    Link {
                        reorder: 0.2,
                        reorder_window: self.rng.range(500, 5_000) * MICRO,
                        dup: 0.05,
                        ..self.net.default
                    }
                };
                self.trace(|| format!("{} {i}<->{j} for {} ms: {l:?}", f.name(), d / MILLI));
                self.net.set_link(i, j, l);
                self.net.set_link(j, i, l);
                self.heals.push((now + d, i, j));
                self.mark(i, now + d);
                self.mark(j, now + d);
            }
        }
        *self.faults.entry(f.name()).or_default() += 1;
    }

    pub(super) fn heal_everything(&mut self) {
        self.trace(|| "heal everything".to_string());
        self.net.heal_all();
        self.heals.clear();
        for i in 0..self.procs.len() {
            if self.procs[i].actor.is_none() {
                self.procs[i].restart_at = self.now;
            }
            if let Some((_, t)) = self.procs[i].paused {
                self.procs[i].paused = Some((self.now, t));
            }
        }
        self.restarts_and_resumes();
    }
}
