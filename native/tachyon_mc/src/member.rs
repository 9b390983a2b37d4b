//! A member actor's state: the real [`Join`], then [`Tx`] and [`Rx`] from
//! its welcome, driven in the order the simulator's `SimMember` calls them
//! (`seq::sim::members`), and what it delivered.
//!
//! * A datagram is one receive batch: the first marks what the receive
//!   side had heard and sets `looked`, then `Rx::on_datagram`, then
//!   `Rx::finish` and the handover applied to `Tx`; then the tick the
//!   simulator gives every process after a batch.
//! * A tick advances the member's clock to its deadline: a joining
//!   member's `Join::tick` (a welcome makes `Tx` and `Rx` with
//!   `from_welcome`, and the tick goes on as the joined member's); a
//!   joined one's `looked`, `Rx::tick`, `Tx::tick`.
//! * A publish (a step of its own, while the member has messages left):
//!   `Tx::publish_many` of one small message whose payload names the
//!   member and its counter.
//!
//! Members are never killed nor closed: what they delivered is the history
//! the properties check logs against.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

use tachyon_core::seq::core::member::{self, Join, MemberEvent, Rx, Tx};
use tachyon_core::seq::core::Nanos;

use crate::config::{member_config, ms, Layout};
use crate::node::Effects;

/// A message a member delivered: where, whose, what, in which term (of
/// the primary it followed then).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Delivery {
    pub seq: u64,
    pub member: u32,
    pub data: Vec<u8>,
    pub term: u32,
}

#[derive(Clone)]
pub enum Phase {
    Joining(Box<Join>),
    Joined { tx: Box<Tx>, rx: Box<Rx> },
}

/// A member actor's state.
#[derive(Clone)]
pub struct MemberState {
    pub phase: Phase,
    pub now: Nanos,
    pub due: Nanos,
    /// Messages published so far.
    pub published: u8,
    pub delivered: Vec<Delivery>,
    /// Forks the member reported.
    pub forks: u8,
    fp: u64,
}

/// The payload of member `j`'s `n`-th message.
pub fn payload(j: usize, n: u8) -> Vec<u8> {
    vec![j as u8 + 1, n]
}

impl MemberState {
    /// Member `j` opens at time 0: it joins.
    pub fn start(l: &Layout, j: usize) -> MemberState {
        let cfg = member_config(l, j);
        let mut s = MemberState {
            phase: Phase::Joining(Box::new(Join::new(&cfg, true))),
            now: 0,
            due: 0,
            published: 0,
            delivered: Vec::new(),
            forks: 0,
            fp: 0,
        };
        s.seal();
        s
    }

    pub fn fingerprint(&self) -> u64 {
        self.fp
    }

    pub fn seal(&mut self) {
        let mut h = crate::fp_hasher();
        match &self.phase {
            Phase::Joining(j) => {
                0u8.hash(&mut h);
                j.hash(&mut h);
            }
            Phase::Joined { tx, rx } => {
                1u8.hash(&mut h);
                tx.fingerprint(&mut h);
                rx.fingerprint(&mut h);
            }
        }
        (
            self.now,
            self.due,
            self.published,
            &self.delivered,
            self.forks,
        )
            .hash(&mut h);
        self.fp = h.finish();
    }

    pub fn is_joined(&self) -> bool {
        matches!(self.phase, Phase::Joined { .. })
    }

    /// The term of the primary the member follows (once joined).
    pub fn term(&self) -> Option<u32> {
        match &self.phase {
            Phase::Joined { rx, .. } => Some(rx.epoch()),
            Phase::Joining(_) => None,
        }
    }

    /// What the receive side reported: forks counted, events noted.
    fn events(&mut self, j: usize, fx: &mut Effects) {
        let Phase::Joined { rx, .. } = &mut self.phase else {
            return;
        };
        for e in rx.take_events() {
            if matches!(e, MemberEvent::Fork { .. }) {
                self.forks = self.forks.saturating_add(1);
            }
            fx.note(|| format!("m{j}: {e:?}"));
        }
    }

