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
    /// Node `i`'s next checkpoint install stops after the checkpoint is
    /// saved, before its log is reset: the node is killed there, and
    /// restarts 100 ms later.
    CrashInInstall(usize),
}

impl Sim<'_> {
    /// A scripted action ([`Action`]).
    pub(super) fn act(&mut self, a: Action) {
        let now = self.now;
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
            Action::When(t, actions) => self.armed.push((t, actions)),
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
