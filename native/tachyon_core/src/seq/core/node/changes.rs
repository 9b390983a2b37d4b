//! Membership changes (Raft thesis, chapter 4): one node at a time, the
//! new membership a log entry (CONTROL|CONFIG) that every node uses as
//! soon as it holds it.
//!
//! * Adding a node: it is started with the address of a node or two of
//!   the group (`NodeConfig::join`) and asks to join (PEER JOIN, every
//!   `JOIN_EVERY`); the primary appends a membership with the node as a
//!   non-voter and answers with its id (JOIN_REPLY). The node copies the
//!   log (it is a bus target now) and acknowledges like a follower, but
//!   no quorum counts it; once it holds the primary's commit position the
//!   primary makes it a voter (thesis §4.2.1: a new node catches up before
//!   it can slow commits down or be part of a majority).
//!   [`Node::add_node`] does the primary's half for an address given by an
//!   operator.
//! * Removing a node ([`Node::remove_node`]): the primary appends the
//!   membership without it; a primary that removed itself goes on until
//!   that change is committed (counting majorities of the new membership,
//!   which it is not part of), then ends its term (thesis §4.2.2). A
//!   removed node grants no vote and does not campaign.
//! * One at a time: a change is appended only when the last one is
//!   committed and the primary's own term has committed an entry (the
//!   thesis's fix for single-server changes across terms). Any majority of
//!   the old membership and any majority of the new one then share a voter.

use std::net::SocketAddr;

use super::membership::{ChangeError, Membership};
use super::{Node, Role};
use crate::seq::core::{Env, Log, Nanos, MILLI};
use crate::seq::wire::{self, PeerKind, CONFIG, CONTROL};

/// A node that is not a member asks to join this often.
const JOIN_EVERY: Nanos = 50 * MILLI;

impl<L: Log> Node<L> {
    /// Whether the primary may append a membership change now.
    fn may_change(&self) -> Result<(), ChangeError> {
        if self.role != Role::Leader {
            return Err(ChangeError::NotPrimary);
        }
        let last = self.ls.config().map(|c| c.0);
        if self.commit <= self.ld.term_start || last.is_some_and(|i| i >= self.commit) {
            return Err(ChangeError::Pending);
        }
        Ok(())
    }

    /// Appends `m` as the group's membership (the primary).
    fn change(&mut self, now: Nanos, m: &Membership, env: &mut dyn Env) -> Result<(), ChangeError> {
        let mut data = Vec::with_capacity(64);
        m.encode(&mut data);
        self.emit(0, 0, CONTROL | CONFIG, &data, env)
            .map_err(|_| ChangeError::Log)?;
        self.c.changes.bump(1);
        self.leader_flush(now, env);
        self.follow_membership(now, env);
        Ok(())
    }

    /// Adds a node at `addr` to the group, as a non-voter until it has
    /// caught up (the primary only); returns its id.
    pub fn add_node(
        &mut self,
        now: Nanos,
        addr: SocketAddr,
        env: &mut dyn Env,
    ) -> Result<u8, ChangeError> {
        if let Some(id) = self.membership().id_of(addr) {
            return Ok(id);
        }
        self.may_change()?;
        let (id, m) = self.membership().with_added(addr)?;
        self.change(now, &m, env)?;
        Ok(id)
    }

    /// Removes node `id` from the group (the primary only).
    pub fn remove_node(
        &mut self,
        now: Nanos,
        id: u8,
        env: &mut dyn Env,
    ) -> Result<(), ChangeError> {
        self.may_change()?;
        let m = self.membership().without(id)?;
        self.change(now, &m, env)
    }

    /// A node asks to join from `from`: the primary adds it (or says its
    /// id again) and answers.
    pub(super) fn on_join(&mut self, now: Nanos, from: SocketAddr, env: &mut dyn Env) {
        if self.role != Role::Leader {
            return;
        }
        if let Ok(id) = self.add_node(now, from, env) {
            let term = self.term;
            self.send_peer_to(from, PeerKind::JoinReply, term, 0, (id as u64, 0), 0, env);
        }
    }

    /// The primary added this node: its id, and who the primary is.
    pub(super) fn on_join_reply(&mut self, from: SocketAddr, p: &wire::Peer) {
        if self.membership().id_of(self.cfg.addr).is_some() || p.a >= super::MAX_NODES as u64 {
            return;
        }
        self.joined = Some((p.a as u8, p.h.node, from));
    }

    /// A node that is no member (joining, or removed) and no voter: asks
    /// to join while not a member, never campaigns. Returns its next
    /// deadline.
    pub(super) fn joining_tick(&mut self, now: Nanos, env: &mut dyn Env) -> Nanos {
        self.silent = 0;
        let member = self.membership().id_of(self.cfg.addr).is_some();
        if !member
            && !self.cfg.join.is_empty()
            && self
                .join_at
                .is_none_or(|a| now.saturating_sub(a) >= JOIN_EVERY)
        {
            self.join_at = Some(now);
            let term = self.term;
            for a in self.cfg.join.clone() {
                self.send_peer_to(a, PeerKind::Join, term, 0, (0, 0), 0, env);
            }
        }
        if self.leader.is_some() {
            let d = self.follower_tick(now, env);
            return d.min(now + JOIN_EVERY);
        }
        now + JOIN_EVERY.min(super::TICK_CAP)
    }

    /// After the log changed: the bus follows the membership in it; a
    /// primary makes caught-up non-voters voters, and one that is no voter
    /// any more ends its term once that is committed.
    pub(super) fn follow_membership(&mut self, now: Nanos, env: &mut dyn Env) {
        let at = self.ls.config().map(|c| c.0);
        if at != self.memb_at {
            self.memb_at = at;
            self.retarget();
        }
        if self.role != Role::Leader || self.may_change().is_err() {
            return;
        }
        if !self.voter() {
            // Removed (the change is committed): thesis §4.2.2.
            self.stop(now, env);
            return;
        }
        let caught_up = self
            .membership()
            .nodes()
            .iter()
            .find(|n| !n.voter && self.ld.matched[n.id as usize] >= self.commit)
            .map(|n| n.id);
        if let Some(id) = caught_up {
            if let Ok(m) = self.membership().with_voter(id) {
                let _ = self.change(now, &m, env);
            }
        }
    }
}
