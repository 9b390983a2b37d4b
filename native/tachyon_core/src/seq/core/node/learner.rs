//! Learners: nodes that cannot vouch for what they acknowledged
//! (Viewstamped Replication Revisited's recovery protocol; the Raft
//! thesis on learners and on servers that lose their state).
//!
//! Raft's safety rests on every vote being cast on a log that holds what
//! the voter acknowledged. A node whose disk was replaced (no metadata, a
//! new log), whose log a recovery cut (a record that did not verify), or
//! that restarts after its host rebooted while acknowledgements promised
//! only the page cache ([`Durability::Replicated`]) may lack entries it
//! acknowledged: with its vote, a candidate lacking a committed entry
//! could win. Such a node starts as a *learner* (recorded in its
//! metadata, so a restart does not forget it):
//!
//! * it grants no pre-vote and no vote, and does not campaign, until it
//!   has caught up: it follows a primary, holds that primary's epoch
//!   record and every entry up to a commit position the primary announced
//!   beyond it (so every entry committed before the learner lost its data
//!   is in its log again). Then it votes again, as if it had voted for
//!   that primary in its term;
//! * when no primary can be elected without it (every node lost its page
//!   cache, or a majority is learners), waiting would stop the group for
//!   good: a learner that has heard every node of the group (it probes
//!   them) votes for a candidate at least as up to date as every log it
//!   heard, its own included. The most up to date log of all holds every
//!   committed entry that any node still holds (log matching), so nothing
//!   that survives anywhere is lost; what no node holds any more was lost
//!   with the disks;
//! * a new group (every node starts as a learner: no metadata yet) need not
//!   wait for its last node: learners with empty logs that hear a majority
//!   of empty logs (themselves included), and no node with a log, vote
//!   among themselves.
//!
//! One candidate per term ([`quorum::candidate_of`]) keeps a forgotten
//! vote harmless: a learner that voted in a term before it lost its disk
//! can only vote again for the same candidate.

use super::quorum;
use super::{Durability, Node, NodeConfig, Role, TwoNodes, MAX_NODES};
use crate::seq::core::{Env, Log, Meta, Nanos, NodeEvent};
use crate::seq::wire::{Peer, PeerKind, LEADER};

/// A probe answer older than this many election timeouts is asked again.
const PROBE_FRESH: u64 = 4;

#[derive(Debug, Clone, Copy, Hash)]
struct Heard {
    last_term: u32,
    end: u64,
    at: Nanos,
}

#[derive(Clone, Hash)]
pub(super) struct Learn {
    /// What each node said of its log, and when.
    heard: Vec<Option<Heard>>,
    probed_at: Option<Nanos>,
}

impl Learn {
    pub fn new(n: usize) -> Learn {
        Learn {
            heard: vec![None; n],
            probed_at: None,
        }
    }
}

/// The metadata a node starts with, and why it is a learner if it is.
pub(super) fn at_start(
    cfg: &NodeConfig,
    saved: Option<Meta>,
    cut: bool,
) -> (Meta, Option<&'static str>) {
    match saved {
        None => (
            Meta {
                term: 0,
                vote: None,
                log_id: cfg.new_log_id,
                boot: cfg.boot,
                learner: true,
            },
            Some("new_disk"),
        ),
        Some(m) => {
            let reason = if m.learner {
                Some("restarted")
            } else if cut {
                Some("cut")
            } else if m.boot != cfg.boot && cfg.durability == Durability::Replicated {
                Some("rebooted")
            } else {
                None
            };
            (
                Meta {
                    boot: cfg.boot,
                    learner: reason.is_some(),
                    ..m
                },
                reason,
            )
        }
    }
}

/// A log ending in `last_term` at `end` is at least as up to date as one
/// ending in `their_term` at `their_end` (Raft §5.4.1).
fn at_least(last_term: u32, end: u64, their_term: u32, their_end: u64) -> bool {
    last_term > their_term || (last_term == their_term && end >= their_end)
}

impl<L: Log> Node<L> {
    /// Whether the learner rules hold here (a group of two that prefers
    /// availability takes silence for a vote: a fork there is reported,
    /// not prevented).
    fn learning(&self) -> bool {
        self.meta.learner
            && !(self.membership().n_voters() == 2 && self.cfg.two_nodes == TwoNodes::Available)
    }

