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
use crate::seq::wire::{Peer, PeerKind, FRESH, LEADER};

/// A probe answer older than this many election timeouts is asked again.
const PROBE_FRESH: u64 = 4;

#[derive(Debug, Clone, Copy, Hash)]
struct Heard {
    last_term: u32,
    end: u64,
    /// Its disk never held a group's log ([`FRESH`]).
    fresh: bool,
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
                fresh: true,
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
    ///
    /// A candidate with an empty log would start a new group (a new
    /// session): a learner votes for one only if its own disk is new and
    /// empty and no node it heard holds a log, or ever did. The candidate
    /// itself campaigns only once it heard every node of the group new and
    /// empty (`may_campaign`): a group is created once.
    pub(super) fn may_vouch(&self, now: Nanos, last_term: u32, end: u64) -> bool {
        if !self.learning() {
            return true;
        }
        let others = self.other_voters();
        let all = others.iter().all(|&i| {
            self.heard(now, i)
                .is_some_and(|h| at_least(last_term, end, h.last_term, h.end))
        });
        if end > 0 || others.is_empty() {
            return all;
        }
        let a_log = others
            .iter()
            .any(|&i| self.heard(now, i).is_some_and(|h| h.end > 0 || !h.fresh));
        self.meta.fresh && self.ls.next == 0 && !a_log
    }

    /// What node `i` said of its log lately (within [`PROBE_FRESH`]
    /// election timeouts).
    fn heard(&self, now: Nanos, i: u8) -> Option<Heard> {
        let fresh = PROBE_FRESH * self.cfg.election_timeout;
        self.lr.heard[i as usize].filter(|h| now.saturating_sub(h.at) < fresh)
    }

    /// Whether this node may campaign: its disk has room, a term is left
    /// for it, and it would vote for itself; with an empty log (a new group), only once every
    /// node of the group said lately that it is new and empty. Empty logs
    /// that hear no log are not enough: the node that holds it may be down
    /// (two nodes whose disks were replaced, the third down, elected a new
    /// group beside the log: `tachyon_sim --scenario two_replaced_disks`),
    /// or removed nodes restarted on the first membership may hear only
    /// each other. So a new group waits for all its nodes; a group whose
    /// logs are all gone waits for an operator (who empties every node's
    /// directory). A group of one has no one else to ask: its node starts
    /// over.
    pub(super) fn may_campaign(&self, now: Nanos) -> bool {
        !self.dur.full
            && self.next_term().is_some()
            && self.may_vouch(now, self.ls.last_term(), self.ls.next)
            && (!self.learning() || self.ls.next > 0 || self.every_node_new(now))
    }

    /// Every other voter said lately that its disk is new and its log
    /// empty.
    fn every_node_new(&self, now: Nanos) -> bool {
        self.other_voters()
            .iter()
            .all(|&i| self.heard(now, i).is_some_and(|h| h.fresh && h.end == 0))
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
        // It says where its own log stands too (and, new and empty,
        // FRESH): the others learn it without asking (a new group's nodes
        // that started before it heard nothing of it yet).
        let (term, last, end) = (self.term, self.ls.last_term() as u64, self.ls.next);
        let flags = self.fresh_flag();
        for i in self.other_voters() {
            self.send_peer(i, PeerKind::Probe, term, flags, (last, end), 0, env);
        }
    }

    /// FRESH if this node's disk never held a log and its log is empty.
    pub(super) fn fresh_flag(&self) -> u8 {
        if self.meta.fresh && self.ls.next == 0 && self.ls.first == 0 {
            FRESH
        } else {
            0
        }
    }

    /// Any node answers a probe: where its log stands, and whether its
    /// disk never held one (and takes what the prober said of its own).
    pub(super) fn on_probe(&mut self, now: Nanos, from: u8, p: &Peer, env: &mut dyn Env) {
        self.heard_of(now, from, p);
        let flags = self.fresh_flag() | if self.role == Role::Leader { LEADER } else { 0 };
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
        self.heard_of(now, from, p);
        // The preferred first primary of a new group (`eager`) campaigns
        // as soon as it heard every node new, not a timeout later.
        if self.cfg.eager
            && self.term == 0
            && self.role == Role::Follower
            && self.leader.is_none()
            && self.ls.next == 0
            && self.may_campaign(now)
        {
            self.silent = self.silent.max(self.timeout);
        }
    }

    /// What node `from` said of its log (`a` its last term, `b` its end,
    /// FRESH): a probe, its reply, a (pre-)vote request.
    pub(super) fn heard_of(&mut self, now: Nanos, from: u8, p: &Peer) {
        if let Some(h) = self.lr.heard.get_mut(from as usize) {
            *h = Some(Heard {
                last_term: p.a.min(u32::MAX as u64) as u32,
                end: p.b,
                fresh: p.h.flags & FRESH != 0,
                at: now,
            });
        }
    }

