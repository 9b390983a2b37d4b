//! Membership changes (Raft thesis, chapter 4): one node at a time, the
//! new membership a log entry (CONTROL|CONFIG) that every node uses as
//! soon as it holds it.
//!
//! * Adding a node: it is started with the address of a node or two of
//!   the group (`NodeConfig::join`) and asks to join (PEER JOIN, every
//!   `JOIN_EVERY`); a follower passes the request to its primary
//!   (JOIN_VIA, with the joining node's address); the primary appends a membership with the node as a
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
        let old = self.membership().clone();
        self.emit(0, 0, CONTROL | CONFIG, &data, env)
            .map_err(|_| ChangeError::Log)?;
        // An id removed, or reused for another address (the lowest free
        // id is given): what its earlier holder acknowledged must not make
        // the new node a voter, nor count in a majority.
        for id in 0..super::MAX_NODES as u8 {
            if old.addr(id) != m.addr(id) {
                self.ld.forget(id);
            }
        }
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
    /// id again) and answers; a follower passes the request to the primary
    /// it follows (JOIN_VIA: the joining node may know only this node's
    /// address), which answers the joining node itself.
    pub(super) fn on_join(&mut self, now: Nanos, from: SocketAddr, env: &mut dyn Env) {
        if self.role != Role::Leader {
            let me = self.id();
            if let Some(l) = self.leader.filter(|l| *l != me) {
                let (a, b, c) = wire::addr_body(from);
                let term = self.term;
                self.send_peer(l, PeerKind::JoinVia, term, 0, (a, b), c, env);
            }
            return;
        }
        if let Ok(id) = self.add_node(now, from, env) {
            let term = self.term;
            self.send_peer_to(
                &[from],
                PeerKind::JoinReply,
                term,
                0,
                (id as u64, 0),
                0,
                env,
            );
        }
    }

    /// A node passed on a JOIN (checked no more than a JOIN: the joiner may
    /// have asked a node removed since): only a primary takes it, and never
    /// passes it again.
    pub(super) fn on_join_via(&mut self, now: Nanos, p: &wire::Peer, env: &mut dyn Env) {
        match wire::body_addr(p.a, p.b, p.c) {
            Some(joiner) if self.role == Role::Leader => self.on_join(now, joiner, env),
            Some(_) => {}
            None => self.c.malformed.bump(1),
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
                self.send_peer_to(&[a], PeerKind::Join, term, 0, (0, 0), 0, env);
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::super::testnet::{addr, Net, Out};
    use super::super::ChangeError;

    #[test]
    fn a_node_that_asks_a_follower_joins_through_the_primary_and_becomes_a_voter() {
        let mut net = Net::new(3, &[1]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()
            && n.nodes[1].leader() == Some(0)));
        // Only node 1, a follower, hears the JOIN: it passes it on.
        assert!(net.run_until(2_000, |n| n.nodes[0].membership().get(3).is_some()));
        assert!(!net.nodes[1].is_leader());
        assert_eq!(net.nodes[0].membership().addr(3), Some(addr(3)));
        assert!(
            net.run_until(3_000, |n| n.nodes[0].membership().is_voter(3)
                && n.nodes[3].id() == 3),
            "the new node catches up and is made a voter"
        );
        let end = net.nodes[0].next_seq();
        assert!(net.run_until(1_000, |n| n.nodes[3].next_seq() >= end));
        assert_eq!(net.nodes[3].membership(), net.nodes[0].membership());
    }

    #[test]
    fn changes_are_refused_off_the_primary_and_one_at_a_time() {
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader() && n.nodes[0].commit() > 1));
        let now = net.now;
        let mut out = Out::default();
        assert_eq!(
            net.nodes[1].add_node(now, addr(9), &mut out),
            Err(ChangeError::NotPrimary)
        );
        assert_eq!(net.nodes[0].add_node(now, addr(9), &mut out), Ok(3));
        assert_eq!(
            net.nodes[0].remove_node(now, 2, &mut out),
            Err(ChangeError::Pending),
            "the first change is not committed yet"
        );
        // The same address again is its id, not a second change.
        assert_eq!(net.nodes[0].add_node(now, addr(9), &mut out), Ok(3));
        net.take(0, out);
        let at = net.nodes[0].membership_index().unwrap();
        assert!(net.run_until(500, |n| n.nodes[0].commit() > at));
        let mut out = Out::default();
        assert_eq!(
            net.nodes[0].remove_node(net.now, 7, &mut out),
            Err(ChangeError::NotFound)
        );
        assert_eq!(net.nodes[0].remove_node(net.now, 3, &mut out), Ok(()));
    }

    #[test]
    fn a_reused_id_starts_with_nothing_acknowledged() {
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader() && n.nodes[0].commit() > 1));
        assert!(net.nodes[0].ld.matched[2] > 0, "node 2 acknowledged");
        let mut out = Out::default();
        assert_eq!(net.nodes[0].remove_node(net.now, 2, &mut out), Ok(()));
        net.take(0, out);
        let at = net.nodes[0].membership_index().unwrap();
        assert!(net.run_until(500, |n| n.nodes[0].commit() > at));
        // The lowest free id, 2, goes to a node at another address, which
        // never answers: the removed node's acknowledgements must not make
        // it a voter (it would count in majorities with an empty log).
        let mut out = Out::default();
        assert_eq!(net.nodes[0].add_node(net.now, addr(9), &mut out), Ok(2));
        net.take(0, out);
        assert_eq!(
            (net.nodes[0].ld.matched[2], net.nodes[0].ld.ident[2]),
            (0, None)
        );
        net.run_until(200, |_| false);
        assert!(!net.nodes[0].membership().is_voter(2));
    }

    #[test]
    fn a_members_hello_to_a_follower_is_welcomed_by_the_primary() {
        use crate::seq::wire::{self, Bus, BusKind, HelloBody};
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()
            && n.nodes[1].leader() == Some(0)
            && n.nodes[0].commit() > n.nodes[0].ld.term_start));
        // A member that knows only node 1 (the primary was added while it
        // was cut off) says hello to it: node 1 passes it on, and the
        // primary welcomes the member at its own address.
        let member = SocketAddr::from(([10, 0, 0, 9], 9000));
        let h = HelloBody {
            flags: wire::UNICAST,
            incarnation: 5,
            epoch: u32::MAX,
            next: 0,
        };
        let mut d = Vec::new();
        wire::hello(&mut d, 7, net.nodes[0].ls.session, &h);
        net.wire.push((member, addr(1), d));
        let welcomed = |n: &Net| {
            n.wire.iter().any(|(from, to, d)| {
                *from == addr(0)
                    && *to == member
                    && Bus::parse(d).is_ok_and(|b| b.kind == BusKind::Welcome)
            })
        };
        assert!(
            net.run_until(5, welcomed),
            "the primary welcomes the member"
        );
        assert!(net.nodes[0].bindings.contains_key(&7));
        // The same member again through node 1, now bound at the primary
        // with that address and incarnation: a late copy, not passed to its
        // hello handling (it would reset the member's held commands).
        let mut d = Vec::new();
        wire::hello(&mut d, 7, net.nodes[0].ls.session, &h);
        net.wire.retain(|w| w.1 != member);
        net.wire.push((member, addr(1), d));
        assert!(!net.run_until(5, welcomed), "no second welcome");
        // A keepalive is not passed on: it renews the follower's record only.
        let keepalive = HelloBody {
            flags: wire::UNICAST | wire::KEEPALIVE,
            ..h
        };
        let mut d = Vec::new();
        wire::hello(&mut d, 8, net.nodes[0].ls.session, &keepalive);
        net.wire.push((member, addr(1), d));
        net.step();
        net.step();
        assert!(!net.nodes[0].bindings.contains_key(&8));
    }

    #[test]
    fn a_joining_member_is_welcomed_once_the_primarys_term_committed() {
        use crate::seq::wire::{self, Bus, BusKind, HelloBody};
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()));
        let joining = HelloBody {
            flags: wire::UNICAST,
            incarnation: 5,
            epoch: u32::MAX,
            next: 0,
        };
        let member = SocketAddr::from(([10, 0, 0, 9], 9000));
        let mut d = Vec::new();
        wire::hello(&mut d, 7, net.nodes[0].ls.session, &joining);
        let welcomes = |out: &Out| {
            out.sent
                .iter()
                .filter(|(to, d)| {
                    *to == member && Bus::parse(d).is_ok_and(|b| b.kind == BusKind::Welcome)
                })
                .count()
        };
        // Elected, its term's first entry not committed yet: its commit
        // index may be far behind (a restarted node's is its log's start).
        assert!(net.nodes[0].commit() <= net.nodes[0].ld.term_start);
        let mut out = Out::default();
        net.nodes[0].on_datagram(net.now, member, &d, &mut out);
        assert_eq!(welcomes(&out), 0, "no welcome before the term commits");
        assert!(net.run_until(100, |n| n.nodes[0].commit() > n.nodes[0].ld.term_start));
        let mut out = Out::default();
        net.nodes[0].on_datagram(net.now, member, &d, &mut out);
        assert_eq!(welcomes(&out), 1);
    }
}
