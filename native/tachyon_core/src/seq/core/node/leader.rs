//! The primary (Raft's leader): sequences members' commands into its log
//! and onto the bus, counts the followers' acknowledgements into the
//! commit position (Raft §5.3, §5.4.2: only an entry of its own term is
//! committed by counting, which commits everything before it), steps down
//! when it has not heard a majority for an election timeout (the thesis's
//! check-quorum), answers hellos and hands replays to its replayer.
//!
//! Commands: a member's messages are taken in `member_seq` order (Raft
//! thesis §6.3: a client's serial numbers); one ahead of a gap is held (up
//! to `window` per member) and the member is told which one is missing (a
//! nack), so a lost command costs one resend, not a go-back-N.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use super::commands::Window;
use super::{quorum, Node, Role, TwoNodes, MAX_NODES, TICK_CAP};
use crate::seq::core::{Env, Log, LogError, Nanos, NodeEvent};
use crate::seq::wire::{self, BusKind, Msg, CONTROL};
use crate::seq::BusMode;

/// Why an entry was not appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Larger than a bus datagram.
    Oversized,
    /// No room on the disk (the primary then steps down).
    NoSpace,
    /// The log failed otherwise (counted).
    Failed,
}

/// A hole is nacked again after this long (the resent command was lost).
const RENACK_AFTER: Nanos = 2_000_000;

/// Who a heartbeat goes to (on a multicast bus: the group, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beat {
    /// Every node and member: a new term, the heartbeats that keep it
    /// (from a tenth of `heartbeat` after data on), and one when
    /// acknowledgements move the commit position (sent only where the
    /// members do not count the acknowledgements themselves:
    /// `members_count_acks`).
    All,
    /// The first heartbeats after data (a lost tail is found by them):
    /// where the members count acknowledgements, the members and the
    /// followers whose acknowledgement does not reach the log's end (the
    /// others need nothing from it: a wake-up saved per message); else
    /// every node and member.
    Tail,
}

#[derive(Clone)]
pub(super) struct Lead {
    /// The index of this term's epoch record.
    pub term_start: u64,
    /// Each node's log end known to match this one (this node's: its end).
    pub matched: Vec<u64>,
    /// Whose acknowledgements `matched` holds: each node's log identity
    /// and incarnation (another, a restart or a new disk, starts anew).
    pub ident: Vec<Option<(u64, u32)>>,
    /// Running time since each node was last heard.
    pub peer_silent: Vec<Nanos>,
    /// Each node's last acknowledgement came from a learner (it may not
    /// campaign: not named to succeed this primary).
    pub learner: Vec<bool>,
    /// Nodes the witness reported down (a group of two).
    pub down: Vec<bool>,
    out: Vec<u8>,
    out_count: u16,
    last_send: Nanos,
    due: Nanos,
    sent_in_batch: bool,
    /// The commit position the bus was last told.
    commit_sent: u64,
    /// Where a heartbeat to some goes (reused).
    beat_to: Vec<SocketAddr>,
    pub windows: BTreeMap<u32, Window>,
    pub replays: HashMap<SocketAddr, (u64, Nanos)>,
}

impl Lead {
    /// What the primary does next depends on: every field but the scratch
    /// list `beat_to`, and the datagram being built only while it holds a
    /// message ([`crate::seq::core::fingerprint`]).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use crate::seq::core::fingerprint::hash_sorted;
        use std::hash::Hash;
        let Lead {
            term_start,
            matched,
            ident,
            peer_silent,
            learner,
            down,
            out,
            out_count,
            last_send,
            due,
            sent_in_batch,
            commit_sent,
            beat_to: _,
            windows,
            replays,
        } = self;
        (term_start, matched, ident, peer_silent, learner, down).hash(h);
        out_count.hash(h);
        if *out_count > 0 {
            out.hash(h);
        }
        (last_send, due, sent_in_batch, commit_sent, windows).hash(h);
        hash_sorted(replays.iter(), h);
    }

    pub fn new(n: usize, max_datagram: usize) -> Lead {
        Lead {
            term_start: 0,
            matched: vec![0; n],
            ident: vec![None; n],
            peer_silent: vec![0; n],
            learner: vec![false; n],
            down: vec![false; n],
            out: Vec::with_capacity(max_datagram),
            out_count: 0,
            last_send: 0,
            due: 0,
            sent_in_batch: false,
            beat_to: Vec::new(),
            commit_sent: 0,
            windows: BTreeMap::new(),
            replays: HashMap::new(),
        }
    }

    /// Node `n`'s place changed hands (removed, or given to a node at
    /// another address): nothing an earlier holder acknowledged counts
    /// for the next.
    pub fn forget(&mut self, n: u8) {
        let i = n as usize;
        if i < self.matched.len() {
            self.matched[i] = 0;
            self.ident[i] = None;
            self.peer_silent[i] = 0;
            self.learner[i] = false;
            self.down[i] = false;
        }
    }

    pub fn peer_down(&mut self, n: u8) {
        if let Some(d) = self.down.get_mut(n as usize) {
            *d = true;
        }
    }
}