    /// A learner that follows the primary of this term, holds its epoch
    /// record, everything up to a commit position the primary announced
    /// beyond it, and everything the primary's log held when it answered
    /// this learner's sync, holds every entry committed before it lost its
    /// data: it votes again (as if it had voted for this primary in its
    /// term).
    ///
    /// The primary's log end, not only its commit: with commit in three
    /// hops a member may deliver what the primary has not counted yet (a
    /// majority's acknowledgements reached the members, not the primary),
    /// counting an acknowledgement this node sent before it lost its data.
    /// That entry is in the log of the primary of the term it was
    /// acknowledged in, and of every primary after it while this node is
    /// a learner (each elected by a majority without this node's vote, so
    /// with the vote of a node that holds it). Catching up to the primary's
    /// commit only, this node voted again without it, and with a node cut
    /// off meanwhile elected a log that lacked it (`tachyon_sim --scenario
    /// three_hops_lost_ack_power_loss`, `silent_fork`).
    pub(super) fn catch_up(&mut self, env: &mut dyn Env) {
        if !self.meta.learner || self.role != Role::Follower || !self.fl.synced {
            return;
        }
        let Some(start) = self.ls.epoch_start(self.term) else {
            return;
        };
        let c = self.fl.commit_heard();
        let target = c.max(self.fl.sync_end);
        if c <= start || self.ls.next < target || self.acked_end() < target {
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

    /// Before this node's first entry (appended, copied, or a checkpoint
    /// installed): its disk holds a group's log from now on, recorded
    /// first; false if that could not be written (nothing is appended).
    pub(super) fn hold_log(&mut self) -> bool {
        if !self.meta.fresh {
            return true;
        }
        self.meta.fresh = false;
        if self.persist() {
            return true;
        }
        self.meta.fresh = true;
        false
    }

    /// Test aid: node `i` said just now that its disk is new and empty.
    #[cfg(test)]
    pub(super) fn heard_new_and_empty(&mut self, i: u8, now: Nanos) {
        self.lr.heard[i as usize] = Some(Heard {
            last_term: 0,
            end: 0,
            fresh: true,
            at: now,
        });
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
    use crate::seq::wire::LEARNER;

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
            fresh: false,
        };
        assert_eq!(at_start(&cfg, None, false).1, Some("new_disk"));
        assert!(at_start(&cfg, None, false).0.fresh, "a new disk");
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
    fn a_new_group_starts_only_with_every_node_new() {
        use crate::seq::core::MemLog;
        let group: Vec<_> = (0..3)
            .map(|i| format!("127.0.0.1:{}", 7000 + i).parse().unwrap())
            .collect();
        let mut n = Node::new(NodeConfig::new(0, group), MemLog::new(), 0).unwrap();
        assert!(n.meta.learner && n.meta.fresh, "a new disk");
        let now = 1_000_000;
        let said = |end: u64, fresh: bool| {
            Some(Heard {
                last_term: if end == 0 { 0 } else { 64 },
                end,
                fresh,
                at: now,
            })
        };
        // The third node not heard (down, or not started yet): two empty
        // logs, a majority, do not start a group (the third may hold the
        // log: two replaced disks elected a new group beside it).
        n.lr.heard[1] = said(0, true);
        assert!(!n.may_campaign(now));
        // Every node new and empty: a new group.
        n.lr.heard[2] = said(0, true);
        assert!(n.may_campaign(now) && n.may_vouch(now, 0, 0));
        // An empty log on a disk that held one (its log lost, or cut):
        // not a new group's; no vote for an empty candidate beside it.
        n.lr.heard[2] = said(0, false);
        assert!(!n.may_campaign(now) && !n.may_vouch(now, 0, 0));
        // The third holds a log: no new group of empty logs...
        n.lr.heard[2] = said(500, false);
        assert!(!n.may_vouch(now, 0, 0));
        // ...but a vote for the node with the log, heard with the others.
        assert!(n.may_vouch(now, 64, 500));
        // This node's own disk held a log: it starts no new group either.
        n.lr.heard[2] = said(0, true);
        n.meta.fresh = false;
        assert!(!n.may_vouch(now, 0, 0) && !n.may_campaign(now));
        // Heard too long ago: not heard.
        n.meta.fresh = true;
        let late = now + PROBE_FRESH * n.cfg.election_timeout;
        assert!(!n.may_campaign(late));
    }

    /// A log of term `term`: the session record, the epoch record, then
    /// `n` messages.
    fn log_of(term: u32, n: u64) -> crate::seq::core::MemLog {
        use crate::seq::core::{Log, MemLog};
        use crate::seq::wire::{self, CONTROL, EPOCH};
        let mut log = MemLog::new();
        let mut e = Vec::new();
        wire::write_msg(&mut e, 0, 77, CONTROL, term, &[]);
        log.append(&e).unwrap();
        e.clear();
        wire::write_msg(&mut e, 0, term as u64, CONTROL | EPOCH, term, &[]);
        log.append(&e).unwrap();
        for k in 1..=n {
            e.clear();
            wire::write_msg(&mut e, 9, k, 0, term, b"x");
            log.append(&e).unwrap();
        }
        log
    }

    /// A peer datagram of node `from`, of `(term, session)`.
    fn peer(
        kind: PeerKind,
        (term, session): (u32, u64),
        from: u8,
        flags: u8,
        (a, b, c): (u64, u64, u64),
    ) -> Vec<u8> {
        use crate::seq::wire::PeerHeader;
        let p = Peer {
            h: PeerHeader {
                kind,
                term,
                session,
                node: from,
                flags,
                log_id: 5 + from as u64,
                incarnation: 3,
            },
            a,
            b,
            c,
        };
        let mut d = Vec::new();
        p.write(&mut d);
        d
    }

    #[test]
    fn a_learner_catches_up_to_the_primarys_log_end_not_only_its_commit() {
        use super::super::testnet::{addr, Out};
        use crate::seq::wire::{self, BusHeader, BusKind};
        let group: Vec<_> = (0..3).map(addr).collect();
        // Node 1 restarted on a new disk and copied 5 messages of the
        // primary (node 0) of term 64: entries 0..7.
        let mut n = Node::new(NodeConfig::new(1, group), log_of(64, 5), 0).unwrap();
        assert!(n.is_learner());
        let mut out = Out::default();
        // The primary's heartbeat: its log ends at 9, its commit is 5
        // (below this log's end: members may have delivered up to 9 on
        // this node's acknowledgements of before it lost its disk).
        let h = BusHeader {
            term: 64,
            session: 77,
            seq: 9,
            commit: 5,
            node: 0,
        };
        let mut d = Vec::new();
        wire::bus_header(&mut d, BusKind::Heartbeat, &h, 0);
        n.on_datagram(1, addr(0), &d, &mut out);
        // Its answer to this node's sync: epoch 64 ends at 9 in its log,
        // which ends at 9.
        let reply = peer(PeerKind::SyncReply, (64, 77), 0, 0, (64, 9, 9));
        n.on_datagram(2, addr(0), &reply, &mut out);
        assert!(n.is_learner(), "caught up to the commit only");
        // The rest of the primary's log: caught up.
        let mut d = Vec::new();
        wire::bus_header(&mut d, BusKind::Data, &BusHeader { seq: 7, ..h }, 0);
        wire::write_msg(&mut d, 9, 6, 0, 64, b"x");
        wire::write_msg(&mut d, 9, 7, 0, 64, b"x");
        wire::set_count(&mut d, 2);
        n.on_datagram(3, addr(0), &d, &mut out);
        assert_eq!(n.next_seq(), 9);
        assert!(!n.is_learner(), "holds the primary's log as it answered");
    }

    #[test]
    fn a_stopping_primary_names_no_learner_to_succeed_it() {
        use super::super::testnet::{addr, Net, Out};
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader() && n.nodes[0].commit() > 1));
        let p = &mut net.nodes[0];
        let (term, end, session) = (p.term(), p.next_seq(), p.session());
        let ack = |from, flags, end| peer(PeerKind::Ack, (term, session), from, flags, (0, end, 0));
        let mut out = Out::default();
        p.on_datagram(net.now, addr(1), &ack(1, 0, end - 1), &mut out);
        // Node 2 acknowledges further, as a learner (a new disk that
        // copied faster): it may not campaign; node 1 is named.
        p.on_datagram(net.now, addr(2), &ack(2, LEARNER, end), &mut out);
        assert_eq!(p.successor(), Some(1));
        p.on_datagram(net.now, addr(2), &ack(2, 0, end), &mut out);
        assert_eq!(p.successor(), Some(2));
    }

    #[test]
    fn up_to_date_compares_the_last_term_then_the_end() {
        assert!(at_least(3, 10, 2, 99));
        assert!(at_least(3, 10, 3, 10));
        assert!(!at_least(3, 9, 3, 10));
        assert!(!at_least(2, 99, 3, 1));
    }
}
