//! The members' invariants, checked as the simulation runs (the nodes'
//! are in [`super::logcheck`]). A member's life is a run of incarnations
//! (an open, its deliveries, a kill or a close); each is a *view*:
//!
//! 1. *Agreement*: no two members deliver different messages at the same
//!    sequence number.
//! 2. *Order*: every view's deliveries have increasing sequence numbers
//!    (a prefix of one total order) and each sender's messages come in its
//!    publish order, none twice, none skipped except what its publisher
//!    was told may be lost (below).
//! 3. *Durability*: every message a member delivered is in the log of
//!    every later primary (checked whenever one takes over, and at the end
//!    on every log); a violation nobody reported as a fork is a *silent*
//!    fork.
//! 4. *No false takeover*: no takeover while the primary was up, running
//!    and reachable from the node that took over for the whole takeover
//!    window.
//! 5. *One primary per term*: no two nodes send the bus of one term.
//! 6. *Every publish that returned `{:ok, _}` is delivered, or its caller
//!    was told otherwise*: a publisher killed before its message was
//!    delivered may have lost it; one that closed was told how many of its
//!    publishes were not delivered. Every other accepted publish reaches
//!    every view that covers it by the end: a view from `n` on, the
//!    messages sequenced at `n` or later; a live view, every message
//!    accepted after its open returned (`missed`); nobody delivering it at
//!    all is `lost_publish`.
//!
//! Where forks are possible by design (a group of two that prefers
//! availability, [`Checker::forks_allowed`]), 1 to 3 are checked at the
//! end instead: every member whose deliveries are not all in the final log
//! must have reported a fork, and a fork loses only what its losing branch
//! delivered: every accepted publish is in the final log unless a member
//! delivered it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;

use super::members::Start;
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

