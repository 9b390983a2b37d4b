//! A member of the bus as a state machine: [`Tx`] (publishing, resends)
//! and [`Rx`] (ordering, commit, gap fill, reassembly, terms and forks),
//! created from the [`Welcome`] a [`Join`] waits for. The shell
//! (`seq::member`) keeps them under two locks so that any thread publishes
//! while one drives the receive side; the simulator drives both from one
//! thread. [`Member`] is the glue both use between the two halves.

pub mod cc;
pub mod config;
pub mod fork;
pub mod join;
pub mod rx;
pub mod tx;

pub use config::{MemberConfig, MemberStats, PublishError, RxCounters, TxCounters};
pub use join::{Join, Welcome};
pub use rx::Rx;
pub use tx::Tx;

use crate::seq::core::{Nanos, Sink};
use crate::seq::wire;
use crate::seq::SeqError;

/// What a member reports to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberEvent {
    /// A primary of `term` whose log does not hold what this member
    /// delivered from `resume` up to `next` (the last of it in `epoch`):
    /// that is not the bus's order any more, and the member delivers the
    /// primary's order from `resume` on.
    Fork {
        next: u64,
        epoch: u32,
        term: u32,
        resume: u64,
    },
    /// A new primary lacked `lost` of this member's commands it had seen
    /// delivered; the pending ones skip those numbers.
    Renumbered { lost: u64 },
    /// The member id is bound to another member: publishes are refused.
    Taken,
    /// A new primary, of `term`.
    Term { term: u32 },
}

/// The largest fragment of a member with these options.
pub fn fragment_size(cfg: &MemberConfig) -> Result<usize, SeqError> {
    let frag = cfg
        .max_datagram
        .checked_sub(wire::BUS_HEADER + wire::MSG_HEADER)
        .filter(|f| *f > 0 && cfg.max_datagram <= crate::udp::MAX_UDP_PAYLOAD)
        .ok_or(SeqError::BadConfig)?
        .min(u16::MAX as usize);
    if cfg.member_id == 0 || cfg.batch == 0 || cfg.replay_chunk == 0 || cfg.max_pending == 0 {
        return Err(SeqError::BadConfig);
    }
    Ok(frag)
}

/// Both halves of a member, welcomed (`Err(Taken)` if the member id is
/// another member's).
pub fn from_welcome(
    cfg: &MemberConfig,
    w: &Welcome,
    unicast: bool,
    now: Nanos,
) -> Result<(Tx, Rx), SeqError> {
    if w.taken {
        return Err(SeqError::Taken);
    }
    let frag = fragment_size(cfg)?;
    let tx = Tx::new(cfg, frag, w);
    let rx = Rx::new(cfg, w, unicast, now);
    Ok((tx, rx))
}

/// What passes from the receive side to the publishing side after a poll
/// (the shell takes the two locks in turn; the simulator holds both).
pub struct Handover {
    pub own: u64,
    pub heard: u64,
    pub taken: bool,
    pub switch_to: Option<std::net::SocketAddr>,
    pub welcome: Option<Welcome>,
    pub nacks: Vec<u64>,
}

impl Handover {
    /// Collected from `rx` after a poll.
    pub fn take(rx: &mut Rx, switch_to: Option<std::net::SocketAddr>) -> Handover {
        Handover {
            own: rx.own_seen(),
            heard: rx.own_heard(),
            taken: rx.is_taken(),
            switch_to,
            welcome: rx.take_welcome(),
            nacks: rx.take_nacks().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.switch_to.is_none() && self.welcome.is_none() && self.nacks.is_empty()
    }

    /// Applied to `tx`; returns events for the owner. Heard before
    /// delivered: the commands delivered in this poll were heard in it,
    /// and give their round-trip samples first.
    pub fn apply(self, tx: &mut Tx, now: Nanos, sink: &mut dyn Sink) -> Option<MemberEvent> {
        if self.taken {
            tx.set_taken();
        }
        if let Some(to) = self.switch_to {
            tx.retarget(to);
        } else {
            tx.heard(now, self.heard, sink);
        }
        tx.ack(self.own);
        let mut ev = None;
        if let Some(w) = self.welcome {
            let lost = tx.reconcile(now, &w, w.delivered, sink);
            if lost > 0 {
                ev = Some(MemberEvent::Renumbered { lost });
            }
        }
        for n in self.nacks {
            tx.on_nack(now, n, sink);
        }
        ev
    }
}
