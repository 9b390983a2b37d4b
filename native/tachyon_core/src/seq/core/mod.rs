//! The bus's protocol as plain state machines (sans-IO): no sockets,
//! threads, clocks or sleeps inside. Each takes datagrams (with their
//! source), ticks with the current time and local calls, and answers with
//! datagrams handed to a [`Sink`], log appends through a [`Log`], and
//! deliveries through a callback. The real sequencer, standby and member
//! (`seq::sequencer`, `seq::standby`, `seq::member`) are thin shells
//! around them (`recvmmsg`/`sendmmsg`, a `Store`, a wait strategy); the
//! simulator (`seq::sim`) drives the same code through a simulated network.

pub mod log;
pub mod member;
mod recover;
pub mod sequencer;
pub mod standby;

use std::net::SocketAddr;

pub use log::{Log, LogError, MemLog};

/// Time in nanoseconds on the caller's monotonic clock (any origin).
pub type Nanos = u64;

pub const MICRO: Nanos = 1_000;
pub const MILLI: Nanos = 1_000_000;

/// Converts a duration to [`Nanos`] (saturating).
pub fn nanos(d: std::time::Duration) -> Nanos {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Where a state machine's datagrams go: the shell's socket (one send, or a
/// `sendmmsg` queue), or the simulator's network.
pub trait Sink {
    /// Sends `d` to every address of `to` (one address, the multicast
    /// group, or the unicast fan-out).
    fn send(&mut self, to: &[SocketAddr], d: &[u8]);
}

/// A [`Sink`] that keeps what was sent (tests and the simulator).
#[derive(Debug, Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    items: Vec<(SocketAddr, usize, usize)>,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every datagram sent, with its address, in order.
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> {
        self.items
            .iter()
            .map(|(a, off, len)| (*a, &self.bytes[*off..*off + *len]))
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.bytes.clear();
    }
}

impl Sink for Outbox {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        let off = self.bytes.len();
        self.bytes.extend_from_slice(d);
        for a in to {
            self.items.push((*a, off, d.len()));
        }
    }
}

/// A small deterministic generator (xorshift64*), for jitter: seeded by the
/// caller, so the simulator replays bit for bit.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)` (`lo` if empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}
