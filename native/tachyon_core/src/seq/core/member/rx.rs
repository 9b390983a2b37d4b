//! The receive side of a member: ordering, gap requests, reassembly,
//! epochs, hellos after a silence.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::config::{MemberConfig, RxCounters};
use super::Deliver;
use crate::seq::core::{nanos, Nanos, Rng, Sink};
use crate::seq::wire::{self, Bus, BusKind, Msg, CONT, CONTROL, MORE};

/// A message held while a gap before it is filled.
struct Held {
    member_id: u32,
    member_seq: u64,
    flags: u8,
    data: Vec<u8>,
}

/// The ordering state of a member.
pub struct Rx {
    member_id: u32,
    session: u64,
    unicast: bool,
    max_buffer: u64,
    max_message_size: usize,
    replay_chunk: u64,
    retransmit_after: Nanos,
    hello_after: Nanos,
    loss: f64,
    alternates: Vec<SocketAddr>,
    /// Where requests go (the primary).
    leader: SocketAddr,
    next: u64,
    /// Every sequence number below this one exists.
    known: u64,
    held: BTreeMap<u64, Held>,
    partial: HashMap<u32, Vec<u8>>,
    /// An outstanding replay request: up to which sequence number, when.
    requested: Option<(u64, Nanos)>,
    heard: bool,
    last_heard: Nanos,
    own_seen: u64,
    rng: Rng,
    scratch: Vec<u8>,
    epoch: u32,
    /// A new primary's address, for the shell to retarget to.
    switch_to: Option<SocketAddr>,
    /// When the last datagram came (a standby watches it).
    last_datagram: Nanos,
    c: Arc<CachePadded<RxCounters>>,
}