    /// Whether this node may vote for a candidate whose log ends in
    /// `last_term` at `end` (besides Raft's own rules): any node may, a
    /// learner only if it heard every node lately and the candidate's log
    /// is at least as up to date as each.
    pub(super) fn may_vouch(&self, now: Nanos, last_term: u32, end: u64) -> bool {
        if !self.learning() {
            return true;
        }
        let fresh = PROBE_FRESH * self.cfg.election_timeout;
        let others = self.other_voters();
        let heard = |i: u8| self.lr.heard[i as usize].filter(|h| now.saturating_sub(h.at) < fresh);
        let all = others
            .iter()
            .all(|&i| heard(i).is_some_and(|h| at_least(last_term, end, h.last_term, h.end)));
        // A new group: this node and a majority with it have empty logs
        // (nothing was ever acknowledged anywhere they could vouch for):
        // it need not wait for every node to start. Not if any node it
        // heard holds a log: then the group exists (two nodes removed from
        // it, their disks replaced and restarted on the first membership,
        // elected a group of their own beside it: `tachyon_sim --nodes 3
        // --durability fsync --seed 3114` with another timing), or the
        // nodes that lost their disks are a majority and the one with a
        // log is the group's memory: they vote for it (`all`).
        let empty = 1 + others
            .iter()
            .filter(|&&i| heard(i).is_some_and(|h| h.end == 0))
            .count();
        let a_log = others.iter().any(|&i| heard(i).is_some_and(|h| h.end > 0));
        all || (self.ls.next == 0 && end == 0 && !a_log && empty >= self.majority())
    }

    /// Whether this node may campaign: its disk has room, and it would
    /// vote for itself.
    pub(super) fn may_campaign(&self, now: Nanos) -> bool {
        !self.dur.full && self.may_vouch(now, self.ls.last_term(), self.ls.next)
    }

    /// A learner with no primary asks every node where its log stands (at
    /// most twice per election timeout).
    pub(super) fn probe(&mut self, now: Nanos, env: &mut dyn Env) {
        if !self.learning()
            || self
                .lr
                .probed_at
                .is_some_and(|a| now.saturating_sub(a) < self.cfg.election_timeout / 2)
        {
            return;
        }
        self.lr.probed_at = Some(now);
        self.c.probes.bump(1);
        let term = self.term;
        for i in self.other_voters() {
            self.send_peer(i, PeerKind::Probe, term, 0, (0, 0), 0, env);
        }
    }

    /// Any node answers a probe: where its log stands.
    pub(super) fn on_probe(&mut self, from: u8, env: &mut dyn Env) {
        let flags = if self.role == Role::Leader { LEADER } else { 0 };
        let (term, last, end, commit) = (self.term, self.ls.last_term(), self.ls.next, self.commit);
        self.send_peer(
            from,
            PeerKind::ProbeReply,
            term,
            flags,
            (last as u64, end),
            commit,
            env,
        );
    }

    pub(super) fn on_probe_reply(&mut self, now: Nanos, from: u8, p: &Peer) {
        if let Some(h) = self.lr.heard.get_mut(from as usize) {
            *h = Some(Heard {
                last_term: p.a.min(u32::MAX as u64) as u32,
                end: p.b,
                at: now,
            });
        }
    }

    /// A learner that follows the primary of this term, holds its epoch
    /// record and everything up to a commit position beyond it holds every
    /// entry committed before it lost its data: it votes again (as if it
    /// had voted for this primary in its term).
    pub(super) fn catch_up(&mut self, env: &mut dyn Env) {
        if !self.meta.learner || self.role != Role::Follower || !self.fl.synced {
            return;
        }
        let Some(start) = self.ls.epoch_start(self.term) else {
            return;
        };
        let c = self.fl.commit_heard();
        if c <= start || self.ls.next < c || self.acked_end() < c {
            return;
        }
        self.meta.learner = false;
        if self.vote.is_none() {
            self.vote = self.leader;
        }
        if self.persist() {
            env.event(NodeEvent::CaughtUp { term: self.term });
        } else {
            self.meta.learner = true;
        }
    }

