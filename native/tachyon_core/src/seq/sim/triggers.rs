//! Faults placed on protocol events (after Jepsen's and TigerBeetle's
//! lesson: a kill at the moment a node catches up, the loss of one
//! particular copy of one datagram, find what uniformly drawn faults do
//! not). A scenario arms actions with [`Action::When`]; the step of the
//! process whose events or datagrams match the [`Trigger`] fires them:
//! [`Action::DropSent`] loses that step's copies to one process (before
//! they leave), every other action runs right after the step (a power
//! loss then cuts the node with what it just sent on the wire).
//!
//! Besides: [`Action::DropInFlight`] loses what is on the wire between
//! two processes now, and [`Action::CrashInInstall`] kills a node in the
//! middle of installing its primary's checkpoint (saved, the log not yet
//! reset), which an atomic install never shows.

use std::net::SocketAddr;

use super::engine::Sim;
use super::faults::Down;
use super::{Action, Event};
use crate::seq::core::{NodeEvent, MILLI};
use crate::seq::wire::{Peer, PeerKind, PEER_MAGIC};

/// A protocol event a scripted action waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Node `i`, a learner, caught up with its primary: it votes again.
    CaughtUp(usize),
    /// Node `i` started as a learner (it cannot vouch for its log).
    Learner(usize),
    /// Node `i` granted its vote.
    Voted(usize),
    /// Node `i` became primary.
    Elected(usize),
    /// Node `i`, a primary, stepped down (check-quorum).
    SteppedDown(usize),
    /// Node `i` installed its primary's checkpoint.
    Installed(usize),
    /// Node `i` sent the members an acknowledgement at least `ahead`
    /// entries beyond its commit position: on it (commit in three hops) a
    /// member may deliver what the primary has not counted committed yet.
    AckToMembers(usize, u64),
}

impl Trigger {
    /// The same trigger on node `w(i)`.
    pub(super) fn cast(self, w: &dyn Fn(usize) -> usize) -> Trigger {
        match self {
            Trigger::CaughtUp(i) => Trigger::CaughtUp(w(i)),
            Trigger::Learner(i) => Trigger::Learner(w(i)),
            Trigger::Voted(i) => Trigger::Voted(w(i)),
            Trigger::Elected(i) => Trigger::Elected(w(i)),
            Trigger::SteppedDown(i) => Trigger::SteppedDown(w(i)),
            Trigger::Installed(i) => Trigger::Installed(w(i)),
            Trigger::AckToMembers(i, ahead) => Trigger::AckToMembers(w(i), ahead),
        }
    }

    /// Its name in a run's counts (a scenario's `expects`).
    pub fn name(self) -> &'static str {
        match self {
            Trigger::CaughtUp(_) => "on_caught_up",
            Trigger::Learner(_) => "on_learner",
            Trigger::Voted(_) => "on_voted",
            Trigger::Elected(_) => "on_elected",
            Trigger::SteppedDown(_) => "on_stepped_down",
            Trigger::Installed(_) => "on_installed",
            Trigger::AckToMembers(..) => "on_ack_to_members",
        }
    }
}

impl Sim<'_> {
    /// Whether `t` is what process `i`'s step did (its events, and what it
    /// queued).
    fn fired(&self, i: usize, t: Trigger) -> bool {
        let event = |want: fn(&NodeEvent) -> bool| {
            self.ev
                .iter()
                .any(|e| matches!(e, Event::Node(n) if want(n)))
        };
        match t {
            Trigger::CaughtUp(n) => n == i && event(|e| matches!(e, NodeEvent::CaughtUp { .. })),
            Trigger::Learner(n) => n == i && event(|e| matches!(e, NodeEvent::Learner { .. })),
            Trigger::Voted(n) => n == i && event(|e| matches!(e, NodeEvent::Voted { .. })),
            Trigger::Elected(n) => n == i && event(|e| matches!(e, NodeEvent::Leader { .. })),
            Trigger::SteppedDown(n) => {
                n == i && event(|e| matches!(e, NodeEvent::SteppedDown { .. }))
            }
            Trigger::Installed(n) => n == i && event(|e| matches!(e, NodeEvent::Installed { .. })),
            Trigger::AckToMembers(n, ahead) => {
                let commit = self.procs[i].actor.as_ref().map_or(0, |a| a.position());
                n == i
                    && self.out.iter().any(|(to, d)| {
                        let member = self.process_at(to).is_some_and(|j| !self.is_node(j));
                        member
                            && crate::seq::wire::magic(d) == PEER_MAGIC
                            && Peer::parse(d).is_ok_and(|p| {
                                p.h.kind == PeerKind::Ack && p.b >= commit + ahead.max(1)
                            })
                    })
            }
        }
    }

    /// The armed actions process `i`'s step set off: the addresses whose
    /// copies of its datagrams are lost now, and the actions to run once
    /// the step is done.
    pub(super) fn fire_triggers(&mut self, i: usize) -> (Vec<SocketAddr>, Vec<Action>) {
        let (mut lost, mut then) = (Vec::new(), Vec::new());
        if self.armed.is_empty() {
            return (lost, then);
        }
        let armed = std::mem::take(&mut self.armed);
        for (t, actions) in armed {
            if !self.fired(i, t) {
                self.armed.push((t, actions));
                continue;
            }
            self.trace(|| {
                let d = self.procs[i].actor.as_ref().map(|a| a.describe());
                format!("scenario: {t:?} fired: {}", d.unwrap_or_default())
            });
            self.count(t.name());
            for a in actions {
                match a {
                    Action::DropSent(a, b) if a == i => lost.push(self.procs[b].addr),
                    a => then.push(a),
                }
            }
        }
        (lost, then)
    }

    /// The process at address `a`.
    pub(super) fn process_at(&self, a: SocketAddr) -> Option<usize> {
        self.procs.iter().position(|p| p.addr == a)
    }

    /// What node `i` reported: a takeover is checked, retention counted,
    /// everything traced.
    pub(super) fn node_event(&mut self, i: usize, e: NodeEvent) {
        match e {
            NodeEvent::Leader { term, .. } => self.took_over(i, term as u64),
            NodeEvent::Trimmed { .. } => self.count("trim"),
            NodeEvent::Truncated { from: 0, .. } => self.count("log_cut_whole"),
            NodeEvent::Installed { .. } => self.count("install"),
            _ => {}
        }
        self.trace(|| format!("node {i}: {e:?}"));
    }

    /// Node `i`'s step stopped in the middle of an install
    /// ([`Action::CrashInInstall`]): the process is killed there (what it
    /// queued in that step never leaves) and restarts 100 ms later.
    pub(super) fn crashed_in_install(&mut self, i: usize) -> bool {
        let crashed = self.procs[i]
            .actor
            .as_ref()
            .and_then(|a| a.log())
            .is_some_and(|l| l.crashed);
        if !crashed {
            return false;
        }
        self.out.clear();
        self.ev.clear();
        self.trace(|| format!("scenario: node {i} killed in the middle of an install"));
        self.count("crash_in_install");
        self.take_down(i, Down::Kill, self.now + 100 * MILLI);
        if let Some(d) = self.procs[i].disk.as_mut() {
            d.log.crashed = false;
        }
        true
    }
}
