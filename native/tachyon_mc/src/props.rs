//! The properties, checked at every state (stateright's `always` and
//! `sometimes`), and what each violation is, in words.
//!
//! * `no_lost_delivery`: every message a member delivered in term `T` is
//!   in the log of every node that is primary now in a term `T` or later,
//!   at its index, the same message (Raft's leader completeness, seen
//!   from the bus: a member delivers only what is committed);
//! * `agreement`: no two deliveries (by any members, at any time) differ
//!   at one index;
//! * `one_primary_per_term`: one actor sends the bus as primary of a
//!   term, and one start of one node is primary of a term;
//! * `committed_survives`: an entry a primary counted committed is, the
//!   same, in the log of every node primary now in that primary's term or
//!   later;
//! * `one_session`: no log of a second session is ever written (a new
//!   group over, or beside, an existing log);
//! * sometimes `delivered`: a member delivers a message published after
//!   the prologue (the check is not vacuous);
//! * sometimes `failover`: a node is primary in a later term than the
//!   prologue's primary (faults reach a takeover);
//! * sometimes `membership_changed` (with a membership change in the
//!   bounds): a primary's log holds a membership change.

use std::collections::BTreeMap;

use stateright::actor::ActorModelState;
use tachyon_core::seq::core::MemLog;
use tachyon_core::seq::wire::{Msg, MORE};

use crate::actor::McActor;
use crate::history::{entry_hash, Hist};
use crate::member::{Delivery, MemberState};
use crate::model::McModel;
use crate::node::NodeState;

pub type State = ActorModelState<McActor, Hist>;

fn nodes(s: &State) -> impl Iterator<Item = (usize, &NodeState)> {
    s.actor_states
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_node().map(|n| (i, n)))
}

fn members(s: &State) -> impl Iterator<Item = (usize, &MemberState)> {
    s.actor_states
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_member().map(|m| (i, m)))
}

/// The nodes primary now: (actor, term, log).
fn primaries(s: &State) -> impl Iterator<Item = (usize, u32, &MemLog)> {
    nodes(s).filter_map(|(i, n)| {
        n.node()
            .filter(|x| x.is_leader())
            .map(|x| (i, x.term(), x.log()))
    })
}

fn holds(log: &MemLog, d: &Delivery) -> bool {
    log.entry(d.seq)
        .and_then(|e| Msg::from_entry(e).ok())
        .is_some_and(|m| m.member_id == d.member && m.flags & MORE == 0 && m.data == d.data)
}

/// Each property's violations in this state, in words (empty: it holds).
pub fn lost_deliveries(s: &State) -> Vec<String> {
    let mut v = Vec::new();
    for (mi, m) in members(s) {
        for d in &m.delivered {
            for (i, term, log) in primaries(s) {
                if term >= d.term && !holds(log, d) {
                    v.push(format!(
                        "actor {mi} delivered {}: m{} {:?} in term {}; node {i}, primary of term {term}, lacks it (log {})",
                        d.seq,
                        d.member,
                        d.data,
                        d.term,
                        crate::node::log_line(log)
                    ));
                }
            }
        }
    }
    v
}

pub fn disagreements(s: &State) -> Vec<String> {
    let mut at: BTreeMap<u64, (usize, &Delivery)> = BTreeMap::new();
    let mut v = Vec::new();
    for (mi, m) in members(s) {
        for d in &m.delivered {
            match at.get(&d.seq) {
                Some((mj, e)) if (e.member, &e.data) != (d.member, &d.data) => v.push(format!(
                    "index {}: actor {mj} delivered m{} {:?}, actor {mi} m{} {:?}",
                    d.seq, e.member, e.data, d.member, d.data
                )),
                Some(_) => {}
                None => {
                    at.insert(d.seq, (mi, d));
                }
            }
        }
    }
    v
}

pub fn two_primaries(s: &State) -> Vec<String> {
    let h = &s.history;
    let mut v = Vec::new();
    for w in h.senders.windows(2) {
        if w[0].0 == w[1].0 {
            v.push(format!(
                "term {}: actors {} and {} sent the bus as primary",
                w[0].0, w[0].1, w[1].1
            ));
        }
    }
    for w in h.leaders.windows(2) {
        if w[0].0 == w[1].0 {
            v.push(format!(
                "term {}: primary as actor {} (start {}) and actor {} (start {})",
                w[0].0, w[0].1, w[0].2, w[1].1, w[1].2
            ));
        }
    }
    v
}

pub fn lost_commits(s: &State) -> Vec<String> {
    let mut v = Vec::new();
    for (seq, &(t, hash)) in s.history.committed.iter().enumerate() {
        for (i, term, log) in primaries(s) {
            let same = log.entry(seq as u64).map(entry_hash) == Some(hash);
            if term >= t && !same {
                v.push(format!(
                    "entry {seq}, committed in term {t}: node {i}, primary of term {term}, {} (log {})",
                    if log.len() > seq as u64 {
                        "holds another"
                    } else {
                        "lacks it"
                    },
                    crate::node::log_line(log)
                ));
            }
        }
    }
    v
}

pub fn new_sessions(s: &State) -> Vec<String> {
    let h = &s.history.sessions;
    if h.len() <= 1 {
        return Vec::new();
    }
    let mut who = Vec::new();
    for (i, n) in nodes(s) {
        if let Some(e) = n.log().and_then(|l| l.entry(0)) {
            if let Some(x) = crate::history::session_of(e) {
                who.push(format!("actor {i}: {x}"));
            }
        }
    }
    vec![format!(
        "sessions {h:?} (logs now: {})",
        if who.is_empty() {
            "none".into()
        } else {
            who.join(", ")
        }
    )]
}

pub fn no_lost_delivery(_: &McModel, s: &State) -> bool {
    lost_deliveries(s).is_empty()
}

pub fn agreement(_: &McModel, s: &State) -> bool {
    disagreements(s).is_empty()
}

pub fn one_primary_per_term(_: &McModel, s: &State) -> bool {
    two_primaries(s).is_empty()
}

pub fn committed_survives(_: &McModel, s: &State) -> bool {
    lost_commits(s).is_empty()
}

pub fn one_session(_: &McModel, s: &State) -> bool {
    s.history.sessions.len() <= 1
}

/// Deliveries by every member.
pub fn deliveries(s: &State) -> usize {
    members(s).map(|(_, m)| m.delivered.len()).sum()
}

/// The highest term of a primary now.
pub fn top_term(s: &State) -> u32 {
    primaries(s).map(|p| p.1).max().unwrap_or(0)
}

pub fn delivered(m: &McModel, s: &State) -> bool {
    deliveries(s) > m.init_deliveries
}

pub fn failover(m: &McModel, s: &State) -> bool {
    top_term(s) > m.init_term
}

/// A membership change is in the log of a primary now (with
/// `--membership`).
pub fn membership_changed(_: &McModel, s: &State) -> bool {
    nodes(s).any(|(_, n)| {
        n.node()
            .is_some_and(|x| x.is_leader() && x.membership_index().is_some())
    })
}

/// A violated property's details in this state.
pub fn explain(name: &str, s: &State) -> Vec<String> {
    match name {
        "no_lost_delivery" => lost_deliveries(s),
        "agreement" => disagreements(s),
        "one_primary_per_term" => two_primaries(s),
        "committed_survives" => lost_commits(s),
        "one_session" => new_sessions(s),
        _ => Vec::new(),
    }
}
