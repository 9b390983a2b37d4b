//! The simulator's state machine, after a `Tachyon.StateMachine` on the
//! bus: a member's state is a hash chain of the messages it applied, in
//! order, from the log's beginning. Members whose state is known publish
//! snapshots of it now and then (as a `StateMachine` runner does: the
//! snapshot's position is just past the last message applied), and
//! members that open from a snapshot restore it and apply what follows.
//! Every state reached is reported ([`Event::State`]): two members at the
//! same position with different states is a violation (`state`), which
//! catches a snapshot that does not hold what its position says, a member
//! started from one that misses or repeats a message, and retention that
//! cut what a snapshot still needed.

use super::actors::Event;
use super::check::hash;
use crate::seq::core::member::Tx;
use crate::seq::core::{Nanos, Outbox, Rng, MILLI};
use crate::seq::wire::{SNAP, SNAP_END};

/// A snapshot being restored.
struct Restore {
    as_of: u64,
    /// The member whose snapshot is being read (the first seen).
    from: Option<u32>,
    bytes: Vec<u8>,
    /// Messages delivered before the snapshot was whole.
    held: Vec<(u64, u32, u64)>,
}

pub struct Machine {
    /// The state after every message delivered below `.0`; `None`:
    /// unknown (a live start, a start in the middle, a skip).
    state: Option<(u64, u64)>,
    restore: Option<Restore>,
    every: Nanos,
    next_snapshot: Nanos,
    rng: Rng,
}

fn mix(h: u64, seq: u64, member: u32, data: u64) -> u64 {
    let mut x = h ^ seq.rotate_left(17) ^ (member as u64).rotate_left(41) ^ data;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

impl Machine {
    pub fn new(seed: u64) -> Machine {
        let mut rng = Rng::new(seed ^ 0x5a4b_3c2d);
        Machine {
            state: None,
            restore: None,
            every: rng.range(50, 400) * MILLI,
            next_snapshot: 0,
            rng,
        }
    }

    /// A new incarnation was welcomed: from sequence 1 its state is known
    /// (empty), from a snapshot at `as_of` it restores it, else unknown.
    pub fn joined(&mut self, from: u64, snapshot: Option<u64>, now: Nanos) {
        self.restore = None;
        self.state = None;
        self.next_snapshot = now + self.every;
        match snapshot {
            Some(as_of) => {
                self.restore = Some(Restore {
                    as_of,
                    from: None,
                    bytes: Vec::new(),
                    held: Vec::new(),
                })
            }
            None if from == 1 => self.state = Some((1, 0)),
            None => {}
        }
    }

    /// The member skipped messages (retention, a fork): its state is not
    /// the log's any more.
    pub fn lost(&mut self) {
        self.state = None;
        self.restore = None;
    }

    pub fn delivered(&mut self, seq: u64, member: u32, snap: u8, data: &[u8], ev: &mut Vec<Event>) {
        if snap != 0 {
            self.snapshot_part(member, snap, data, ev);
            return;
        }
        let h = hash(data);
        match &mut self.restore {
            Some(r) => r.held.push((seq, member, h)),
            None => self.apply(seq, member, h, ev),
        }
    }

    fn apply(&mut self, seq: u64, member: u32, h: u64, ev: &mut Vec<Event>) {
        if let Some((next, state)) = self.state {
            if seq >= next {
                let s = mix(state, seq, member, h);
                self.state = Some((seq + 1, s));
                ev.push(Event::State {
                    next: seq + 1,
                    hash: s,
                });
            }
        }
    }

    fn snapshot_part(&mut self, member: u32, snap: u8, data: &[u8], ev: &mut Vec<Event>) {
        let Some(r) = self.restore.as_mut() else {
            return;
        };
        let Some(as_of) = data
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        else {
            return;
        };
        if as_of != r.as_of || r.from.is_some_and(|m| m != member) {
            return;
        }
        r.from = Some(member);
        r.bytes.extend_from_slice(&data[8..]);
        if snap & SNAP_END == 0 {
            return;
        }
        let Some(r) = self.restore.take() else { return };
        let Some(state) = r
            .bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        else {
            ev.push(Event::Trace("a snapshot without its state".into()));
            return;
        };
        ev.push(Event::Trace(format!(
            "restored the snapshot of member {member} as of {as_of} ({} bytes, {} held)",
            r.bytes.len(),
            r.held.len()
        )));
        ev.push(Event::Retention("snapshot_restore"));
        self.state = Some((as_of, state));
        ev.push(Event::State {
            next: as_of,
            hash: state,
        });
        for (seq, m, h) in r.held {
            self.apply(seq, m, h, ev);
        }
    }

    /// Publishes a snapshot when one is due (the state is known): its
    /// state padded to a random size, in one to three messages.
    pub fn maybe_snapshot(
        &mut self,
        now: Nanos,
        tx: &mut Tx,
        out: &mut Outbox,
        ev: &mut Vec<Event>,
    ) {
        if now < self.next_snapshot {
            return;
        }
        self.next_snapshot = now + self.every;
        let Some((as_of, state)) = self.state else {
            return;
        };
        let mut body = state.to_le_bytes().to_vec();
        let pad = self.rng.range(0, 4_000) as usize;
        body.extend((0..pad).map(|i| (i as u64 ^ as_of) as u8));
        let parts = self.rng.range(1, 4) as usize;
        let size = body.len().div_ceil(parts);
        let chunks: Vec<&[u8]> = body.chunks(size.max(1)).collect();
        let n = chunks.len();
        let mut msgs = Vec::with_capacity(n);
        for c in &chunks {
            let mut m = as_of.to_le_bytes().to_vec();
            m.extend_from_slice(c);
            msgs.push(m);
        }
        let mut ok = true;
        for (i, m) in msgs.iter().enumerate() {
            let kind = SNAP | if i + 1 == n { SNAP_END } else { 0 };
            ok &= tx
                .publish_flagged(now, std::iter::once(&m[..]), kind, out)
                .is_ok();
            if !ok {
                break;
            }
        }
        if ok {
            ev.push(Event::Retention("snapshot"));
        }
    }
}
