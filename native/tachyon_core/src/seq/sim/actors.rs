//! The processes of a simulation: sequencer nodes and members, each the
//! real protocol core (`seq::core`) behind one small trait.

use std::net::SocketAddr;

use crate::seq::core::member::{self, Handover, Join, MemberConfig, MemberEvent, Rx, Tx};
use crate::seq::core::node::{Node, NodeConfig};
use crate::seq::core::{
    replay_datagrams, Env, MemLog, Nanos, NodeEvent, Outbox, Replay, Rng, Sink, MICRO, MILLI,
};
use crate::seq::BusMode;

use super::check::payload;

/// What a process reports to the simulation.
#[derive(Debug)]
pub enum Event {
    Delivered {
        seq: u64,
        member_id: u32,
        data: Vec<u8>,
    },
    Accepted {
        counter: u64,
    },
    /// A member moved back to `resume` after a fork: it delivers the
    /// primary's order from there.
    MovedBack {
        resume: u64,
    },
    /// The node became primary of `term`.
    Leader {
        term: u64,
    },
    Trace(String),
}

/// What a node keeps across a crash: its log, and its term and vote.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub log: MemLog,
}

/// A process: the protocol core and its workload.
pub trait Actor {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    );
    /// After the datagrams of one receive batch.
    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>);
    /// Timed work; returns the next deadline.
    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos;
    /// What survives a crash (a node's disk).
    fn crash(self: Box<Self>) -> Option<Disk>;
    /// A node's log.
    fn log(&self) -> Option<&MemLog>;
    /// The term it sends the bus in, if it acts as primary.
    fn primary_term(&self) -> Option<u64>;
    /// The witness says node `down` is down (its BEAM node, say).
    fn witness(&mut self, _now: Nanos, _down: u8) {}
    /// Forks a member reported.
    fn forks(&self) -> u64 {
        0
    }
    /// A member's next sequence number, a node's commit position.
    fn position(&self) -> u64 {
        0
    }
    /// Its state in a line (traces).
    fn describe(&self) -> String {
        String::new()
    }
    /// A member's command datagrams sent, and resent.
    fn tx_counts(&self) -> (u64, u64) {
        (0, 0)
    }
}

// -- members -----------------------------------------------------------------

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
    Joining(Join),
    Joined {
        tx: Box<Tx>,
        rx: Box<Rx>,
    },
    /// Refused: its id is another's.
    Taken,
}

pub struct SimMember {
    id: u32,
    cfg: MemberConfig,
    unicast: bool,
    state: MState,
    publisher: Publisher,
}

/// Publishes the workload's messages on time.
struct Publisher {
    id: u32,
    work: Workload,
    counter: u64,
    next_publish: Nanos,
    rng: Rng,
}

