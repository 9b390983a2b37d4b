//! A simulated member: the member's real state machines (`Join`, `Tx`,
//! `Rx`, the handover between them) and a workload that publishes on
//! time, through a life of incarnations: it joins (from sequence 1, from
//! a later point, or live), publishes and delivers, and may be killed
//! (no goodbye: its id stays bound for the lease) or closed with publishes
//! in flight, then opens again as a new incarnation.

use std::net::SocketAddr;

use super::actors::{Actor, Disk, Event};
use super::check::payload;
use super::machine::Machine;
use crate::seq::core::member::{self, Join, Mark, MemberConfig, MemberEvent, Rx, Tx};
use crate::seq::core::{MemLog, Nanos, Outbox, Rng, MICRO, MILLI};
use crate::seq::BusMode;

/// Where an incarnation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the next message on (`from: :live`).
    Live,
    /// From sequence number `n` (a rewind).
    From(u64),
    /// From the latest snapshot of a state machine (`from: :snapshot`).
    Snapshot,
}

/// The workload of one member.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Publishes stop at this time.
    pub until: Nanos,
    /// Time between publishes: uniform in this range.
    pub gap: (Nanos, Nanos),
    /// Share of large (fragmented) messages.
    pub large: f64,
}

enum MState {
    /// Not running: before its first open, or killed or closed; opens
    /// again at `until` (never if `Nanos::MAX`).
    Down {
        until: Nanos,
    },
    Joining(Join),
    Joined {
        tx: Box<Tx>,
        rx: Box<Rx>,
        /// What the receive side had heard when this batch began.
        mark: Option<Mark>,
        /// Closing: publishes refused, what is pending still resent until
        /// it is delivered or this time comes; then down until the second.
        closing: Option<(Nanos, Nanos)>,
    },
}

/// How long a close waits for what is pending (`Bus.close/2`'s timeout).
const CLOSE_WAIT: Nanos = 300 * MILLI;

pub struct SimMember {
    id: u32,
    base: MemberConfig,
    unicast: bool,
    state: MState,
    /// How the next (or current) incarnation starts.
    start: Start,
    /// The incarnation number (0: the first).
    inc: u32,
    publisher: Publisher,
    machine: Machine,
    rng: Rng,
}

/// Publishes the workload's messages on time; its counter goes on across
/// incarnations (the payload says who and which).
struct Publisher {
    id: u32,
    work: Workload,
    counter: u64,
    next_publish: Nanos,
    rng: Rng,
}

impl SimMember {
    /// A member that opens first at `open_at`, starting at `start`.
    pub fn new(
        id: u32,
        cfg: MemberConfig,
        work: Workload,
        seed: u64,
        open_at: Nanos,
        start: Start,
    ) -> SimMember {
        let unicast = matches!(cfg.bus, BusMode::Unicast);
        let mut rng = Rng::new(seed);
        SimMember {
            id,
            unicast,
            state: MState::Down { until: open_at },
            start,
            inc: 0,
            publisher: Publisher {
                id,
                work,
                counter: 0,
                next_publish: 0,
                rng: Rng::new(rng.next_u64()),
            },
            base: cfg,
            machine: Machine::new(seed),
            rng,
        }
    }

    /// Opens a new incarnation now.
    fn open(&mut self, ev: &mut Vec<Event>) {
        let mut cfg = self.base.clone();
        cfg.incarnation = self.rng.next_u64() | 1;
        cfg.from = match self.start {
            Start::Live | Start::Snapshot => None,
            Start::From(n) => Some(n),
        };
        cfg.from_snapshot = self.start == Start::Snapshot;
        self.base.incarnation = cfg.incarnation;
        ev.push(Event::Trace(format!(
            "member {} opens (incarnation {}, {:?})",
            self.id, self.inc, self.start
        )));
        self.state = MState::Joining(Join::new(&cfg, self.unicast));
    }

    fn config(&self) -> MemberConfig {
        let mut cfg = self.base.clone();
        cfg.from = match self.start {
            Start::Live | Start::Snapshot => None,
            Start::From(n) => Some(n),
        };
        cfg.from_snapshot = self.start == Start::Snapshot;
        cfg
    }

    /// Whether an incarnation is open (joining or joined).
    pub fn is_open(&self) -> bool {
        !matches!(self.state, MState::Down { .. })
    }

    /// How the next incarnation starts: live or from the beginning.
    fn next_start(&mut self) -> Start {
        match self.rng.range(0, 4) {
            0 | 1 => Start::Live,
            2 => Start::From(1),
            _ => Start::Snapshot,
        }
    }

    fn go_down(&mut self, reopen_at: Nanos, start: Start) {
        self.state = MState::Down { until: reopen_at };
        self.start = start;
        self.inc += 1;
    }
}

