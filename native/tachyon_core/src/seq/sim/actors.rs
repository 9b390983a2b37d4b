//! The processes of a simulation: sequencer nodes and members, each the
//! real protocol core (`seq::core`) behind one small trait.

use std::net::SocketAddr;

use crate::seq::core::member::{self, Deliver, Join, MemberConfig, Rx, Tx};
use crate::seq::core::sequencer::{CoreConfig, SequencerCore};
use crate::seq::core::standby::{Action, StandbyCore};
use crate::seq::core::{MemLog, Nanos, Outbox, Rng, MICRO, MILLI};
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
    /// The node became primary of `term`.
    Leader {
        term: u64,
    },
    Trace(String),
}

/// What a node keeps across a crash.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub log: MemLog,
    /// A node's persistent state beside its log (its term and vote).
    pub meta: Vec<u8>,
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
    /// A node that follows from a socket of its own (a standby of today,
    /// until it takes over): it sends from and receives on its follower
    /// address; its command port is not open.
    fn on_follower_socket(&self) -> bool {
        false
    }
    /// Forks a member reported.
    fn forks(&self) -> u64 {
        0
    }
    /// Its state in a line (traces).
    fn describe(&self) -> String {
        String::new()
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
    Joined { tx: Box<Tx>, rx: Box<Rx> },
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

impl Actor for SimMember {
    fn on_datagram(
        &mut self,
        _now: Nanos,
        from: SocketAddr,
        d: &[u8],
        _out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        match &mut self.state {
            MState::Joining(j) => j.on_datagram(d, Some(from)),
            MState::Joined { rx, .. } => {
                let mut f = |seq: u64, member_id: u32, data: &[u8]| {
                    ev.push(Event::Delivered {
                        seq,
                        member_id,
                        data: data.to_vec(),
                    })
                };
                rx.on_datagram(d, Some(from), &mut Deliver::Messages(&mut f));
            }
        }
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        if let MState::Joined { tx, rx } = &mut self.state {
            let switch = rx.end_batch(now, out);
            tx.ack(rx.own_seen());
            if let Some(to) = switch {
                ev.push(Event::Trace(format!("member {} follows {to}", self.id)));
                tx.retarget(now, to, out);
            }
        }
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        if let MState::Joining(j) = &mut self.state {
            match j.tick(now, out) {
                Ok(w) => {
                    let (tx, rx) = member::from_welcome(&self.cfg, &w, self.unicast, now)
                        .expect("member config");
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
                Err(due) => return due,
            }
        }
        let MState::Joined { tx, rx } = &mut self.state else {
            return now + MILLI;
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
            MState::Joining(_) => 0,
        }
    }

    fn describe(&self) -> String {
        match &self.state {
            MState::Joining(_) => format!("member {} joining", self.id),
            MState::Joined { tx, rx } => {
                let (t, r) = (tx.counters(), rx.counters());
                format!(
                    "member {} oldest {:?} epoch {} next {} pending {} published {} resent {} delivered {} gaps {} replay_requests {} dup {} ahead {}",
                    self.id,
                    tx.oldest_pending(),
                    rx.epoch(),
                    rx.next_seq(),
                    tx.pending(),
                    t.published.get(),
                    t.resent.get(),
                    r.delivered.get(),
                    r.gaps.get(),
                    r.replay_requests.get(),
                    r.duplicates.get(),
                    r.dropped_ahead.get()
                )
            }
        }
    }
}

// -- the sequencer and standby of today ----------------------------------------

/// A primary, or a standby (which may have taken over).
pub enum LegacyNode {
    Primary(Box<SequencerCore<MemLog>>),
    Standby(Box<StandbyCore<MemLog>>),
}

/// The protocol options of the simulated sequencers.
pub fn legacy_core_config() -> CoreConfig {
    CoreConfig {
        bus: BusMode::Unicast,
        max_datagram: 1472,
        batching: true,
        heartbeat: 10 * MILLI,
        heartbeat_after: 10 * MICRO,
        replay_max: 1024,
        new_epoch: false,
    }
}

impl LegacyNode {
    pub fn primary(disk: Disk, now: Nanos) -> LegacyNode {
        let core = SequencerCore::start(disk.log, legacy_core_config(), now).expect("log");
        LegacyNode::Primary(Box::new(core))
    }

    pub fn standby(
        disk: Disk,
        primary: SocketAddr,
        takeover_after: Nanos,
        now: Nanos,
    ) -> LegacyNode {
        let mcfg = MemberConfig::new(primary, u32::MAX);
        let core = StandbyCore::new(mcfg, legacy_core_config(), takeover_after, disk.log, now)
            .expect("standby config");
        LegacyNode::Standby(Box::new(core))
    }

    fn after(&mut self, now: Nanos, ev: &mut Vec<Event>) {
        if let LegacyNode::Standby(s) = self {
            match s.take_action() {
                Some(Action::ResetLog { epoch }) => {
                    ev.push(Event::Trace(format!(
                        "standby sets its log aside (epoch {epoch})"
                    )));
                    drop(s.take_log());
                    s.set_log(MemLog::new(), now);
                }
                Some(Action::TookOver { .. }) => {
                    let term = s.promoted().map_or(0, |p| p.epoch() as u64);
                    ev.push(Event::Leader { term });
                }
                None => {}
            }
        }
    }
}

impl Actor for LegacyNode {
    fn on_datagram(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        d: &[u8],
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        match self {
            LegacyNode::Primary(p) => p.on_datagram(now, Some(from), d, out),
            LegacyNode::Standby(s) => s.on_datagram(now, Some(from), d, out),
        }
        self.after(now, ev);
    }

    fn end_batch(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) {
        match self {
            LegacyNode::Primary(p) => p.end_batch(now, out),
            LegacyNode::Standby(s) => s.end_batch(now, out),
        }
        self.after(now, ev);
    }

    fn tick(&mut self, now: Nanos, out: &mut Outbox, ev: &mut Vec<Event>) -> Nanos {
        let due = match self {
            LegacyNode::Primary(p) => p.tick(now, out),
            LegacyNode::Standby(s) => s.tick(now, out),
        };
        self.after(now, ev);
        due
    }

    fn crash(self: Box<Self>) -> Option<Disk> {
        let log = match *self {
            LegacyNode::Primary(p) => p.into_log(),
            LegacyNode::Standby(mut s) => match s.take_log() {
                Some(l) => l,
                None => s.into_promoted().map(|p| p.into_log()).unwrap_or_default(),
            },
        };
        Some(Disk {
            log,
            meta: Vec::new(),
        })
    }

    fn log(&self) -> Option<&MemLog> {
        match self {
            LegacyNode::Primary(p) => Some(p.log()),
            LegacyNode::Standby(s) => s.log(),
        }
    }

    fn on_follower_socket(&self) -> bool {
        matches!(self, LegacyNode::Standby(s) if s.promoted_ref().is_none())
    }

    fn describe(&self) -> String {
        let seq = match self {
            LegacyNode::Primary(p) => Some(&**p),
            LegacyNode::Standby(s) => s.promoted_ref(),
        };
        match seq {
            Some(p) => {
                let c = p.counters();
                format!(
                    "primary last {:?} epoch {} next {} messages {} dup {} out_of_order {} oversized {} malformed {} replays {} replayed {}",
                    (1..4).map(|m| p.last_of(m)).collect::<Vec<_>>(),
                    p.epoch(),
                    p.next_seq(),
                    c.messages.get(),
                    c.duplicates.get(),
                    c.out_of_order.get(),
                    c.oversized.get(),
                    c.malformed.get(),
                    c.replays.get(),
                    c.replayed.get()
                )
            }
            None => format!(
                "standby {} next {}",
                match self {
                    LegacyNode::Standby(s) => s.state_name(),
                    _ => "",
                },
                self.log().map_or(0, |l| l.len())
            ),
        }
    }

    fn primary_term(&self) -> Option<u64> {
        match self {
            LegacyNode::Primary(p) => Some(p.epoch() as u64),
            LegacyNode::Standby(s) => s.promoted_ref().map(|p| p.epoch() as u64),
        }
    }
}