impl<L: Log> Node<L> {
    /// Raft: a candidate with a majority is the leader of its term; it
    /// appends its term's first entry (the epoch record) at once.
    pub(super) fn become_leader(&mut self, now: Nanos, env: &mut dyn Env) {
        if !self.voter() {
            self.become_follower(None, env);
            return;
        }
        let n = MAX_NODES;
        self.role = Role::Leader;
        self.leader = Some(self.id());
        self.fl.reset();
        self.ld = Lead::new(n, self.cfg.max_datagram);
        let two = self.membership().n_voters() == 2;
        let peer = self.other_voters().first().copied().unwrap_or(0) as usize;
        if two && self.el.granted & (1 << peer) == 0 {
            match self.cfg.two_nodes {
                // Elected with the witness's vote: the peer is down.
                // (Its vote counted only after an election timeout of the
                // peer's silence.)
                TwoNodes::Safe if self.el.witness_until > now => {
                    self.ld.down[peer] = true;
                    self.ld.peer_silent[peer] = self.cfg.election_timeout;
                }
                // Elected by the peer's silence: it has been silent a whole
                // election already; the primary commits alone at once.
                TwoNodes::Available => self.ld.peer_silent[peer] = self.cfg.election_timeout,
                TwoNodes::Safe => {}
            }
        }
        self.ld.last_send = now;
        self.ld.due = self.cfg.heartbeat_after;
        if self.ls.next == 0 {
            // A new group's first primary writes the session record.
            let _ = self.emit(0, self.cfg.new_session, CONTROL, &[], env);
        }
        self.ld.term_start = self.ls.next;
        let term = self.term as u64;
        if let Err(r) = self.emit(0, term, CONTROL | wire::EPOCH, &[], env) {
            // Cannot even write the epoch record: not a primary.
            self.become_follower(None, env);
            if r == Refused::NoSpace {
                self.disk_full(now, env);
            }
            return;
        }
        self.lead_as_voter();
        self.el.reset();
        self.c.terms_led.bump(1);
        self.leader_flush(now, env);
        self.heartbeat(now, Beat::All, env);
        // The counters first: whoever hears the event and reads the stats
        // sees the new term's epoch record in `next_seq`.
        self.mirror();
        env.event(NodeEvent::Leader {
            term: self.term,
            start: self.ld.term_start,
        });
    }

    /// Whether a majority (this node included) was heard within the
    /// election timeout.
    pub(super) fn quorum_fresh(&self) -> bool {
        let me = self.id();
        let voters: Vec<u8> = self.membership().voters().collect();
        let silent: Vec<Nanos> = voters
            .iter()
            .map(|v| self.ld.peer_silent[*v as usize])
            .collect();
        // A primary that is no voter (removed, not yet stepped down)
        // counts only the voters it hears.
        let at = voters.iter().position(|v| *v == me).unwrap_or(usize::MAX);
        quorum::fresh(&silent, at, self.cfg.election_timeout)
    }

    /// A group of two whose peer is taken for dead: the primary commits
    /// alone.
    fn solo(&self, peer: usize) -> bool {
        match self.cfg.two_nodes {
            // The witness's word counts while the peer is silent on the
            // bus too (a monitor that lost only its own link says nothing).
            TwoNodes::Safe => {
                self.ld.down[peer] && self.ld.peer_silent[peer] >= self.cfg.election_timeout
            }
            TwoNodes::Available => self.ld.peer_silent[peer] >= self.cfg.election_timeout,
        }
    }

    /// The end a majority's logs match, if it commits anything new (this
    /// node's own log counts as far as its acknowledgement would: with
    /// `durability: fsync`, what is on its disk).
    fn advance_commit(&mut self) {
        let end = self.acked_end();
        let me = self.id();
        // A primary that removed itself (a joiner's, its id gone with it)
        // has no slot: it counts only the voters, as `quorum_fresh`.
        if let Some(slot) = self.ld.matched.get_mut(me as usize) {
            *slot = end;
        }
        // No allocation: called for every bus datagram.
        let mut m = [0u64; MAX_NODES];
        let (mut n, mut peer, mut with_me) = (0, None, false);
        for v in self.membership().voters() {
            m[n] = self.ld.matched[v as usize];
            n += 1;
            if v == me {
                with_me = true;
            } else {
                peer = Some(v as usize);
            }
        }
        let q = match peer {
            Some(p) if n == 2 && with_me => {
                quorum::two_node_end(end, self.ld.matched[p], self.solo(p))
            }
            _ => quorum::majority_end(&m[..n]),
        };
        // Raft §5.4.2: only an entry of this term commits by counting.
        let c = quorum::advance(self.commit, q, self.ld.term_start);
        if c > self.commit {
            self.commit = c;
            self.ls.committed(c);
        }
    }