impl Publisher {
    fn publish(&mut self, now: Nanos, tx: &mut Tx, out: &mut Outbox, ev: &mut Vec<Event>) {
        while self.next_publish <= now && now < self.work.until {
            let len = if self.rng.chance(self.work.large) {
                self.rng.range(2_000, 20_000) as usize
            } else {
                self.rng.range(12, 200) as usize
            };
            let p = payload(self.id, self.counter + 1, len);
            // Refused (busy, full, closed): tried again at the next
            // publish time, under the same counter.
            if tx.publish_many(now, [p.as_slice()], out).is_ok() {
                self.counter += 1;
                ev.push(Event::Accepted {
                    counter: self.counter,
                });
            }
            self.next_publish += self.rng.range(self.work.gap.0, self.work.gap.1).max(1);
        }
    }
}

fn member_events(id: u32, rx: &mut Rx, machine: &mut Machine, ev: &mut Vec<Event>) {
    for e in rx.take_events() {
        if let MemberEvent::Fork { resume, .. } = e {
            ev.push(Event::MovedBack { resume });
            machine.lost();
        }
        if let MemberEvent::Trimmed { from, first } = e {
            ev.push(Event::Skipped { from, first });
            ev.push(Event::Retention("member_skip"));
            machine.lost();
        }
        if !matches!(e, MemberEvent::Term { .. }) {
            ev.push(Event::Trace(format!("member {id}: {e:?}")));
        }
    }
}

