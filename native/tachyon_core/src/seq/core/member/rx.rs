//! The receive side of a member: follows the primary of the highest term,
//! holds what is not committed, delivers in order exactly once, fills gaps,
//! reassembles fragments, and checks every new primary's log against what
//! it delivered (a fork is reported, never silent).
//!
//! The rules (docs/ARCHITECTURE.md, "Failover"):
//! * bus datagrams come from the group's nodes only; a lower term's are
//!   dropped; a higher term's sender is the new primary: what was held
//!   (not delivered) is dropped, the member says hello to it and delivers
//!   nothing of the new term before its welcome;
//! * every hello says where the member is (its next sequence number and
//!   the epoch of the entry before); the welcome says where that epoch ends
//!   in the primary's log: if before the member's next, or in another
//!   epoch, the primary's log does not hold what the member delivered: a
//!   fork, counted and reported ([`MemberEvent::Fork`]);
//! * a message is delivered only below the commit position of the term's
//!   primary;
//! * a member starts at the commit position its welcome names (or where
//!   it asked to start, if that is before): what is beyond may be cut by
//!   the next primary, and a message published after the open returned is
//!   sequenced after the commit position in any primary's log. Asked to
//!   start beyond the commit position, it starts at it and delivers from
//!   where it asked (what is below goes by unseen): its view of the terms
//!   it passes stays whole.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::acks::Acks;
use super::config::{MemberConfig, RxCounters};
use super::fork::{Epochs, Matching};
use super::join::Welcome;
use super::{Deliver, Handover, Mark, MemberEvent};
use crate::seq::core::fill::Fill;
use crate::seq::core::node::{Membership, MAX_NODES};
use crate::seq::core::{nanos, Nanos, Rng, Sink, MILLI};
use crate::seq::wire::{
    self, Bus, BusKind, HelloBody, Msg, Peer, CONT, CONTROL, HOLDS, KEEPALIVE, MORE, PEER_MAGIC,
    SNAP, SNAP_END, TAKEN, UNICAST,
};

#[path = "rx_stream.rs"]
mod stream;
use stream::{Ring, Stream};

/// The ordering state of a member.
pub struct Rx {
    session: u64,
    unicast: bool,
    incarnation: u64,
    group: Vec<SocketAddr>,
    max_buffer: u64,
    replay_chunk: u64,
    retransmit_after: Nanos,
    hello_after: Nanos,
    keepalive: Nanos,
    loss: f64,
    term: u32,
    /// The primary of `term`.
    leader: SocketAddr,
    welcomed: bool,
    st: Stream,
    /// Below this, entries are committed.
    commit: u64,
    /// The followers' acknowledgements (commit in three hops).
    acks: Acks,
    /// The primary's log end as last heard.
    known: u64,
    ring: Ring,
    /// Entries beyond a gap.
    ooo: BTreeMap<u64, Vec<u8>>,
    fill: Fill,
    rng: Rng,
    scratch: Vec<u8>,
    heard_at: Nanos,
    /// The last hello to the primary, and to every node.
    hello_at: Option<Nanos>,
    hello_all_at: Option<Nanos>,
    /// Hellos to every node since the last datagram of the primary.
    hello_backoff: u32,
    /// A hello to the primary is due (a new term, or its end).
    hello_now: bool,
    /// The epoch the last hello asked about (`u32::MAX`: none, a join).
    asked_epoch: u32,
    /// An epoch asked about again because the answer named an earlier one
    /// (`rx_welcome.rs`).
    reasked: Option<u32>,
    keepalive_at: Nanos,
    switch_to: Option<SocketAddr>,
    /// A welcome of the current term, for the publishing side.
    welcome: Option<Welcome>,
    /// This member's own highest `member_seq` delivered when the term began.
    own_at_term: u64,
    /// This member's highest `member_seq` seen on the bus in this term,
    /// committed or not: the primary holds every command up to it.
    heard: u64,
    nacks: Vec<u64>,
    /// A primary could not append this command (a full disk).
    full: Option<u64>,
    /// A primary said the member id is another member's.
    taken: bool,
    /// A fork being resolved: where the member was (its next, and the
    /// epoch before it) before it moved back to ask again.
    fork: Option<(u64, u32)>,
    events: Vec<MemberEvent>,
    c: Arc<CachePadded<RxCounters>>,
}

