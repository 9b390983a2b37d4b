//! Commit in three hops, a node's side (docs/ARCHITECTURE.md, "Commit
//! before delivery"): a follower sends its acknowledgement to the members
//! as well as to its primary, so that a member may deliver once it has
//! heard a majority's (`core/member/acks.rs`) instead of waiting for the
//! primary's next datagram to carry the commit position. The primary says
//! on its data datagrams and heartbeats that it holds what it sent
//! ([`wire::HOLDS`], durability `:replicated`); with `:fsync` it sends its
//! own acknowledgement of what it synced to the members instead.
//!
//! On a multicast bus that is one datagram to the group per follower and
//! receive batch; on a unicast bus one per unicast member, so only while
//! they are at most [`NodeConfig::ack_fanout`](super::NodeConfig) (beyond,
//! the members wait for the primary's commit position, as in a group of
//! two, where a member counts no acknowledgements).

use super::Node;
use crate::seq::core::{Env, Log};
use crate::seq::wire::{self, PeerKind};
use crate::seq::BusMode;

impl<L: Log> Node<L> {
    /// The bus flags of a primary's data datagram or heartbeat.
    pub(super) fn holds_flag(&self) -> u8 {
        if self.cfg.durability.on_disk() {
            0
        } else {
            wire::HOLDS
        }
    }

    /// Where acknowledgements go besides the primary: after `retarget`.
    pub(super) fn retarget_acks(&mut self) {
        self.ack_to.clear();
        let fanout = self.cfg.ack_fanout;
        if fanout == 0 {
            return;
        }
        match self.cfg.bus {
            BusMode::Multicast { group, .. } => self.ack_to.push(group),
            BusMode::Unicast if self.unicast_members <= fanout => {
                // The unicast members are the targets after the nodes.
                let n = self.targets.len() - self.unicast_members;
                self.ack_to.extend_from_slice(&self.targets[n..]);
            }
            BusMode::Unicast => {}
        }
    }

    /// A follower's acknowledgement to the members, one ahead of the
    /// primary's commit position at a time (as Nagle's algorithm keeps one
    /// small segment unacknowledged): until the commit the primary
    /// announces reaches the end this follower last sent them, the members
    /// learn what it would say from that commit (the primary announces one
    /// as soon as acknowledgements move it, `leader_end_batch`), and it
    /// sends them nothing. One message at a time, every acknowledgement
    /// goes; under a stream, about one per round trip to the primary, not
    /// one per receive batch (which halved a group's throughput). Nothing
    /// new: nothing sent.
    pub(super) fn follower_ack_members(&mut self, end: u64, env: &mut dyn Env) {
        let last = self.fl.members_acked;
        if end <= last || self.fl.commit_heard() < last {
            return;
        }
        self.fl.members_acked = end;
        self.ack_members(end, env);
    }

    /// Whether the members commit in three hops from the followers'
    /// acknowledgements and the primary's HOLDS (`:replicated`, more than
    /// two voters, the members within `ack_fanout`): then the primary
    /// sends no heartbeat when acknowledgements move its commit position.
    /// Its first heartbeat after data (`heartbeat_after`, 10 us) still
    /// carries it to the members, should a follower's acknowledgement to
    /// them be lost; what it saved was a datagram per message to every
    /// member, which on two cores is a member's wake-up.
    pub(super) fn members_count_acks(&self) -> bool {
        self.acks_reach_members() && !self.cfg.durability.on_disk()
    }

    /// Whether this node's acknowledgements go to the members and count
    /// there (`retarget_acks` chose where; a group of two voters or fewer:
    /// members count none). Every node computes `ack_to` the same way, the
    /// primary included.
    fn acks_reach_members(&self) -> bool {
        !self.ack_to.is_empty() && self.membership().n_voters() > 2
    }

