//! The sequencer: one [`Worker`] thread that reads commands, stamps every
//! new message with the next index of its [`Store`], appends it and sends it
//! on the bus; it answers hellos and replay requests from the same store.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::wire::{self, Bad, BusKind, Cmd, CmdKind, CONTROL, EPOCH};
use super::{BusMode, SeqError};
use crate::counter::Counter;
use crate::store::{self, Store};
use crate::udp::sys::{Batch, SendBatch, Socket, SocketOptions};
use crate::udp::Placement;
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::{Ctx, Worker};

use super::recover::recover;

/// Most members in the unicast fan-out.
pub const MAX_MEMBERS: usize = 4096;

/// Sends queued before a `sendmmsg` (a receive batch's bus datagrams times
/// the unicast members).
const SEND_QUEUE: usize = 256;

/// Sequencer options (`SequencerConfig::new` holds the defaults).
#[derive(Debug, Clone)]
pub struct SequencerConfig {
    /// Where commands arrive (and bus datagrams leave from).
    pub bind: SocketAddr,
    pub bus: BusMode,
    /// The log's directory (a `Store`).
    pub dir: PathBuf,
    pub store: store::Config,
    pub core: Option<usize>,
    pub wait: WaitStrategy,
    /// Command datagrams per `recvmmsg`.
    pub batch: usize,
    /// Largest bus datagram (messages of one batch share datagrams up to it).
    pub max_datagram: usize,
    /// Several messages per bus datagram when several are waiting.
    pub batching: bool,
    /// A heartbeat this long after the last datagram, when idle.
    pub heartbeat: Duration,
    /// A heartbeat this soon after the last data datagram, once: a member
    /// that lost the last message of a burst learns of it at once.
    pub heartbeat_after: Duration,
    /// Most messages one replay request is answered with.
    pub replay_max: usize,
    pub socket: SocketOptions,
    /// Start a new epoch: the log's last epoch + 1, recorded in the log
    /// (the first entry of the epoch) and in every datagram from now on.
    /// A standby that takes over sets it.
    pub new_epoch: bool,
}

impl SequencerConfig {
    pub fn new(bind: SocketAddr, dir: impl Into<PathBuf>) -> SequencerConfig {
        SequencerConfig {
            bind,
            bus: BusMode::Unicast,
            dir: dir.into(),
            store: store::Config::default(),
            core: None,
            wait: WaitStrategy::machine_default(),
            batch: 32,
            max_datagram: 1472,
            batching: true,
            heartbeat: Duration::from_millis(10),
            heartbeat_after: Duration::from_micros(10),
            replay_max: 1024,
            socket: SocketOptions::default(),
            new_epoch: false,
        }
    }
}

/// The sequencer's counters (one writer: its thread).
#[derive(Debug, Default)]
struct Counters {
    messages: Counter,
    datagrams: Counter,
    heartbeats: Counter,
    duplicates: Counter,
    out_of_order: Counter,
    replays: Counter,
    replayed: Counter,
    malformed: Counter,
    wrong_session: Counter,
    oversized: Counter,
    send_errors: Counter,
    store_errors: Counter,
    members: Counter,
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequencerStats {
    /// Messages sequenced (appended and sent) since start.
    pub messages: u64,
    /// Bus data datagrams sent (live, not replays).
    pub datagrams: u64,
    pub heartbeats: u64,
    /// Commands dropped as already sequenced (`member_seq` not above the last).
    pub duplicates: u64,
    /// Commands dropped as ahead of the next `member_seq` (resent later).
    pub out_of_order: u64,
    pub replays: u64,
    pub replayed: u64,
    pub malformed: u64,
    pub wrong_session: u64,
    pub oversized: u64,
    pub send_errors: u64,
    pub store_errors: u64,
    /// Members in the unicast fan-out.
    pub members: u64,
    /// The next sequence number.
    pub next_seq: u64,
    /// The epoch (term) this sequencer stamps on every datagram.
    pub epoch: u64,
}

/// A running sequencer.
pub struct Sequencer {
    local: SocketAddr,
    session: u64,
    counters: Arc<CachePadded<Counters>>,
    worker: Option<Worker>,
    placement: Placement,
    recovered: u64,
    epoch: u32,
    /// The next sequence number at start (after the epoch record).
    first_next: u64,
}

/// The state the thread owns.
struct Core {
    sock: Socket,
    store: Store,
    session: u64,
    epoch: u32,
    /// Last sequenced `member_seq` of every member.
    last: HashMap<u32, u64>,
    /// The unicast fan-out.
    members: Vec<SocketAddr>,
    bus: BusMode,
    max_datagram: usize,
    batching: bool,
    replay_max: usize,
    next: u64,
    out: Vec<u8>,
    out_count: u16,
    /// The bus datagrams of one receive batch, sent with one `sendmmsg`.
    sendq: SendBatch,
    c: Arc<CachePadded<Counters>>,
}

impl Sequencer {
    /// Opens (or recovers) the log, binds the command port and starts the
    /// thread. A new log gets a new session; an existing one keeps its
    /// session and every member's last `member_seq`.
    pub fn start(cfg: SequencerConfig) -> Result<Sequencer, SeqError> {
        Self::check(&cfg)?;
        let store = Store::open(&cfg.dir, cfg.store.clone())?;
        Self::start_on(cfg, store)
    }

