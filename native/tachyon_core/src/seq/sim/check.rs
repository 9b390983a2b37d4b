//! The invariants, checked as the simulation runs:
//!
//! 1. *Agreement*: no two members deliver different messages at the same
//!    sequence number.
//! 2. *Order*: every member's deliveries have increasing sequence numbers
//!    (a prefix of one total order) and each sender's messages come in its
//!    publish order, none twice.
//! 3. *Durability*: every message a member delivered is in the log of
//!    every later primary (checked whenever one takes over, and at the end
//!    on every log); a violation nobody reported as a fork is a *silent*
//!    fork.
//! 4. *No false takeover*: no takeover while the primary was up, running
//!    and reachable from the node that took over for the whole takeover
//!    window.
//! 5. *One primary per term*: no two nodes send the bus of one term.
//! 6. *Liveness*: once faults stop, every member delivers every message
//!    whose publish was accepted, within a bounded time (no wedge).
//!
//! Where forks are possible by design (a group of two that prefers
//! availability, [`Checker::forks_allowed`]), 1 to 3 are checked at the
//! end instead: every member whose deliveries are not all in the final log
//! must have reported a fork, and a fork loses only what its losing branch
//! delivered: every accepted publish is in the final log unless its own
//! sender delivered it (a publish still pending at the fork skips the lost
//! numbers and is sequenced by the new primary, never dropped).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use crate::seq::core::{MemLog, Nanos};
use crate::seq::wire::{Msg, CONT, MORE};

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: &'static str,
    pub at: Nanos,
    pub detail: String,
}

/// A payload the workload publishes: who, and its counter.
pub fn payload(sender: u32, counter: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(12));
    v.extend_from_slice(&sender.to_le_bytes());
    v.extend_from_slice(&counter.to_le_bytes());
    let mut x = counter ^ (sender as u64) << 40;
    while v.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.push((x >> 56) as u8);
    }
    v
}

/// The sender and counter of a payload.
pub fn decode(d: &[u8]) -> Option<(u32, u64)> {
    if d.len() < 12 {
        return None;
    }
    Some((
        u32::from_le_bytes(d[0..4].try_into().ok()?),
        u64::from_le_bytes(d[4..12].try_into().ok()?),
    ))
}

