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
        let fanout = self.cfg.ack_fanout;
        let reach = match self.cfg.bus {
            BusMode::Multicast { .. } => fanout > 0,
            BusMode::Unicast => fanout > 0 && self.unicast_members <= fanout,
        };
        reach && !self.cfg.durability.on_disk() && self.membership().n_voters() > 2
    }

    /// This node's acknowledgement of its log up to `end`, to the members
    /// (a group of two voters or fewer: none, members do not count them).
    pub(super) fn ack_members(&mut self, end: u64, env: &mut dyn Env) {
        if self.ack_to.is_empty() || self.membership().n_voters() <= 2 {
            return;
        }
        let to = std::mem::take(&mut self.ack_to);
        let term = self.term;
        self.send_peer_to(&to, PeerKind::Ack, term, 0, (0, end), 0, env);
        self.ack_to = to;
    }
}
