//! Commit in three hops: the followers' acknowledgements, heard by the
//! member (Paxos's acceptors informing the learners).
//!
//! The bus's commit position stays the primary's. A member may also take
//! entry `i` as committed when, for the term `T` of the primary it follows
//! (after that primary's welcome), acknowledgements of `T` from a majority
//! of the voters of the primary's membership reach past `i` and past an
//! entry of `T` (Raft §5.4.2: only an entry of the current term commits by
//! counting, which commits everything before it). It counts what the
//! primary's own rule counts (`advance_commit`, `core/node/leader.rs`):
//!
//! * a follower's ACK of term `T` says that its log matches the primary's
//!   up to its end (a follower acknowledges only once its log is synced
//!   with the primary of its term); one of another log identity or
//!   incarnation of that node replaces what an earlier one said (a restart
//!   may have lost it), as the primary resets `matched`;
//! * a learner's ACK (a node that cannot vouch for its log) never counts,
//!   and forgets what that node said before; nor a non-voter's, nor one
//!   from an address that is not the node's in the membership;
//! * the primary counts for what its data datagrams and heartbeats flagged
//!   [`HOLDS`] reach (durability `:replicated`: it holds what it sent); with
//!   `:fsync` they are not flagged, and it counts only by its own ACKs (of
//!   what it synced);
//! * the membership is the primary's as its welcome gave it, then every
//!   CONFIG entry it appended after that welcome (the primary counts with
//!   its latest membership too). A member that has no welcome's
//!   membership, or follows a group of two voters or fewer, uses the
//!   commit position only.
//!
//! Whenever unsure, nothing is counted: the commit position still comes.

use crate::seq::core::node::{quorum, Membership, MAX_NODES};
use crate::seq::wire::{Peer, PeerKind, LEARNER};
use std::net::SocketAddr;

/// What one voter acknowledged in this term: its log identity and
/// incarnation, and its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Said {
    log_id: u64,
    incarnation: u32,
    end: u64,
}

/// The acknowledgements a member heard in the current term.
#[derive(Debug, Default, Clone, Hash)]
pub(super) struct Acks {
    term: u32,
    /// The primary of `term`, and its node id in `config`.
    leader: Option<(SocketAddr, u8)>,
    /// The primary's membership (`None`: not known, nothing counts).
    config: Option<Membership>,
    /// CONFIG entries at or after this position are newer than `config`.
    config_from: u64,
    /// The last CONFIG entry of the primary's log seen in this term (data
    /// may overtake the welcome: one seen before it may be newer).
    last_config: Option<(u64, Membership)>,
    said: Vec<Option<Said>>,
    /// The end the primary's HOLDS datagrams reach.
    holds: u64,
    /// The lowest position of an entry of `term` seen (in the primary's
    /// log: an entry of its term is at or after its epoch record).
    term_entry: Option<u64>,
    /// What the acknowledgements commit (0: nothing).
    commit: u64,
}

impl Acks {
    /// A new term: nothing heard counts any more.
    pub fn new_term(&mut self, term: u32) {
        *self = Acks {
            term,
            ..Acks::default()
        };
    }

    /// The welcome of the term's primary at `from`: its membership (the
    /// welcome's tail), and its log end then.
    pub fn welcomed(&mut self, from: SocketAddr, config: Option<Membership>, end: u64) {
        self.config_from = end;
        let config = match &self.last_config {
            Some((seq, c)) if *seq >= end => {
                self.config_from = seq + 1;
                Some(c.clone())
            }
            _ => config,
        };
        self.set_config(from, config);
    }

    fn set_config(&mut self, from: SocketAddr, config: Option<Membership>) {
        // A changed membership may give an id to another node: what was
        // heard is forgotten (it comes again with the next batch).
        self.said.clear();
        self.said.resize(MAX_NODES, None);
        self.leader = None;
        self.config = config.filter(|c| c.n_voters() > 2);
        if let Some(c) = &self.config {
            self.leader = c.id_of(from).map(|id| (from, id));
        }
        self.recount();
    }

    /// An entry of the primary's log at `seq`, of `term`; `config`: a
    /// CONFIG entry's membership.
    pub fn entry(&mut self, seq: u64, term: u32, config: Option<Membership>) {
        if term == self.term && self.term_entry.is_none_or(|s| seq < s) {
            self.term_entry = Some(seq);
        }
        let Some(c) = config else { return };
        if self.last_config.as_ref().is_none_or(|(s, _)| seq > *s) {
            self.last_config = Some((seq, c.clone()));
        }
        if seq >= self.config_from {
            if let Some((from, _)) = self.leader {
                self.config_from = seq + 1;
                self.set_config(from, Some(c));
            }
        }
    }

    /// A datagram of the primary flagged HOLDS: it holds its log to `end`.
    pub fn holds(&mut self, end: u64) {
        if end > self.holds {
            self.holds = end;
            self.recount();
        }
    }

    /// An acknowledgement from `from`; whether it counted.
    ///
    /// A learner's counts for nothing, and it makes the member forget what
    /// that node said before (of any log identity or incarnation): a
    /// learner may lack what it acknowledged (a restart after a power
    /// loss, a replaced disk, a log cut), so an earlier word of it must not
    /// keep counting for the rest of the term.
    pub fn ack(&mut self, from: SocketAddr, p: &Peer) -> bool {
        if p.h.kind != PeerKind::Ack || p.h.term != self.term {
            return false;
        }
        let Some(c) = &self.config else { return false };
        if !c.is_voter(p.h.node) || c.addr(p.h.node) != Some(from) {
            return false;
        }
        let Some(slot) = self.said.get_mut(p.h.node as usize) else {
            return false;
        };
        if p.h.flags & LEARNER != 0 {
            if slot.take().is_some() {
                self.recount();
            }
            return false;
        }
        let (log_id, incarnation, end) = (p.h.log_id, p.h.incarnation, p.b);
        *slot = match *slot {
            Some(s) if s.log_id == log_id && s.incarnation == incarnation => Some(Said {
                end: s.end.max(end),
                ..s
            }),
            // Another start of that node: what it holds now, only.
            _ => Some(Said {
                log_id,
                incarnation,
                end,
            }),
        };
        self.recount();
        true
    }

    /// Below this, entries are committed by the acknowledgements heard.
    pub fn commit(&self) -> u64 {
        self.commit
    }

    fn recount(&mut self) {
        self.commit = 0;
        let (Some(c), Some((_, leader))) = (&self.config, self.leader) else {
            return;
        };
        let mut m = [0u64; MAX_NODES];
        let mut n = 0;
        for v in c.voters() {
            let acked = self.said[v as usize].map_or(0, |s| s.end);
            m[n] = if v == leader {
                acked.max(self.holds)
            } else {
                acked
            };
            n += 1;
        }
        let q = quorum::majority_end(&m[..n]);
        if self.term_entry.is_some_and(|s| q > s) {
            self.commit = q;
        }
    }
}
