//! A follower (Raft §5.3): copies the primary's log from the bus (the
//! data datagrams are its AppendEntries), acknowledges what it holds, fills
//! gaps by replay, and learns the commit position.
//!
//! Raft checks each AppendEntries against the entry before it; here a
//! follower checks once per term, when it starts following a primary (or
//! after a restart): it asks where its last epoch ends in the primary's log
//! (a sync) and truncates what it holds beyond (an uncommitted tail of an
//! earlier term), asking again until its last epoch is the one the primary
//! answered with. From then on, in that term, the primary's entries extend
//! its log in order.

use std::collections::BTreeMap;

use super::{Node, Role};
use crate::seq::core::fill::Fill;
use crate::seq::core::{Env, Log, LogError, Nanos, NodeEvent};
use crate::seq::wire::{self, Bus, BusKind, Msg, PeerKind};

/// Entries held ahead of the log end at most (beyond: asked for again).
const HELD_MAX: usize = 1 << 16;

#[derive(Debug, Default, Clone, Hash)]
pub(super) struct Follow {
    /// The log matches the primary's (this term).
    pub synced: bool,
    sync_at: Option<Nanos>,
    /// Entries of the primary beyond this log's end.
    held: BTreeMap<u64, Vec<u8>>,
    /// The primary's log end as last heard.
    known: u64,
    fill: Fill,
    pub ack_due: bool,
    stale_at: Option<Nanos>,
    /// The highest commit position the primary announced.
    pub(super) commit_heard: u64,
    /// The primary's log end when it answered this follower's sync: a
    /// learner catches up to it ([`super::learner`]).
    pub(super) sync_end: u64,
    /// The log end this follower last acknowledged to the members
    /// (`acks.rs`).
    pub members_acked: u64,
    /// Where the primary's datagrams come from (`addr_of` sends there).
    pub leader_addr: Option<std::net::SocketAddr>,
}

impl Follow {
    pub fn commit_heard(&self) -> u64 {
        self.commit_heard
    }

    pub fn reset(&mut self) {
        let requests = self.fill.requests;
        *self = Follow::default();
        self.fill.requests = requests;
    }
}

impl<L: Log> Node<L> {
    /// A bus datagram from node `b.h.node` at `from` (checked: a node of
    /// the group, of this session).
    pub(super) fn on_bus(
        &mut self,
        now: Nanos,
        from: std::net::SocketAddr,
        b: &Bus<'_>,
        env: &mut dyn Env,
    ) {
        if matches!(b.kind, BusKind::Welcome | BusKind::Nack) {
            return;
        }
        if b.kind == BusKind::Trimmed {
            // An answer to this follower's gap fill.
            if b.h.term == self.term && self.leader == Some(b.h.node) {
                self.on_trimmed(now, b.trimmed().map_or(0, |t| t.0), env);
            }
            return;
        }
        let (t, n) = (b.h.term, b.h.node);
        if t < self.term {
            // A deposed primary: tell it the term (Raft: the reply to a
            // stale AppendEntries carries the current term).
            self.c.stale.bump(1);
            if self
                .fl
                .stale_at
                .is_none_or(|a| now.saturating_sub(a) >= 5_000_000)
            {
                self.fl.stale_at = Some(now);
                let term = self.term;
                self.send_peer(n, PeerKind::Ack, term, 0, (0, 0), 0, env);
            }
            return;
        }
        if t > self.term {
            self.adopt_term(t, Some(n), env);
        } else {
            match self.role {
                Role::Leader => {
                    // Two primaries in one term cannot be: votes are
                    // once per term. Counted, ignored.
                    self.c.stale.bump(1);
                    return;
                }
                Role::PreCandidate | Role::Candidate => self.become_follower(Some(n), env),
                Role::Follower if self.leader != Some(n) => self.become_follower(Some(n), env),
                Role::Follower => {}
            }
        }
        self.silent = 0;
        self.since_leader = 0;
        self.fl.leader_addr = Some(from);
        if b.kind == BusKind::End {
            // The primary stopped: the successor it names (or, if it names
            // none, every node) campaigns now; the others after their own
            // timeout if no primary is heard by then.
            self.leader = None;
            if b.successor().is_none_or(|s| s == self.id()) {
                self.silent = self.timeout;
            }
            return;
        }
        self.fl.known = self.fl.known.max(b.end());
        self.fl.commit_heard = self.fl.commit_heard.max(b.h.commit);
        self.fl.ack_due = true;
        if b.kind == BusKind::Data {
            for (seq, m) in b.messages() {
                if seq < self.ls.next && self.fl.synced {
                    continue;
                }
                if seq == self.ls.next && self.fl.synced && !self.dur.full {
                    if let Err(LogError::NoSpace) = self.copy(seq, &m) {
                        self.disk_full(now, env);
                    }
                } else if self.fl.held.len() < HELD_MAX {
                    self.fl.held.entry(seq).or_insert_with(|| {
                        let mut e = Vec::with_capacity(m.size());
                        m.write(&mut e);
                        e
                    });
                }
            }
        }
        if self.fl.synced {
            self.drain_held(now, env);
            let c = b.h.commit.min(self.ls.next);
            if c > self.commit {
                self.commit = c;
                self.ls.committed(c);
            }
            self.catch_up(env);
        } else {
            self.sync(now, env);
        }
    }