impl Rx {
    /// After the welcome `w`.
    pub fn new(cfg: &MemberConfig, w: &Welcome, unicast: bool, now: Nanos) -> Rx {
        let start = cfg.from.map_or(w.commit, |f| f.max(1));
        let mut group = cfg.group();
        for n in w.config.iter().flat_map(|c| c.nodes()) {
            if !group.contains(&n.addr) && group.len() < 4 * MAX_NODES {
                group.push(n.addr);
            }
        }
        let mut acks = Acks::default();
        acks.new_term(w.term);
        acks.welcomed(w.from, w.config.clone(), w.next);
        let next = start.min(w.commit);
        // From a snapshot: read from where the messages it does not hold
        // begin, deliver from its position.
        let deliver_from = cfg.deliver_from.map_or(start, |d| d.max(start));
        let c = Arc::new(CachePadded::new(RxCounters::default()));
        c.hellos.bump(1);
        c.welcomes.bump(1);
        c.next_seq.set(next);
        c.epoch.set(w.term as u64);
        Rx {
            session: w.session,
            unicast,
            incarnation: cfg.incarnation,
            group,
            max_buffer: cfg.max_buffer,
            replay_chunk: cfg.replay_chunk,
            retransmit_after: nanos(cfg.retransmit_after),
            hello_after: nanos(cfg.hello_after),
            keepalive: nanos(cfg.keepalive).max(MILLI),
            loss: cfg.loss,
            term: w.term,
            leader: w.from,
            welcomed: true,
            st: Stream {
                member_id: cfg.member_id,
                max_message_size: cfg.max_message_size,
                next,
                deliver_from,
                epochs: Epochs::new(w.epoch, next),
                delivered_any: false,
                own: w.last,
                partial: HashMap::new(),
                snapshots: cfg.snapshots,
                snapshot_as_of: cfg.deliver_from.filter(|_| cfg.snapshots),
                c: c.clone(),
            },
            commit: w.commit,
            acks,
            known: w.next,
            ring: Ring::default(),
            ooo: BTreeMap::new(),
            fill: Fill::default(),
            rng: Rng::new(cfg.incarnation ^ 0x2545_f491_4f6c_dd1d ^ (cfg.member_id as u64) << 7),
            scratch: Vec::with_capacity(64),
            heard_at: now,
            hello_at: Some(now),
            hello_all_at: Some(now),
            hello_backoff: 0,
            hello_now: false,
            asked_epoch: u32::MAX,
            reasked: None,
            keepalive_at: now,
            switch_to: None,
            welcome: None,
            own_at_term: 0,
            heard: 0,
            nacks: Vec::new(),
            full: None,
            taken: false,
            fork: None,
            events: Vec::new(),
            c,
        }
    }

    pub fn counters(&self) -> &Arc<CachePadded<RxCounters>> {
        &self.c
    }

    /// This member's highest `member_seq` delivered.
    pub fn own_seen(&self) -> u64 {
        self.st.own
    }

    /// This member's highest `member_seq` the primary of this term has sent
    /// on the bus (delivered or not yet).
    pub fn own_heard(&self) -> u64 {
        self.heard.max(self.st.own)
    }

    pub fn epoch(&self) -> u32 {
        self.term
    }

    pub fn next_seq(&self) -> u64 {
        self.st.next
    }

    pub fn commit(&self) -> u64 {
        self.commit
    }

    /// The welcome of a new term, once (for the publishing side).
    pub fn take_welcome(&mut self) -> Option<Welcome> {
        self.welcome.take()
    }

    /// Nacked `member_seq`s since the last call.
    pub fn take_nacks(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.nacks.drain(..)
    }

    /// Whether a primary said the member id is another member's.
    pub fn is_taken(&self) -> bool {
        self.taken
    }

    /// A command a primary could not append (a full disk), once.
    pub fn take_full(&mut self) -> Option<u64> {
        self.full.take()
    }

    /// Before the datagrams of a poll: what the publishing side has heard.
    pub fn mark(&self) -> Mark {
        Mark {
            own: self.own_seen(),
            heard: self.own_heard(),
        }
    }

