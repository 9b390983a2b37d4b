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