impl Actor for SimMember {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        _out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        match &mut self.state {
            MState::Joining(j) => j.on_datagram(now, d, Some(from)),
            MState::Joined { rx, tx, mark, .. } => {
                if mark.is_none() {
                    *mark = Some(rx.mark());
                    member::looked(tx.counters(), now);
                }
                let machine = &mut self.machine;
                let mut f = |seq: u64, member_id: u32, snap: u8, data: &[u8]| {
                    if snap == 0 {
                        ev.push(Event::Delivered {
                            seq,
                            member_id,
                            data: data.to_vec(),
                        });
                    }
                    machine.delivered(seq, member_id, snap, data, ev);
                };
                rx.on_datagram(now, d, Some(from), &mut f);
                // Events in their place among the deliveries.
                member_events(self.id, rx, &mut self.machine, ev);
            }
            MState::Down { .. } => {}
        }
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        if let MState::Joined { tx, rx, mark, .. } = &mut self.state {
            let Some(m) = mark.take() else { return };
            if let Some(h) = rx.finish(now, m, out) {
                if let Some(to) = h.switch_to {
                    ev.push(Event::Trace(format!("member {} follows {to}", self.id)));
                }
                if let Some(e) = h.apply(tx, now, out) {
                    ev.push(Event::Trace(format!("member {}: {e:?}", self.id)));
                }
            }
            member_events(self.id, rx, &mut self.machine, ev);
        }
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        if let MState::Down { until } = self.state {
            if now < until {
                return until;
            }
            self.open(ev);
        }
        if let MState::Joining(j) = &mut self.state {
            match j.tick(now, out) {
                Ok(w) => match member::from_welcome(&self.config(), &w, self.unicast, now) {
                    Ok((tx, rx)) => {
                        ev.push(Event::Trace(format!(
                            "member {} joined {} at {} (commit {}, last {})",
                            self.id,
                            w.from,
                            rx.next_seq(),
                            w.commit,
                            w.last
                        )));
                        // From a snapshot: a view from its position (or
                        // from 1 if there was none).
                        let snapshot =
                            (self.start == Start::Snapshot && w.snap.0 > 0).then_some(w.snap.2);
                        let start = match self.start {
                            Start::Snapshot => Start::From(snapshot.unwrap_or(1)),
                            s => s,
                        };
                        self.machine.joined(rx.next_seq(), snapshot, now);
                        ev.push(Event::Joined {
                            inc: self.inc,
                            start,
                        });
                        self.state = MState::Joined {
                            tx: Box::new(tx),
                            rx: Box::new(rx),
                            mark: None,
                            closing: None,
                        };
                        let p = &mut self.publisher;
                        p.next_publish = p.next_publish.max(now);
                    }
                    Err(crate::seq::SeqError::Trimmed(first)) => {
                        // Asked to start before what the log keeps: from
                        // its first entry then (what a caller does with
                        // `{:error, {:trimmed, first}}`).
                        ev.push(Event::Trace(format!(
                            "member {} asked for {:?}: trimmed, from {first}",
                            self.id, self.start
                        )));
                        ev.push(Event::Retention("trimmed_open"));
                        self.start = Start::From(first);
                        self.state = MState::Down { until: now };
                        return now;
                    }
                    Err(e) => {
                        // Its id is still bound (a killed incarnation's
                        // lease): open again a little later.
                        ev.push(Event::Trace(format!("member {} refused: {e}", self.id)));
                        self.state = MState::Down {
                            until: now + 200 * MILLI,
                        };
                        return now + 200 * MILLI;
                    }
                },
                Err(due) => return due,
            }
        }
        let MState::Joined {
            tx, rx, closing, ..
        } = &mut self.state
        else {
            return now + 1_000 * MILLI;
        };
        if let Some((deadline, reopen_at)) = *closing {
            if tx.pending() == 0 || now >= deadline {
                // The goodbye, and the caller told what was not delivered.
                let n = tx.undelivered();
                tx.close(now, out);
                ev.push(Event::Trace(format!(
                    "member {} closed, {n} undelivered",
                    self.id
                )));
                ev.push(Event::MemberGone {
                    inc: self.inc,
                    undelivered: Some(n),
                });
                let start = self.next_start();
                self.go_down(reopen_at, start);
                return reopen_at;
            }
        }
        member::looked(tx.counters(), now);
        let mut due = rx.tick(now, out);
        if let Some(d) = tx.tick(now, out) {
            due = due.min(d);
        }
        if let Some((deadline, _)) = *closing {
            due = due.min(deadline);
        }
        let p = &mut self.publisher;
        p.publish(now, tx, out, ev);
        if closing.is_none() && now < p.work.until {
            self.machine.maybe_snapshot(now, tx, out, ev);
        }
        if now < p.work.until {
            due = due.min(p.next_publish.max(now + MICRO));
        }
        due
    }

    fn crash(self: Box<Self>) -> Option<Disk> {
        None
    }

    fn log(&self) -> Option<&MemLog> {
        None
    }

    fn primary_term(&self) -> Option<u64> {
        None
    }

    fn kill_member(&mut self, reopen_at: Nanos, ev: &mut Vec<Event>) {
        if !self.is_open() {
            return;
        }
        let start = self.next_start();
        ev.push(Event::Trace(format!("member {} killed", self.id)));
        ev.push(Event::MemberGone {
            inc: self.inc,
            undelivered: None,
        });
        self.go_down(reopen_at, start);
    }

    fn close_member(
        &mut self,
        now: Nanos,
        reopen_at: Nanos,
        _out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        let MState::Joined { tx, closing, .. } = &mut self.state else {
            return;
        };
        if closing.is_some() {
            return;
        }
        // No more publishes; what is pending is still resent for a while.
        tx.shut();
        ev.push(Event::Trace(format!(
            "member {} closes with {} pending",
            self.id,
            tx.pending()
        )));
        *closing = Some((now + CLOSE_WAIT, reopen_at.max(now + CLOSE_WAIT)));
    }

    fn reopen_member(&mut self, now: Nanos, start: Start) {
        if let MState::Down { until } = &mut self.state {
            *until = (*until).min(now);
            self.start = start;
        }
    }

    fn incarnation(&self) -> u32 {
        self.inc
    }

    fn forks(&self) -> u64 {
        match &self.state {
            MState::Joined { rx, .. } => rx.counters().forks.get(),
            _ => 0,
        }
    }

    fn position(&self) -> u64 {
        match &self.state {
            MState::Joined { rx, .. } => rx.next_seq(),
            _ => 0,
        }
    }

    fn tx_counts(&self) -> (u64, u64) {
        match &self.state {
            MState::Joined { tx, .. } => {
                let c = tx.counters();
                (c.commands.get(), c.resent.get())
            }
            _ => (0, 0),
        }
    }

    fn describe(&self) -> String {
        match &self.state {
            MState::Down { until } => format!("member {} down until {until}", self.id),
            MState::Joining(_) => format!("member {} joining", self.id),
            MState::Joined { tx, rx, .. } => {
                let (t, r) = (tx.counters(), rx.counters());
                format!(
                    "member {} inc {} term {} next {} commit {} pending {} in_flight {} cwnd {} rto {} us oldest {:?} published {} resent {} nacked {} delivered {} gaps {} replay_requests {} dup {} forks {}",
                    self.id,
                    self.inc,
                    rx.epoch(),
                    rx.next_seq(),
                    rx.commit(),
                    tx.pending(),
                    tx.in_flight(),
                    tx.cwnd(),
                    tx.rto() / MICRO,
                    tx.oldest_pending(),
                    t.published.get(),
                    t.resent.get(),
                    t.nacked.get(),
                    r.delivered.get(),
                    r.gaps.get(),
                    r.replay_requests.get(),
                    r.duplicates.get(),
                    r.forks.get(),
                )
            }
        }
    }
}