    /// Appends one entry and adds it to the data datagram being built.
    pub(super) fn emit(
        &mut self,
        member_id: u32,
        member_seq: u64,
        flags: u8,
        data: &[u8],
        env: &mut dyn Env,
    ) -> Result<(), Refused> {
        let size = wire::MSG_HEADER + data.len();
        if wire::BUS_HEADER + size > self.cfg.max_datagram {
            self.c.oversized.bump(1);
            return Err(Refused::Oversized);
        }
        if self.dur.full {
            return Err(Refused::NoSpace);
        }
        if !self.hold_log() {
            return Err(Refused::Failed);
        }
        let full = !self.cfg.batching
            || self.ld.out_count == u16::MAX
            || self.ld.out.len() + size > self.cfg.max_datagram;
        if full {
            self.flush_data(env);
        }
        if self.ld.out_count == 0 {
            let h = self.bus_header(self.ls.next);
            let f = self.holds_flag();
            wire::bus_header(&mut self.ld.out, BusKind::Data, &h, f);
        }
        // The bus message is the log entry: written once into the datagram
        // being built, appended to the log from there.
        let at = self.ld.out.len();
        let term = self.term;
        wire::write_msg(&mut self.ld.out, member_id, member_seq, flags, term, data);
        match self.log.append(&self.ld.out[at..]) {
            Ok(i) if i == self.ls.next => {
                let m = Msg {
                    member_id,
                    member_seq,
                    flags,
                    term,
                    data,
                };
                self.ls.applied(i, &m);
                self.ld.out_count += 1;
                if member_id != 0 {
                    self.c.messages.bump(1);
                }
                Ok(())
            }
            r => {
                // Not stamped: the member resends it later.
                self.ld.out.truncate(at);
                self.c.store_errors.bump(1);
                Err(match r {
                    Err(LogError::NoSpace) => Refused::NoSpace,
                    _ => Refused::Failed,
                })
            }
        }
    }

    /// Sends the data datagram being built, with the commit position now.
    fn flush_data(&mut self, env: &mut dyn Env) {
        if self.ld.out_count == 0 {
            return;
        }
        self.advance_commit();
        wire::set_count(&mut self.ld.out, self.ld.out_count);
        wire::set_commit(&mut self.ld.out, self.commit);
        self.ld.out_count = 0;
        env.send(&self.targets, &self.ld.out);
        self.c.datagrams.bump(1);
        self.ld.sent_in_batch = true;
        self.ld.commit_sent = self.commit;
    }

    pub(super) fn leader_flush(&mut self, _now: Nanos, env: &mut dyn Env) {
        self.flush_data(env);
    }

    fn heartbeat(&mut self, now: Nanos, beat: Beat, env: &mut dyn Env) {
        self.advance_commit();
        let h = self.bus_header(self.ls.next);
        let f = self.holds_flag();
        wire::bus_header(&mut self.scratch, BusKind::Heartbeat, &h, f);
        let everyone = beat == Beat::All
            || matches!(self.cfg.bus, BusMode::Multicast { .. })
            || !self.members_count_acks();
        if everyone {
            env.send(&self.targets, &self.scratch);
        } else {
            // Unicast: the nodes first in `targets`, then the members.
            let mut to = std::mem::take(&mut self.ld.beat_to);
            to.clear();
            let nodes = self.targets.len() - self.unicast_members;
            let end = self.ls.next;
            let m = self.membership();
            let behind = |a: &SocketAddr| {
                m.id_of(*a)
                    .is_none_or(|id| self.ld.matched.get(id as usize).is_none_or(|e| *e < end))
            };
            to.extend(self.targets[..nodes].iter().filter(|a| behind(a)));
            to.extend_from_slice(&self.targets[nodes..]);
            if !to.is_empty() {
                env.send(&to, &self.scratch);
            }
            self.ld.beat_to = to;
        }
        self.c.heartbeats.bump(1);
        self.ld.last_send = now;
        self.ld.commit_sent = self.commit;
    }

    pub(super) fn leader_end_batch(&mut self, now: Nanos, env: &mut dyn Env) {
        self.flush_data(env);
        self.advance_commit();
        if self.commit > self.ld.commit_sent && !self.members_count_acks() {
            // Acknowledgements moved the commit position: tell the bus now.
            self.heartbeat(now, Beat::All, env);
        }
        if std::mem::take(&mut self.ld.sent_in_batch) {
            self.ld.due = self.cfg.heartbeat_after;
            self.ld.last_send = now;
        }
    }

