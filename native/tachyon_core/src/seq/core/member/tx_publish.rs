//! The publishing side's publishes: messages into command datagrams (as
//! many per datagram as fit, joining the last one waiting for the window),
//! queued for [`Tx::flush`].

use super::*;

impl Tx {
    /// Publishes messages, as many per command datagram as fit; returns
    /// the `member_seq` of the last (of its last fragment). Sent at once
    /// while the window is open; else they join the last datagram waiting.
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
        self.publish_flagged(now, msgs, 0, sink)
    }

    /// [`Tx::publish_many`], every fragment of every message with `kind`
    /// (`SNAP`, `SNAP | SNAP_END`: a state machine's snapshot).
    pub fn publish_flagged<'a, I>(
        &mut self,
        now: Nanos,
        msgs: I,
        kind: u8,
        sink: &mut dyn Sink,
    ) -> Result<u64, PublishError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        let kind = kind & (wire::SNAP | wire::SNAP_END);
        let it = msgs.into_iter();
        if it.clone().any(|m| m.len() > self.max_message_size) {
            return Err(PublishError::TooLarge);
        }
        if self.closed || self.shut {
            return Err(PublishError::Closed);
        }
        if self.taken {
            return Err(PublishError::Taken);
        }
        if self.read_only {
            return Err(PublishError::Forbidden);
        }
        if self.full {
            return Err(PublishError::NoSpace);
        }
        if self.pending.len() >= self.max_pending {
            return Err(PublishError::Busy);
        }
        // Numbers are never reused: a member whose next number would pass
        // u64::MAX (a primary's welcome may say its last is near it) can
        // publish no more, as if closed.
        let frag = self.frag.max(1) as u64;
        let numbers = it.clone().fold(0u64, |n, m| {
            n.saturating_add((m.len() as u64).div_ceil(frag).max(1))
        });
        if self.next_member_seq.checked_add(numbers).is_none() {
            return Err(PublishError::Closed);
        }
        // The last command waits for the window: the messages join it.
        let waiting = self.sent_n < self.pending.len()
            && self.pending.back().is_some_and(|p| p.count < u16::MAX);
        let mut b = match waiting.then(|| self.pending.pop_back()).flatten() {
            Some(p) => Building {
                d: p.dgram,
                count: p.count,
                first: p.first_seq,
                resent: p.resent,
                waited: true,
            },
            None => self.building(),
        };
        let mut published = 0u64;
        for m in it {
            published += 1;
            if m.is_empty() {
                self.add_cmd(&mut b, now, kind, &[], sink);
            }
            let mut chunks = m.chunks(self.frag).peekable();
            let mut start = true;
            while let Some(c) = chunks.next() {
                let mut flags = kind | if start { 0 } else { CONT };
                if chunks.peek().is_some() {
                    flags |= MORE;
                }
                start = false;
                self.add_cmd(&mut b, now, flags, c, sink);
            }
        }
        self.push_cmd(b, now);
        self.flush(now, sink);
        self.c.published.bump(published);
        Ok(self.next_member_seq - 1)
    }

    fn building(&mut self) -> Building {
        Building {
            d: self.pool.pop().unwrap_or_default(),
            count: 0,
            first: self.next_member_seq,
            resent: false,
            waited: false,
        }
    }

    /// Adds one message to the command being built, queueing it first if
    /// it would not fit.
    fn add_cmd(&mut self, b: &mut Building, now: Nanos, flags: u8, c: &[u8], sink: &mut dyn Sink) {
        if b.count > 0
            && (b.d.len() + wire::CMD_MSG_HEADER + c.len() > self.max_datagram
                || b.count == u16::MAX)
        {
            let full = std::mem::replace(b, self.building());
            self.push_cmd(full, now);
            self.flush(now, sink);
        }
        if b.count == 0 {
            wire::cmd_header(
                &mut b.d,
                CmdKind::Publish,
                self.member_id,
                self.session,
                self.incarnation,
            );
            b.first = self.next_member_seq;
        } else if b.waited {
            self.c.coalesced.bump(1);
        }
        let seq = self.next_member_seq;
        self.next_member_seq += 1;
        wire::write_cmd_msg(&mut b.d, seq, flags, c);
        b.count += 1;
    }

    /// Queues a command built (unsent: [`Tx::flush`] sends it).
    fn push_cmd(&mut self, mut b: Building, now: Nanos) {
        if b.count == 0 {
            self.pool.push(b.d);
            return;
        }
        wire::set_cmd_count(&mut b.d, b.count);
        self.pending.push_back(Pending {
            first_seq: b.first,
            last_seq: self.next_member_seq - 1,
            sent: now,
            attempts: 0,
            resent: b.resent,
            count: b.count,
            dgram: b.d,
        });
        self.c.pending.set(self.pending.len() as u64);
        self.apply_skip();
    }

    /// Marks the first pending command to skip to `self.skip` (dropping
    /// its messages before it, delivered on the side a fork dropped).
    pub(super) fn apply_skip(&mut self) {
        let Some(s) = self.skip else { return };
        let Some(p) = self.pending.front_mut() else {
            return;
        };
        if let Some(first) = wire::skip_to(&mut p.dgram, s) {
            p.first_seq = first;
            p.count = (p.last_seq - first + 1) as u16;
        }
        self.skip = None;
    }
}

/// The command datagram being built.
struct Building {
    d: Vec<u8>,
    count: u16,
    first: u64,
    resent: bool,
    /// It waited for the window: messages join it (coalesced).
    waited: bool,
}