    fn check(cfg: &SequencerConfig) -> Result<(), SeqError> {
        if cfg.max_datagram < wire::BUS_HEADER + wire::MSG_HEADER + 1
            || cfg.max_datagram > crate::udp::MAX_UDP_PAYLOAD
            || cfg.batch == 0
            || cfg.batch > crate::udp::MAX_BATCH
        {
            return Err(SeqError::BadConfig);
        }
        Ok(())
    }

    /// [`Sequencer::start`] on a log already open (a standby's, when it
    /// takes over: no reopening, and no lock to wait for).
    pub fn start_on(cfg: SequencerConfig, store: Store) -> Result<Sequencer, SeqError> {
        Self::check(&cfg)?;
        let (session, mut last, mut next) = recover(&store)?;
        let mut epoch = last.remove(&0).unwrap_or(0) as u32;
        if cfg.new_epoch {
            epoch += 1;
            let mut e = Vec::new();
            wire::write_msg(&mut e, 0, epoch as u64, CONTROL | EPOCH, &[]);
            store.append(&e)?;
            next += 1;
        }
        let sock = Socket::bind(cfg.bind, &cfg.socket)?;
        if let BusMode::Multicast {
            iface, ttl, looped, ..
        } = cfg.bus
        {
            sock.multicast_sender_v4(iface, ttl, looped)?;
        }
        let local = sock.local_addr()?;
        let counters = Arc::new(CachePadded::new(Counters::default()));
        let recovered = last.len() as u64;
        let mut core = Core {
            sock,
            store,
            session,
            epoch,
            last,
            members: Vec::new(),
            bus: cfg.bus,
            max_datagram: cfg.max_datagram,
            batching: cfg.batching,
            replay_max: cfg.replay_max.max(1),
            next,
            out: Vec::with_capacity(cfg.max_datagram),
            out_count: 0,
            sendq: SendBatch::new(SEND_QUEUE),
            c: counters.clone(),
        };
        let (wait, batch, heartbeat, after) =
            (cfg.wait, cfg.batch, cfg.heartbeat, cfg.heartbeat_after);
        let worker = Worker::spawn("tachyon-seq", cfg.core, move |ctx| {
            let mut b = Batch::new(batch, crate::udp::MAX_UDP_PAYLOAD.min(65_536));
            core.run(ctx, &mut b, wait, heartbeat, after);
            // The socket and the log close before the thread ends: a stop
            // that joined us finds the port free and the log unlocked.
            drop(core);
        })?;
        let pinned = worker.placement().1;
        Ok(Sequencer {
            local,
            session,
            counters,
            worker: Some(worker),
            placement: Placement {
                core: cfg.core,
                pinned,
                wait: cfg.wait,
            },
            recovered,
            epoch,
            first_next: next,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Members whose last `member_seq` recovery found in the log.
    pub fn recovered_members(&self) -> u64 {
        self.recovered
    }

    pub fn is_running(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.is_finished())
    }

    pub fn stats(&self) -> SequencerStats {
        let c = &self.counters;
        SequencerStats {
            messages: c.messages.get(),
            datagrams: c.datagrams.get(),
            heartbeats: c.heartbeats.get(),
            duplicates: c.duplicates.get(),
            out_of_order: c.out_of_order.get(),
            replays: c.replays.get(),
            replayed: c.replayed.get(),
            malformed: c.malformed.get(),
            wrong_session: c.wrong_session.get(),
            oversized: c.oversized.get(),
            send_errors: c.send_errors.get(),
            store_errors: c.store_errors.get(),
            members: c.members.get(),
            // Every message sequenced took the next number.
            next_seq: self.first_next + c.messages.get(),
            epoch: self.epoch as u64,
        }
    }

    /// Stops and joins the thread (idempotent): the port is free and the
    /// log closed on return. Blocks: from the BEAM, on a dirty scheduler.
    pub fn stop(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Core {
    fn run(
        &mut self,
        ctx: &Ctx,
        b: &mut Batch,
        wait: WaitStrategy,
        heartbeat: Duration,
        after: Duration,
    ) {
        let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), self.sock.fd());
        let mut last_send = Instant::now();
        // The next heartbeat is due this long after the last datagram:
        // `after` once data went out, then ten times longer after each
        // heartbeat, up to `heartbeat` (10 us, 100 us, 1 ms, 10 ms by
        // default: a member that lost the last data datagram *and* the
        // first heartbeat still hears of it within 100 us).
        let mut due = after;
        while !ctx.stopped() {
            match b.recv(&self.sock) {
                Ok(n) if n > 0 => {
                    waiter.reset();
                    let sent = self.c.datagrams.get();
                    for i in 0..n {
                        let from = b.addr(i);
                        if b.is_truncated(i) {
                            self.c.oversized.bump(1);
                            continue;
                        }
                        self.command(b.data(i), from);
                    }
                    self.flush();
                    self.send_queued();
                    if self.c.datagrams.get() != sent {
                        due = after;
                        last_send = Instant::now();
                    }
                }
                Ok(_) | Err(_) => {
                    let now = Instant::now();
                    let idle = now.duration_since(last_send);
                    if idle >= due {
                        self.heartbeat();
                        due = (due * 10).min(heartbeat);
                        last_send = now;
                        continue;
                    }
                    waiter.idle_at_most(Some(due - idle), || false);
                }
            }
        }
    }

    fn command(&mut self, d: &[u8], from: Option<SocketAddr>) {
        let cmd = match Cmd::parse(d) {
            Ok(c) => c,
            Err(_) => {
                self.c.malformed.bump(1);
                return;
            }
        };
        match cmd.kind {
            CmdKind::Publish => {
                if cmd.session != self.session {
                    self.c.wrong_session.bump(1);
                    return;
                }
                for p in cmd.published() {
                    self.publish(cmd.member_id, p.member_seq, p.flags, p.data);
                }
            }
            CmdKind::Hello => {
                let Some(from) = from else { return };
                if cmd.unicast() && !self.members.contains(&from) {
                    if self.members.len() >= MAX_MEMBERS {
                        return;
                    }
                    self.members.push(from);
                    self.c.members.bump(1);
                }
                let last = self.last.get(&cmd.member_id).copied().unwrap_or(0);
                let mut w = Vec::with_capacity(wire::BUS_HEADER + 8);
                wire::bus_header(
                    &mut w,
                    BusKind::Welcome,
                    self.epoch,
                    self.session,
                    self.next,
                );
                w.extend_from_slice(&last.to_le_bytes());
                self.send_to(&w, &from);
            }
            CmdKind::Replay => {
                if cmd.session != self.session {
                    self.c.wrong_session.bump(1);
                    return;
                }
                if let Some(from) = from {
                    let (a, z) = cmd.range();
                    self.replay(a, z, from);
                }
            }
            CmdKind::Bye => {
                if let Some(from) = from {
                    if let Some(i) = self.members.iter().position(|m| *m == from) {
                        self.members.swap_remove(i);
                        self.c.members.add(u64::MAX); // wrapping -1
                    }
                }
            }
        }
    }

    fn publish(&mut self, member_id: u32, member_seq: u64, flags: u8, data: &[u8]) {
        let last = self.last.get(&member_id).copied().unwrap_or(0);
        if member_seq <= last {
            self.c.duplicates.bump(1);
            return;
        }
        if member_seq != last + 1 {
            self.c.out_of_order.bump(1);
            return;
        }
        let size = wire::MSG_HEADER + data.len();
        if wire::BUS_HEADER + size > self.max_datagram {
            self.c.oversized.bump(1);
            return;
        }
        if !self.batching || self.out_count == u16::MAX || self.out.len() + size > self.max_datagram
        {
            self.flush();
        }
        if self.out_count == 0 {
            wire::bus_header(
                &mut self.out,
                BusKind::Data,
                self.epoch,
                self.session,
                self.next,
            );
        }
        // The bus message is the log entry: written once into the datagram
        // being built, appended to the log from there.
        let at = self.out.len();
        wire::write_msg(&mut self.out, member_id, member_seq, flags, data);
        match self.store.append(&self.out[at..]) {
            Ok(seq) => debug_assert_eq!(seq, self.next),
            Err(_) => {
                // Not stamped: the member resends it later.
                self.out.truncate(at);
                self.c.store_errors.bump(1);
                return;
            }
        }
        self.last.insert(member_id, member_seq);
        self.out_count += 1;
        self.next += 1;
        self.c.messages.bump(1);
    }

    /// Queues the data datagram being built, if any, for every member.
    fn flush(&mut self) {
        if self.out_count == 0 {
            return;
        }
        wire::set_count(&mut self.out, self.out_count);
        self.out_count = 0;
        let targets = match self.bus {
            BusMode::Multicast { .. } => 1,
            BusMode::Unicast => self.members.len(),
        };
        if !self.sendq.has_room(targets) {
            self.send_queued();
        }
        self.queue_out();
        self.c.datagrams.bump(1);
    }

    /// Queues `out` for the bus (the group, or every member).
    fn queue_out(&mut self) {
        match self.bus {
            BusMode::Multicast { group, .. } => self.sendq.push(&self.out, &[group]),
            BusMode::Unicast => self.sendq.push(&self.out, &self.members),
        }
    }

    /// Sends the queued bus datagrams (one `sendmmsg`).
    fn send_queued(&mut self) {
        let r = self.sendq.flush(&self.sock);
        if r.errors > 0 {
            self.c.send_errors.bump(r.errors);
        }
    }

    /// Sent when idle, so no data datagram is being built in `out`.
    fn heartbeat(&mut self) {
        wire::bus_header(
            &mut self.out,
            BusKind::Heartbeat,
            self.epoch,
            self.session,
            self.next,
        );
        self.queue_out();
        self.send_queued();
        self.out.clear();
        self.c.heartbeats.bump(1);
    }

    fn send_to(&self, d: &[u8], to: &SocketAddr) {
        if self.sock.send_to(d, to).is_err() {
            self.c.send_errors.bump(1);
        }
    }

    /// Answers `[a, z)` to `to` with at most `replay_max` messages.
    fn replay(&mut self, a: u64, z: u64, to: SocketAddr) {
        self.c.replays.bump(1);
        let z = z.min(self.next);
        if a >= z {
            return;
        }
        let n = ((z - a) as usize).min(self.replay_max);
        let mut d = Vec::with_capacity(self.max_datagram);
        let mut count = 0u16;
        let mut sent = 0u64;
        let max = self.max_datagram;
        let (session, epoch) = (self.session, self.epoch);
        let out = |d: &mut Vec<u8>, count: &mut u16| {
            if *count > 0 {
                wire::set_count(d, *count);
                self.send_to(d, &to);
                *count = 0;
            }
        };
        let r = self.store.read_range(a, n, usize::MAX, |seq, e| {
            if count > 0 && (d.len() + e.len() > max || count == u16::MAX) {
                out(&mut d, &mut count);
            }
            if count == 0 {
                wire::bus_header(&mut d, BusKind::Data, epoch, session, seq);
            }
            d.extend_from_slice(e);
            count += 1;
            sent += 1;
        });
        out(&mut d, &mut count);
        if r.is_err() {
            self.c.store_errors.bump(1);
        }
        self.c.replayed.bump(sent);
    }
}

impl From<Bad> for SeqError {
    fn from(_: Bad) -> SeqError {
        SeqError::BadLog
    }
}

impl From<io::Error> for SeqError {
    fn from(e: io::Error) -> SeqError {
        SeqError::Io(e)
    }
}
