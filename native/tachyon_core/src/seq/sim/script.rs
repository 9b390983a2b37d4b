//! The steps a scenario scripts ([`Action`]), and how the simulation
//! takes each: faults on processes, disks and links at a time, or when a
//! protocol event fires ([`super::triggers`]).

use super::engine::Sim;
use super::faults::{Down, Heal};
use super::members::Start;
use super::net::Link;
use super::Trigger;
use crate::seq::core::Nanos;

/// A scripted step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Node `i` is killed (-9: its page cache survives); it stays down
    /// until [`Action::Restart`] (or the heal).
    Kill(usize),
    /// Node `i`'s host loses power (unsynced writes lost or torn); down
    /// until restarted.
    PowerLoss(usize),
    /// Node `i`'s disk is replaced by an empty one; down until restarted.
    ReplaceDisk(usize),
    Restart(usize),
    Pause(usize, Nanos),
    /// Processes `a` and `b` cut from each other (both ways) until mended.
    Cut(usize, usize),
    /// Datagrams from `a` to `b` lost until mended.
    CutOneWay(usize, usize),
    Mend(usize, usize),
    /// Process `i` cut from every other until it rejoins.
    Isolate(usize),
    Rejoin(usize),
    /// The datagrams of the next node elected are lost from that moment
    /// (its first as primary included) until the heal.
    MuteNextPrimary,
    /// Node `i`'s disk is full (`true`) or has room again; a scenario's
    /// full disk outlasts the heal.
    DiskFull(usize, bool),
    /// Node `i`'s witness says node `down` is down (a group of two).
    Witness(usize, u8),
    /// Member `id`'s process is killed; down until opened.
    MemberKill(u32),
    /// Member `id` closes with what it has in flight; down until opened.
    MemberClose(u32),
    MemberOpen(u32, Start),
    /// Member `id`'s process is frozen this long.
    MemberPause(u32, Nanos),
    /// Once the trigger fires (once), these actions run: at the step that
    /// fired it ([`super::triggers`]).
    When(Trigger, Vec<Action>),
    /// In a [`Action::When`]: what process `a` sends to process `b` in the
    /// step that fired the trigger is lost (that copy only).
    DropSent(usize, usize),
    /// Every datagram on its way between processes `a` and `b` (both
    /// ways) is lost.
    DropInFlight(usize, usize),
    /// Datagrams from `a` to `b` are lost with this probability (in
    /// percent) until mended.
    Loss(usize, usize, u8),
    /// These actions run this long from now (in a [`Action::When`]: from
    /// the step that fired it).
    After(Nanos, Vec<Action>),
    /// Node `i`'s page cache reaches its disk (the kernel's write-back).
    WriteBack(usize),
    /// From now on node index 0 in the script names the node that is
    /// primary now (the others keep their order): a script written for
    /// "A the primary, B and C its followers" holds whichever node the
    /// seed elected first. Nothing happens if no node is primary.
    PrimaryIs0,
    /// Node `i`'s next checkpoint install stops after the checkpoint is
    /// saved, before its log is reset: the node is killed there, and
    /// restarts 100 ms later.
    CrashInInstall(usize),
}

