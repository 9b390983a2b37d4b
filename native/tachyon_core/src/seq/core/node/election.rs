//! Elections (Raft §5.2 and §5.4.1; the thesis's §9.6 pre-vote and §4.2.3
//! on disruptive servers):
//!
//! * a follower that hears no primary for its election timeout (drawn in
//!   `[t, 2t)`, counted in running time only) asks the others for a
//!   *pre-vote* for the next term, without changing its own;
//! * a node grants a pre-vote only if it is not the primary, has not heard a
//!   primary within the minimum election timeout, and the candidate's log
//!   is at least as up to date as its own (a higher last term, or the same
//!   and at least as long);
//! * with a majority of pre-votes the candidate starts the term, votes for
//!   itself (recorded before anything is sent) and asks for votes;
//! * a node votes once per term, recorded before it answers, for a log at
//!   least as up to date; a node that heard a primary within the minimum
//!   timeout (or is a primary with its majority) ignores a vote for a later
//!   term: a node that was paused or cut off cannot depose a healthy
//!   primary;
//! * with a majority of votes the candidate is the primary of the term.
//!
//! In a group of two, a majority is both nodes. [`TwoNodes::Safe`] counts a
//! third vote from the witness (the other's BEAM node reported down), for a
//! follower in sync only: it heard the primary within the election timeout
//! and its log reaches the last commit position it heard (so it holds every
//! committed entry; a node that restarted or was cut off does not take
//! over alone). [`TwoNodes::Available`] counts the peer's silence: no
//! answer to a pre-vote (or vote) within a short wait stands for its vote.
//! Each term has one candidate, node `term mod n` ([`quorum::candidate_of`]):
//! a node campaigns only in its own terms, and votes in a term only for
//! its candidate. Two primaries of one term cannot be even if a node
//! forgets its vote (a replaced disk), and in a group of two two
//! witnesses (one per node) never make two primaries of one term. A
//! learner ([`super::learner`]) votes and campaigns only as its rules
//! allow.

use super::{quorum, Node, Role, TwoNodes, MAX_NODES, TICK_CAP};
use crate::seq::core::{Env, Log, Nanos, NodeEvent};
use crate::seq::wire::{Peer, PeerKind, GRANTED};

#[derive(Debug, Default, Clone, Hash)]
pub(super) struct Election {
    /// Nodes that granted this round's (pre-)vote, as bits.
    pub granted: u64,
    denied: u64,
    started: Nanos,
    /// The witness's vote holds until then...
    pub witness_until: Nanos,
    /// ...for a follower that held every committed entry when it fired.
    pub in_sync: bool,
}

impl Election {
    pub fn reset(&mut self) {
        self.granted = 0;
        self.denied = 0;
    }
}

impl<L: Log> Node<L> {
    /// Raft's election restriction: a candidate's log is at least as up to
    /// date as this node's.
    fn up_to_date(&self, last_term: u32, end: u64) -> bool {
        let mine = self.ls.last_term();
        last_term > mine || (last_term == mine && end >= self.ls.next)
    }

    /// The term this node campaigns for: the next one whose candidate it
    /// is (`None`: no term is left, the node never campaigns).
    pub(super) fn next_term(&self) -> Option<u32> {
        quorum::next_term_of(self.term, self.id(), MAX_NODES)
    }

    /// Votes this round has, the witness's or the silent peer's included.
    pub(super) fn tally(&self, now: Nanos) -> usize {
        let m = self.membership();
        let mut n = m
            .voters()
            .filter(|v| self.el.granted & (1 << v) != 0)
            .count();
        if m.n_voters() == 2 {
            match self.cfg.two_nodes {
                TwoNodes::Safe => {
                    if self.el.witness_until > now
                        && self.el.in_sync
                        && self.since_leader >= self.cfg.election_timeout
                    {
                        n += 1;
                    }
                }
                TwoNodes::Available => {
                    let wait = (self.cfg.election_timeout / 4).min(10_000_000);
                    if self.el.denied == 0 && now.saturating_sub(self.el.started) >= wait {
                        n += 1;
                    }
                }
            }
        }
        n
    }

    /// Timed work of a node that is not the primary; returns the next
    /// deadline.
    pub(super) fn election_tick(&mut self, now: Nanos, env: &mut dyn Env) -> Nanos {
        match self.role {
            Role::Follower if !self.voter() => {
                // Not a voter (joining, catching up, or removed): it never
                // campaigns; one that is not a member asks to join.
                return self.joining_tick(now, env);
            }
            Role::Follower => {
                if self.silent >= self.timeout && self.may_campaign(now) {
                    self.start_prevote(now, env);
                } else if self.silent >= self.timeout {
                    // A learner that cannot vouch for its log asks every
                    // node where theirs stand; a full disk waits for room.
                    self.probe(now, env);
                    self.silent = 0;
                    self.new_timeout();
                } else {
                    let d = self.follower_tick(now, env);
                    let left = self.timeout - self.silent;
                    return d.min(now + left.min(TICK_CAP));
                }
            }
            Role::PreCandidate | Role::Candidate => {
                if self.tally(now) >= self.majority() {
                    if self.role == Role::PreCandidate {
                        self.start_vote(now, env);
                    } else {
                        self.become_leader(now, env);
                        return now;
                    }
                } else if self.silent >= self.timeout {
                    // No majority in time (a split vote, or too few
                    // nodes up): again, from the pre-vote.
                    self.start_prevote(now, env);
                }
            }
            Role::Leader => return now,
        }
        let left = self.timeout.saturating_sub(self.silent);
        now + left.clamp(1, TICK_CAP)
    }

