//! The publishing side of a member: commands sent and not yet seen
//! delivered, resent when the primary nacks one or when overdue, and
//! marked to skip the lost numbers if a new primary's log lacks commands
//! this member saw delivered (a fork). A message keeps its `member_seq`
//! whichever primary sequences it.
//!
//! Congestion control, after TCP's rules ([`super::cc`]), so that a slow
//! link with a deep queue is never offered more than it carries:
//! * the retransmission timer follows the measured round trip (RFC 6298):
//!   samples from commands heard sequenced that were sent once only
//!   (Karn's rule), floored at `resend_after`, doubled per timeout of a
//!   command and for every command until a fresh sample;
//! * at most a window of command datagrams is in flight (sent, not yet
//!   heard sequenced); it grows by one per window of acknowledgements and
//!   halves on a timeout-driven loss, once per round trip (RFC 5681,
//!   RFC 6582). Publishes beyond it are not refused: they join the last
//!   datagram waiting (up to `max_datagram`), which goes when the window
//!   opens: many small datagrams become few full ones on a congested link;
//! * a timeout resends the oldest command in flight only, as TCP's
//!   retransmission timer does (the primary holds what arrives after a
//!   hole and nacks the hole); a nack is a fast retransmit (RFC 5681
//!   (3.2)), at most once per round trip for a command.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::cc::{Rtt, Window};
use super::config::{MemberConfig, PublishError, TxCounters};
use super::join::Welcome;
use crate::seq::core::{nanos, Nanos, Sink};
use crate::seq::wire::{self, CmdKind, CONT, MORE};

/// A nacked command is not resent again within this, nor within a
/// smoothed round trip (its resend could not have been heard sooner:
/// RFC 5681 (3.2) retransmits once per loss, not once per duplicate
/// acknowledgement).
const NACK_GUARD: Nanos = 200_000;
/// Datagram buffers kept for reuse.
const POOL: usize = 64;
/// A tick never asks to be called again sooner than this; nor does a
/// tail-loss probe wait less (RFC 8985's PTO is 2 SRTT plus the peer's
/// acknowledgement delay: a primary acknowledges at once, but its thread
/// may be scheduled out for tens of microseconds on a loaded machine).
const MIN_TICK: Nanos = 100_000;

#[derive(Clone, Hash)]
struct Pending {
    first_seq: u64,
    last_seq: u64,
    /// When it was last sent.
    sent: Nanos,
    /// Times its timer resent it (its backoff).
    attempts: u32,
    /// Sent more than once (by a timer, a nack or to a new primary): no
    /// round-trip sample from it (Karn's rule).
    resent: bool,
    count: u16,
    dgram: Vec<u8>,
}

/// Commands published and not yet seen delivered.
///
/// `pending` is in `member_seq` order: the first `heard_n` are heard (the
/// primary holds them), the first `sent_n` sent; the rest wait for the
/// window (or a new primary's welcome) and take more messages meanwhile.
pub struct Tx {
    member_id: u32,
    session: u64,
    incarnation: u64,
    frag: usize,
    max_datagram: usize,
    max_message_size: usize,
    max_pending: usize,
    /// Where commands go (the primary).
    target: SocketAddr,
    next_member_seq: u64,
    pending: VecDeque<Pending>,
    sent_n: usize,
    heard_n: usize,
    pool: Vec<Vec<u8>>,
    closed: bool,
    /// No more publishes (a close waits for what is pending).
    shut: bool,
    taken: bool,
    /// The group's access control lets this member read, not publish.
    read_only: bool,
    /// A primary could not append a command of this member (a full disk).
    full: bool,
    /// A new primary has not welcomed this member yet: commands wait (its
    /// welcome may show a fork).
    held: bool,
    /// After a fork: the first command to go marks its message of this
    /// `member_seq` [`wire::SKIP`] (the next pending, or the next
    /// published if none is).
    skip: Option<u64>,
    /// The primary holds every command up to this `member_seq` (seen on
    /// the bus in its term): those are not resent on a timer.
    heard: u64,
    rtt: Rtt,
    win: Window,
    /// A tail-loss probe went out since the last acknowledgement.
    probed: bool,
    c: Arc<CachePadded<TxCounters>>,
}