impl Sim<'_> {
    /// A scripted action ([`Action`]).
    pub(super) fn act(&mut self, a: Action) {
        let now = self.now;
        let a = self.cast(a);
        self.trace(|| format!("scenario: {a:?}"));
        match a {
            Action::Kill(i) => {
                self.take_down(i, Down::Kill, Nanos::MAX);
            }
            Action::PowerLoss(i) => {
                self.take_down(i, Down::PowerLoss, Nanos::MAX);
            }
            Action::ReplaceDisk(i) => {
                self.take_down(i, Down::Replace, Nanos::MAX);
            }
            Action::Restart(i) => self.procs[i].restart_at = now,
            Action::Pause(i, d) => {
                self.procs[i].paused = Some((now + d, false));
                self.mark(i, now + d);
            }
            Action::Cut(a, b) => self.cut(a, b, true, Nanos::MAX),
            Action::CutOneWay(a, b) => self.cut(a, b, false, Nanos::MAX),
            Action::Mend(a, b) => self.undo(Heal::Link(a, b)),
            Action::Isolate(i) => {
                for j in 0..self.procs.len() {
                    if j != i {
                        self.cut(i, j, true, Nanos::MAX);
                    }
                }
            }
            Action::Rejoin(i) => {
                for j in 0..self.procs.len() {
                    self.undo(Heal::Link(i, j));
                }
            }
            Action::MuteNextPrimary => self.mute_next_primary = true,
            Action::DiskFull(i, full) => self.set_full(i, full),
            Action::Witness(i, down) => {
                let at = self.local(i);
                if let Some(a) = self.procs[i].actor.as_mut() {
                    a.witness(at, down);
                }
            }
            Action::MemberKill(id) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, _, _, ev| a.kill_member(Nanos::MAX, ev));
            }
            Action::MemberClose(id) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, now, out, ev| {
                    a.close_member(now, Nanos::MAX, out, ev)
                });
            }
            Action::MemberOpen(id, start) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, now, _, _| a.reopen_member(now, start));
            }
            Action::MemberPause(id, d) => {
                let i = self.member_proc(id);
                self.procs[i].paused = Some((now + d, false));
                self.mark(i, now + d);
            }
            Action::When(t, actions) => {
                let actions = actions.into_iter().map(|a| self.cast(a)).collect();
                self.armed.push((t, actions));
            }
            Action::PrimaryIs0 => {
                let Some(p) = (0..self.initial_nodes).find(|&i| {
                    self.procs[i]
                        .actor
                        .as_ref()
                        .is_some_and(|a| a.primary_term().is_some())
                }) else {
                    return;
                };
                let mut roles: Vec<usize> = vec![p];
                roles.extend((0..self.initial_nodes).filter(|&i| i != p));
                self.trace(|| format!("scenario: nodes 0.. are now {roles:?}"));
                self.roles = roles;
            }
            // Outside a trigger there is no step to lose from.
            Action::DropSent(..) => {}
            Action::DropInFlight(a, b) => {
                let (pa, pb) = (self.procs[a].addr, self.procs[b].addr);
                let n = self.net.drop_in_flight((a, pa), (b, pb));
                self.trace(|| format!("scenario: {n} datagrams between {a} and {b} lost"));
            }
            Action::CrashInInstall(i) => {
                let p = &mut self.procs[i];
                let log = match p.actor.as_mut() {
                    Some(a) => a.log_mut(),
                    None => p.disk.as_mut().map(|d| &mut d.log),
                };
                if let Some(l) = log {
                    l.crash_in_install = true;
                }
            }
            Action::WriteBack(i) => {
                if let Some(l) = self.procs[i].actor.as_mut().and_then(|a| a.log_mut()) {
                    l.sync_all();
                }
            }
            Action::Loss(a, b, percent) => {
                let l = Link {
                    loss: percent as f64 / 100.0,
                    ..self.net.default
                };
                self.net.set_link(a, b, l);
                self.mark(a, Nanos::MAX);
                self.mark(b, Nanos::MAX);
            }
            Action::After(d, actions) => {
                let at = now.saturating_add(d);
                for a in actions {
                    let k = self.script.partition_point(|(t, _)| *t <= at);
                    self.script.insert(k, (at, a));
                }
            }
        }
    }
}

impl Sim<'_> {
    /// The process a script's index names (node indices as cast by
    /// [`Action::PrimaryIs0`]; members and spare slots as they are).
    fn who(&self, i: usize) -> usize {
        self.roles.get(i).copied().unwrap_or(i)
    }

    /// `a` with its node indices cast (not a `When`'s inner actions: cast
    /// when armed).
    fn cast(&self, a: Action) -> Action {
        use Action::*;
        let w = |i| self.who(i);
        match a {
            Kill(i) => Kill(w(i)),
            PowerLoss(i) => PowerLoss(w(i)),
            ReplaceDisk(i) => ReplaceDisk(w(i)),
            Restart(i) => Restart(w(i)),
            Pause(i, d) => Pause(w(i), d),
            Cut(a, b) => Cut(w(a), w(b)),
            CutOneWay(a, b) => CutOneWay(w(a), w(b)),
            Mend(a, b) => Mend(w(a), w(b)),
            Isolate(i) => Isolate(w(i)),
            Rejoin(i) => Rejoin(w(i)),
            DiskFull(i, f) => DiskFull(w(i), f),
            Witness(i, d) => Witness(w(i), w(d as usize) as u8),
            When(t, actions) => When(t.cast(&w), actions),
            DropSent(a, b) => DropSent(w(a), w(b)),
            DropInFlight(a, b) => DropInFlight(w(a), w(b)),
            Loss(a, b, p) => Loss(w(a), w(b), p),
            CrashInInstall(i) => CrashInInstall(w(i)),
            WriteBack(i) => WriteBack(w(i)),
            other => other,
        }
    }
}