    /// Appends the primary's entry `seq` (the next one).
    fn copy(&mut self, seq: u64, m: &Msg<'_>) -> Result<(), LogError> {
        if !self.hold_log() {
            return Err(LogError::NotFound);
        }
        self.scratch.clear();
        m.write(&mut self.scratch);
        match self.log.append(&self.scratch) {
            Ok(i) if i == seq => {
                self.ls.applied(seq, m);
                self.c.copied.bump(1);
                Ok(())
            }
            r => {
                self.c.store_errors.bump(1);
                Err(r.err().unwrap_or(LogError::NotFound))
            }
        }
    }

    /// Appends what is held that now follows the log end (nothing while
    /// the disk is full).
    fn drain_held(&mut self, now: Nanos, env: &mut dyn Env) {
        while let Some((&seq, _)) = self.fl.held.first_key_value() {
            if self.dur.full {
                break;
            }
            if seq < self.ls.next {
                self.fl.held.pop_first();
                continue;
            }
            if seq > self.ls.next {
                break;
            }
            let (_, e) = self.fl.held.pop_first().expect("first");
            let r = match Msg::from_entry(&e) {
                Ok(m) => self.copy(seq, &m),
                Err(_) => Err(LogError::NotFound),
            };
            match r {
                Ok(()) => {}
                Err(LogError::NoSpace) => {
                    self.fl.held.insert(seq, e);
                    self.disk_full(now, env);
                    break;
                }
                Err(_) => break,
            }
        }
    }

    /// Asks the primary where this log's last epoch ends in its log.
    fn sync(&mut self, now: Nanos, env: &mut dyn Env) {
        let Some(l) = self.leader else { return };
        if self
            .fl
            .sync_at
            .is_some_and(|a| now.saturating_sub(a) < 4 * self.cfg.retransmit_after)
        {
            return;
        }
        self.fl.sync_at = Some(now);
        let (term, last, end) = (self.term, self.ls.last_term() as u64, self.ls.next);
        self.send_peer(l, PeerKind::Sync, term, 0, (last, end), 0, env);
    }

    /// Removes the log's entries from `at` on, durably (an uncommitted
    /// tail: a conflict with the primary's log, or damage); false if the
    /// store failed (counted).
    pub(super) fn cut_log(&mut self, at: u64, env: &mut dyn Env) -> bool {
        if at >= self.ls.next {
            return true;
        }
        let removed = self.ls.next - at;
        if self.ls.truncate(&mut self.log, at).is_err() {
            self.c.store_errors.bump(1);
            return false;
        }
        self.c.truncated.bump(removed);
        self.truncated_to(at);
        self.commit = self.commit.min(at);
        env.event(NodeEvent::Truncated { from: at, removed });
        true
    }

    /// The primary's answer to a sync.
    pub(super) fn on_sync_reply(
        &mut self,
        now: Nanos,
        from: u8,
        p: &wire::Peer,
        env: &mut dyn Env,
    ) {
        if self.role != Role::Follower || self.leader != Some(from) || self.fl.synced {
            return;
        }
        let (epoch, end, leader_end) = (p.a as u32, p.b, p.c);
        let m = self.ls.matching_end(epoch, end);
        if !self.cut_log(m, env) {
            return;
        }
        if self.ls.next == 0 || self.ls.last_term() == epoch {
            self.fl.synced = true;
            self.fl.sync_end = leader_end;
            self.fl.known = self.fl.known.max(leader_end);
            self.drain_held(now, env);
            self.fl.ack_due = true;
            self.follower_end_batch(now, env);
            self.catch_up(env);
        } else {
            // Not there yet: ask again about the new last epoch.
            self.fl.sync_at = None;
            self.sync(now, env);
        }
    }

    /// After a receive batch: the acknowledgement, and a gap request.
    pub(super) fn follower_end_batch(&mut self, now: Nanos, env: &mut dyn Env) {
        let Some(l) = self.leader else { return };
        if !self.fl.synced {
            return;
        }
        if std::mem::take(&mut self.fl.ack_due) {
            let (term, end) = (self.term, self.acked_end());
            // The members first: theirs is the critical path now.
            self.follower_ack_members(end, env);
            self.send_peer(l, PeerKind::Ack, term, 0, (0, end), 0, env);
        }
        self.fill_gap(now, env);
    }

    fn fill_gap(&mut self, now: Nanos, env: &mut dyn Env) {
        let Some(l) = self.leader else { return };
        let have = self.ls.next;
        let gap_end = self
            .fl
            .held
            .first_key_value()
            .map_or(self.fl.known, |(s, _)| *s);
        let (chunk, base) = (self.cfg.replay_chunk, self.cfg.retransmit_after);
        if let Some((a, z)) = self
            .fl
            .fill
            .want(now, have, gap_end, chunk, base, &mut self.rng)
        {
            let id = u32::MAX - self.id() as u32;
            wire::replay(&mut self.scratch, id, self.ls.session, a, z);
            if let Some(to) = self.addr_of(l) {
                env.send(&[to], &self.scratch);
            }
        }
    }

    /// A follower's timed work: sync and gap requests again; returns the
    /// next deadline.
    pub(super) fn follower_tick(&mut self, now: Nanos, env: &mut dyn Env) -> Nanos {
        if self.leader.is_none() {
            return now + super::TICK_CAP;
        }
        if !self.fl.synced {
            self.sync(now, env);
            return now + 4 * self.cfg.retransmit_after;
        }
        self.fill_gap(now, env);
        if self.ls.next < self.fl.known || !self.fl.held.is_empty() {
            return self.fl.fill.due(self.cfg.retransmit_after).max(now + 1);
        }
        now + super::TICK_CAP
    }
}