fn hash(d: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in d {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[derive(Default)]
struct MemberView {
    /// seq -> (member_id, hash): kept where forks are allowed.
    seqs: BTreeMap<u64, (u32, u64, Vec<u8>)>,
    last_seq: u64,
    /// Per sender, the last counter delivered.
    last_from: HashMap<u32, u64>,
    delivered: u64,
    last_delivery_at: Nanos,
}

/// What has happened, and the checks on it.
#[derive(Default)]
pub struct Checker {
    /// seq -> (member_id, hash of data, the data's last bytes).
    order: BTreeMap<u64, (u32, u64, Vec<u8>)>,
    members: HashMap<u32, MemberView>,
    /// Per sender, counters whose publish was accepted.
    accepted: HashMap<u32, Vec<u64>>,
    /// When each (sender, counter) was accepted.
    accepted_at: HashMap<(u32, u64), Nanos>,
    /// (sender, counter) its own sender delivered.
    own_delivered: HashSet<(u32, u64)>,
    /// Publish-to-delivery times, every member's deliveries.
    pub latencies: Vec<Nanos>,
    /// term -> the address that sent its bus.
    primaries: HashMap<u64, SocketAddr>,
    pub checks: u64,
    pub violations: Vec<Violation>,
    pub forks_reported: u64,
    pub takeovers: u64,
    pub last_delivery: Nanos,
    /// A group of two preferring availability: forks are allowed if the
    /// members that meet them report them.
    pub forks_allowed: bool,
}

impl Checker {
    pub fn new(forks_allowed: bool) -> Checker {
        Checker {
            forks_allowed,
            ..Checker::default()
        }
    }

    fn fail(&mut self, kind: &'static str, at: Nanos, detail: String) {
        if self.violations.len() < 16 {
            self.violations.push(Violation { kind, at, detail });
        }
    }

    pub fn accepted(&mut self, at: Nanos, sender: u32, counter: u64) {
        self.accepted.entry(sender).or_default().push(counter);
        self.accepted_at.insert((sender, counter), at);
    }

    pub fn delivered(&mut self, at: Nanos, member: u32, seq: u64, from: u32, data: &[u8]) {
        self.checks += 1;
        let h = hash(data);
        let tail = data[data.len().saturating_sub(32)..].to_vec();
        if self.forks_allowed {
            let v = self.members.entry(member).or_default();
            v.seqs.insert(seq, (from, h, tail.clone()));
        }
        match self.order.get(&seq) {
            Some((id, hh, _)) if (*id != from || *hh != h) && !self.forks_allowed => {
                let d = format!(
                    "member {member} delivered seq {seq} from {from}, another had it from {id}"
                );
                self.fail("agreement", at, d);
            }
            Some(_) => {}
            None => {
                self.order.insert(seq, (from, h, tail));
            }
        }
        let v = self.members.entry(member).or_default();
        v.delivered += 1;
        v.last_delivery_at = at;
        self.last_delivery = at;
        let mut bad = None;
        if seq <= v.last_seq {
            bad = Some(format!(
                "member {member} delivered seq {seq} after {}",
                v.last_seq
            ));
        }
        v.last_seq = seq;
        if let Some((sender, counter)) = decode(data) {
            if let Some(t) = self.accepted_at.get(&(sender, counter)) {
                self.latencies.push(at.saturating_sub(*t));
            }
            if sender != from {
                bad = Some(format!("seq {seq}: payload of {sender} from member {from}"));
            }
            if sender == member {
                self.own_delivered.insert((sender, counter));
            }
            // Counters go up by one per accepted publish: anything else is
            // a message twice, out of order, or one lost before it.
            let last = v.last_from.entry(sender).or_insert(0);
            if counter != *last + 1 {
                bad = Some(format!(
                    "member {member}: {sender}'s message {counter} after {last} (seq {seq})"
                ));
            }
            *last = counter;
        }
        if let Some(d) = bad {
            if !self.forks_allowed {
                self.fail("order", at, d);
            }
        }
    }

    /// `member` moved back to `resume` after a fork: what it delivered from
    /// there on is replaced by what it delivers now.
    pub fn moved_back(&mut self, member: u32, resume: u64) {
        let v = self.members.entry(member).or_default();
        v.seqs.split_off(&resume);
        v.last_seq = resume.saturating_sub(1);
    }

    /// Where forks are allowed, at the end: what every member delivered
    /// (since it last moved back after a fork) is the final `log`'s order.
    /// A member that did not is a `silent_fork` if it reported no fork
    /// (`forks`: per member), `diverged` if it did and did not move back.
    pub fn views_in_log(&mut self, at: Nanos, log: &MemLog, forks: &HashMap<u32, u64>) {
        self.checks += 1;
        let bad = self.members.iter().find_map(|(m, v)| {
            let (seq, (from, _, _)) = v
                .seqs
                .iter()
                .find(|(seq, (from, _, tail))| !Self::holds(log, **seq, *from, tail))?;
            Some(if forks.get(m).copied().unwrap_or(0) == 0 {
                ("silent_fork", format!("member {m} delivered seq {seq} (from {from}), not in the final log, and reported no fork"))
            } else {
                ("diverged", format!("member {m} delivered seq {seq} (from {from}), not the final log's, and did not move back"))
            })
        });
        if let Some((kind, d)) = bad {
            self.fail(kind, at, d);
        }
    }

    /// Where forks are allowed: every accepted publish is in the final
    /// `log`, or its sender delivered it (in a branch a fork then dropped).
    pub fn publishes_kept(&mut self, at: Nanos, log: &MemLog) {
        self.checks += 1;
        let mut logged = HashSet::new();
        for i in 0..log.len() {
            let Some(m) = log.entry(i).and_then(|e| Msg::from_entry(e).ok()) else {
                continue;
            };
            if m.flags & CONT == 0 {
                if let Some((sender, counter)) = decode(m.data) {
                    if sender == m.member_id {
                        logged.insert((sender, counter));
                    }
                }
            }
        }
        let mut lost: Vec<(u32, u64)> = self
            .accepted
            .iter()
            .flat_map(|(s, cs)| cs.iter().map(move |c| (*s, *c)))
            .filter(|k| !logged.contains(k) && !self.own_delivered.contains(k))
            .collect();
        lost.sort_unstable();
        if let Some((sender, counter)) = lost.first() {
            let d = format!(
                "{} accepted publishes in no log and never delivered to their sender, the first {sender}'s {counter}",
                lost.len()
            );
            self.fail("lost_publish", at, d);
        }
    }

    fn holds(log: &MemLog, seq: u64, from: u32, tail: &[u8]) -> bool {
        log.entry(seq)
            .and_then(|e| Msg::from_entry(e).ok())
            .is_some_and(|m| {
                m.member_id == from
                    && m.flags & MORE == 0
                    && tail.ends_with(&m.data[m.data.len().saturating_sub(tail.len())..])
            })
    }

    /// A primary of `term` sent the bus from `addr`.
    pub fn primary(&mut self, at: Nanos, term: u64, addr: SocketAddr) {
        self.checks += 1;
        match self.primaries.get(&term) {
            Some(a) if *a != addr => {
                let d = format!("term {term}: primaries {a} and {addr}");
                self.fail("two_primaries", at, d);
            }
            Some(_) => {}
            None => {
                self.primaries.insert(term, addr);
            }
        }
    }

    /// Every delivered message must be in `log` (a new primary's, or any
    /// log at the end); `what` names it.
    pub fn log_holds_delivered(&mut self, at: Nanos, log: &MemLog, what: &str) -> bool {
        self.checks += 1;
        if self.forks_allowed {
            return true;
        }
        for (seq, (from, _, tail)) in &self.order {
            let ok = Self::holds(log, *seq, *from, tail);
            if !ok {
                let kind = if self.forks_reported > 0 {
                    "fork"
                } else {
                    "silent_fork"
                };
                let d = format!("{what}: delivered seq {seq} (from {from}) is not in its log");
                self.fail(kind, at, d);
                return false;
            }
        }
        true
    }

    pub fn false_takeover(&mut self, at: Nanos, detail: String) {
        self.fail("false_takeover", at, detail);
    }

    /// After the faults: every member delivered every accepted message.
    pub fn converged(&self, members: &[u32]) -> Result<(), String> {
        for m in members {
            let v = self.members.get(m);
            for (sender, counters) in &self.accepted {
                let got = v
                    .and_then(|v| v.last_from.get(sender))
                    .copied()
                    .unwrap_or(0);
                if let Some(max) = counters.iter().max() {
                    if got < *max {
                        return Err(format!(
                            "member {m} has {sender}'s messages up to {got} of {max}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    pub fn wedge(&mut self, at: Nanos, detail: String) {
        self.fail("wedge", at, detail);
    }

    /// A violation found by the simulation itself (not by a delivery).
    pub fn wedge_kind(&mut self, kind: &'static str, at: Nanos, detail: String) {
        self.fail(kind, at, detail);
    }

    pub fn delivered_total(&self) -> u64 {
        self.members.values().map(|v| v.delivered).sum()
    }

    pub fn accepted_total(&self) -> u64 {
        self.accepted.values().map(|v| v.len() as u64).sum()
    }
}

/// p50, p99, p99.9 and max of `v` (sorted in place).
pub fn percentiles(v: &mut [Nanos]) -> Option<[Nanos; 4]> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    Some([at(0.5), at(0.99), at(0.999), v[v.len() - 1]])
}
