//! What the properties need beyond the current state: a history kept in
//! stateright's model state (so it is part of every state's identity),
//! updated after every step.
//!
//! * `senders`: every (term, actor) that sent a bus data datagram or
//!   heartbeat as primary (stateright's `record_msg_out`);
//! * `leaders`: every (term, actor, start) seen primary in a state;
//! * `sessions`: the session of every log seen (its entry 0), up or down;
//! * `committed`: for each index a primary counted committed, the term
//!   of the first primary that did and a hash of the entry;
//! * the budgets spent: faults, membership changes, and which nodes the
//!   witness told that their peer is down.

use std::hash::{Hash, Hasher};

use stateright::actor::Envelope;
use tachyon_core::seq::wire::{self, Bus, BusKind, Msg};

use crate::actor::McState;
use crate::datagram::Datagram;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hist {
    /// Steps since the initial state. Part of the state so that a
    /// depth-first search bounded in depth is exhaustive within its bound:
    /// a state met first deep and later shallower is explored again from
    /// there (stateright's search would skip it as already seen).
    pub depth: u16,
    /// Faults injected so far.
    pub faults: u8,
    /// Membership changes made.
    pub changes: u8,
    /// Bit `i`: node `i` was told its peer is down (until the peer
    /// restarts).
    pub witnessed: u8,
    /// (term, actor) of every datagram sent as primary, sorted.
    pub senders: Vec<(u32, u8)>,
    /// (term, actor, start) of every node seen primary, sorted.
    pub leaders: Vec<(u32, u8, u32)>,
    /// Sessions of the logs seen, sorted.
    pub sessions: Vec<u64>,
    /// `committed[i]`: the term of the first primary that counted entry
    /// `i` committed, and the entry's hash.
    pub committed: Vec<(u32, u64)>,
}

fn insert<T: Ord>(v: &mut Vec<T>, x: T) -> bool {
    match v.binary_search(&x) {
        Ok(_) => false,
        Err(at) => {
            v.insert(at, x);
            true
        }
    }
}

/// A hash of a log entry.
pub fn entry_hash(e: &[u8]) -> u64 {
    let mut h = crate::fp_hasher();
    e.hash(&mut h);
    h.finish()
}

/// The session a log's entry 0 records, if it holds one.
pub fn session_of(e: &[u8]) -> Option<u64> {
    let m = Msg::from_entry(e).ok()?;
    (m.member_id == 0 && m.flags & wire::CONTROL != 0 && m.flags & wire::EPOCH == 0)
        .then_some(m.member_seq)
}

/// stateright's `record_msg_out`: a bus data datagram or heartbeat is
/// sent by the primary of its term.
pub fn record_out(_: &(), h: &Hist, env: Envelope<&Datagram>) -> Option<Hist> {
    let b = Bus::parse(&env.msg.0).ok()?;
    if !matches!(b.kind, BusKind::Data | BusKind::Heartbeat) {
        return None;
    }
    let key = (b.h.term, usize::from(env.src) as u8);
    if h.senders.binary_search(&key).is_ok() {
        return None;
    }
    let mut h = h.clone();
    insert(&mut h.senders, key);
    Some(h)
}

impl Hist {
    /// After a step: what the states show now.
    pub fn observe(&mut self, actors: &[std::sync::Arc<McState>]) {
        for (i, a) in actors.iter().enumerate() {
            let Some(n) = a.as_node() else { continue };
            if let Some(log) = n.log() {
                if log.first() == 0 && !log.is_empty() {
                    if let Some(s) = log.entry(0).and_then(session_of) {
                        insert(&mut self.sessions, s);
                    }
                }
            }
            let Some(node) = n.node().filter(|x| x.is_leader()) else {
                continue;
            };
            insert(&mut self.leaders, (node.term(), i as u8, n.starts));
            let log = node.log();
            let upto = node.commit().min(log.len());
            while (self.committed.len() as u64) < upto {
                let at = self.committed.len() as u64;
                let h = log.entry(at).map_or(0, entry_hash);
                self.committed.push((node.term(), h));
            }
        }
    }
}
