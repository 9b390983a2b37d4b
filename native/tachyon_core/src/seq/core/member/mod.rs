//! A member of the bus as a state machine: [`Tx`] (publishing, resends)
//! and [`Rx`] (ordering, gap fill, reassembly, epochs), created from the
//! [`Welcome`] a [`Join`] waits for. The shell (`seq::member`) keeps them
//! under two locks so that any thread publishes while one drives the
//! receive side; the simulator drives both from one thread.

pub mod config;
pub mod join;
pub mod rx;
pub mod tx;

pub use config::{MemberConfig, MemberStats, PublishError, RxCounters, TxCounters};
pub use join::{Join, Welcome};
pub use rx::Rx;
pub use tx::Tx;

use crate::seq::wire::{self, Msg};
use crate::seq::SeqError;

/// Where the receive side hands what is now in order.
pub enum Deliver<'a> {
    /// Whole messages (fragments reassembled, control entries skipped):
    /// `(seq, member_id, data)`.
    Messages(&'a mut dyn FnMut(u64, u32, &[u8])),
    /// Every log entry as it is, control entries and fragments too (a
    /// standby copying the log).
    Entries(&'a mut dyn FnMut(u64, &Msg<'_>)),
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

/// Both halves of a member, welcomed.
pub fn from_welcome(
    cfg: &MemberConfig,
    w: &Welcome,
    unicast: bool,
    now: super::Nanos,
) -> Result<(Tx, Rx), SeqError> {
    let frag = fragment_size(cfg)?;
    let tx = Tx::new(cfg, frag, w.session, w.from, w.last);
    let rx = Rx::new(
        cfg, w.session, w.epoch, w.from, w.next, w.last, unicast, now,
    );
    Ok((tx, rx))
}