impl Rx {
    /// After a welcome from `leader`: `next_seq` is the sequencer's next
    /// sequence number, `last` this member's last sequenced `member_seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: &MemberConfig,
        session: u64,
        epoch: u32,
        leader: SocketAddr,
        next_seq: u64,
        last: u64,
        unicast: bool,
        now: Nanos,
    ) -> Rx {
        let next = cfg
            .from
            .map_or(next_seq, |f| if cfg.raw { f } else { f.max(1) });
        let c = Arc::new(CachePadded::new(RxCounters::default()));
        c.hellos.bump(1);
        c.next_seq.set(next);
        c.epoch.set(epoch as u64);
        Rx {
            member_id: cfg.member_id,
            session,
            unicast,
            max_buffer: cfg.max_buffer,
            max_message_size: cfg.max_message_size,
            replay_chunk: cfg.replay_chunk,
            retransmit_after: nanos(cfg.retransmit_after),
            hello_after: nanos(cfg.hello_after),
            loss: cfg.loss,
            alternates: cfg.alternates.clone(),
            leader,
            next,
            known: next_seq,
            held: BTreeMap::new(),
            partial: HashMap::new(),
            requested: None,
            heard: true,
            last_heard: now,
            own_seen: last,
            rng: Rng::new(0x2545_f491_4f6c_dd1d ^ (cfg.member_id as u64) << 7),
            scratch: Vec::with_capacity(64),
            epoch,
            switch_to: None,
            last_datagram: now,
            c,
        }
    }

    pub fn counters(&self) -> &Arc<CachePadded<RxCounters>> {
        &self.c
    }

    /// The highest `member_seq` of this member seen sequenced.
    pub fn own_seen(&self) -> u64 {
        self.own_seen
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// How long since the last datagram from the sequencer.
    pub fn silence(&self, now: Nanos) -> Nanos {
        now.saturating_sub(self.last_datagram)
    }

    /// One bus datagram from `from`.
    pub fn on_datagram(&mut self, d: &[u8], from: Option<SocketAddr>, deliver: &mut Deliver<'_>) {
        if self.loss > 0.0 && self.rng.chance(self.loss) {
            self.c.injected_losses.bump(1);
            return;
        }
        let bus = match Bus::parse(d) {
            Ok(b) => b,
            Err(_) => {
                self.c.malformed.bump(1);
                return;
            }
        };
        if bus.session != self.session {
            self.c.wrong_session.bump(1);
            return;
        }
        // Epochs (docs/ARCHITECTURE.md, "Failover"): a lower one is a
        // deposed sequencer, ignored; a higher one is a new primary, whose
        // address the member sends to from now on.
        if bus.epoch < self.epoch {
            self.c.stale_epoch.bump(1);
            return;
        }
        if bus.epoch > self.epoch {
            self.epoch = bus.epoch;
            self.c.epoch.set(bus.epoch as u64);
            if let Some(from) = from {
                self.leader = from;
                self.switch_to = Some(from);
            }
            // The new primary's log ends before messages this member
            // already delivered: they were never copied to it (a fork).
            if bus.kind != BusKind::Data && bus.seq < self.next {
                self.c.forks.bump(1);
            }
        }
        self.c.datagrams.bump(1);
        match bus.kind {
            BusKind::Heartbeat | BusKind::Welcome => {
                if bus.seq > self.known {
                    self.known = bus.seq;
                }
            }
            BusKind::Data => {
                let end = bus.seq + bus.count as u64;
                if end > self.known {
                    self.known = end;
                }
                for (seq, m) in bus.messages() {
                    if seq < self.next {
                        self.c.duplicates.bump(1);
                    } else if seq == self.next {
                        self.apply(seq, m, deliver);
                        self.drain(deliver);
                    } else if seq - self.next < self.max_buffer {
                        if let std::collections::btree_map::Entry::Vacant(v) = self.held.entry(seq)
                        {
                            v.insert(Held {
                                member_id: m.member_id,
                                member_seq: m.member_seq,
                                flags: m.flags,
                                data: m.data.to_vec(),
                            });
                            if self.held.len() == 1 {
                                self.c.gaps.bump(1);
                            }
                        } else {
                            self.c.duplicates.bump(1);
                        }
                    } else {
                        self.c.dropped_ahead.bump(1);
                    }
                }
            }
        }
        self.c.next_seq.set(self.next);
    }

    /// After the datagrams of one poll (at least one): asks for a gap at
    /// once; returns a new primary to retarget to, if any.
    pub fn end_batch(&mut self, now: Nanos, sink: &mut dyn Sink) -> Option<SocketAddr> {
        self.heard = true;
        self.last_datagram = now;
        if self.next < self.known {
            self.want(now, sink);
        }
        self.switch_to.take()
    }

    /// Delivers the held messages that are now in order.
    fn drain(&mut self, deliver: &mut Deliver<'_>) {
        while let Some(h) = self.held.remove(&self.next) {
            let m = Msg {
                member_id: h.member_id,
                member_seq: h.member_seq,
                flags: h.flags,
                data: &h.data,
            };
            let seq = self.next;
            self.apply(seq, m, deliver);
        }
    }

    /// Takes message `seq` (the next one): delivers it, or a reassembled
    /// message whose last fragment it is.
    fn apply(&mut self, seq: u64, m: Msg<'_>, deliver: &mut Deliver<'_>) {
        self.next = seq + 1;
        if m.member_id == self.member_id && m.member_seq > self.own_seen {
            self.own_seen = m.member_seq;
        }
        let deliver = match deliver {
            Deliver::Entries(f) => return f(seq, &m),
            Deliver::Messages(f) => f,
        };
        if m.flags & CONTROL != 0 || m.member_id == 0 {
            return;
        }
        if m.flags & (MORE | CONT) == 0 {
            self.c.delivered.bump(1);
            deliver(seq, m.member_id, m.data);
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
        } else {
            self.c.delivered.bump(1);
            deliver(seq, m.member_id, &v);
        }
    }

    /// Asks for the first missing range if no request for it is out (or
    /// the last one is older than `retransmit_after`).
    fn want(&mut self, now: Nanos, sink: &mut dyn Sink) {
        if self.next >= self.known {
            self.requested = None;
            return;
        }
        if let Some((upto, at)) = self.requested {
            if self.next < upto && now.saturating_sub(at) < self.retransmit_after {
                return;
            }
        }
        let mut to = self.known.min(self.next + self.replay_chunk);
        if let Some((&first, _)) = self.held.first_key_value() {
            to = to.min(first.max(self.next + 1));
        }
        let mut r = std::mem::take(&mut self.scratch);
        wire::replay(&mut r, self.member_id, self.session, self.next, to);
        sink.send(&[self.leader], &r);
        self.scratch = r;
        self.requested = Some((to, now));
        self.c.replay_requests.bump(1);
    }

    /// Timed work when a poll found nothing: gap requests, hellos after a
    /// silence. Returns when to tick again at the latest.
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Nanos {
        let mut due = now + self.hello_after;
        if self.next < self.known {
            self.want(now, sink);
            due = due.min(now + self.retransmit_after);
        }
        if self.heard {
            self.heard = false;
            self.last_heard = now;
        } else if now.saturating_sub(self.last_heard) >= self.hello_after {
            self.last_heard = now;
            let mut h = std::mem::take(&mut self.scratch);
            wire::hello(&mut h, self.member_id, self.unicast);
            sink.send(&[self.leader], &h);
            for a in &self.alternates {
                sink.send(std::slice::from_ref(a), &h);
            }
            self.scratch = h;
            self.c.hellos.bump(1);
        }
        due
    }
}
