//! Congestion control of a member's commands, after TCP's published
//! practice: a retransmission timer from measured round trips (RFC 6298)
//! and a congestion window on the command datagrams in flight (RFC 5681),
//! so that a member never offers a slow link more than it carries.
//!
//! A command is *in flight* from its first send until the member hears it
//! sequenced on the bus (`heard`: the primary holds it); that is the
//! acknowledgement here, cumulative as TCP's (the primary sequences a
//! member's commands in `member_seq` order). A round trip is measured from
//! a command's send to the poll that hears it: the link both ways, the
//! primary, and the member's own polling.

use crate::seq::core::{Nanos, MICRO, MILLI};

/// The window a member starts with, in command datagrams. A quiet bus
/// never fills it (a round trip is ~100 us; a publish goes out at once
/// while fewer than this are in flight), so latency with an idle window is
/// what it was without one.
pub const INITIAL_CWND: usize = 32;
/// The window never shrinks below this (RFC 5681 (4): 2 segments).
pub const MIN_CWND: usize = 2;
/// Nor grows above this: a primary holds about this many commands of a
/// member beyond a hole (its `window` option, 1024 by default).
pub const MAX_CWND: usize = 1024;
/// The timer of a command doubles at most this many times (8 x). RFC 6298
/// (5.5) backs off up to its ceiling of at least 60 s; a member probes with
/// one datagram per expiry (the oldest in flight), so a short cap costs the
/// link little and bounds the wait after a healed partition: in the
/// simulator (300 seeds, every fault) the worst convergence after the heal
/// was 157 ms with 8 x, 317 ms with 16 x and 996 ms with 64 x, for the same
/// resends within 1%.
pub const MAX_BACKOFF: u32 = 3;
/// A timer never waits longer than this (unless the configured floor is
/// longer): RFC 6298 (2.5) allows a maximum of at least 60 s; a bus wants
/// its probes back within a second of a healed link.
pub const MAX_RTO: Nanos = 1_000 * MILLI;
/// The clock granularity `G` of RFC 6298 (2.2).
const G: Nanos = MICRO;

/// The retransmission timer (RFC 6298).
#[derive(Debug, Clone, Hash)]
pub struct Rtt {
    srtt: Option<Nanos>,
    rttvar: Nanos,
    /// The configured `resend_after`: the lower bound of the timer (RFC
    /// 6298 (2.4) rounds up to 1 s; a bus on one machine or a LAN wants
    /// milliseconds, and the operator says how many).
    floor: Nanos,
    rto: Nanos,
    /// Timeouts since the last fresh sample (RFC 6298 (5.5)): every timer
    /// is backed off by at least this, until a sample (5.7).
    backoff: u32,
}

impl Rtt {
    /// Before any sample the timer is the floor (RFC 6298 (2.1) starts at
    /// 1 s, which a bus would find far too slow).
    pub fn new(floor: Nanos) -> Rtt {
        Rtt {
            srtt: None,
            rttvar: 0,
            floor,
            rto: floor,
            backoff: 0,
        }
    }