    /// After the datagrams of a poll (at least one): a hello to a new
    /// primary, a gap request at once; and, if anything changed for the
    /// publishing side since `mark`, what to hand over to it.
    pub fn finish(&mut self, now: Nanos, mark: Mark, sink: &mut dyn Sink) -> Option<Handover> {
        let switch = self.end_batch(now, sink);
        let h = Handover::take(self, switch);
        (h.own > mark.own || h.heard != mark.heard || !h.is_empty()).then_some(h)
    }

    pub fn take_events(&mut self) -> Vec<MemberEvent> {
        std::mem::take(&mut self.events)
    }

    fn have(&self) -> u64 {
        self.st.next + self.ring.len()
    }

    /// One bus datagram from `from`.
    pub fn on_datagram(
        &mut self,
        now: Nanos,
        d: &[u8],
        from: Option<SocketAddr>,
        deliver: &mut Deliver<'_>,
    ) {
        if self.loss > 0.0 && self.rng.chance(self.loss) {
            self.c.injected_losses.bump(1);
            return;
        }
        let Some(from) = from else {
            self.c.strangers.bump(1);
            return;
        };
        let known = self.group.contains(&from);
        if known && wire::magic(d) == PEER_MAGIC {
            self.on_peer(d, from, deliver);
            return;
        }
        let b = match Bus::parse(d) {
            Ok(b) => b,
            Err(_) if known => {
                self.c.malformed.bump(1);
                return;
            }
            Err(_) => {
                self.c.strangers.bump(1);
                return;
            }
        };
        if !known {
            // A node of a newer membership than this member has seen (its
            // session is this bus's): learnt; anyone else is a stranger.
            if b.h.session != self.session || self.group.len() >= 4 * MAX_NODES {
                self.c.strangers.bump(1);
                return;
            }
            self.group.push(from);
        }
        if b.h.session != self.session {
            self.c.wrong_session.bump(1);
            return;
        }
        if b.h.term < self.term {
            self.c.stale_epoch.bump(1);
            return;
        }
        if b.h.term > self.term {
            self.new_term(b.h.term, from);
        } else if from != self.leader {
            self.c.conflicts.bump(1);
            return;
        }
        self.c.datagrams.bump(1);
        self.heard_at = now;
        self.hello_backoff = 0;
        if b.flags & HOLDS != 0 && matches!(b.kind, BusKind::Data | BusKind::Heartbeat) {
            self.acks.holds(b.end());
        }
        match b.kind {
            BusKind::Heartbeat => self.known = self.known.max(b.h.seq),
            BusKind::Data => self.data(&b, deliver),
            BusKind::Welcome => self.welcomed(&b),
            BusKind::Nack => self.nacks.extend(b.nacked()),
            BusKind::Trimmed => {
                if let Some((first, epoch)) = b.trimmed() {
                    self.trimmed(first, epoch);
                    // Nothing delivered in this call: the `Trimmed` event
                    // is taken first, and what follows the gap comes after
                    // it (at the next datagram).
                    self.c.next_seq.set(self.st.next);
                    return;
                }
            }
            BusKind::Full => {
                if let Some(seq) = b.refused() {
                    self.full = Some(seq);
                    self.events.push(MemberEvent::NoSpace { member_seq: seq });
                }
            }
            BusKind::End => {
                // The primary stopped: look for the next one at once.
                self.heard_at = 0;
                self.hello_all_at = None;
            }
        }
        if self.welcomed && b.h.commit > self.commit {
            self.commit = b.h.commit;
            self.c.commit.set(self.commit);
        }
        self.deliver(deliver);
        self.c.next_seq.set(self.st.next);
    }

    /// A peer datagram from a node of the group: a follower's
    /// acknowledgement, which may commit entries (three hops).
    fn on_peer(&mut self, d: &[u8], from: SocketAddr, deliver: &mut Deliver<'_>) {
        let Ok(p) = Peer::parse(d) else {
            self.c.malformed.bump(1);
            return;
        };
        if p.h.session != self.session {
            self.c.wrong_session.bump(1);
            return;
        }
        if self.acks.ack(from, &p) {
            self.c.acks.bump(1);
            self.deliver(deliver);
            self.c.next_seq.set(self.st.next);
        }
    }

