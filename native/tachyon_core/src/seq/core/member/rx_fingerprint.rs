//! The receive side's deep copy and fingerprint, for a model checker
//! (`native/tachyon_mc`; what is hashed and what is left out:
//! [`crate::seq::core::fingerprint`]).

use super::*;

/// A deep copy, counters included (the stream counts into the same ones
/// as the copy): a model checker's states share nothing that changes.
impl Clone for Rx {
    fn clone(&self) -> Rx {
        // Every field by name: a field added must be cloned here too.
        let Rx {
            session,
            unicast,
            incarnation,
            group,
            max_buffer,
            replay_chunk,
            retransmit_after,
            hello_after,
            keepalive,
            loss,
            term,
            leader,
            welcomed,
            st,
            commit,
            acks,
            known,
            ring,
            ooo,
            fill,
            rng,
            scratch,
            heard_at,
            hello_at,
            hello_all_at,
            hello_backoff,
            hello_now,
            asked_epoch,
            reasked,
            keepalive_at,
            switch_to,
            welcome,
            own_at_term,
            heard,
            nacks,
            full,
            taken,
            fork,
            events,
            c,
        } = self;
        let c = Arc::new(CachePadded::clone(c));
        Rx {
            session: *session,
            unicast: *unicast,
            incarnation: *incarnation,
            group: group.clone(),
            max_buffer: *max_buffer,
            replay_chunk: *replay_chunk,
            retransmit_after: *retransmit_after,
            hello_after: *hello_after,
            keepalive: *keepalive,
            loss: *loss,
            term: *term,
            leader: *leader,
            welcomed: *welcomed,
            st: Stream {
                c: c.clone(),
                ..st.clone()
            },
            commit: *commit,
            acks: acks.clone(),
            known: *known,
            ring: ring.clone(),
            ooo: ooo.clone(),
            fill: fill.clone(),
            rng: rng.clone(),
            scratch: scratch.clone(),
            heard_at: *heard_at,
            hello_at: *hello_at,
            hello_all_at: *hello_all_at,
            hello_backoff: *hello_backoff,
            hello_now: *hello_now,
            asked_epoch: *asked_epoch,
            reasked: *reasked,
            keepalive_at: *keepalive_at,
            switch_to: *switch_to,
            welcome: welcome.clone(),
            own_at_term: *own_at_term,
            heard: *heard,
            nacks: nacks.clone(),
            full: *full,
            taken: *taken,
            fork: *fork,
            events: events.clone(),
            c,
        }
    }
}

impl Rx {
    /// Hashes everything that decides what the receive side does next; not
    /// its counters nor its scratch buffer, and the ring by the entries it
    /// holds (see [`crate::seq::core::fingerprint`]).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        let Rx {
            session,
            unicast,
            incarnation,
            group,
            max_buffer,
            replay_chunk,
            retransmit_after,
            hello_after,
            keepalive,
            loss,
            term,
            leader,
            welcomed,
            st,
            commit,
            acks,
            known,
            ring,
            ooo,
            fill,
            rng,
            scratch: _,
            heard_at,
            hello_at,
            hello_all_at,
            hello_backoff,
            hello_now,
            asked_epoch,
            reasked,
            keepalive_at,
            switch_to,
            welcome,
            own_at_term,
            heard,
            nacks,
            full,
            taken,
            fork,
            events,
            c: _,
        } = self;
        (session, unicast, incarnation, group, max_buffer).hash(h);
        (replay_chunk, retransmit_after, hello_after, keepalive).hash(h);
        loss.to_bits().hash(h);
        (term, leader, welcomed).hash(h);
        st.fingerprint(h);
        (commit, acks, known).hash(h);
        ring.fingerprint(h);
        (ooo, fill, rng, heard_at, hello_at, hello_all_at).hash(h);
        (hello_backoff, hello_now, asked_epoch, reasked, keepalive_at).hash(h);
        (switch_to, welcome, own_at_term, heard, nacks, full, taken).hash(h);
        (fork, events).hash(h);
    }
}
