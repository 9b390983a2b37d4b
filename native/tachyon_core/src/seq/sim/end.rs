//! The checks at the end of a run, once every fault is healed and the
//! members had time to settle: the scenario's expectations (its first
//! primary's window, the paths it must take), forks where none can be,
//! every accepted publish delivered, every delivered message in every
//! node's log.

use std::collections::HashMap;

use super::engine::Sim;
use crate::seq::core::{Nanos, MILLI};

impl Sim<'_> {
    /// At the end: forks where none can be, every accepted publish where
    /// it must be, every delivered message in every node's log. Returns
    /// the time from the heal to the last delivery.
    pub(super) fn final_checks(&mut self, heal_at: Nanos) -> Option<Nanos> {
        if !self.check.violations.is_empty() {
            return None;
        }
        let now = self.now;
        if let Some((from, by)) = self.cfg.scenario.as_ref().and_then(|s| s.primary_between) {
            let first = self.first_primary;
            if first.is_none_or(|t| t < from || t > by) {
                let d = format!(
                    "the first primary at {:?} ms, not between {} and {} ms",
                    first.map(|t| t / MILLI),
                    from / MILLI,
                    by / MILLI
                );
                self.check.fail("first_primary", now, d);
                return None;
            }
        }
        let expects = self.cfg.scenario.as_ref().map_or(&[][..], |s| s.expects);
        if let Some(k) = expects.iter().find(|k| !self.retention.contains_key(*k)) {
            let d = format!("the script never reached its path: no {k}");
            self.check.fail("path_not_taken", now, d);
            return None;
        }
        if !self.check.forks_allowed && self.check.forks_reported > 0 {
            let d = format!(
                "{} forks reported where none can be",
                self.check.forks_reported
            );
            self.check.fail("false_fork", now, d);
            return None;
        }
        if self.check.forks_allowed {
            // Forks lose what the losing side delivered: every member must
            // have moved back and caught up with the final primary's log.
            let commit = self.procs[self.primary]
                .actor
                .as_ref()
                .map_or(0, |a| a.position());
            for p in self.procs.iter().filter(|p| p.member_id > 0) {
                let Some(a) = p.actor.as_ref() else { continue };
                let at = a.position();
                if at != 0 && at != commit {
                    let d = format!(
                        "member {} at {at}, the final commit at {commit}",
                        p.member_id
                    );
                    self.check.fail("wedge", now, d);
                    return None;
                }
            }
            let forks: HashMap<u32, u64> = self
                .procs
                .iter()
                .filter(|p| p.member_id > 0)
                .map(|p| (p.member_id, p.actor.as_ref().map_or(0, |a| a.forks())))
                .collect();
            let p = self.primary;
            if let Some(log) = self.procs[p].actor.as_ref().and_then(|a| a.log()).cloned() {
                self.check.views_in_log(now, &log, &forks);
                self.check.publishes_kept(now, &log);
            }
        } else {
            self.check.converged(now);
        }
        if self.check.violations.is_empty() {
            // Every delivered message is in every member's final log.
            let members = self.members_now();
            for p in members {
                let log = self.procs[p].actor.as_ref().and_then(|a| a.log());
                // A disk that stays full cannot catch up.
                if let Some(log) = log.filter(|l| !l.full).cloned() {
                    let what = format!("node {p} at the end");
                    if !self.check.log_holds_delivered(now, &log, &what) {
                        break;
                    }
                }
            }
        }
        self.check
            .violations
            .is_empty()
            .then(|| self.check.last_delivery.saturating_sub(heal_at))
    }

    /// The members' command datagrams sent and resent.
    pub(super) fn tx_counts(&self) -> (u64, u64) {
        self.procs
            .iter()
            .filter_map(|p| p.actor.as_ref())
            .map(|a| a.tx_counts())
            .fold((0, 0), |(c, r), (a, b)| (c + a, r + b))
    }
}