    fn start_prevote(&mut self, now: Nanos, env: &mut dyn Env) {
        self.role = Role::PreCandidate;
        self.leader = None;
        self.el.reset();
        self.el.granted = 1 << self.id();
        self.el.started = now;
        self.silent = 0;
        self.new_timeout();
        let Some(t) = self.next_term() else {
            self.become_follower(None, env);
            return;
        };
        let (last, end) = (self.ls.last_term() as u64, self.ls.next);
        env.event(NodeEvent::Campaign { term: t, pre: true });
        let flags = self.fresh_flag();
        for n in self.other_voters() {
            self.send_peer(n, PeerKind::PreVote, t, flags, (last, end), 0, env);
        }
        if self.tally(now) >= self.majority() {
            self.start_vote(now, env);
        }
        self.mirror();
    }

    fn start_vote(&mut self, now: Nanos, env: &mut dyn Env) {
        let Some(t) = self.next_term() else {
            self.become_follower(None, env);
            return;
        };
        self.term = t;
        self.vote = Some(self.id());
        if !self.persist() {
            self.become_follower(None, env);
            return;
        }
        self.c.elections.bump(1);
        self.role = Role::Candidate;
        self.el.reset();
        self.el.granted = 1 << self.id();
        self.el.started = now;
        self.silent = 0;
        self.new_timeout();
        let (t, last, end) = (self.term, self.ls.last_term() as u64, self.ls.next);
        env.event(NodeEvent::Campaign {
            term: t,
            pre: false,
        });
        let flags = self.fresh_flag();
        for n in self.other_voters() {
            self.send_peer(n, PeerKind::Vote, t, flags, (last, end), 0, env);
        }
        if self.tally(now) >= self.majority() {
            self.become_leader(now, env);
        }
        self.mirror();
    }

    /// Heard a primary recently (Raft thesis §4.2.3).
    fn sticky(&self) -> bool {
        match self.role {
            Role::Leader => self.quorum_fresh(),
            Role::Follower => self.leader.is_some() && self.silent < self.cfg.election_timeout,
            _ => false,
        }
    }

    pub(super) fn on_prevote(&mut self, now: Nanos, from: u8, p: &Peer, env: &mut dyn Env) {
        self.heard_of(now, from, p);
        let proposed = p.h.term;
        let (last, end) = (p.a.min(u32::MAX as u64) as u32, p.b);
        let mut grant = proposed > self.term
            && self.voter()
            && self.designated(proposed, from)
            && !self.sticky()
            && self.up_to_date(last, end);
        if grant && !self.may_vouch(now, last, end) {
            self.c.learner_refusals.bump(1);
            grant = false;
        }
        // A grant carries the proposed term; a refusal this node's own (a
        // candidate behind it learns its term from the answer).
        let term = if grant { proposed } else { self.term };
        let flags = if grant { GRANTED } else { 0 };
        self.send_peer(from, PeerKind::PreVoteReply, term, flags, (0, 0), 0, env);
    }

    pub(super) fn on_vote(&mut self, now: Nanos, from: u8, p: &Peer, env: &mut dyn Env) {
        self.heard_of(now, from, p);
        let t = p.h.term;
        let (last, end) = (p.a.min(u32::MAX as u64) as u32, p.b);
        let before = (self.term, self.vote);
        if t > self.term {
            if self.sticky() {
                let term = self.term;
                self.send_peer(from, PeerKind::VoteReply, term, 0, (0, 0), 0, env);
                return;
            }
            self.term = t;
            self.vote = None;
            if self.role != Role::Follower || self.leader.is_some() {
                self.become_follower(None, env);
            }
        }
        let mut grant = t == self.term
            && self.voter()
            && self.designated(t, from)
            && self.vote.is_none_or(|v| v == from)
            && self.up_to_date(last, end);
        if grant && !self.may_vouch(now, last, end) {
            self.c.learner_refusals.bump(1);
            grant = false;
        }
        if grant {
            self.vote = Some(from);
        }
        if (self.term, self.vote) != before && !self.persist() {
            grant = false;
        }
        if grant {
            // Granting a vote restarts the election timer (Raft §5.2).
            self.silent = 0;
            env.event(NodeEvent::Voted {
                term: self.term,
                candidate: from,
            });
        }
        let term = self.term;
        let flags = if grant { GRANTED } else { 0 };
        self.send_peer(from, PeerKind::VoteReply, term, flags, (0, 0), 0, env);
        self.mirror();
    }

    pub(super) fn on_vote_reply(&mut self, now: Nanos, from: u8, p: &Peer, env: &mut dyn Env) {
        let granted = p.h.flags & GRANTED != 0;
        let pre = p.h.kind == PeerKind::PreVoteReply;
        if p.h.term > self.term && !(pre && granted) {
            self.adopt_term(p.h.term, None, env);
            return;
        }
        if pre
            && !granted
            && self.role == Role::PreCandidate
            && self.membership().n_voters() == 2
            && self.cfg.two_nodes == TwoNodes::Available
        {
            // The peer answered (a refusal carries its own term, not the
            // proposed one): it is alive; a takeover needs its vote.
            self.become_follower(None, env);
            return;
        }
        let ours = match (self.role, pre) {
            (Role::PreCandidate, true) => Some(p.h.term) == self.next_term(),
            (Role::Candidate, false) => p.h.term == self.term,
            _ => false,
        };
        if !ours {
            return;
        }
        if granted {
            self.el.granted |= 1 << from;
        } else {
            self.el.denied |= 1 << from;
        }
        if self.tally(now) >= self.majority() {
            if pre {
                self.start_vote(now, env);
            } else {
                self.become_leader(now, env);
            }
        }
    }
}