impl Tx {
    /// After the welcome `w`.
    pub fn new(cfg: &MemberConfig, frag: usize, w: &Welcome) -> Tx {
        let rtt = Rtt::new(nanos(cfg.resend_after));
        let win = Window::default();
        let c = Arc::new(CachePadded::new(TxCounters::default()));
        c.cwnd.set(win.cwnd() as u64);
        c.rto.set(rtt.rto());
        Tx {
            member_id: cfg.member_id,
            session: w.session,
            incarnation: cfg.incarnation,
            frag: frag.min(Self::frag_for(w.max_datagram)),
            max_datagram: cfg
                .max_datagram
                .min(w.max_datagram.max(wire::CMD_HEADER + 32)),
            max_message_size: cfg.max_message_size,
            max_pending: cfg.max_pending,
            target: w.from,
            // A welcome's `last` is the primary's word: u64::MAX leaves no
            // number to publish with (publishes are refused), never a wrap.
            next_member_seq: w.last.saturating_add(1),
            pending: VecDeque::new(),
            sent_n: 0,
            heard_n: 0,
            pool: Vec::new(),
            closed: false,
            shut: false,
            taken: w.taken,
            read_only: w.read_only,
            full: false,
            held: false,
            skip: None,
            heard: 0,
            rtt,
            win,
            probed: false,
            c,
        }
    }

    /// The largest fragment a primary with this `max_datagram` takes.
    fn frag_for(max_datagram: usize) -> usize {
        max_datagram
            .saturating_sub(wire::BUS_HEADER + wire::MSG_HEADER)
            .clamp(1, u16::MAX as usize)
    }

    pub fn counters(&self) -> &Arc<CachePadded<TxCounters>> {
        &self.c
    }

