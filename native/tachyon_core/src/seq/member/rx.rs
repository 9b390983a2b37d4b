//! The receive side of a member: ordering, gap requests, reassembly.

use std::time::Instant;

use std::net::SocketAddr;

use super::{Deliver, Held, Member, Rx};
use crate::seq::wire::{self, Bus, BusKind, Msg, CONT, CONTROL, MORE};

impl Member {
    fn rand(rx: &mut Rx) -> f64 {
        let mut x = rx.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rx.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(super) fn datagram(
        &self,
        rx: &mut Rx,
        d: &[u8],
        from: Option<SocketAddr>,
        deliver: &mut Deliver<'_>,
    ) {
        if self.cfg.loss > 0.0 && Self::rand(rx) < self.cfg.loss {
            self.rxc.injected_losses.bump(1);
            return;
        }
        let bus = match Bus::parse(d) {
            Ok(b) => b,
            Err(_) => {
                self.rxc.malformed.bump(1);
                return;
            }
        };
        if bus.session != self.session {
            self.rxc.wrong_session.bump(1);
            return;
        }
        // Epochs (docs/ARCHITECTURE.md, "Failover"): a lower one is a
        // deposed sequencer, ignored; a higher one is a new primary, whose
        // address the member sends to from now on.
        if bus.epoch < rx.epoch {
            self.rxc.stale_epoch.bump(1);
            return;
        }
        if bus.epoch > rx.epoch {
            rx.epoch = bus.epoch;
            rx.switch_to = from;
            // The new primary's log ends before messages this member
            // already delivered: they were never copied to it (a fork).
            if bus.kind != BusKind::Data && bus.seq < rx.next {
                self.rxc.forks.bump(1);
            }
        }
        self.rxc.datagrams.bump(1);
        match bus.kind {
            BusKind::Heartbeat | BusKind::Welcome => {
                if bus.seq > rx.known {
                    rx.known = bus.seq;
                }
            }
            BusKind::Data => {
                let end = bus.seq + bus.count as u64;
                if end > rx.known {
                    rx.known = end;
                }
                for (seq, m) in bus.messages() {
                    if seq < rx.next {
                        self.rxc.duplicates.bump(1);
                    } else if seq == rx.next {
                        self.apply(rx, seq, m, deliver);
                        self.drain(rx, deliver);
                    } else if seq - rx.next < self.cfg.max_buffer {
                        if !rx.held.contains_key(&seq) {
                            if rx.held.is_empty() {
                                self.rxc.gaps.bump(1);
                            }
                            rx.held.insert(
                                seq,
                                Held {
                                    member_id: m.member_id,
                                    member_seq: m.member_seq,
                                    flags: m.flags,
                                    data: m.data.to_vec(),
                                },
                            );
                        } else {
                            self.rxc.duplicates.bump(1);
                        }
                    } else {
                        self.rxc.dropped_ahead.bump(1);
                    }
                }
            }
        }
    }

    /// Delivers the held messages that are now in order.
    fn drain(&self, rx: &mut Rx, deliver: &mut Deliver<'_>) {
        while let Some(h) = rx.held.remove(&rx.next) {
            let m = Msg {
                member_id: h.member_id,
                member_seq: h.member_seq,
                flags: h.flags,
                data: &h.data,
            };
            let seq = rx.next;
            self.apply(rx, seq, m, deliver);
        }
    }

    /// Takes message `seq` (the next one): delivers it, or a reassembled
    /// message whose last fragment it is.
    fn apply(&self, rx: &mut Rx, seq: u64, m: Msg<'_>, deliver: &mut Deliver<'_>) {
        rx.next = seq + 1;
        if m.member_id == self.cfg.member_id && m.member_seq > rx.own_seen {
            rx.own_seen = m.member_seq;
        }
        let deliver = match deliver {
            Deliver::Entries(f) => return f(seq, &m),
            Deliver::Messages(f) => f,
        };
        if m.flags & CONTROL != 0 || m.member_id == 0 {
            return;
        }
        if m.flags & (MORE | CONT) == 0 {
            self.rxc.delivered.bump(1);
            deliver(seq, m.member_id, m.data);
            return;
        }
        let part = if m.flags & CONT == 0 {
            let mut v = rx.partial.remove(&m.member_id).unwrap_or_default();
            v.clear();
            Some(v)
        } else {
            rx.partial.remove(&m.member_id)
        };
        // A continuation without its start (a rewind began mid-message): skip.
        let Some(mut v) = part else { return };
        if v.len() + m.data.len() > self.cfg.max_message_size {
            self.rxc.oversized.bump(1);
            return;
        }
        v.extend_from_slice(m.data);
        if m.flags & MORE != 0 {
            rx.partial.insert(m.member_id, v);
        } else {
            self.rxc.delivered.bump(1);
            deliver(seq, m.member_id, &v);
        }
    }

    /// Asks for the first missing range if no request for it is out (or
    /// the last one is older than `retransmit_after`).
    pub(super) fn want(&self, rx: &mut Rx, now: Instant) {
        if rx.next >= rx.known {
            rx.requested = None;
            return;
        }
        if let Some((upto, at)) = rx.requested {
            if rx.next < upto && now.duration_since(at) < self.cfg.retransmit_after {
                return;
            }
        }
        let mut to = rx.known.min(rx.next + self.cfg.replay_chunk);
        if let Some((&first, _)) = rx.held.first_key_value() {
            to = to.min(first.max(rx.next + 1));
        }
        let mut r = std::mem::take(&mut rx.scratch);
        wire::replay(&mut r, self.cfg.member_id, self.session, rx.next, to);
        let _ = self.send_bytes(&r);
        rx.scratch = r;
        rx.requested = Some((to, now));
        self.rxc.replay_requests.bump(1);
    }
}
