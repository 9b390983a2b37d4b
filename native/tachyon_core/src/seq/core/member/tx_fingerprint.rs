//! The publishing side's deep copy and fingerprint, for a model checker
//! (`native/tachyon_mc`; what is hashed and what is left out:
//! [`crate::seq::core::fingerprint`]).

use super::*;

/// A deep copy, counters included (its window reads `looked` back): a
/// model checker's states share nothing that changes.
impl Clone for Tx {
    fn clone(&self) -> Tx {
        // Every field by name: a field added must be cloned here too.
        let Tx {
            member_id,
            session,
            incarnation,
            frag,
            max_datagram,
            max_message_size,
            max_pending,
            target,
            next_member_seq,
            pending,
            sent_n,
            heard_n,
            pool,
            closed,
            shut,
            taken,
            full,
            held,
            skip,
            heard,
            rtt,
            win,
            probed,
            read_only,
            c,
        } = self;
        Tx {
            member_id: *member_id,
            session: *session,
            incarnation: *incarnation,
            frag: *frag,
            max_datagram: *max_datagram,
            max_message_size: *max_message_size,
            max_pending: *max_pending,
            target: *target,
            next_member_seq: *next_member_seq,
            pending: pending.clone(),
            sent_n: *sent_n,
            heard_n: *heard_n,
            pool: pool.clone(),
            closed: *closed,
            shut: *shut,
            taken: *taken,
            full: *full,
            held: *held,
            skip: *skip,
            heard: *heard,
            rtt: rtt.clone(),
            win: win.clone(),
            probed: *probed,
            read_only: *read_only,
            c: Arc::new(CachePadded::clone(c)),
        }
    }
}

impl Tx {
    /// Hashes everything that decides what the publishing side does next,
    /// the `looked` signal included; not the other counters nor the buffer
    /// pool (see [`crate::seq::core::fingerprint`]).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        let Tx {
            member_id,
            session,
            incarnation,
            frag,
            max_datagram,
            max_message_size,
            max_pending,
            target,
            next_member_seq,
            pending,
            sent_n,
            heard_n,
            pool: _,
            closed,
            shut,
            taken,
            full,
            held,
            skip,
            heard,
            rtt,
            win,
            probed,
            read_only,
            c,
        } = self;
        (member_id, session, incarnation, frag, max_datagram).hash(h);
        (max_message_size, max_pending, target, next_member_seq).hash(h);
        (pending, sent_n, heard_n, closed, shut, taken, full, held).hash(h);
        (skip, heard, rtt, win, probed, read_only).hash(h);
        c.looked.get().hash(h);
    }
}