    /// A round-trip measurement `r` of a command sent once only (Karn's
    /// rule is the caller's: a resent command's acknowledgement may be
    /// for either send).
    pub fn sample(&mut self, r: Nanos) {
        match self.srtt {
            // RFC 6298 (2.2): the first measurement.
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            // (2.3): RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|, then
            // SRTT <- 7/8 SRTT + 1/8 R' (RTTVAR from the old SRTT).
            Some(s) => {
                self.rttvar = self.rttvar - self.rttvar / 4 + s.abs_diff(r) / 4;
                self.srtt = Some(s - s / 8 + r / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        // (2.3), (2.4), (2.5): RTO <- SRTT + max(G, 4 RTTVAR), floored,
        // capped.
        self.rto = s
            .saturating_add(G.max(self.rttvar.saturating_mul(4)))
            .max(self.floor)
            .min(self.ceiling());
        // (5.7): a fresh sample after a backoff: the timer is recomputed.
        self.backoff = 0;
    }

    /// A timer expired (RFC 6298 (5.5)): timers back off until a sample.
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    fn ceiling(&self) -> Nanos {
        MAX_RTO.max(self.floor)
    }

    /// The retransmission timeout, without backoff.
    pub fn rto(&self) -> Nanos {
        self.rto
    }

    pub fn srtt(&self) -> Option<Nanos> {
        self.srtt
    }

    /// The timeout of a command sent `attempts` times by its timer before
    /// (doubling each time, RFC 6298 (5.5); at least as backed off as the
    /// connection, capped at 8 x and at the ceiling).
    pub fn timeout(&self, attempts: u32) -> Nanos {
        let shift = attempts.max(self.backoff).min(MAX_BACKOFF);
        self.rto
            .saturating_mul(1 << shift)
            .min(self.ceiling().max(self.rto))
    }
}

/// The congestion window on command datagrams in flight (RFC 5681's
/// additive increase, multiplicative decrease).
#[derive(Debug, Clone, Hash)]
pub struct Window {
    cwnd: usize,
    /// Datagrams acknowledged towards the next increase.
    acked: usize,
    /// In recovery until the member hears this `member_seq` (the last
    /// sent when the window was cut; RFC 6582's recovery point): one cut
    /// per window of data, i.e. per round trip, however many of its
    /// datagrams time out.
    recover: Option<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            cwnd: INITIAL_CWND,
            acked: 0,
            recover: None,
        }
    }
}

impl Window {
    pub fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// Whether another datagram may go with `in_flight` in flight.
    pub fn open(&self, in_flight: usize) -> bool {
        in_flight < self.cwnd
    }

    /// `n` datagrams acknowledged (heard) while the window limited the
    /// sender (RFC 7661: a window not used is not grown). Congestion
    /// avoidance (RFC 5681 (3)): one more datagram per window of
    /// acknowledgements; none in recovery.
    pub fn on_acked(&mut self, n: usize, limited: bool) {
        if !limited || self.recover.is_some() {
            return;
        }
        self.acked += n;
        while self.acked >= self.cwnd && self.cwnd < MAX_CWND {
            self.acked -= self.cwnd;
            self.cwnd += 1;
        }
        if self.cwnd >= MAX_CWND {
            self.acked = 0;
        }
    }

    /// The member heard its commands up to `heard`: a recovery whose point
    /// is reached ends.
    pub fn on_heard(&mut self, heard: u64) {
        if self.recover.is_some_and(|r| heard >= r) {
            self.recover = None;
        }
    }

    /// A timeout-driven loss, with `last_sent` the highest `member_seq`
    /// sent: the window halves (RFC 5681 (4): ssthresh = FlightSize / 2,
    /// here the window itself, as NewReno leaves fast recovery), at most
    /// once per recovery (RFC 6582). True if it was cut.
    pub fn on_timeout(&mut self, last_sent: u64) -> bool {
        if self.recover.is_some() {
            return false;
        }
        self.cwnd = (self.cwnd / 2).max(MIN_CWND);
        self.acked = 0;
        self.recover = Some(last_sent);
        true
    }