    /// A datagram from `from`: one receive batch, then a tick.
    pub fn deliver(&mut self, l: &Layout, j: usize, from: SocketAddr, d: &[u8], fx: &mut Effects) {
        let now = self.now;
        let mut got: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut mark = None;
        match &mut self.phase {
            Phase::Joining(join) => join.on_datagram(now, d, Some(from)),
            Phase::Joined { tx, rx } => {
                mark = Some(rx.mark());
                member::looked(tx.counters(), now);
                let mut f = |seq: u64, member_id: u32, snap: u8, data: &[u8]| {
                    if snap == 0 {
                        got.push((seq, member_id, data.to_vec()));
                    }
                };
                rx.on_datagram(now, d, Some(from), &mut f);
                let term = rx.epoch();
                for (seq, member, data) in got {
                    fx.note(|| format!("m{j}: DELIVERS {seq}: m{member} {data:?} (term {term})"));
                    self.delivered.push(Delivery {
                        seq,
                        member,
                        data,
                        term,
                    });
                }
            }
        }
        if let Some(mark) = mark {
            // Events in their place among the deliveries, then the end of
            // the batch.
            self.events(j, fx);
            if let Phase::Joined { tx, rx } = &mut self.phase {
                if let Some(h) = rx.finish(now, mark, fx) {
                    if let Some(to) = h.switch_to {
                        fx.note(|| format!("m{j}: follows {to}"));
                    }
                    if let Some(e) = h.apply(tx, now, fx) {
                        fx.note(|| format!("m{j}: {e:?}"));
                    }
                }
            }
            self.events(j, fx);
        }
        self.tick_now(l, j, fx);
        self.seal();
    }

    /// The clock runs to the deadline; the member ticks.
    pub fn tick(&mut self, l: &Layout, j: usize, fx: &mut Effects) {
        self.now = self.now.max(self.due);
        self.tick_now(l, j, fx);
        self.seal();
    }

    fn tick_now(&mut self, l: &Layout, j: usize, fx: &mut Effects) {
        let now = self.now;
        if let Phase::Joining(join) = &mut self.phase {
            match join.tick(now, fx) {
                Ok(w) => match member::from_welcome(&member_config(l, j), &w, true, now) {
                    Ok((tx, rx)) => {
                        fx.note(|| {
                            format!(
                                "m{j}: joined {} at {} (commit {})",
                                w.from,
                                rx.next_seq(),
                                w.commit
                            )
                        });
                        self.phase = Phase::Joined {
                            tx: Box::new(tx),
                            rx: Box::new(rx),
                        };
                    }
                    Err(e) => {
                        // Not with one incarnation and no retention; the
                        // member would say hello again.
                        fx.note(|| format!("m{j}: refused: {e}"));
                        self.due = now + 1;
                        return;
                    }
                },
                Err(due) => {
                    self.due = due;
                    return;
                }
            }
        }
        if let Phase::Joined { tx, rx } = &mut self.phase {
            member::looked(tx.counters(), now);
            let mut due = rx.tick(now, fx);
            if let Some(d) = tx.tick(now, fx) {
                due = due.min(d);
            }
            self.due = due;
        }
    }

    /// The member publishes its next message (if it is joined and has
    /// messages left).
    pub fn publish(&mut self, j: usize, limit: u8, fx: &mut Effects) {
        let now = self.now;
        let Phase::Joined { tx, .. } = &mut self.phase else {
            return;
        };
        if self.published >= limit {
            return;
        }
        let p = payload(j, self.published + 1);
        match tx.publish_many(now, [p.as_slice()], fx) {
            Ok(seq) => {
                self.published += 1;
                fx.note(|| format!("m{j}: publishes {p:?} as its message {seq}"));
            }
            Err(e) => fx.note(|| format!("m{j}: publish refused: {e:?}")),
        }
        self.seal();
    }

    pub fn may_publish(&self, limit: u8) -> bool {
        self.is_joined() && self.published < limit
    }
}

impl PartialEq for MemberState {
    fn eq(&self, other: &MemberState) -> bool {
        self.fp == other.fp
    }
}

impl Eq for MemberState {}

impl Hash for MemberState {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.fp.hash(h);
    }
}

impl fmt::Debug for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d: Vec<String> = self
            .delivered
            .iter()
            .map(|d| format!("{}:m{}{:?}", d.seq, d.member, d.data))
            .collect();
        match &self.phase {
            Phase::Joining(_) => write!(f, "joining t={}", ms(self.now)),
            Phase::Joined { rx, tx } => write!(
                f,
                "term {} next {} commit {} pending {} t={} due {} published {} delivered [{}]{}",
                rx.epoch(),
                rx.next_seq(),
                rx.commit(),
                tx.pending(),
                ms(self.now),
                ms(self.due),
                self.published,
                d.join(" "),
                if self.forks > 0 {
                    format!(" FORKS {}", self.forks)
                } else {
                    String::new()
                }
            ),
        }
    }
}
