//! The sequencer's protocol: stamps every new message with the next index
//! of its log, appends it and sends it on the bus; drops duplicates by
//! `(member_id, member_seq)`; answers hellos and replay requests; sends
//! heartbeats when idle. The shell (`seq::sequencer`) feeds it the datagrams
//! of each `recvmmsg`, calls [`SequencerCore::end_batch`] after them and
//! [`SequencerCore::tick`] when idle.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::{Log, Nanos, Sink};
use crate::counter::Counter;
use crate::seq::wire::{self, BusKind, Cmd, CmdKind, Msg, CONTROL, EPOCH};
use crate::seq::{BusMode, SeqError};

/// Most members in the unicast fan-out.
pub const MAX_MEMBERS: usize = 4096;

/// The protocol's options (a subset of `SequencerConfig`).
#[derive(Debug, Clone)]
pub struct CoreConfig {
    pub bus: BusMode,
    pub max_datagram: usize,
    pub batching: bool,
    pub heartbeat: Nanos,
    pub heartbeat_after: Nanos,
    pub replay_max: usize,
    pub new_epoch: bool,
}

/// The sequencer's counters (one writer: the thread driving the core).
#[derive(Debug, Default)]
pub struct Counters {
    pub messages: Counter,
    pub datagrams: Counter,
    pub heartbeats: Counter,
    pub duplicates: Counter,
    pub out_of_order: Counter,
    pub replays: Counter,
    pub replayed: Counter,
    pub malformed: Counter,
    pub wrong_session: Counter,
    pub oversized: Counter,
    pub send_errors: Counter,
    pub store_errors: Counter,
    pub members: Counter,
}

/// A sequencer's state.
pub struct SequencerCore<L: Log> {
    log: L,
    session: u64,
    epoch: u32,
    /// Last sequenced `member_seq` of every member.
    last: HashMap<u32, u64>,
    /// The unicast fan-out.
    members: Vec<SocketAddr>,
    /// Where bus datagrams go on a multicast bus.
    group: Option<SocketAddr>,
    cfg: CoreConfig,
    next: u64,
    /// The data datagram being built.
    out: Vec<u8>,
    out_count: u16,
    recovered: u64,
    first_next: u64,
    /// Heartbeats: the last datagram sent, and how long after it the next
    /// heartbeat is due (`heartbeat_after`, then ten times longer each time
    /// up to `heartbeat`).
    last_send: Nanos,
    due: Nanos,
    sent_in_batch: bool,
    c: Arc<CachePadded<Counters>>,
}

impl<L: Log> SequencerCore<L> {
    /// Recovers the session, every member's last `member_seq` and the next
    /// sequence number from `log` (a new log gets a session record); with
    /// `new_epoch`, starts the next epoch (an epoch record).
    pub fn start(mut log: L, cfg: CoreConfig, now: Nanos) -> Result<Self, SeqError> {
        let (session, mut last, mut next) = super::recover::recover(&mut log)?;
        let mut epoch = last.remove(&0).unwrap_or(0) as u32;
        if cfg.new_epoch {
            epoch += 1;
            let mut e = Vec::new();
            wire::write_msg(&mut e, 0, epoch as u64, CONTROL | EPOCH, &[]);
            log.append(&e).map_err(|_| SeqError::BadLog)?;
            next += 1;
        }
        let group = match cfg.bus {
            BusMode::Multicast { group, .. } => Some(group),
            BusMode::Unicast => None,
        };
        Ok(SequencerCore {
            recovered: last.len() as u64,
            log,
            session,
            epoch,
            last,
            members: Vec::new(),
            group,
            out: Vec::with_capacity(cfg.max_datagram),
            out_count: 0,
            next,
            first_next: next,
            last_send: now,
            due: cfg.heartbeat_after,
            sent_in_batch: false,
            cfg,
            c: Arc::new(CachePadded::new(Counters::default())),
        })
    }