pub fn hash(d: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in d {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// A member incarnation: (member id, incarnation).
pub type ViewId = (u32, u32);

/// What one incarnation of a member delivered.
struct MemberView {
    start: Start,
    joined_at: Nanos,
    open: bool,
    /// seq -> (member_id, hash, tail): kept where forks are allowed.
    seqs: BTreeMap<u64, (u32, u64, Vec<u8>)>,
    last_seq: u64,
    /// Per sender, the last counter delivered.
    last_from: HashMap<u32, u64>,
    got: HashSet<(u32, u64)>,
    delivered: u64,
    /// Ranges of sequence numbers retention removed before this view read
    /// them (it was told: a `Trimmed` event).
    skipped: Vec<(u64, u64)>,
}

/// What has happened, and the checks on it.
#[derive(Default)]
pub struct Checker {
    /// seq -> (member_id, hash of data, the data's last bytes).
    order: BTreeMap<u64, (u32, u64, Vec<u8>)>,
    views: BTreeMap<ViewId, MemberView>,
    /// Per sender, counters whose publish was accepted, and when.
    accepted: HashMap<u32, Vec<(u64, Nanos)>>,
    /// Accepted publishes whose publisher was told they may be lost.
    exempt: HashSet<(u32, u64)>,
    /// (sender, counter) its own sender (any incarnation) delivered.
    own_delivered: HashSet<(u32, u64)>,
    /// The sequence number each message was delivered at (its last
    /// fragment's), and whether it was cut into fragments.
    seq_of: HashMap<(u32, u64), (u64, bool)>,
    accepted_at: HashMap<(u32, u64), Nanos>,
    /// Publish-to-delivery times, every member's deliveries.
    pub latencies: Vec<Nanos>,
    /// term -> the address that sent its bus.
    primaries: HashMap<u64, SocketAddr>,
    pub checks: u64,
    pub violations: Vec<Violation>,
    pub forks_reported: u64,
    pub takeovers: u64,
    pub joins: u64,
    pub last_delivery: Nanos,
    /// A group of two preferring availability: forks are allowed if the
    /// members that meet them report them.
    pub forks_allowed: bool,
    /// The state machines' states: position -> state (and whose).
    states: HashMap<u64, (u64, ViewId)>,
}

impl Checker {
    pub fn new(forks_allowed: bool) -> Checker {
        Checker {
            forks_allowed,
            ..Checker::default()
        }
    }

    pub fn fail(&mut self, kind: &'static str, at: Nanos, detail: String) {
        if self.violations.len() < 16 {
            self.violations.push(Violation { kind, at, detail });
        }
    }

    pub fn accepted(&mut self, at: Nanos, sender: u32, counter: u64) {
        self.accepted.entry(sender).or_default().push((counter, at));
        self.accepted_at.insert((sender, counter), at);
    }

    /// Incarnation `v` of a member was welcomed (its open returned).
    pub fn joined(&mut self, at: Nanos, v: ViewId, start: Start) {
        self.joins += 1;
        self.views.insert(
            v,
            MemberView {
                start,
                joined_at: at,
                open: true,
                seqs: BTreeMap::new(),
                last_seq: 0,
                last_from: HashMap::new(),
                got: HashSet::new(),
                delivered: 0,
                skipped: Vec::new(),
            },
        );
    }

    /// Incarnation `v` ended: killed (`None`: what its member had not
    /// seen delivered may be lost), or closed, its caller told that the
    /// last `n` of its publishes not delivered were not (`Some(n)`).
    pub fn gone(&mut self, v: ViewId, undelivered: Option<u64>) {
        if let Some(view) = self.views.get_mut(&v) {
            view.open = false;
        }
        let sender = v.0;
        let mut pending: Vec<u64> = self
            .accepted
            .get(&sender)
            .map(|a| {
                a.iter()
                    .map(|(c, _)| *c)
                    .filter(|c| !self.own_delivered.contains(&(sender, *c)))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(n) = undelivered {
            let keep = pending.len().saturating_sub(n as usize);
            pending.drain(..keep);
        }
        for c in pending {
            self.exempt.insert((sender, c));
        }
    }

    pub fn delivered(&mut self, at: Nanos, v: ViewId, seq: u64, from: u32, data: &[u8]) {
        self.checks += 1;
        let member = v.0;
        let h = hash(data);
        let tail = data[data.len().saturating_sub(32)..].to_vec();
        match self.order.get(&seq) {
            Some((id, hh, _)) if (*id != from || *hh != h) && !self.forks_allowed => {
                let d = format!(
                    "member {member} delivered seq {seq} from {from}, another had it from {id}"
                );
                self.fail("agreement", at, d);
            }
            Some(_) => {}
            None => {
                self.order.insert(seq, (from, h, tail.clone()));
            }
        }
        self.last_delivery = at;
        let Some(view) = self.views.get_mut(&v) else {
            let d = format!(
                "member {member} incarnation {} delivered before its open",
                v.1
            );
            self.fail("order", at, d);
            return;
        };
        if self.forks_allowed {
            view.seqs.insert(seq, (from, h, tail));
        }
        view.delivered += 1;
        let mut bad = None;
        if seq <= view.last_seq {
            bad = Some(format!(
                "member {member} delivered seq {seq} after {}",
                view.last_seq
            ));
        }
        view.last_seq = seq;
        if let Some((sender, counter)) = decode(data) {
            // Publish to delivery, for members that were there when it was
            // published (a rewind's deliveries are old news).
            if let Some(t) = self.accepted_at.get(&(sender, counter)) {
                if *t >= view.joined_at {
                    self.latencies.push(at.saturating_sub(*t));
                }
            }
            if sender != from {
                bad = Some(format!("seq {seq}: payload of {sender} from member {from}"));
            }
            if sender == member {
                self.own_delivered.insert((sender, counter));
            }
            // Fragments are at most a datagram's worth (above 1 KiB the
            // checks take a message for fragmented).
            let fragmented = data.len() > 1024;
            self.seq_of
                .entry((sender, counter))
                .or_insert((seq, fragmented));
            view.got.insert((sender, counter));
            // Counters go up by one per accepted publish: anything else is
            // a message twice, out of order, or one lost before it that
            // its publisher was not told may be lost. (A view's first
            // message of a sender may be any: it started anywhere.)
            if let Some(last) = view.last_from.get(&sender).copied() {
                let skipped_ok = counter > last
                    && (last + 1..counter).all(|c| self.exempt.contains(&(sender, c)));
                if !skipped_ok {
                    bad = Some(format!(
                        "member {member}: {sender}'s message {counter} after {last} (seq {seq})"
                    ));
                }
            }
            view.last_from.insert(sender, counter);
        }
        if let Some(d) = bad {
            if !self.forks_allowed {
                self.fail("order", at, d);
            }
        }
    }

    /// A member moved back to `resume` after a fork: what it delivered from
    /// there on is replaced by what it delivers now.
    pub fn moved_back(&mut self, v: ViewId, resume: u64) {
        if let Some(view) = self.views.get_mut(&v) {
            view.seqs.split_off(&resume);
            view.last_seq = resume.saturating_sub(1);
        }
    }

    /// View `v`'s state machine reached `hash` after everything below
    /// `next`: every state machine at `next` must be in the same state.
    pub fn state(&mut self, at: Nanos, v: ViewId, next: u64, hash: u64) {
        self.checks += 1;
        match self.states.get(&next) {
            Some(&(h, w)) if h != hash && !self.forks_allowed => {
                let d = format!(
                    "member {} (incarnation {}) at {next} in another state than member {} (incarnation {})",
                    v.0, v.1, w.0, w.1
                );
                self.fail("state", at, d);
            }
            Some(_) => {}
            None => {
                self.states.insert(next, (hash, v));
            }
        }
    }

    /// View `v` was told that `[from, first)` was gone (retention): it
    /// goes on from `first`; each sender's next message there may be any.
    pub fn skipped(&mut self, v: ViewId, from: u64, first: u64) {
        if let Some(view) = self.views.get_mut(&v) {
            view.skipped.push((from, first));
            view.last_from.clear();
        }
    }

    /// Where forks are allowed, at the end: what every member delivered
    /// (since it last moved back after a fork) is the final `log`'s order.
    /// A member that did not is a `silent_fork` if it reported no fork
    /// (`forks`: per member), `diverged` if it did and did not move back.
    pub fn views_in_log(&mut self, at: Nanos, log: &MemLog, forks: &HashMap<u32, u64>) {
        self.checks += 1;
        let bad = self.views.iter().filter(|(_, v)| v.open).find_map(|((m, _), v)| {
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
    /// `log`, or a member delivered it (in a branch a fork then dropped:
    /// its sender saw it in that order, and does not publish it again), or
    /// its publisher was told it may be lost.
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
            .flat_map(|(s, cs)| cs.iter().map(move |(c, _)| (*s, *c)))
            .filter(|k| {
                !logged.contains(k) && !self.seq_of.contains_key(k) && !self.exempt.contains(k)
            })
            .collect();
        lost.sort_unstable();
        if let Some((sender, counter)) = lost.first() {
            let d = format!(
                "{} accepted publishes in no log and delivered to no member, the first {sender}'s {counter}",
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
        for (seq, (from, _, tail)) in self.order.range(log.first()..) {
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

    /// After the faults: every accepted publish (but those its publisher
    /// was told may be lost) reached every open view that covers it.
    pub fn converged(&mut self, at: Nanos) {
        self.checks += 1;
        let mut all: Vec<(u32, u64, Nanos)> = self
            .accepted
            .iter()
            .flat_map(|(s, cs)| cs.iter().map(move |(c, t)| (*s, *c, *t)))
            .filter(|(s, c, _)| !self.exempt.contains(&(*s, *c)))
            .collect();
        all.sort_unstable();
        for (s, c, t) in all {
            let seq = self.seq_of.get(&(s, c)).copied();
            let Some((seq, fragmented)) = seq else {
                let d = format!(
                    "{s}'s message {c} (accepted at {:.3} ms) was delivered to no member",
                    t as f64 / 1e6
                );
                self.fail("lost_publish", at, d);
                return;
            };
            // Where its first fragment was is not known: after the
            // sender's message before it.
            let first = if fragmented {
                self.seq_of
                    .get(&(s, c.wrapping_sub(1)))
                    .map_or(0, |p| p.0 + 1)
            } else {
                seq
            };
            for ((m, inc), v) in self.views.iter().filter(|(_, v)| v.open) {
                let covers = match v.start {
                    Start::From(n) => first >= n,
                    // (A view from a snapshot is a view from its position.)
                    Start::Live | Start::Snapshot => t > v.joined_at,
                } && !v.skipped.iter().any(|&(a, b)| first < b && seq >= a);
                if covers && !v.got.contains(&(s, c)) {
                    let d = format!(
                        "member {m} (incarnation {inc}, {:?}, joined at {:.3} ms) never got {s}'s message {c} (seq {seq}, accepted at {:.3} ms)",
                        v.start,
                        v.joined_at as f64 / 1e6,
                        t as f64 / 1e6
                    );
                    self.fail("missed", at, d);
                    return;
                }
            }
        }
    }

    pub fn delivered_total(&self) -> u64 {
        self.views.values().map(|v| v.delivered).sum()
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
