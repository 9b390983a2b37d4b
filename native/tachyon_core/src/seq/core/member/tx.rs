//! The publishing side of a member: commands sent and not yet seen
//! delivered, resent when the primary nacks one or when overdue, and
//! renumbered if a new primary's log lacks commands this member saw
//! delivered (a fork).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::config::{MemberConfig, PublishError, TxCounters};
use super::join::Welcome;
use crate::seq::core::{nanos, Nanos, Sink};
use crate::seq::wire::{self, CmdKind, CONT, MORE};

/// Commands resent at once to a new primary.
const RESEND_WINDOW: usize = 32;
/// Commands looked at per tick for a resend.
const RESEND_SCAN: usize = 64;
/// Commands resent per tick at most: a timeout probes with the oldest the
/// primary has not sent on the bus (the primary holds what arrives after a
/// hole and nacks the hole); a burst of resends would only feed a
/// congested link.
const RESEND_BURST: usize = 4;
/// A nacked command is not resent again within this.
const NACK_GUARD: Nanos = 200_000;

struct Pending {
    first_seq: u64,
    last_seq: u64,
    sent: Nanos,
    attempts: u32,
    dgram: Vec<u8>,
}

/// Commands published and not yet seen delivered.
pub struct Tx {
    member_id: u32,
    session: u64,
    frag: usize,
    max_datagram: usize,
    max_message_size: usize,
    max_pending: usize,
    resend_after: Nanos,
    /// Where commands go (the primary).
    target: SocketAddr,
    next_member_seq: u64,
    pending: VecDeque<Pending>,
    pool: Vec<Vec<u8>>,
    closed: bool,
    taken: bool,
    /// A new primary has not welcomed this member yet: commands wait (its
    /// welcome may renumber them).
    held: bool,
    /// The primary holds every command up to this `member_seq` (seen on
    /// the bus in its term): those are not resent on a timer.
    heard: u64,
    c: Arc<CachePadded<TxCounters>>,
}

impl Tx {
    /// After the welcome `w`.
    pub fn new(cfg: &MemberConfig, frag: usize, w: &Welcome) -> Tx {
        Tx {
            member_id: cfg.member_id,
            session: w.session,
            frag: frag.min(Self::frag_for(w.max_datagram)),
            max_datagram: cfg
                .max_datagram
                .min(w.max_datagram.max(wire::CMD_HEADER + 32)),
            max_message_size: cfg.max_message_size,
            max_pending: cfg.max_pending,
            resend_after: nanos(cfg.resend_after),
            target: w.from,
            next_member_seq: w.last + 1,
            pending: VecDeque::new(),
            pool: Vec::new(),
            closed: false,
            taken: w.taken,
            held: false,
            heard: 0,
            c: Arc::new(CachePadded::new(TxCounters::default())),
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

    pub fn fragment_size(&self) -> usize {
        self.frag
    }

    /// Publishes messages, as many per command datagram as fit; returns
    /// the `member_seq` of the last (of its last fragment).
    pub fn publish_many<'a, I>(
        &mut self,
        now: Nanos,
        msgs: I,
        sink: &mut dyn Sink,
    ) -> Result<u64, PublishError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let it = msgs.into_iter();
        if it.clone().any(|m| m.len() > self.max_message_size) {
            return Err(PublishError::TooLarge);
        }
        if self.closed {
            return Err(PublishError::Closed);
        }
        if self.taken {
            return Err(PublishError::Taken);
        }
        if self.pending.len() >= self.max_pending {
            return Err(PublishError::Busy);
        }
        let mut d = self.pool.pop().unwrap_or_default();
        let mut count = 0u16;
        let mut first = self.next_member_seq;
        let mut published = 0u64;
        for m in it {
            published += 1;
            if m.is_empty() {
                self.add_cmd(&mut d, &mut count, &mut first, now, 0, &[], sink);
            }
            let mut chunks = m.chunks(self.frag).peekable();
            let mut start = true;
            while let Some(c) = chunks.next() {
                let mut flags = if start { 0 } else { CONT };
                if chunks.peek().is_some() {
                    flags |= MORE;
                }
                start = false;
                self.add_cmd(&mut d, &mut count, &mut first, now, flags, c, sink);
            }
        }
        self.send_cmd(d, count, first, now, sink);
        self.c.published.bump(published);
        Ok(self.next_member_seq - 1)
    }

    /// Adds one message to the command being built, sending it first if
    /// it would not fit.
    #[allow(clippy::too_many_arguments)]
    fn add_cmd(
        &mut self,
        d: &mut Vec<u8>,
        count: &mut u16,
        first: &mut u64,
        now: Nanos,
        flags: u8,
        c: &[u8],
        sink: &mut dyn Sink,
    ) {
        if *count > 0
            && (d.len() + wire::CMD_MSG_HEADER + c.len() > self.max_datagram || *count == u16::MAX)
        {
            let full = std::mem::replace(d, self.pool.pop().unwrap_or_default());
            self.send_cmd(full, *count, *first, now, sink);
            *count = 0;
        }
        if *count == 0 {
            wire::cmd_header(d, CmdKind::Publish, self.member_id, self.session);
            *first = self.next_member_seq;
        }
        let seq = self.next_member_seq;
        self.next_member_seq += 1;
        wire::write_cmd_msg(d, seq, flags, c);
        *count += 1;
    }

