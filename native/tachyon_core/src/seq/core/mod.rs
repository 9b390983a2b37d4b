//! The bus's protocol as plain state machines (sans-IO): no sockets,
//! threads, clocks or sleeps inside. Each takes datagrams (with their
//! source), ticks with the current time and local calls, and answers with
//! datagrams handed to a [`Sink`] (or an [`Env`]), log appends and
//! truncations through a [`Log`], and deliveries through a callback.
//!
//! * [`node`]: a node of a sequencer group (Raft: follower, candidate,
//!   primary; the primary sequences).
//! * [`member`]: a member of the bus.
//! * [`fill`]: gap filling by replay requests, for both.
//!
//! The real node and member (`seq::sequencer`, `seq::member`) are thin
//! shells around them (`recvmmsg`/`sendmmsg`, a `Store`, a replayer thread,
//! a wait strategy); the simulator (`seq::sim`) drives the same code
//! through a simulated network.

pub mod fill;
pub mod fingerprint;
pub mod log;
pub mod member;
mod memlog;
pub mod node;

use std::net::SocketAddr;

pub use log::{Entries, Log, LogError, Meta};
pub use memlog::{MemLog, Prefixes};

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

/// A replay the primary hands to its replayer: the entries `[from, to)` of
/// its log, in bus data datagrams with this header (their `seq` set per
/// datagram), to `to_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replay {
    pub to_addr: SocketAddr,
    pub from: u64,
    pub to: u64,
    pub header: crate::seq::wire::BusHeader,
    pub max_datagram: usize,
    /// The node's [`Fence`] when the job was made: a replayer answers it
    /// only while the node's is the same (the same term, as primary, and
    /// no truncation since); the log under another term's header would be
    /// another log.
    pub fence: Fence,
}

/// Replays of at most this many entries are answered by the sequencing
/// thread itself, from the log, in the same `sendmmsg` as its other
/// datagrams: a gap fill of a datagram or two (what a lost datagram under
/// light loss costs) then waits for no thread to wake up. Measured on the
/// 2-core VM, the parked replayer's wake-up was tens of microseconds,
/// the whole tail of `tachyon.sequencer.roundtrip.loss`. Larger replays
/// (rewinds) go to the replayer, off the sequencing path. (The shell and
/// the simulator both follow this.)
pub const INLINE_REPLAY: u64 = 16;

impl Replay {
    /// Whether the node's own thread answers it ([`INLINE_REPLAY`]).
    pub fn is_small(&self) -> bool {
        self.to.saturating_sub(self.from) <= INLINE_REPLAY
    }
}

/// What a replay job's answer depends on: the primary's term and its
/// log's generation (bumped by every truncation). 0: not a primary.
pub type Fence = u64;

/// The fence of a primary of `term` whose log is at generation `gen`.
pub fn fence(term: u32, gen: u64) -> Fence {
    (term as u64) << 32 | (gen & 0xffff_ffff) | 1 << 31
}

/// Packs a replay's entries into bus data datagrams (as many per datagram
/// as fit) and hands each to `emit`; returns the entries sent. The
/// replayer thread of the shell and the simulator both use it.
pub fn replay_datagrams<L: Entries + ?Sized>(
    log: &L,
    job: &Replay,
    buf: &mut Vec<u8>,
    emit: &mut dyn FnMut(&[u8]),
) -> Result<u64, LogError> {
    use crate::seq::wire::{self, BusKind};
    let mut count = 0u16;
    let mut sent = 0u64;
    let mut h = job.header;
    let max = job.max_datagram;
    let mut at = job.from;
    let mut failed = None;
    while at < job.to {
        let want = (job.to - at).min(4096) as usize;
        let r = log.read_range(at, want, &mut |seq, e| {
            if count > 0 && (buf.len() + e.len() > max || count == u16::MAX) {
                wire::set_count(buf, count);
                emit(buf);
                count = 0;
            }
            if count == 0 {
                h.seq = seq;
                wire::bus_header(buf, BusKind::Data, &h, 0);
            }
            buf.extend_from_slice(e);
            count += 1;
            sent += 1;
        });
        match r {
            Ok(0) => break,
            Ok(n) => at += n as u64,
            Err(e) => {
                // What was read before an entry that cannot be is sent.
                failed = Some(e);
                break;
            }
        }
    }
    if count > 0 {
        wire::set_count(buf, count);
        emit(buf);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(sent),
    }
}