    /// This node's acknowledgement of its log up to `end`, to the members
    /// (a group of two voters or fewer: none, members do not count them).
    pub(super) fn ack_members(&mut self, end: u64, env: &mut dyn Env) {
        if !self.acks_reach_members() {
            return;
        }
        let to = std::mem::take(&mut self.ack_to);
        let term = self.term;
        self.send_peer_to(&to, PeerKind::Ack, term, 0, (0, end), 0, env);
        self.ack_to = to;
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::super::testnet::{addr, Net, Out};
    use crate::seq::wire::{self, Bus, BusKind, HelloBody, Peer, PeerKind};

    const MEMBER: u32 = 7;

    fn member() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 9], 9000))
    }

    /// A group of three, its term committed, and a unicast member bound at
    /// the primary and known to every node (its hello to each).
    fn group_with_member() -> Net {
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()
            && (1..3).all(|i| n.nodes[i].leader() == Some(0))
            && n.nodes[0].commit() > n.nodes[0].ld.term_start));
        let h = HelloBody {
            flags: wire::UNICAST,
            incarnation: 5,
            epoch: u32::MAX,
            next: 0,
        };
        for i in 0..3 {
            let mut d = Vec::new();
            wire::hello(&mut d, MEMBER, net.nodes[0].ls.session, &h);
            net.wire.push((member(), addr(i), d));
        }
        assert!(
            net.run_until(10, |n| n.nodes[0].bindings.contains_key(&MEMBER)
                && (1..3).all(|i| !n.nodes[i].ack_to.is_empty()))
        );
        net.run_until(20, |_| false);
        net
    }

    /// The heartbeats in flight from the primary: to the member, to followers.
    fn heartbeats(net: &Net) -> (usize, usize) {
        let beats = net.wire.iter().filter(|(from, _, d)| {
            *from == addr(0) && Bus::parse(d).is_ok_and(|b| b.kind == BusKind::Heartbeat)
        });
        beats.fold((0, 0), |(m, f), (_, to, _)| {
            if *to == member() {
                (m + 1, f)
            } else {
                (m, f + 1)
            }
        })
    }

    #[test]
    fn heartbeats_after_data_skip_followers_that_acknowledged_and_a_counted_commit_sends_none() {
        let mut net = group_with_member();
        assert!(net.nodes[0].members_count_acks());
        // A command from the member: the primary sequences it (step 1),
        // the followers acknowledge it (step 2), the acknowledgements move
        // the primary's commit index (step 3).
        let mut d = Vec::new();
        let session = net.nodes[0].ls.session;
        wire::cmd_header(&mut d, wire::CmdKind::Publish, MEMBER, session, 5);
        wire::write_cmd_msg(&mut d, 1, 0, b"x");
        wire::set_cmd_count(&mut d, 1);
        net.wire.push((member(), addr(0), d));
        let end = net.nodes[0].next_seq() + 1;
        net.step();
        assert_eq!(net.nodes[0].next_seq(), end);
        net.step();
        net.step();
        assert_eq!(
            net.nodes[0].commit(),
            end,
            "committed by the acknowledgements"
        );
        assert!((1..3).all(|i| net.nodes[0].ld.matched[i] == end));
        // The heartbeat that went at that step (100 us after the first):
        // to the member, to no follower (both hold the end), and none for
        // the commit itself (the member counts the acknowledgements).
        assert_eq!(heartbeats(&net), (1, 0));
        let acks_to_member = net.wire.iter().filter(|(from, to, d)| {
            *to == member()
                && *from != addr(0)
                && Peer::parse(d).is_ok_and(|p| p.h.kind == PeerKind::Ack)
        });
        assert_eq!(acks_to_member.count(), 0, "sent a step earlier");
        // A tenth of the heartbeat interval after data, every node hears
        // them again (they keep the term).
        assert!(net.run_until(50, |n| heartbeats(n).1 == 2));
    }

    #[test]
    fn a_follower_acknowledges_to_the_members_one_ahead_of_the_commit() {
        let mut net = group_with_member();
        let acks = |out: &Out| {
            out.sent
                .iter()
                .filter(|(to, d)| {
                    *to == member() && Peer::parse(d).is_ok_and(|p| p.h.kind == PeerKind::Ack)
                })
                .count()
        };
        let f = &mut net.nodes[1];
        let base = f.fl.members_acked;
        f.fl.commit_heard = base;
        let mut out = Out::default();
        f.follower_ack_members(base + 5, &mut out);
        assert_eq!(acks(&out), 1, "the commit reached what it sent last");
        f.follower_ack_members(base + 9, &mut out);
        assert_eq!(acks(&out), 1, "one ahead of the commit at a time");
        f.fl.commit_heard = base + 5;
        f.follower_ack_members(base + 5, &mut out);
        assert_eq!(acks(&out), 1, "nothing new");
        f.follower_ack_members(base + 9, &mut out);
        assert_eq!(acks(&out), 2);
    }
}
