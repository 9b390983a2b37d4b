//! The receive side's buffers: entries held in order until the commit
//! position passes them ([`Ring`]), and what was delivered ([`Stream`]:
//! the position, fragments' reassembly, the epochs delivered).

use super::*;

/// Entries in order, not yet delivered (waiting for the commit position),
/// back to back in one buffer: no allocation per message.
#[derive(Default, Clone)]
pub(super) struct Ring {
    pub(super) buf: Vec<u8>,
    pub(super) head: usize,
    pub(super) spans: VecDeque<(usize, usize)>,
}

impl Ring {
    /// The entries held, in order (not the buffer's layout).
    pub(super) fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        self.spans.len().hash(h);
        for &(a, l) in &self.spans {
            self.buf[a..a + l].hash(h);
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.spans.len() as u64
    }

    pub(super) fn push(&mut self, m: &Msg<'_>) {
        let at = self.buf.len();
        m.write(&mut self.buf);
        self.spans.push_back((at, self.buf.len() - at));
    }

    pub(super) fn push_raw(&mut self, e: &[u8]) {
        let at = self.buf.len();
        self.buf.extend_from_slice(e);
        self.spans.push_back((at, e.len()));
    }

    pub(super) fn front(&self) -> Option<&[u8]> {
        self.spans.front().map(|&(a, l)| &self.buf[a..a + l])
    }

    pub(super) fn pop(&mut self) {
        if let Some((a, l)) = self.spans.pop_front() {
            self.head = a + l;
        }
        if self.spans.is_empty() {
            self.buf.clear();
            self.head = 0;
        } else if self.head > (1 << 20) && self.head > self.buf.len() / 2 {
            self.buf.drain(..self.head);
            for s in self.spans.iter_mut() {
                s.0 -= self.head;
            }
            self.head = 0;
        }
    }

    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
        self.head = 0;
    }
}

/// What has been delivered: the stream's position and reassembly.
#[derive(Clone)]
pub(super) struct Stream {
    pub(super) member_id: u32,
    pub(super) max_message_size: usize,
    pub(super) next: u64,
    /// Entries below this are taken, not delivered (a start beyond the
    /// commit position).
    pub(super) deliver_from: u64,
    /// Where each epoch delivered began (the last: the epoch of entry
    /// `next - 1`).
    pub(super) epochs: Epochs,
    pub(super) delivered_any: bool,
    /// This member's highest `member_seq` delivered (committed).
    pub(super) own: u64,
    pub(super) partial: HashMap<u32, Vec<u8>>,
    /// Deliver snapshot messages (SNAP), flagged; others never see them.
    pub(super) snapshots: bool,
    /// The position of the snapshot this member starts from: once its
    /// last message is delivered, later snapshots are not (the member has
    /// its state; they would only cost it their size).
    pub(super) snapshot_as_of: Option<u64>,
    pub(super) c: Arc<CachePadded<RxCounters>>,
}

impl Stream {
    /// Every field but the counters, fragments in key order.
    pub(super) fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use crate::seq::core::fingerprint::hash_sorted;
        use std::hash::Hash;
        let Stream {
            member_id,
            max_message_size,
            next,
            deliver_from,
            epochs,
            delivered_any,
            own,
            partial,
            snapshots,
            snapshot_as_of,
            c: _,
        } = self;
        (member_id, max_message_size, next, deliver_from, epochs).hash(h);
        (delivered_any, own).hash(h);
        hash_sorted(partial.iter(), h);
        (snapshots, snapshot_as_of).hash(h);
    }

    /// Takes entry `seq` (the next one): delivers it, or a reassembled
    /// message whose last fragment it is.
    pub(super) fn apply(&mut self, seq: u64, m: &Msg<'_>, deliver: &mut Deliver<'_>) {
        self.next = seq + 1;
        self.delivered_any = true;
        // Every entry carries its term: the epochs passed are known even
        // from a start in the middle of one.
        self.epochs.record(m.term, seq);
        // A message of this member's counts as delivered with its last
        // fragment: a fork may lose the rest of one delivered in part, and
        // then it is published again whole.
        if m.member_id == self.member_id && m.flags & MORE == 0 && m.member_seq > self.own {
            self.own = m.member_seq;
        }
        if m.flags & CONTROL != 0 || m.member_id == 0 {
            return;
        }
        let snap = m.flags & (SNAP | SNAP_END);
        if snap != 0 && !self.snapshots {
            // A state machine's snapshot: only for members that ask.
            return;
        }
        if m.flags & (MORE | CONT) == 0 {
            if seq >= self.deliver_from {
                self.c.delivered.bump(1);
                deliver(seq, m.member_id, snap, m.data);
                self.snapshot_done(snap, m.data);
            }
            return;
        }
        let part = if m.flags & CONT == 0 {
            let mut v = self.partial.remove(&m.member_id).unwrap_or_default();
            v.clear();
            Some(v)
        } else {
            self.partial.remove(&m.member_id)
        };
        // A continuation without its start (a rewind began mid-message): skip.
        let Some(mut v) = part else { return };
        if v.len() + m.data.len() > self.max_message_size {
            self.c.oversized.bump(1);
            return;
        }
        v.extend_from_slice(m.data);
        if m.flags & MORE != 0 {
            self.partial.insert(m.member_id, v);
        } else if seq >= self.deliver_from {
            self.c.delivered.bump(1);
            deliver(seq, m.member_id, snap, &v);
            self.snapshot_done(snap, &v);
        }
    }

    /// After a delivery: the last message of the snapshot this member
    /// starts from ends its snapshots (a snapshot message's data begins
    /// with its position).
    fn snapshot_done(&mut self, snap: u8, data: &[u8]) {
        if snap & SNAP_END == 0 || self.snapshot_as_of.is_none() {
            return;
        }
        let as_of = data
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if as_of == self.snapshot_as_of {
            self.snapshots = false;
        }
    }
}
