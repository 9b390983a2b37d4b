//! The receive side's own sends and timers: hellos (to the primary until
//! welcomed, to every node after a silence, backing off while
//! unanswered), keepalives and gap requests.

use super::*;

/// An unanswered hello to every node doubles the wait for the next, up
/// to `hello_after` times 2^this (a member behind a congested link, whose
/// primary's datagrams come late, does not add hellos to the queue; one
/// whose primary is gone still asks every node every few `hello_after`).
const HELLO_BACKOFF: u32 = 2;

impl Rx {
    pub(super) fn hello(&mut self, flags: u8, to_all: bool, sink: &mut dyn Sink) {
        let h = HelloBody {
            flags: flags | if self.unicast { UNICAST } else { 0 },
            incarnation: self.incarnation,
            epoch: if self.st.delivered_any {
                self.st.epochs.last()
            } else {
                u32::MAX
            },
            next: self.st.next,
        };
        self.asked_epoch = h.epoch;
        let mut d = std::mem::take(&mut self.scratch);
        wire::hello(&mut d, self.st.member_id, self.session, &h);
        if to_all {
            for a in &self.group {
                sink.send(std::slice::from_ref(a), &d);
            }
        } else {
            sink.send(&[self.leader], &d);
        }
        self.scratch = d;
        self.c.hellos.bump(1);
    }

    /// After the datagrams of one poll (at least one): a hello to a new
    /// primary, a gap request at once; returns a new primary to retarget
    /// commands to, if any.
    pub fn end_batch(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<SocketAddr> {
        if std::mem::take(&mut self.hello_now) {
            self.hello(0, false, sink);
            self.hello_at = Some(now);
        }
        self.fill_gap(now, sink);
        self.switch_to.take()
    }

    fn fill_gap(&mut self, now: Nanos, sink: &mut dyn Sink) {
        let have = self.have();
        let gap_end = self.ooo.first_key_value().map_or(self.known, |(s, _)| *s);
        let (chunk, base) = (self.replay_chunk, self.retransmit_after);
        if let Some((a, z)) = self
            .fill
            .want(now, have, gap_end, chunk, base, &mut self.rng)
        {
            let mut r = std::mem::take(&mut self.scratch);
            wire::replay(&mut r, self.st.member_id, self.session, a, z);
            sink.send(&[self.leader], &r);
            self.scratch = r;
            self.c.replay_requests.bump(1);
        }
    }

    /// Timed work when a poll found nothing: gap requests, hellos (to the
    /// primary until welcomed, to every node after a silence, backing off
    /// while unanswered), keepalives.
    /// Returns when to tick again at the latest.
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Nanos {
        self.fill_gap(now, sink);
        let since = |t: Option<Nanos>| t.map_or(Nanos::MAX, |h| now.saturating_sub(h));
        let (since_hello, since_all) = (since(self.hello_at), since(self.hello_all_at));
        let every = self.hello_after.saturating_mul(1 << self.hello_backoff);
        if now.saturating_sub(self.heard_at) >= self.hello_after && since_all >= every {
            // Silence: whichever node is the primary now answers.
            self.hello(0, true, sink);
            self.hello_all_at = Some(now);
            self.hello_at = Some(now);
            self.hello_backoff = (self.hello_backoff + 1).min(HELLO_BACKOFF);
        } else if !self.welcomed && since_hello >= 4 * self.retransmit_after.max(MILLI) {
            self.hello(0, false, sink);
            self.hello_at = Some(now);
        } else if self.welcomed && now.saturating_sub(self.keepalive_at) >= self.keepalive {
            self.keepalive_at = now;
            self.hello(KEEPALIVE, false, sink);
        }
        let every = self.hello_after.saturating_mul(1 << self.hello_backoff);
        let mut due = (self.heard_at + self.hello_after)
            .max(self.hello_all_at.map_or(0, |h| h.saturating_add(every)))
            .min(self.keepalive_at + self.keepalive)
            .max(now + MILLI / 10);
        if !self.welcomed {
            due = due.min(now + 4 * self.retransmit_after.max(MILLI));
        }
        if self.have() < self.known || !self.ooo.is_empty() {
            due = due.min(self.fill.due(self.retransmit_after).max(now + 1));
        }
        due
    }
}
