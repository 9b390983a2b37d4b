//! The simulated network: every datagram is lost, duplicated, delayed
//! (and so reordered) or cut by a partition as its link says, all drawn
//! from the simulation's one seed. A link may also have a finite capacity
//! ([`Capacity`]): datagrams queue behind it (delayed, in order), and a
//! bounded queue drops what does not fit (drop-tail).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;

use crate::seq::core::{Nanos, Rng, MICRO};

/// A datagram on its way.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InFlight {
    pub at: Nanos,
    /// Ties broken by send order: the run is deterministic.
    pub n: u64,
    pub to: usize,
    /// The address it was sent to (a process may have two).
    pub to_addr: SocketAddr,
    pub from: SocketAddr,
    pub bytes: Vec<u8>,
}

/// What a link (one direction between two processes) does now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub loss: f64,
    pub dup: f64,
    /// Delay: `base` plus up to `jitter`, in order (a datagram never
    /// overtakes an earlier one on its link)...
    pub base: Nanos,
    pub jitter: Nanos,
    /// ...except this share, delayed by up to `reorder_window` regardless
    /// of the others.
    pub reorder: f64,
    pub reorder_window: Nanos,
    pub cut: bool,
}

impl Link {
    pub fn healthy(base_loss: f64) -> Link {
        Link {
            loss: base_loss,
            dup: 0.0,
            base: 20 * MICRO,
            jitter: 30 * MICRO,
            reorder: 0.0,
            reorder_window: 0,
            cut: false,
        }
    }
}

/// A link's capacity: it carries one datagram per `per_datagram`; the
/// others wait in its queue, at most `queue` of them (`None`: unbounded,
/// the delay grows with the queue; a relay that reads everything into a
/// mailbox is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub per_datagram: Nanos,
    pub queue: Option<usize>,
}

/// Counts of what the network did.
#[derive(Debug, Default, Clone)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub cut: u64,
    pub overflowed: u64,
    /// Dropped by a full link queue ([`Capacity`]).
    pub queue_drops: u64,
    /// The longest wait in a link queue.
    pub max_queue_delay: Nanos,
}

pub struct Net {
    heap: BinaryHeap<Reverse<InFlight>>,
    n: u64,
    /// Links that differ from the default, by (from, to) process index.
    links: HashMap<(usize, usize), Link>,
    /// The last in-order arrival on each link.
    last_at: HashMap<(usize, usize), Nanos>,
    /// Links of finite capacity (not faults: no heal lifts them), and
    /// when each is done with its queue.
    capacity: HashMap<(usize, usize), Capacity>,
    busy_until: HashMap<(usize, usize), Nanos>,
    pub default: Link,
    pub stats: NetStats,
}

impl Net {
    pub fn new(default: Link) -> Net {
        Net {
            heap: BinaryHeap::new(),
            n: 0,
            links: HashMap::new(),
            last_at: HashMap::new(),
            capacity: HashMap::new(),
            busy_until: HashMap::new(),
            default,
            stats: NetStats::default(),
        }
    }

    pub fn link(&self, from: usize, to: usize) -> Link {
        self.links.get(&(from, to)).copied().unwrap_or(self.default)
    }

    pub fn set_link(&mut self, from: usize, to: usize, l: Link) {
        self.links.insert((from, to), l);
    }

    /// The link from `from` to `to` carries this much from now on.
    pub fn set_capacity(&mut self, from: usize, to: usize, c: Capacity) {
        self.capacity.insert((from, to), c);
    }

    /// When a datagram sent now leaves the link's queue (`now` without a
    /// capacity), or `None` if the queue is full.
    fn queue(&mut self, now: Nanos, from: usize, to: usize) -> Option<Nanos> {
        let Some(c) = self.capacity.get(&(from, to)) else {
            return Some(now);
        };
        let busy = self.busy_until.entry((from, to)).or_insert(0);
        let start = (*busy).max(now);
        let ahead = (start - now) / c.per_datagram.max(1);
        if c.queue.is_some_and(|q| ahead >= q as u64) {
            self.stats.queue_drops += 1;
            return None;
        }
        *busy = start + c.per_datagram;
        self.stats.max_queue_delay = self.stats.max_queue_delay.max(*busy - now);
        Some(*busy)
    }

    pub fn heal(&mut self, from: usize, to: usize) {
        self.links.remove(&(from, to));
    }

    pub fn heal_all(&mut self) {
        self.links.clear();
    }

    /// Whether any link into or out of `p` is impaired.
    pub fn impaired(&self, p: usize) -> bool {
        self.links
            .iter()
            .any(|(&(a, b), l)| (a == p || b == p) && (l.cut || l.loss > self.default.loss))
    }

    /// Whether the link from `a` to `b` is impaired.
    pub fn link_impaired(&self, a: usize, b: usize) -> bool {
        let l = self.link(a, b);
        l.cut || l.loss > self.default.loss
    }

    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        rng: &mut Rng,
        now: Nanos,
        from_i: usize,
        from: SocketAddr,
        to: usize,
        to_addr: SocketAddr,
        d: &[u8],
    ) {
        self.stats.sent += 1;
        let l = self.link(from_i, to);
        if l.cut {
            self.stats.cut += 1;
            return;
        }
        if rng.chance(l.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if rng.chance(l.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let Some(out) = self.queue(now, from_i, to) else {
                continue;
            };
            let mut at = out + l.base + rng.range(0, l.jitter + 1);
            if rng.chance(l.reorder) {
                at += rng.range(0, l.reorder_window + 1);
            } else {
                let last = self.last_at.entry((from_i, to)).or_insert(0);
                at = at.max(*last);
                *last = at;
            }
            self.n += 1;
            self.heap.push(Reverse(InFlight {
                at,
                n: self.n,
                to,
                to_addr,
                from,
                bytes: d.to_vec(),
            }));
        }
    }

    /// Loses every datagram on its way between processes `a` (at
    /// `a_addr`) and `b` (at `b_addr`), both ways; returns how many.
    pub fn drop_in_flight(
        &mut self,
        (a, a_addr): (usize, SocketAddr),
        (b, b_addr): (usize, SocketAddr),
    ) -> u64 {
        let before = self.heap.len();
        self.heap.retain(|r| {
            let f = &r.0;
            !(f.to == b && f.from == a_addr || f.to == a && f.from == b_addr)
        });
        let lost = (before - self.heap.len()) as u64;
        self.stats.lost += lost;
        lost
    }

    /// Puts back a datagram taken by [`Net::pop_due`] and not read yet
    /// (its receiver's batch was full): due as it was, in its order.
    pub fn requeue(&mut self, f: InFlight) {
        self.heap.push(Reverse(f));
    }

    pub fn next_at(&self) -> Option<Nanos> {
        self.heap.peek().map(|r| r.0.at)
    }

    /// The next datagram due at or before `now`.
    pub fn pop_due(&mut self, now: Nanos) -> Option<InFlight> {
        if self.heap.peek().is_some_and(|r| r.0.at <= now) {
            self.heap.pop().map(|r| r.0)
        } else {
            None
        }
    }
}