    fn send_cmd(
        &mut self,
        mut d: Vec<u8>,
        count: u16,
        first: u64,
        now: Nanos,
        sink: &mut dyn Sink,
    ) {
        if count == 0 {
            self.pool.push(d);
            return;
        }
        wire::set_cmd_count(&mut d, count);
        // Commands leave in member_seq order, the order the primary takes
        // them in (after its welcome, for a new primary).
        if !self.held {
            sink.send(&[self.target], &d);
        }
        self.c.commands.bump(1);
        self.pending.push_back(Pending {
            first_seq: first,
            last_seq: self.next_member_seq - 1,
            sent: now,
            attempts: 0,
            dgram: d,
        });
        self.c.pending.set(self.pending.len() as u64);
    }

    fn resend(&mut self, i: usize, now: Nanos, sink: &mut dyn Sink) {
        let p = &mut self.pending[i];
        sink.send(&[self.target], &p.dgram);
        p.sent = now;
        p.attempts += 1;
        self.c.resent.bump(1);
    }

    /// A new primary, at `to`: commands wait for its welcome
    /// ([`Tx::reconcile`]).
    pub fn retarget(&mut self, to: SocketAddr) {
        self.target = to;
        self.held = true;
        self.heard = 0;
    }

    /// The primary sent this member's commands up to `member_seq` on the
    /// bus: it holds them (their datagrams may still be lost on the way to
    /// this member; the gap fill brings them).
    /// (Rx's view of the current term, reset with it.)
    pub fn heard(&mut self, member_seq: u64) {
        self.heard = member_seq;
    }

    /// The welcome of a new primary, whose log holds this member's
    /// commands up to `w.last`; `delivered` is this member's highest
    /// `member_seq` it had delivered before the new term. If the primary's
    /// log lacks some of those, they were lost in a fork: the pending
    /// commands are renumbered after its last, so that they can be
    /// sequenced. Then the pending commands go to it. Returns how many
    /// numbers were lost.
    pub fn reconcile(
        &mut self,
        now: Nanos,
        w: &Welcome,
        delivered: u64,
        sink: &mut dyn Sink,
    ) -> u64 {
        self.frag = self.frag.min(Self::frag_for(w.max_datagram));
        self.taken = w.taken;
        self.target = w.from;
        self.held = false;
        for p in self.pending.iter_mut() {
            p.attempts = 0;
        }
        let lost = delivered.saturating_sub(w.last);
        if lost == 0 {
            for i in 0..self.pending.len().min(RESEND_WINDOW) {
                self.resend(i, now, sink);
            }
            return 0;
        }
        let mut seq = w.last + 1;
        for p in self.pending.iter_mut() {
            let Some(last) = wire::renumber(&mut p.dgram, seq) else {
                continue;
            };
            p.first_seq = seq;
            p.last_seq = last;
            seq = last + 1;
        }
        self.next_member_seq = seq;
        self.c.renumbered.bump(self.pending.len() as u64);
        for i in 0..self.pending.len().min(RESEND_WINDOW) {
            self.resend(i, now, sink);
        }
        lost
    }

    /// The primary says `member_seq` is missing: its command goes again
    /// (unless just sent).
    pub fn on_nack(&mut self, now: Nanos, member_seq: u64, sink: &mut dyn Sink) {
        if self.held {
            return;
        }
        let Some(i) = self
            .pending
            .iter()
            .take(RESEND_SCAN * 16)
            .position(|p| p.first_seq <= member_seq && member_seq <= p.last_seq)
        else {
            return;
        };
        if now.saturating_sub(self.pending[i].sent) >= NACK_GUARD {
            self.c.nacked.bump(1);
            self.resend(i, now, sink);
        }
    }

    /// Forgets the commands delivered up to `member_seq`.
    pub fn ack(&mut self, member_seq: u64) {
        while self
            .pending
            .front()
            .is_some_and(|p| p.last_seq <= member_seq)
        {
            let p = self.pending.pop_front().expect("front");
            if self.pool.len() < 64 {
                self.pool.push(p.dgram);
            }
        }
        self.c.pending.set(self.pending.len() as u64);
    }

    fn overdue(&self, p: &Pending) -> Nanos {
        p.sent + self.resend_after.saturating_mul(1 << p.attempts.min(3))
    }

    /// Resends the overdue commands (each waits `resend_after`, then twice,
    /// four and eight times as long); returns when to look again at the
    /// latest (`None`: nothing pending).
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<Nanos> {
        if self.held {
            return None;
        }
        let mut due = None::<Nanos>;
        // The primary holds what it sent on the bus: the scan starts after.
        let heard = self.heard;
        let from = self.pending.partition_point(|p| p.last_seq <= heard);
        let mut burst = 0;
        for i in from..self.pending.len().min(from + RESEND_SCAN) {
            if burst < RESEND_BURST && self.overdue(&self.pending[i]) <= now {
                self.resend(i, now, sink);
                burst += 1;
            }
            // Overdue but past the burst: the next tick's.
            let d = self
                .overdue(&self.pending[i])
                .max(now + (self.resend_after / 4).max(100_000));
            due = Some(due.map_or(d, |x| x.min(d)));
        }
        due
    }

    /// No more publishes; the member id is free again (a unicast member is
    /// also dropped from the fan-out). False if already closed.
    pub fn close(&mut self, sink: &mut dyn Sink) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        let mut b = Vec::with_capacity(wire::CMD_HEADER);
        wire::cmd_header(&mut b, CmdKind::Bye, self.member_id, self.session);
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