    pub(super) fn age_peers(&mut self, dt: Nanos) {
        let me = self.id() as usize;
        for (i, s) in self.ld.peer_silent.iter_mut().enumerate() {
            if i != me {
                *s = s.saturating_add(dt);
            }
        }
    }

    pub(super) fn leader_tick(&mut self, now: Nanos, env: &mut dyn Env) -> Nanos {
        if self.membership().n_voters() > 2 && !self.quorum_fresh() {
            // Check-quorum: cut off from a majority, this primary can
            // commit nothing; it stops sequencing so members look elsewhere.
            self.c.stepped_down.bump(1);
            env.event(NodeEvent::SteppedDown { term: self.term });
            self.become_follower(None, env);
            self.silent = 0;
            return now + TICK_CAP;
        }
        self.renack(now, env);
        self.advance_commit();
        if now.saturating_sub(self.ld.last_send) >= self.ld.due {
            // The first ones after data find a lost tail; from a tenth of
            // the heartbeat on they keep the term (every node hears them).
            let tail = self.ld.due < self.cfg.heartbeat / 10;
            self.heartbeat(now, if tail { Beat::Tail } else { Beat::All }, env);
            self.ld.due = self.ld.due.saturating_mul(10).min(self.cfg.heartbeat);
        } else if self.commit > self.ld.commit_sent && !self.members_count_acks() {
            self.heartbeat(now, Beat::All, env);
        }
        let mut due = (self.ld.last_send + self.ld.due).min(now + TICK_CAP);
        if self.ld.windows.values().any(|w| !w.held.is_empty()) {
            due = due.min(now + RENACK_AFTER);
        }
        due
    }

    /// Holes nacked a while ago and still open: nacked again.
    fn renack(&mut self, now: Nanos, env: &mut dyn Env) {
        let due: Vec<(u32, SocketAddr, u64)> = self
            .ld
            .windows
            .iter()
            .filter(|(_, w)| !w.held.is_empty())
            .filter(|(_, w)| {
                w.nacked
                    .is_none_or(|(_, at)| now.saturating_sub(at) >= RENACK_AFTER)
            })
            .map(|(id, w)| (*id, w.addr, self.ls.last_of(*id) + 1))
            .collect();
        for (id, addr, seq) in due {
            if let Some(w) = self.ld.windows.get_mut(&id) {
                w.nacked = None;
            }
            self.nack(now, id, addr, seq, env);
        }
    }

    /// An acknowledgement: node `from` holds this log up to `p.b`. One of
    /// another incarnation or log of that node (a restart, a replaced
    /// disk) replaces what an earlier one said: that may be gone.
    pub(super) fn on_ack(&mut self, from: u8, p: &wire::Peer) {
        if self.role != Role::Leader {
            return;
        }
        let i = from as usize;
        self.c.acks.bump(1);
        let end = p.b.min(self.ls.next);
        let learner = p.h.flags & wire::LEARNER != 0;
        if self.same_incarnation(i, p) && !learner {
            self.ld.matched[i] = self.ld.matched[i].max(end);
        } else {
            // Another start of that node, or a learner (its log may have
            // lost what it said before, a damaged entry cut): what it
            // holds now, only.
            self.ld.matched[i] = end;
        }
        self.ld.learner[i] = learner;
        self.ld.peer_silent[i] = 0;
        self.ld.down[i] = false;
    }

    /// Whether `p` comes from the incarnation of node `i` whose
    /// acknowledgements `matched` holds; if not, it is the one now (what
    /// the other said is forgotten).
    fn same_incarnation(&mut self, i: usize, p: &wire::Peer) -> bool {
        let ident = Some((p.h.log_id, p.h.incarnation));
        if self.ld.ident[i] == ident {
            return true;
        }
        self.ld.ident[i] = ident;
        self.ld.matched[i] = 0;
        false
    }

    /// A follower asks where its last epoch ends in this log.
    pub(super) fn on_sync(&mut self, from: u8, p: &wire::Peer, env: &mut dyn Env) {
        if self.role != Role::Leader {
            return;
        }
        self.c.syncs.bump(1);
        self.ld.peer_silent[from as usize] = 0;
        self.same_incarnation(from as usize, p);
        let (e, end) = self.ls.epoch_end(p.a as u32);
        let (term, next) = (self.term, self.ls.next);
        self.send_peer(
            from,
            wire::PeerKind::SyncReply,
            term,
            0,
            (e as u64, end),
            next,
            env,
        );
    }
}