    /// Below this, entries are committed: the primary's commit position,
    /// or what a majority's acknowledgements of its term reach.
    fn committed(&self) -> u64 {
        self.commit.max(self.acks.commit())
    }

    /// A higher term: its sender is the primary now; nothing held is kept.
    fn new_term(&mut self, term: u32, from: SocketAddr) {
        self.term = term;
        self.c.epoch.set(term as u64);
        // The publishing side holds its commands until the welcome, also
        // for the same node: a primary that restarted may lack commands
        // numbered after its log, and would hold the later ones until a
        // skipping command came (then sequence both).
        self.switch_to = Some(from);
        self.leader = from;
        self.welcomed = false;
        self.ring.clear();
        self.ooo.clear();
        self.commit = self.st.next;
        self.acks.new_term(term);
        self.known = self.st.next;
        self.fill.reset();
        self.hello_now = true;
        self.own_at_term = self.st.own;
        self.heard = self.st.own;
        self.events.push(MemberEvent::Term { term });
    }

    fn data(&mut self, b: &Bus<'_>, deliver: &mut Deliver<'_>) {
        self.known = self.known.max(b.end());
        for (seq, m) in b.messages() {
            let config = m.config().and_then(|c| {
                self.learn_nodes(c);
                Membership::decode(c)
            });
            self.acks.entry(seq, m.term, config);
            if m.member_id == self.st.member_id && m.member_seq > self.heard {
                self.heard = m.member_seq;
            }
            let have = self.have();
            if seq < have {
                self.c.duplicates.bump(1);
            } else if seq == have {
                // In order: delivered straight from the datagram when
                // committed and nothing waits before it; held otherwise.
                let commit = self
                    .committed()
                    .max(if self.welcomed { b.h.commit } else { 0 });
                if self.ring.len() == 0 && self.welcomed && seq < commit {
                    self.st.apply(seq, &m, deliver);
                } else {
                    self.ring.push(&m);
                }
                self.unblock();
            } else if seq - self.st.next < self.max_buffer {
                if let std::collections::btree_map::Entry::Vacant(v) = self.ooo.entry(seq) {
                    let mut e = Vec::with_capacity(m.size());
                    m.write(&mut e);
                    v.insert(e);
                    if self.ooo.len() == 1 {
                        self.c.gaps.bump(1);
                    }
                } else {
                    self.c.duplicates.bump(1);
                }
            } else {
                self.c.dropped_ahead.bump(1);
            }
        }
    }

    /// A membership change on the bus: its nodes' datagrams are taken from
    /// now on, and hellos go to them too (a node removed stays known: a
    /// datagram from it is of an older term, or of no consequence).
    fn learn_nodes(&mut self, config: &[u8]) {
        let Some(m) = Membership::decode(config) else {
            return;
        };
        for n in m.nodes() {
            if !self.group.contains(&n.addr) && self.group.len() < 4 * MAX_NODES {
                self.group.push(n.addr);
            }
        }
    }

    /// Moves what is held beyond a gap into the ring once the gap is filled.
    fn unblock(&mut self) {
        while let Some(e) = self.ooo.remove(&self.have()) {
            self.ring.push_raw(&e);
        }
        let have = self.have();
        while self.ooo.first_key_value().is_some_and(|(s, _)| *s < have) {
            self.ooo.pop_first();
        }
    }

    /// Delivers what is held, in order, below the commit position.
    fn deliver(&mut self, deliver: &mut Deliver<'_>) {
        if !self.welcomed {
            return;
        }
        let commit = self.committed();
        while self.st.next < commit {
            let Some(e) = self.ring.front() else { break };
            let seq = self.st.next;
            match Msg::from_entry(e) {
                Ok(m) => self.st.apply(seq, &m, deliver),
                Err(_) => self.st.next = seq + 1,
            }
            self.ring.pop();
        }
    }
}

#[path = "rx_fingerprint.rs"]
mod fingerprint;

#[path = "rx_timers.rs"]
mod timers;

#[path = "rx_welcome.rs"]
mod welcome;

#[cfg(test)]
#[path = "rx_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "acks_tests.rs"]
mod acks_tests;