impl SimMember {
    pub fn new(id: u32, cfg: MemberConfig, work: Workload, seed: u64) -> SimMember {
        let unicast = matches!(cfg.bus, BusMode::Unicast);
        SimMember {
            id,
            state: MState::Joining(Join::new(&cfg, unicast)),
            unicast,
            cfg,
            publisher: Publisher {
                id,
                work,
                counter: 0,
                next_publish: 0,
                rng: Rng::new(seed),
            },
        }
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
            // Busy: tried again at the next publish time.
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

fn member_events(id: u32, rx: &mut Rx, ev: &mut Vec<Event>) {
    for e in rx.take_events() {
        if let MemberEvent::Fork { resume, .. } = e {
            ev.push(Event::MovedBack { resume });
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
            MState::Joined { rx, .. } => {
                let mut f = |seq: u64, member_id: u32, data: &[u8]| {
                    ev.push(Event::Delivered {
                        seq,
                        member_id,
                        data: data.to_vec(),
                    })
                };
                rx.on_datagram(now, d, Some(from), &mut f);
                // Events in their place among the deliveries.
                member_events(self.id, rx, ev);
            }
            MState::Taken => {}
        }
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        if let MState::Joined { tx, rx } = &mut self.state {
            let switch = rx.end_batch(now, out);
            if let Some(to) = switch {
                ev.push(Event::Trace(format!("member {} follows {to}", self.id)));
            }
            if let Some(e) = Handover::take(rx, switch).apply(tx, now, out) {
                ev.push(Event::Trace(format!("member {}: {e:?}", self.id)));
            }
            member_events(self.id, rx, ev);
        }
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        if let MState::Joining(j) = &mut self.state {
            match j.tick(now, out) {
                Ok(w) => match member::from_welcome(&self.cfg, &w, self.unicast, now) {
                    Ok((tx, rx)) => {
                        ev.push(Event::Trace(format!(
                            "member {} joined {}",
                            self.id, w.from
                        )));
                        self.state = MState::Joined {
                            tx: Box::new(tx),
                            rx: Box::new(rx),
                        };
                        let p = &mut self.publisher;
                        p.next_publish = p.next_publish.max(now);
                    }
                    Err(e) => {
                        ev.push(Event::Trace(format!("member {} refused: {e}", self.id)));
                        self.state = MState::Taken;
                        return now + 1_000 * MILLI;
                    }
                },
                Err(due) => return due,
            }
        }
        let MState::Joined { tx, rx } = &mut self.state else {
            return now + 1_000 * MILLI;
        };
        let mut due = rx.tick(now, out);
        if let Some(d) = tx.tick(now, out) {
            due = due.min(d);
        }
        let p = &mut self.publisher;
        p.publish(now, tx, out, ev);
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
            MState::Joining(_) => format!("member {} joining", self.id),
            MState::Taken => format!("member {} refused", self.id),
            MState::Joined { tx, rx } => {
                let (t, r) = (tx.counters(), rx.counters());
                format!(
                    "member {} term {} next {} commit {} pending {} in_flight {} cwnd {} rto {} us oldest {:?} published {} resent {} nacked {} delivered {} gaps {} replay_requests {} dup {} forks {}",
                    self.id,
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

// -- nodes ---------------------------------------------------------------------

/// A sequencer node: the core, and its replayer run inline.
pub struct SimNode {
    node: Node<MemLog>,
    replays: Vec<Replay>,
    events: Vec<NodeEvent>,
    buf: Vec<u8>,
}

struct SimEnv<'a> {
    out: &'a mut Outbox,
    replays: &'a mut Vec<Replay>,
    events: &'a mut Vec<NodeEvent>,
}

impl Sink for SimEnv<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.out.send(to, d)
    }
}

impl Env for SimEnv<'_> {
    fn replay(&mut self, job: Replay) {
        self.replays.push(job);
    }

    fn event(&mut self, e: NodeEvent) {
        self.events.push(e);
    }
}

impl SimNode {
    pub fn new(cfg: NodeConfig, disk: Disk, now: Nanos) -> SimNode {
        SimNode {
            node: Node::new(cfg, disk.log, now).expect("node config"),
            replays: Vec::new(),
            events: Vec::new(),
            buf: Vec::new(),
        }
    }

    fn call(
        &mut self,
        out: &mut Outbox,
        ev: &mut Vec<Event>,
        f: impl FnOnce(&mut Node<MemLog>, &mut SimEnv<'_>),
    ) {
        let mut env = SimEnv {
            out,
            replays: &mut self.replays,
            events: &mut self.events,
        };
        f(&mut self.node, &mut env);
        // The replayer: answered at once from the log.
        for job in self.replays.drain(..) {
            let _ = replay_datagrams(self.node.log(), &job, &mut self.buf, &mut |d| {
                out.send(&[job.to_addr], d)
            });
        }
        let id = self.node.id();
        for e in self.events.drain(..) {
            match e {
                NodeEvent::Leader { term, .. } => ev.push(Event::Leader { term: term as u64 }),
                e => ev.push(Event::Trace(format!("node {id}: {e:?}"))),
            }
        }
    }
}

impl Actor for SimNode {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        self.call(out, ev, |n, env| n.on_datagram(now, from, d, env));
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        self.call(out, ev, |n, env| n.end_batch(now, env));
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        let mut due = now;
        self.call(out, ev, |n, env| due = n.tick(now, env));
        due
    }

    fn crash(self: Box<Self>) -> Option<Disk> {
        Some(Disk {
            log: self.node.into_log(),
        })
    }

    fn log(&self) -> Option<&MemLog> {
        Some(self.node.log())
    }

    fn primary_term(&self) -> Option<u64> {
        self.node.is_leader().then_some(self.node.term() as u64)
    }

    fn position(&self) -> u64 {
        self.node.commit()
    }

    fn witness(&mut self, now: Nanos, down: u8) {
        self.node.witness_down(now, Some(down));
    }

    fn describe(&self) -> String {
        let n = &self.node;
        let c = n.counters();
        format!(
            "{} term {} leader {:?} next {} commit {} messages {} held {} ooo {} nacks {} dup {} replays {} copied {} truncated {} elections {} not_primary {} backpressure {}",
            n.role().name(),
            n.term(),
            n.leader(),
            n.next_seq(),
            n.commit(),
            c.messages.get(),
            c.held.get(),
            c.out_of_order.get(),
            c.nacks.get(),
            c.duplicates.get(),
            c.replays.get(),
            c.copied.get(),
            c.truncated.get(),
            c.elections.get(),
            c.not_primary.get(),
            c.backpressure.get(),
        )
    }
}
