//! A member of the bus as a state machine: [`Tx`] (publishing, resends)
//! and [`Rx`] (ordering, commit, gap fill, reassembly, terms and forks),
//! created from the [`Welcome`] a [`Join`] waits for. The shell
//! (`seq::member`) keeps them under two locks so that any thread publishes
//! while one drives the receive side; the simulator drives both from one
//! thread. Both drive them the same way, through the same inputs:
//!
//! * a join: [`Join::tick`] and [`Join::on_datagram`] until a welcome,
//!   then [`from_welcome`];
//! * a receive batch: [`Rx::mark`], [`Rx::on_datagram`] for each datagram,
//!   [`Rx::finish`], which returns the [`Handover`] for the publishing
//!   side when anything changed for it (own commands heard or delivered, a
//!   new primary, its welcome, nacks, a full disk), applied with
//!   [`Handover::apply`];
//! * the "looked" signal ([`looked`]): when the receive side last looked
//!   for datagrams (the window holds publishes back only while it looks);
//! * timed work: [`Rx::tick`], then [`Tx::tick`];
//! * publishes ([`Tx::publish_many`]) and a close: [`Tx::shut`] (no more
//!   publishes; what is pending is still resent), then, once nothing is
//!   pending or the caller stops waiting, [`Tx::close`] (the goodbye;
//!   [`Tx::undelivered`] says what was not delivered).

mod acks;
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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
    /// The primary could not append this member's command `member_seq`:
    /// its disk is full (it steps down; the command is resent to the next
    /// primary). Publishes are refused with `NoSpace` until a primary
    /// takes this member's commands again.
    NoSpace { member_seq: u64 },
    /// A new primary, of `term`.
    Term { term: u32 },
    /// The entries from `from` up to `first` were gone when this member
    /// asked for them (retention removed them): it goes on from `first`.
    Trimmed { from: u64, first: u64 },
}

/// Where a member's messages go: `(seq, member_id, kind, data)`, `kind`
/// 0 or, for a message of a state machine's snapshot (delivered only to
/// members that ask), its SNAP flags (`SNAP`, `SNAP | SNAP_END`).
pub type Deliver<'a> = dyn FnMut(u64, u32, u8, &[u8]) + 'a;

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
    let mut cfg = std::borrow::Cow::Borrowed(cfg);
    let mut w = std::borrow::Cow::Borrowed(w);
    if cfg.from_snapshot {
        // The snapshot's position (its messages come after it), read from
        // where the messages it does not hold begin; or the log's
        // beginning (the hello asked about it).
        let c = cfg.to_mut();
        c.from = Some(1);
        let (from, epoch, as_of) = w.snap;
        if from > 0 {
            // Its snapshot's messages only (none: the whole log, no
            // snapshot needed).
            c.snapshots = true;
            c.from = Some(from);
            c.deliver_from = Some(as_of);
            w.to_mut().epoch = epoch;
        }
    }
    if let Some(f) = cfg.from {
        if f.max(1) < w.first {
            return Err(SeqError::Trimmed(w.first));
        }
    }
    let frag = fragment_size(&cfg)?;
    let tx = Tx::new(&cfg, frag, &w);
    let rx = Rx::new(&cfg, &w, unicast, now);
    Ok((tx, rx))
}

/// The "looked" signal: the receive side looks for datagrams at `now` (a
/// poll or a tick). The shell sets it at every poll without the `tx` lock.
pub fn looked(tx: &TxCounters, now: Nanos) {
    tx.looked.set(now);
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
    /// A primary could not append this command: its disk is full.
    pub full: Option<u64>,
}

/// What the receive side had heard of the member's own commands before a
/// poll ([`Rx::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    own: u64,
    heard: u64,
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
            full: rx.take_full(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.switch_to.is_none()
            && self.welcome.is_none()
            && self.nacks.is_empty()
            && self.full.is_none()
    }

    /// Applied to `tx`; returns events for the owner. Heard before
    /// delivered: the commands delivered in this poll were heard in it,
    /// and give their round-trip samples first.
    pub fn apply(self, tx: &mut Tx, now: Nanos, sink: &mut dyn Sink) -> Option<MemberEvent> {
        if self.taken {
            tx.set_taken();
        }
        if self.full.is_some() {
            tx.set_full();
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