    /// A new primary: no recovery carries over.
    pub fn reset_recovery(&mut self) {
        self.recover = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = MILLI;

    #[test]
    fn rto_starts_at_the_floor_and_follows_rfc6298() {
        let mut r = Rtt::new(10 * MS);
        assert_eq!(r.rto(), 10 * MS);
        // First sample: SRTT = R, RTTVAR = R/2, RTO = R + 4 R/2 = 3 R.
        r.sample(20 * MS);
        assert_eq!(r.srtt(), Some(20 * MS));
        assert_eq!(r.rto(), 60 * MS);
        // Second: RTTVAR = 3/4 10 + 1/4 |20 - 36| = 11.5;
        // SRTT = 7/8 20 + 1/8 36 = 22; RTO = 22 + 46 = 68.
        r.sample(36 * MS);
        assert_eq!(r.srtt(), Some(22 * MS));
        assert_eq!(r.rto(), 68 * MS);
    }

    #[test]
    fn rto_is_floored_by_resend_after_and_capped() {
        let mut r = Rtt::new(10 * MS);
        for _ in 0..50 {
            r.sample(100 * MICRO);
        }
        assert_eq!(r.rto(), 10 * MS, "the configured floor");
        let mut r = Rtt::new(10 * MS);
        r.sample(5_000 * MS);
        assert_eq!(r.rto(), MAX_RTO, "the ceiling");
        // A floor above the ceiling wins.
        let mut r = Rtt::new(2_000 * MS);
        r.sample(MS);
        assert_eq!(r.rto(), 2_000 * MS);
        assert_eq!(r.timeout(5), 2_000 * MS);
    }

    #[test]
    fn timers_double_up_to_the_cap_and_a_sample_resets_the_backoff() {
        let r = Rtt::new(10 * MS);
        assert_eq!(r.timeout(0), 10 * MS);
        assert_eq!(r.timeout(1), 20 * MS);
        assert_eq!(r.timeout(3), 80 * MS);
        assert_eq!(r.timeout(20), 80 * MS, "8 x at most");
        let mut r = Rtt::new(20 * MS);
        r.sample(200 * MS);
        assert_eq!(r.rto(), 600 * MS);
        assert_eq!(r.timeout(1), 1_000 * MS, "and the ceiling");
        // A timeout backs every timer off until a fresh sample.
        let mut r = Rtt::new(10 * MS);
        r.back_off();
        r.back_off();
        assert_eq!(r.timeout(0), 40 * MS);
        assert_eq!(r.timeout(3), 80 * MS);
        r.sample(2 * MS);
        assert_eq!(r.timeout(0), 10 * MS);
    }

    #[test]
    fn the_window_grows_by_one_per_window_of_acks_when_it_limits() {
        let mut w = Window::default();
        assert_eq!(w.cwnd(), INITIAL_CWND);
        assert!(w.open(INITIAL_CWND - 1) && !w.open(INITIAL_CWND));
        // Not limited: not grown however much is acknowledged.
        w.on_acked(10_000, false);
        assert_eq!(w.cwnd(), INITIAL_CWND);
        w.on_acked(INITIAL_CWND - 1, true);
        assert_eq!(w.cwnd(), INITIAL_CWND);
        w.on_acked(1, true);
        assert_eq!(w.cwnd(), INITIAL_CWND + 1);
        w.on_acked(INITIAL_CWND + 1, true);
        assert_eq!(w.cwnd(), INITIAL_CWND + 2);
        w.on_acked(1 << 30, true);
        assert_eq!(w.cwnd(), MAX_CWND);
    }

    #[test]
    fn the_window_halves_once_per_recovery_down_to_the_minimum() {
        let mut w = Window::default();
        assert!(w.on_timeout(100));
        assert_eq!(w.cwnd(), INITIAL_CWND / 2);
        // More timeouts of the same window: no further cut.
        assert!(!w.on_timeout(120));
        assert_eq!(w.cwnd(), INITIAL_CWND / 2);
        // Nor growth until the recovery point is heard.
        w.on_acked(1000, true);
        assert_eq!(w.cwnd(), INITIAL_CWND / 2);
        w.on_heard(99);
        assert!(!w.on_timeout(130));
        w.on_heard(100);
        assert!(w.on_timeout(130));
        assert_eq!(w.cwnd(), INITIAL_CWND / 4);
        for i in 0..10 {
            w.on_heard(1000 + i);
            w.on_timeout(1001 + i);
        }
        assert_eq!(w.cwnd(), MIN_CWND);
    }
}
