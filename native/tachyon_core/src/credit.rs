//! Flow control between a Rust thread that delivers items to a consumer (a
//! BEAM process, through the NIF's process sink) and the consumer's
//! acknowledgements: credits.
//!
//! The delivering thread takes one credit per item ([`Credits::take`]); the
//! consumer gives credits back with [`Credits::ack`] once it has processed
//! what it got. With a limit, an item that finds `delivered - acked` at the
//! limit is refused, and the caller drops it (tail drop: the newest item
//! goes, stale data never queues up in a mailbox) and counts it. Without a
//! limit every item is taken and the counters only report.
//!
//! `delivered` has one writer (the delivering thread: a plain load and store)
//! and `acked` many (any process acknowledging: an atomic add); each sits on
//! its own cache line. Used by `Tachyon.UDP`'s receive thread; the sequencer
//! members deliver bus messages to their owners the same way.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::counter::Counter;

/// Credits of one consumer.
#[derive(Debug)]
pub struct Credits {
    limit: u64,
    delivered: CachePadded<Counter>,
    acked: CachePadded<AtomicU64>,
}

impl Credits {
    /// At most `limit` items delivered and not acknowledged (`None`: no
    /// limit). A limit of 0 is taken as 1.
    pub fn new(limit: Option<u64>) -> Credits {
        Credits {
            limit: limit.map_or(u64::MAX, |l| l.max(1)),
            delivered: CachePadded::new(Counter::default()),
            acked: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Takes a credit for one item (the delivering thread only). False when
    /// the consumer is at its limit: the item must not be delivered.
    #[inline]
    pub fn take(&self) -> bool {
        if self.limit != u64::MAX {
            let acked = self.acked.load(Ordering::Acquire);
            if self.delivered.get().saturating_sub(acked) >= self.limit {
                return false;
            }
        }
        // Counted before the hand-over: the consumer may acknowledge the
        // item before the delivery call even returns.
        self.delivered.bump(1);
        true
    }

    /// Items that cannot be refused (a bus member delivers a datagram's
    /// messages whole, in order): the room left before the limit, for a
    /// deliverer that checks before it reads rather than per item. `None`:
    /// no limit.
    pub fn room(&self) -> Option<u64> {
        self.limit().map(|l| l.saturating_sub(self.in_flight()))
    }

    /// Counts one item delivered whatever the limit (after [`Credits::room`]).
    #[inline]
    pub fn count(&self) {
        self.delivered.bump(1);
    }

    /// Returns the credit of an item taken but not delivered after all (the
    /// delivering thread only).
    #[inline]
    pub fn untake(&self) {
        self.delivered.bump(u64::MAX); // wrapping -1
    }

    /// The consumer processed `n` items (any thread).
    pub fn ack(&self, n: u64) {
        self.acked.fetch_add(n, Ordering::AcqRel);
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.get()
    }

    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// Delivered and not acknowledged (0 if more was acknowledged).
    pub fn in_flight(&self) -> u64 {
        self.delivered().saturating_sub(self.acked())
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<u64> {
        (self.limit != u64::MAX).then_some(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_what_is_left_under_the_limit() {
        let c = Credits::new(Some(3));
        assert_eq!(c.room(), Some(3));
        c.count();
        c.count();
        c.count();
        c.count();
        assert_eq!(c.room(), Some(0));
        c.ack(2);
        assert_eq!(c.room(), Some(1));
        assert_eq!(Credits::new(None).room(), None);
    }

    #[test]
    fn a_limit_refuses_until_acks_come() {
        let c = Credits::new(Some(2));
        assert!(c.take() && c.take());
        assert!(!c.take());
        assert_eq!((c.delivered(), c.in_flight()), (2, 2));
        c.ack(1);
        assert!(c.take());
        assert!(!c.take());
        c.untake();
        assert_eq!((c.delivered(), c.acked(), c.in_flight()), (2, 1, 1));
        assert_eq!(c.limit(), Some(2));
    }

    #[test]
    fn no_limit_takes_everything_and_over_acks_do_not_underflow() {
        let c = Credits::new(None);
        for _ in 0..1000 {
            assert!(c.take());
        }
        c.ack(5000);
        assert_eq!(c.in_flight(), 0);
        assert_eq!(c.limit(), None);
        assert_eq!(Credits::new(Some(0)).limit(), Some(1));
    }
}