    /// A new primary (from a learner's campaign, once it could vouch): it
    /// holds the best log there is; it is no learner.
    pub(super) fn lead_as_voter(&mut self) {
        if self.meta.learner {
            self.meta.learner = false;
            self.persist();
        }
    }

    /// Entry `at` of this node's log cannot be read back (a replay's read
    /// failed: a latent sector error, a record that does not verify). It
    /// is never served as data: a primary steps down (a node with a good
    /// copy takes over); the node cuts its log there, durably, and is a
    /// learner until it has copied the rest again from the primary
    /// (repaired from its peers).
    pub fn log_damaged(&mut self, now: Nanos, at: u64, env: &mut dyn Env) {
        if at >= self.ls.next {
            return;
        }
        if self.role == Role::Leader {
            self.stop(now, env);
        }
        if !self.cut_log(at, env) {
            return;
        }
        self.fl.reset();
        if !self.meta.learner {
            self.meta.learner = true;
            self.persist();
            env.event(NodeEvent::Learner { reason: "damaged" });
        }
        self.mirror();
    }

    /// The candidate of `term` is `node` (one per term).
    pub(super) fn designated(&self, term: u32, node: u8) -> bool {
        quorum::candidate_of(term, MAX_NODES) == node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_a_learner_when_it_cannot_vouch_for_its_log() {
        let mut cfg = NodeConfig::new(0, vec!["127.0.0.1:1".parse().unwrap()]);
        cfg.boot = 7;
        let m = Meta {
            term: 3,
            vote: Some(0),
            log_id: 9,
            boot: 7,
            learner: false,
        };
        assert_eq!(at_start(&cfg, None, false).1, Some("new_disk"));
        assert_eq!(at_start(&cfg, Some(m), false), (m, None));
        assert_eq!(at_start(&cfg, Some(m), true).1, Some("cut"));
        let learner = Meta { learner: true, ..m };
        assert_eq!(at_start(&cfg, Some(learner), false).1, Some("restarted"));
        // Another boot: the page cache is gone; it matters only where
        // acknowledgements promised no more.
        let rebooted = Meta { boot: 6, ..m };
        assert_eq!(at_start(&cfg, Some(rebooted), false).1, Some("rebooted"));
        assert_eq!(at_start(&cfg, Some(rebooted), false).0.boot, 7);
        cfg.durability = Durability::Fsync;
        assert_eq!(at_start(&cfg, Some(rebooted), false).1, None);
    }

    #[test]
    fn empty_logs_start_a_new_group_only_where_no_node_holds_a_log() {
        use crate::seq::core::MemLog;
        let group: Vec<_> = (0..3)
            .map(|i| format!("127.0.0.1:{}", 7000 + i).parse().unwrap())
            .collect();
        let mut n = Node::new(NodeConfig::new(0, group), MemLog::new(), 0).unwrap();
        assert!(n.meta.learner, "a new disk");
        let now = 1_000_000;
        let said = |end: u64| {
            Some(Heard {
                last_term: if end == 0 { 0 } else { 64 },
                end,
                at: now,
            })
        };
        // A new group whose third node has not started: a majority of
        // empty logs.
        n.lr.heard[1] = said(0);
        assert!(n.may_vouch(now, 0, 0));
        n.lr.heard[2] = said(0);
        assert!(n.may_vouch(now, 0, 0));
        // The third holds a log: the group exists (this node and node 1
        // were removed from it and lost their disks, or lost them with
        // it alive): no new group of empty logs...
        n.lr.heard[2] = said(500);
        assert!(!n.may_vouch(now, 0, 0));
        // ...but a vote for the node with the log, heard with the others.
        assert!(n.may_vouch(now, 64, 500));
    }

    #[test]
    fn up_to_date_compares_the_last_term_then_the_end() {
        assert!(at_least(3, 10, 2, 99));
        assert!(at_least(3, 10, 3, 10));
        assert!(!at_least(3, 9, 3, 10));
        assert!(!at_least(2, 99, 3, 1));
    }
}
