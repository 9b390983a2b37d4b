//! The publishing side's timers: the retransmission timer of the oldest
//! command in flight (RFC 6298) and the tail-loss probe (RFC 8985).

use super::*;

impl Tx {
    /// The oldest command in flight, if its timer expired, goes again (a
    /// timeout: the window halves, once per recovery; the timers back off
    /// unless `progress`: it expired while the ones before it were
    /// outstanding). Returns when its timer expires.
    pub(super) fn retransmit(
        &mut self,
        now: Nanos,
        progress: bool,
        sink: &mut dyn Sink,
    ) -> Option<Nanos> {
        // After the goodbye nothing goes again: a command the primary saw
        // after it would bind the member id to this closed member anew.
        if self.closed {
            return None;
        }
        let i = self.heard_n;
        if i >= self.sent_n {
            return None;
        }
        let p = &self.pending[i];
        let due = p.sent.saturating_add(self.rtt.timeout(p.attempts));
        if due > now {
            return Some(due);
        }
        let last_sent = self.pending[self.sent_n - 1].last_seq;
        if self.win.on_timeout(last_sent) {
            self.c.cwnd.set(self.win.cwnd() as u64);
        }
        if !progress {
            self.rtt.back_off();
        }
        self.resend(i, now, true, sink);
        let p = &self.pending[i];
        Some(p.sent.saturating_add(self.rtt.timeout(p.attempts)))
    }

    /// A tail-loss probe (RFC 8985 (7)): when the commands in flight have
    /// not been heard of for a probe timeout (PTO = 2 SRTT, at least
    /// [`MIN_TICK`]) after the last send, the last one goes again, once
    /// per flight: a lost command at the tail (a ping-pong, the last of a
    /// burst) has no later command to reveal its loss by a nack, and would
    /// otherwise wait for the retransmission timer (`resend_after`, 20 ms
    /// by default). A probe is no timeout: no backoff, no window change
    /// (it is counted in `resent` and `probes`). Returns when it is due.
    pub(super) fn probe(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<Nanos> {
        if self.closed || self.probed || self.sent_n <= self.heard_n {
            return None;
        }
        let srtt = self.rtt.srtt()?;
        let pto = srtt.saturating_mul(2).max(MIN_TICK);
        let i = self.sent_n - 1;
        let due = self.pending[i].sent.saturating_add(pto);
        if due > now {
            return Some(due);
        }
        self.probed = true;
        self.resend(i, now, false, sink);
        self.c.probes.bump(1);
        None
    }

    /// Sends what the window lets, resends the oldest command in flight
    /// once its timer expires (each waits the retransmission timeout,
    /// doubled per expiry) and probes the tail ([`Tx::probe`]); returns
    /// when to look again at the latest (`None`: nothing in flight).
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<Nanos> {
        self.c.looked.set(now);
        if self.held {
            return None;
        }
        self.flush(now, sink);
        // The probe first: its send re-arms the timer of the command it
        // resends (RFC 8985 (7.3)), so a timer never resends it again at
        // once.
        let probe = self.probe(now, sink);
        let timer = self.retransmit(now, false, sink);
        match (timer, probe) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|d| d.max(now + MIN_TICK))
    }
}