/// What a node reports to its shell (telemetry, tests, the simulator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// This node is the primary of `term` (its epoch record at `start`).
    Leader { term: u32, start: u64 },
    /// This node follows `leader` (if known) in `term`.
    Follower { term: u32, leader: Option<u8> },
    /// A primary that lost its majority stopped sequencing.
    SteppedDown { term: u32 },
    /// This node asks for (pre-)votes for `term`.
    Campaign { term: u32, pre: bool },
    /// This node voted for `candidate` in `term`.
    Voted { term: u32, candidate: u8 },
    /// The entries from `from` on were removed (an uncommitted tail the
    /// primary's log does not hold).
    Truncated { from: u64, removed: u64 },
    /// This node started as a learner: it grants no vote until it has
    /// caught up (`reason`: `new_disk`, `rebooted`, `cut`, `restarted`).
    Learner { reason: &'static str },
    /// A learner caught up with the primary of `term`: it votes again.
    CaughtUp { term: u32 },
    /// An append failed for want of space: a primary steps down, and no
    /// node campaigns until its disk has room again.
    DiskFull { primary: bool },
    /// The disk has room again.
    DiskSpace,
    /// Retention removed the log's entries below `first` (a checkpoint
    /// sums them up).
    Trimmed { first: u64 },
    /// This node was too far behind its primary to be filled from the
    /// log: it installed the primary's checkpoint and goes on from
    /// `first`.
    Installed { first: u64 },
}

/// A node's environment: where its datagrams, replays, syncs and events
/// go.
pub trait Env: Sink {
    fn replay(&mut self, job: Replay);
    fn event(&mut self, e: NodeEvent);
    /// Makes the log durable up to `upto` (everything appended so far, at
    /// least), off the node's thread: the shell answers with
    /// [`node::Node::synced`] once it is, with the same `gen`. Asked only
    /// with `durability: fsync`, one at a time.
    fn sync(&mut self, upto: u64, gen: u64);
    /// Retention: saves `checkpoint` (the state below `first`) durably,
    /// then removes the log's whole segments below `first`, off the
    /// node's thread. The node serves nothing below `first` from then on.
    fn trim(&mut self, first: u64, checkpoint: std::sync::Arc<Vec<u8>>);
    /// Sends the chunk at `offset` of `checkpoint` to node `to` (at
    /// `addr`), off the node's thread ([`node::checkpoint`]).
    fn send_checkpoint(&mut self, job: CheckpointJob);
}

/// A chunk of a checkpoint to send to a node installing it.
#[derive(Debug, Clone)]
pub struct CheckpointJob {
    pub to: SocketAddr,
    pub checkpoint: std::sync::Arc<Vec<u8>>,
    pub offset: u64,
    /// The header's fields: the primary's term, session and id.
    pub term: u32,
    pub session: u64,
    pub node: u8,
    pub log_id: u64,
    pub incarnation: u32,
}

/// Bytes of a checkpoint per peer datagram.
pub const CHECKPOINT_CHUNK: usize = 1200;
/// Chunks sent for one request (the requester asks for the next window
/// once this one is in).
pub const CHECKPOINT_WINDOW: usize = 32;

impl CheckpointJob {
    /// The datagrams of this request's window, one by one.
    pub fn each_datagram(&self, out: &mut Vec<u8>, send: &mut dyn FnMut(&[u8])) {
        let len = self.checkpoint.len() as u64;
        let mut at = self.offset;
        for _ in 0..CHECKPOINT_WINDOW {
            if at >= len {
                break;
            }
            self.datagram(at, out);
            send(out);
            at += CHECKPOINT_CHUNK as u64;
        }
    }

    /// The datagram for the chunk at `offset`, in `out`.
    pub fn datagram(&self, offset: u64, out: &mut Vec<u8>) {
        use crate::seq::wire::{Peer, PeerHeader, PeerKind};
        let total = self.checkpoint.len() as u64;
        let at = (offset as usize).min(self.checkpoint.len());
        let end = (at + CHECKPOINT_CHUNK).min(self.checkpoint.len());
        let p = Peer {
            h: PeerHeader {
                kind: PeerKind::Checkpoint,
                term: self.term,
                session: self.session,
                node: self.node,
                flags: 0,
                log_id: self.log_id,
                incarnation: self.incarnation,
            },
            a: at as u64,
            b: total,
            c: 0,
        };
        p.write(out);
        out.extend_from_slice(&self.checkpoint[at..end]);
    }
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
#[derive(Debug, Clone, Hash)]
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
