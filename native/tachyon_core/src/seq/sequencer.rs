//! The sequencer's shell: one [`Worker`] thread that reads commands with
//! `recvmmsg`, feeds them to the protocol ([`SequencerCore`]) and sends
//! what it answers with one `sendmmsg` per receive batch; its log is a
//! [`Store`].

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::core::sequencer::{CoreConfig, Counters, SequencerCore};
use super::core::{nanos, Sink};
use super::wire::{self, Bad};
use super::{clock, BusMode, SeqError};
use crate::counter::Counter;
use crate::store::{self, Store};
use crate::udp::sys::{Batch, SendBatch, Socket, SocketOptions};
use crate::udp::Placement;
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::{Ctx, Worker};

pub use super::core::sequencer::MAX_MEMBERS;

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

    /// The protocol's share of the options.
    pub(crate) fn core(&self) -> CoreConfig {
        CoreConfig {
            bus: self.bus,
            max_datagram: self.max_datagram,
            batching: self.batching,
            heartbeat: nanos(self.heartbeat),
            heartbeat_after: nanos(self.heartbeat_after),
            replay_max: self.replay_max.max(1),
            new_epoch: self.new_epoch,
        }
    }

    fn check(&self) -> Result<(), SeqError> {
        if self.max_datagram < wire::BUS_HEADER + wire::MSG_HEADER + 1
            || self.max_datagram > crate::udp::MAX_UDP_PAYLOAD
            || self.batch == 0
            || self.batch > crate::udp::MAX_BATCH
        {
            return Err(SeqError::BadConfig);
        }
        Ok(())
    }
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

/// A `sendmmsg` queue as the protocol's [`Sink`]: flushed when full and at
/// the end of every receive batch.
pub(crate) struct QueueSink<'a> {
    pub q: &'a mut SendBatch,
    pub sock: &'a Socket,
    pub errors: &'a Counter,
}

impl QueueSink<'_> {
    pub fn flush(&mut self) {
        let r = self.q.flush(self.sock);
        if r.errors > 0 {
            self.errors.bump(r.errors);
        }
    }
}

impl Sink for QueueSink<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        if !self.q.has_room(to.len()) {
            self.flush();
        }
        self.q.push(d, to);
    }
}

impl Sequencer {
    /// Opens (or recovers) the log, binds the command port and starts the
    /// thread. A new log gets a new session; an existing one keeps its
    /// session and every member's last `member_seq`.
    pub fn start(cfg: SequencerConfig) -> Result<Sequencer, SeqError> {
        cfg.check()?;
        let store = Store::open(&cfg.dir, cfg.store.clone())?;
        Self::start_on(cfg, store)
    }

    /// [`Sequencer::start`] on a log already open.
    pub fn start_on(cfg: SequencerConfig, store: Store) -> Result<Sequencer, SeqError> {
        cfg.check()?;
        let core = SequencerCore::start(store, cfg.core(), clock::now())?;
        Self::run_core(cfg, core)
    }

    /// Runs a sequencer's protocol (a standby's, once it took over) on a
    /// thread with a socket bound to `cfg.bind`.
    pub(crate) fn run_core(
        cfg: SequencerConfig,
        mut core: SequencerCore<Store>,
    ) -> Result<Sequencer, SeqError> {
        let sock = Socket::bind(cfg.bind, &cfg.socket)?;
        if let BusMode::Multicast {
            iface, ttl, looped, ..
        } = cfg.bus
        {
            sock.multicast_sender_v4(iface, ttl, looped)?;
        }
        let local = sock.local_addr()?;
        let counters = core.counters().clone();
        let (session, epoch, first_next, recovered) = (
            core.session(),
            core.epoch(),
            core.next_seq(),
            core.recovered_members(),
        );
        let (wait, batch) = (cfg.wait, cfg.batch);
        let worker = Worker::spawn("tachyon-seq", cfg.core, move |ctx| {
            let mut b = Batch::new(batch, crate::udp::MAX_UDP_PAYLOAD.min(65_536));
            run(ctx, &mut core, &sock, &mut b, wait);
            // The socket and the log close before the thread ends: a stop
            // that joined us finds the port free and the log unlocked.
            drop(core);
            drop(sock);
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
            first_next,
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

fn run(
    ctx: &Ctx,
    core: &mut SequencerCore<Store>,
    sock: &Socket,
    b: &mut Batch,
    wait: WaitStrategy,
) {
    let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), sock.fd());
    let mut q = SendBatch::new(SEND_QUEUE);
    let counters = core.counters().clone();
    while !ctx.stopped() {
        let mut sink = QueueSink {
            q: &mut q,
            sock,
            errors: &counters.send_errors,
        };
        match b.recv(sock) {
            Ok(n) if n > 0 => {
                waiter.reset();
                let now = clock::now();
                for i in 0..n {
                    if b.is_truncated(i) {
                        counters.oversized.bump(1);
                        continue;
                    }
                    core.on_datagram(now, b.addr(i), b.data(i), &mut sink);
                }
                core.end_batch(now, &mut sink);
                sink.flush();
            }
            Ok(_) | Err(_) => {
                let now = clock::now();
                let due = core.tick(now, &mut sink);
                sink.flush();
                let now = clock::now();
                if due > now {
                    waiter.idle_at_most(Some(Duration::from_nanos(due - now)), || false);
                }
            }
        }
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
