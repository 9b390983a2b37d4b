//! The publishing side of a member: commands sent and not yet seen
//! sequenced, resent when overdue.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::config::{MemberConfig, PublishError, TxCounters};
use crate::seq::core::{nanos, Nanos, Sink};
use crate::seq::wire::{self, CmdKind, CONT, MORE};

/// Commands resent at once when the oldest is overdue.
const RESEND_WINDOW: usize = 32;

struct Pending {
    last_seq: u64,
    sent: Nanos,
    dgram: Vec<u8>,
}

/// Commands published and not yet seen sequenced.
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
    c: Arc<CachePadded<TxCounters>>,
}

impl Tx {
    /// After a welcome from `target` in `session`; `last` is this member's
    /// last sequenced `member_seq`.
    pub fn new(cfg: &MemberConfig, frag: usize, session: u64, target: SocketAddr, last: u64) -> Tx {
        Tx {
            member_id: cfg.member_id,
            session,
            frag,
            max_datagram: cfg.max_datagram,
            max_message_size: cfg.max_message_size,
            max_pending: cfg.max_pending,
            resend_after: nanos(cfg.resend_after),
            target,
            next_member_seq: last + 1,
            pending: VecDeque::new(),
            pool: Vec::new(),
            closed: false,
            c: Arc::new(CachePadded::new(TxCounters::default())),
        }
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
        if self.pending.len() >= self.max_pending {
            return Err(PublishError::Busy);
        }
        let mut d = self.pool.pop().unwrap_or_default();
        let mut count = 0u16;
        let mut published = 0u64;
        for m in it {
            published += 1;
            if m.is_empty() {
                self.add_cmd(&mut d, &mut count, now, 0, &[], sink);
            }
            let mut chunks = m.chunks(self.frag).peekable();
            let mut first = true;
            while let Some(c) = chunks.next() {
                let mut flags = if first { 0 } else { CONT };
                if chunks.peek().is_some() {
                    flags |= MORE;
                }
                first = false;
                self.add_cmd(&mut d, &mut count, now, flags, c, sink);
            }
        }
        self.send_cmd(d, count, now, sink);
        self.c.published.bump(published);
        Ok(self.next_member_seq - 1)
    }

    /// Adds one message to the command being built, sending it first if
    /// it would not fit.
    fn add_cmd(
        &mut self,
        d: &mut Vec<u8>,
        count: &mut u16,
        now: Nanos,
        flags: u8,
        c: &[u8],
        sink: &mut dyn Sink,
    ) {
        if *count > 0
            && (d.len() + wire::CMD_MSG_HEADER + c.len() > self.max_datagram || *count == u16::MAX)
        {
            let full = std::mem::replace(d, self.pool.pop().unwrap_or_default());
            self.send_cmd(full, *count, now, sink);
            *count = 0;
        }
        if *count == 0 {
            wire::cmd_header(d, CmdKind::Publish, self.member_id, self.session);
        }
        let seq = self.next_member_seq;
        self.next_member_seq += 1;
        wire::write_cmd_msg(d, seq, flags, c);
        *count += 1;
    }

    fn send_cmd(&mut self, mut d: Vec<u8>, count: u16, now: Nanos, sink: &mut dyn Sink) {
        if count == 0 {
            self.pool.push(d);
            return;
        }
        wire::set_cmd_count(&mut d, count);
        // Commands leave in member_seq order, the only order the sequencer
        // takes them in.
        sink.send(&[self.target], &d);
        self.c.commands.bump(1);
        self.pending.push_back(Pending {
            last_seq: self.next_member_seq - 1,
            sent: now,
            dgram: d,
        });
        self.c.pending.set(self.pending.len() as u64);
    }

    /// Sends to `to` from now on (a new primary), and resends at once the
    /// commands the old one may not have sequenced. False if unchanged.
    pub fn retarget(&mut self, now: Nanos, to: SocketAddr, sink: &mut dyn Sink) -> bool {
        if self.target == to {
            return false;
        }
        self.target = to;
        self.resend_oldest(now, sink);
        true
    }

    /// Resends the oldest pending commands (a window: the sequencer takes a
    /// member's commands in `member_seq` order, so everything after a lost
    /// one was dropped too and goes out as these are sequenced).
    fn resend_oldest(&mut self, now: Nanos, sink: &mut dyn Sink) {
        let mut n = 0;
        for p in self.pending.iter_mut().take(RESEND_WINDOW) {
            sink.send(&[self.target], &p.dgram);
            p.sent = now;
            n += 1;
        }
        self.c.resent.bump(n);
    }

    /// Forgets the commands sequenced up to `member_seq`.
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

    /// Resends when the oldest command is overdue; returns when to look
    /// again at the latest (`None`: nothing pending).
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<Nanos> {
        let sent = self.pending.front()?.sent;
        if now.saturating_sub(sent) >= self.resend_after {
            self.resend_oldest(now, sink);
            return Some(now + self.resend_after);
        }
        Some(sent + self.resend_after)
    }

    /// No more publishes; a unicast member tells the sequencer to stop
    /// sending to it. False if already closed.
    pub fn close(&mut self, unicast: bool, sink: &mut dyn Sink) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        if unicast {
            let mut b = Vec::with_capacity(wire::CMD_HEADER);
            wire::cmd_header(&mut b, CmdKind::Bye, self.member_id, self.session);
            sink.send(&[self.target], &b);
        }
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