    pub fn counters(&self) -> &Arc<CachePadded<Counters>> {
        &self.c
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The next sequence number at start (after the epoch record).
    pub fn first_next(&self) -> u64 {
        self.first_next
    }

    pub fn recovered_members(&self) -> u64 {
        self.recovered
    }

    /// The last sequenced `member_seq` of `member_id`.
    pub fn last_of(&self, member_id: u32) -> u64 {
        self.last.get(&member_id).copied().unwrap_or(0)
    }

    pub fn log(&self) -> &L {
        &self.log
    }

    pub fn into_log(self) -> L {
        self.log
    }

    /// One command datagram from `from`.
    pub fn on_datagram(
        &mut self,
        _now: Nanos,
        from: Option<SocketAddr>,
        d: &[u8],
        sink: &mut dyn Sink,
    ) {
        let cmd = match Cmd::parse(d) {
            Ok(c) => c,
            Err(_) => {
                self.c.malformed.bump(1);
                return;
            }
        };
        match cmd.kind {
            CmdKind::Publish => {
                if cmd.session != self.session {
                    self.c.wrong_session.bump(1);
                    return;
                }
                for p in cmd.published() {
                    self.publish(cmd.member_id, p.member_seq, p.flags, p.data, sink);
                }
            }
            CmdKind::Hello => {
                let Some(from) = from else { return };
                if cmd.unicast() && !self.members.contains(&from) {
                    if self.members.len() >= MAX_MEMBERS {
                        return;
                    }
                    self.members.push(from);
                    self.c.members.bump(1);
                }
                let last = self.last.get(&cmd.member_id).copied().unwrap_or(0);
                let mut w = Vec::with_capacity(wire::BUS_HEADER + 8);
                wire::bus_header(
                    &mut w,
                    BusKind::Welcome,
                    self.epoch,
                    self.session,
                    self.next,
                );
                w.extend_from_slice(&last.to_le_bytes());
                sink.send(&[from], &w);
            }
            CmdKind::Replay => {
                if cmd.session != self.session {
                    self.c.wrong_session.bump(1);
                    return;
                }
                if let Some(from) = from {
                    let (a, z) = cmd.range();
                    self.replay(a, z, from, sink);
                }
            }
            CmdKind::Bye => {
                if let Some(from) = from {
                    if let Some(i) = self.members.iter().position(|m| *m == from) {
                        self.members.swap_remove(i);
                        self.c.members.add(u64::MAX); // wrapping -1
                    }
                }
            }
        }
    }

    fn publish(
        &mut self,
        member_id: u32,
        member_seq: u64,
        flags: u8,
        data: &[u8],
        sink: &mut dyn Sink,
    ) {
        let last = self.last.get(&member_id).copied().unwrap_or(0);
        if member_seq <= last {
            self.c.duplicates.bump(1);
            return;
        }
        if member_seq != last + 1 {
            self.c.out_of_order.bump(1);
            return;
        }
        let size = wire::MSG_HEADER + data.len();
        if wire::BUS_HEADER + size > self.cfg.max_datagram {
            self.c.oversized.bump(1);
            return;
        }
        if !self.cfg.batching
            || self.out_count == u16::MAX
            || self.out.len() + size > self.cfg.max_datagram
        {
            self.flush(sink);
        }
        if self.out_count == 0 {
            wire::bus_header(
                &mut self.out,
                BusKind::Data,
                self.epoch,
                self.session,
                self.next,
            );
        }
        // The bus message is the log entry: written once into the datagram
        // being built, appended to the log from there.
        let at = self.out.len();
        wire::write_msg(&mut self.out, member_id, member_seq, flags, data);
        if self.log.append(&self.out[at..]).is_err() {
            // Not stamped: the member resends it later.
            self.out.truncate(at);
            self.c.store_errors.bump(1);
            return;
        }
        self.last.insert(member_id, member_seq);
        self.out_count += 1;
        self.next += 1;
        self.c.messages.bump(1);
    }

    /// Sends the data datagram being built, if any, on the bus.
    fn flush(&mut self, sink: &mut dyn Sink) {
        if self.out_count == 0 {
            return;
        }
        wire::set_count(&mut self.out, self.out_count);
        self.out_count = 0;
        self.send_bus(sink);
        self.c.datagrams.bump(1);
        self.sent_in_batch = true;
    }

    fn send_bus(&self, sink: &mut dyn Sink) {
        match &self.group {
            Some(g) => sink.send(std::slice::from_ref(g), &self.out),
            None => sink.send(&self.members, &self.out),
        }
    }

    /// The end of a receive batch: the datagram being built goes out.
    pub fn end_batch(&mut self, now: Nanos, sink: &mut dyn Sink) {
        self.flush(sink);
        if std::mem::take(&mut self.sent_in_batch) {
            self.due = self.cfg.heartbeat_after;
            self.last_send = now;
        }
    }

    /// Timed work when idle (a heartbeat when due); returns when to tick
    /// again at the latest.
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Nanos {
        if now.saturating_sub(self.last_send) >= self.due {
            wire::bus_header(
                &mut self.out,
                BusKind::Heartbeat,
                self.epoch,
                self.session,
                self.next,
            );
            self.send_bus(sink);
            self.out.clear();
            self.c.heartbeats.bump(1);
            self.due = (self.due.saturating_mul(10)).min(self.cfg.heartbeat);
            self.last_send = now;
        }
        self.last_send.saturating_add(self.due)
    }

    /// Answers `[a, z)` to `to` with at most `replay_max` messages.
    fn replay(&mut self, a: u64, z: u64, to: SocketAddr, sink: &mut dyn Sink) {
        self.c.replays.bump(1);
        let z = z.min(self.next);
        if a >= z {
            return;
        }
        let n = ((z - a) as usize).min(self.cfg.replay_max);
        let mut d = Vec::with_capacity(self.cfg.max_datagram);
        let mut count = 0u16;
        let mut sent = 0u64;
        let max = self.cfg.max_datagram;
        let (session, epoch) = (self.session, self.epoch);
        let mut out = |d: &mut Vec<u8>, count: &mut u16| {
            if *count > 0 {
                wire::set_count(d, *count);
                sink.send(&[to], d);
                *count = 0;
            }
        };
        let r = self.log.read_range(a, n, &mut |seq, e| {
            if count > 0 && (d.len() + e.len() > max || count == u16::MAX) {
                out(&mut d, &mut count);
            }
            if count == 0 {
                wire::bus_header(&mut d, BusKind::Data, epoch, session, seq);
            }
            d.extend_from_slice(e);
            count += 1;
            sent += 1;
        });
        out(&mut d, &mut count);
        if r.is_err() {
            self.c.store_errors.bump(1);
        }
        self.c.replayed.bump(sent);
    }
}

/// A log entry's message (for a reader of the log).
pub fn entry(e: &[u8]) -> Option<Msg<'_>> {
    Msg::from_entry(e).ok()
}