    pub fn target(&self) -> SocketAddr {
        self.target
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn is_taken(&self) -> bool {
        self.taken
    }

    /// The member id is another member's: publishes are refused.
    pub fn set_taken(&mut self) {
        self.taken = true;
    }

    /// A primary's disk is full: publishes are refused until a primary
    /// takes this member's commands again (a new term's welcome, or one of
    /// its commands heard sequenced).
    pub fn set_full(&mut self) {
        self.full = true;
    }

    pub fn is_full(&self) -> bool {
        self.full
    }

    pub fn fragment_size(&self) -> usize {
        self.frag
    }

    /// Command datagrams in flight: sent, not heard sequenced.
    pub fn in_flight(&self) -> usize {
        self.sent_n.saturating_sub(self.heard_n)
    }

    /// Command datagrams waiting for the window (or a welcome).
    pub fn waiting(&self) -> usize {
        self.pending.len() - self.sent_n
    }

    pub fn cwnd(&self) -> usize {
        self.win.cwnd()
    }

    /// The retransmission timeout (before backoff).
    pub fn rto(&self) -> Nanos {
        self.rtt.rto()
    }

    /// Sends what waits, in `member_seq` order (the order the primary
    /// takes them in), while the window is open.
    fn flush(&mut self, now: Nanos, sink: &mut dyn Sink) {
        if self.held {
            return;
        }
        let clocked = self.clocked();
        while self.sent_n < self.pending.len() && (!clocked || self.win.open(self.in_flight())) {
            self.send_next(now, sink);
        }
    }

    /// Whether acknowledgements clock the sends: the receive side looked
    /// (a poll, a tick) since the oldest command in flight left. A member
    /// nobody drives (`delivery: :poll` and no `recv`) hears nothing: the
    /// window would hold its publishes until it is driven again, so they
    /// go at once, as before there was a window (such a member resends
    /// nothing either: its publishes are all it sends).
    fn clocked(&self) -> bool {
        self.in_flight() == 0 || self.c.looked.get() >= self.pending[self.heard_n].sent
    }

    fn send_next(&mut self, now: Nanos, sink: &mut dyn Sink) {
        let p = &mut self.pending[self.sent_n];
        sink.send(&[self.target], &p.dgram);
        p.sent = now;
        if p.resent {
            self.c.resent.bump(1);
        } else {
            self.c.commands.bump(1);
        }
        self.sent_n += 1;
    }

    /// Sends command `i` again (`timer`: its timer expired, which backs it
    /// off).
    fn resend(&mut self, i: usize, now: Nanos, timer: bool, sink: &mut dyn Sink) {
        let p = &mut self.pending[i];
        sink.send(&[self.target], &p.dgram);
        p.sent = now;
        p.resent = true;
        if timer {
            p.attempts += 1;
        }
        self.c.resent.bump(1);
    }

    /// A new primary, at `to`: commands wait for its welcome
    /// ([`Tx::reconcile`]).
    pub fn retarget(&mut self, to: SocketAddr) {
        self.target = to;
        self.held = true;
        self.heard = 0;
        self.requeue(0);
    }

    /// Everything from command `from` on is to be sent (again, for those
    /// sent: no round-trip sample from them).
    fn requeue(&mut self, from: usize) {
        for p in self.pending.range_mut(from.min(self.sent_n)..self.sent_n) {
            p.resent = true;
        }
        self.sent_n = from.min(self.pending.len());
        self.heard_n = self.heard_n.min(self.sent_n);
        self.win.reset_recovery();
    }

    /// The primary sent this member's commands up to `member_seq` on the
    /// bus: it holds them (their datagrams may still be lost on the way to
    /// this member; the gap fill brings them). That acknowledges them:
    /// a round-trip sample, the window's growth, and room in it.
    /// (Rx's view of the current term, reset with it.)
    pub fn heard(&mut self, now: Nanos, member_seq: u64, sink: &mut dyn Sink) {
        self.c.looked.set(now);
        self.heard = member_seq;
        let n = self.pending.partition_point(|p| p.last_seq <= member_seq);
        if n > self.heard_n {
            // A primary took this member's commands: it has room.
            self.full = false;
            self.probed = false;
            let sent = self.sent_n;
            let newly = self.pending.range(self.heard_n..n);
            // Karn's rule: no sample if any of them was sent again (the
            // advance may be the resend's). The oldest's send is the one
            // the advance answers (as RFC 7323's echo of the earliest
            // unacknowledged segment).
            if n <= sent && newly.clone().all(|p| !p.resent) {
                if let Some(p) = self.pending.get(self.heard_n) {
                    self.rtt.sample(now.saturating_sub(p.sent));
                    self.c.rto.set(self.rtt.rto());
                }
            }
            let limited = sent < self.pending.len() && !self.held;
            self.win.on_acked(n - self.heard_n, limited);
            self.c.cwnd.set(self.win.cwnd() as u64);
        }
        self.heard_n = n;
        self.sent_n = self.sent_n.max(n);
        self.win.on_heard(member_seq);
        if !self.held {
            // Progress: the next command in flight, if overdue, goes now
            // (TCP's retransmissions after a timeout, one per
            // acknowledgement), then what the window lets.
            self.retransmit(now, true, sink);
            self.flush(now, sink);
        }
    }

    /// The welcome of a new primary, whose log holds this member's
    /// commands up to `w.last`; `delivered` is this member's highest
    /// `member_seq` it had delivered before the new term. If the primary's
    /// log lacks some of those, they were lost in a fork: the first
    /// pending message goes marked [`wire::SKIP`] so that the primary
    /// sequences it after its last (numbers are never reused: a number
    /// the primary holds is the message this member sent with it). Then
    /// the pending commands go to it, in order, as the window lets.
    /// Returns how many numbers were lost.
    pub fn reconcile(
        &mut self,
        now: Nanos,
        w: &Welcome,
        delivered: u64,
        sink: &mut dyn Sink,
    ) -> u64 {
        self.frag = self.frag.min(Self::frag_for(w.max_datagram));
        self.taken = w.taken;
        self.read_only = w.read_only;
        // A new primary wrote its epoch record: it has room.
        self.full = false;
        self.target = w.from;
        self.held = false;
        for p in self.pending.iter_mut() {
            p.attempts = 0;
        }
        let lost = delivered.saturating_sub(w.last);
        if lost > 0 {
            // What was delivered is done, on the side the fork dropped.
            self.ack(delivered);
            self.skip = Some(delivered.saturating_add(1));
            self.apply_skip();
            self.c.renumbered.bump(self.pending.len() as u64);
            self.heard = w.last;
        } else {
            self.heard = self.heard.max(w.last);
        }
        // The primary holds what its log does; the rest goes (again).
        let heard = self.heard;
        let n = self.pending.partition_point(|p| p.last_seq <= heard);
        self.requeue(n);
        self.heard_n = n;
        self.flush(now, sink);
        lost
    }

    /// The primary says `member_seq` is missing: its command goes again
    /// (a fast retransmit), unless sent within a round trip.
    pub fn on_nack(&mut self, now: Nanos, member_seq: u64, sink: &mut dyn Sink) {
        if self.held {
            return;
        }
        let i = self.pending.partition_point(|p| p.last_seq < member_seq);
        // Not sent yet (the flush sends it in order), or held already.
        if i >= self.sent_n || i < self.heard_n || self.pending[i].first_seq > member_seq {
            return;
        }
        let guard = NACK_GUARD.max(self.rtt.srtt().unwrap_or(0));
        if now.saturating_sub(self.pending[i].sent) >= guard {
            self.c.nacked.bump(1);
            self.resend(i, now, false, sink);
        }
    }

    /// Forgets the commands delivered up to `member_seq`.
    pub fn ack(&mut self, member_seq: u64) {
        let mut k = 0;
        while self
            .pending
            .front()
            .is_some_and(|p| p.last_seq <= member_seq)
        {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            k += 1;
            if self.pool.len() < POOL {
                self.pool.push(p.dgram);
            }
        }
        self.sent_n = self.sent_n.saturating_sub(k);
        self.heard_n = self.heard_n.saturating_sub(k);
        self.c.pending.set(self.pending.len() as u64);
    }

    /// No more publishes: what is pending is still sent and resent (a
    /// close waits for it to be delivered, or for its caller's patience,
    /// before [`Tx::close`]).
    pub fn shut(&mut self) {
        self.shut = true;
    }

    /// Messages published and not yet delivered to this member (each
    /// counted once, by its last fragment).
    pub fn undelivered(&self) -> u64 {
        self.pending
            .iter()
            .map(|p| wire::final_fragments(&p.dgram))
            .sum()
    }

    /// No more publishes; the member id is free again (a unicast member is
    /// also dropped from the fan-out). What waits for the window goes
    /// first, at once. False if already closed.
    pub fn close(&mut self, now: Nanos, sink: &mut dyn Sink) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        if !self.held {
            while self.sent_n < self.pending.len() {
                self.send_next(now, sink);
            }
        }
        let mut b = Vec::with_capacity(wire::CMD_HEADER);
        wire::cmd_header(
            &mut b,
            CmdKind::Bye,
            self.member_id,
            self.session,
            self.incarnation,
        );
        sink.send(&[self.target], &b);
        true
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The `member_seq` of the last message of the oldest pending command.
    pub fn oldest_pending(&self) -> Option<u64> {
        self.pending.front().map(|p| p.last_seq)
    }

    /// The next `member_seq` to publish.
    pub fn next_member_seq(&self) -> u64 {
        self.next_member_seq
    }
}

#[path = "tx_publish.rs"]
mod publish;

#[path = "tx_fingerprint.rs"]
mod fingerprint;

#[path = "tx_timers.rs"]
mod timers;

#[cfg(test)]
#[path = "tx_tests.rs"]
mod tests;
