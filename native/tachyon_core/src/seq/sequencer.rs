//! A sequencer node's shell: one [`Worker`] thread runs the node's protocol
//! ([`Node`]) on its socket (`recvmmsg` in, one `sendmmsg` per receive
//! batch out), a second answers replays from the log (`sendmmsg`, off the
//! sequencing path), and the log is a [`NodeLog`] (a `Store` and the vote).
//!
//! A group of one is what was a lone sequencer; a group of two a primary
//! and a standby; three or five nodes a majority group (docs/FAILOVER.md).
//! The shell reads the socket before every tick: a node that waited for a
//! CPU sees what arrived meanwhile before its timers run (and the protocol
//! counts such a wait as at most a few milliseconds).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::core::node::{Node, NodeConfig, NodeCounters, TwoNodes};
use super::core::{nanos, replay_datagrams, Env, NodeEvent, Replay, Sink};
use super::member::{Batches, Sockets};
use super::nodelog::{NodeLog, SharedStore};
use super::wire::{self, Bad};
use super::{clock, BusMode, SeqError};
use crate::counter::Counter;
use crate::report::{Report, Reporter, Value};
use crate::store;
use crate::udp::sys::{SendBatch, Socket, SocketOptions};
use crate::udp::Placement;
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::{Ctx, Slot, Worker};

pub use super::core::node::MAX_MEMBERS;

/// Sends queued before a `sendmmsg` (a receive batch's bus datagrams times
/// the unicast members).
const SEND_QUEUE: usize = 256;
/// Replays waiting for the replayer at most (more are dropped: members ask
/// again).
const REPLAY_QUEUE: usize = 4096;

/// Sequencer options (`SequencerConfig::new` holds the defaults).
#[derive(Debug, Clone)]
pub struct SequencerConfig {
    /// This node's command address (the bus leaves from it too).
    pub bind: SocketAddr,
    /// Every node's command address, this one's included, the same list on
    /// every node (empty: a group of one).
    pub group: Vec<SocketAddr>,
    pub bus: BusMode,
    /// The log's directory.
    pub dir: PathBuf,
    pub store: store::Config,
    pub core: Option<usize>,
    pub wait: WaitStrategy,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// Largest bus datagram (messages of one batch share datagrams up to it).
    pub max_datagram: usize,
    /// Several messages per bus datagram when several are waiting.
    pub batching: bool,
    /// A heartbeat this long after the last datagram, when idle.
    pub heartbeat: Duration,
    /// A heartbeat this soon after the last data datagram (then ten times
    /// later each time, up to `heartbeat`).
    pub heartbeat_after: Duration,
    /// Most messages one replay request is answered with.
    pub replay_max: usize,
    pub socket: SocketOptions,
    /// The minimum election timeout (each wait is drawn in `[t, 2t)`).
    pub election_timeout: Duration,
    pub two_nodes: TwoNodes,
    /// Hold an election at start (the preferred primary).
    pub eager: bool,
}

impl SequencerConfig {
    pub fn new(bind: SocketAddr, dir: impl Into<PathBuf>) -> SequencerConfig {
        SequencerConfig {
            bind,
            group: Vec::new(),
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
            election_timeout: Duration::from_millis(50),
            two_nodes: TwoNodes::Safe,
            eager: true,
        }
    }

    fn check(&self) -> Result<(), SeqError> {
        let in_group = self.group.is_empty() || self.group.contains(&self.bind);
        if self.max_datagram < wire::BUS_HEADER + wire::MSG_HEADER + 1
            || self.max_datagram > crate::udp::MAX_UDP_PAYLOAD
            || self.batch == 0
            || self.batch > crate::udp::MAX_BATCH
            || self.group.len() > 64
            || !in_group
            || (self.group.len() > 1 && self.bind.port() == 0)
        {
            return Err(SeqError::BadConfig);
        }
        Ok(())
    }

    /// The protocol's options, for the node at `local` (its bound address).
    fn node(&self, local: SocketAddr) -> NodeConfig {
        let group = if self.group.is_empty() {
            vec![local]
        } else {
            self.group.clone()
        };
        let id = group.iter().position(|a| *a == self.bind).unwrap_or(0) as u8;
        let mut c = NodeConfig::new(id, group);
        c.bus = self.bus;
        c.max_datagram = self.max_datagram;
        c.batching = self.batching;
        c.heartbeat = nanos(self.heartbeat);
        c.heartbeat_after = nanos(self.heartbeat_after);
        c.election_timeout = nanos(self.election_timeout).max(1_000_000);
        c.two_nodes = self.two_nodes;
        c.replay_max = self.replay_max.max(1) as u64;
        c.eager = self.eager;
        c.new_session = super::new_session();
        c.seed = c.new_session ^ std::process::id() as u64;
        c
    }
}

/// A snapshot of a node's counters and state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequencerStats {
    /// Messages sequenced (appended and sent) since start.
    pub messages: u64,
    /// Bus data datagrams sent (live, not replays).
    pub datagrams: u64,
    pub heartbeats: u64,
    /// Commands dropped as already sequenced.
    pub duplicates: u64,
    /// Commands held until an earlier one of their member arrived.
    pub held: u64,
    /// Commands dropped: too far ahead of their member's next.
    pub out_of_order: u64,
    pub nacks: u64,
    pub replays: u64,
    /// Entries sent by the replayer.
    pub replayed: u64,
    pub replays_dropped: u64,
    pub malformed: u64,
    pub strangers: u64,
    pub wrong_session: u64,
    pub oversized: u64,
    pub send_errors: u64,
    pub store_errors: u64,
    /// Members (and other nodes) in the unicast fan-out.
    pub members: u64,
    pub backpressure: u64,
    pub not_primary: u64,
    pub taken: u64,
    pub elections: u64,
    pub terms_led: u64,
    pub stepped_down: u64,
    /// Entries removed by truncations.
    pub truncated: u64,
    /// Entries copied from primaries.
    pub copied: u64,
    pub acks: u64,
    /// The next sequence number (the log's end).
    pub next_seq: u64,
    pub commit: u64,
    /// The current term (epoch).
    pub epoch: u64,
    /// `"primary"`, `"follower"`, `"pre_candidate"`, `"candidate"`.
    pub role: &'static str,
    /// The primary's node id, if known.
    pub leader: Option<u64>,
    pub session: u64,
}

struct Shared {
    session: Counter,
    replayed: Counter,
    replays_dropped: Counter,
    malformed: Counter,
    witness: AtomicU64,
    take_over: AtomicBool,
    /// Replays for the replayer.
    replays: Mutex<VecDeque<Replay>>,
}

/// A running sequencer node.
pub struct Sequencer {
    local: SocketAddr,
    id: u8,
    group: Vec<SocketAddr>,
    counters: Arc<CachePadded<NodeCounters>>,
    shared: Arc<Shared>,
    worker: Slot,
    replayer: Slot,
    placement: Placement,
    recovered: u64,
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

/// The node thread's environment: datagrams to the `sendmmsg` queue,
/// replays to the replayer, events to the report channel.
struct NodeEnv<'a> {
    sink: QueueSink<'a>,
    shared: &'a Shared,
    wake_replayer: &'a dyn Fn(),
    report: &'a mut Option<Reporter>,
}

impl Sink for NodeEnv<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.sink.send(to, d)
    }
}

impl Env for NodeEnv<'_> {
    fn replay(&mut self, job: Replay) {
        let mut q = self
            .shared
            .replays
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.len() >= REPLAY_QUEUE {
            self.shared.replays_dropped.bump(1);
            return;
        }
        q.push_back(job);
        drop(q);
        (self.wake_replayer)();
    }

    fn event(&mut self, e: NodeEvent) {
        if let Some(r) = self.report.as_mut() {
            r(event_report(&e));
        }
    }
}

/// A node's event as a report (`role`, `truncated`).
fn event_report(e: &NodeEvent) -> Report {
    let u = |v: u64| Value::U64(v);
    match *e {
        NodeEvent::Leader { term, start } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("primary")),
                ("epoch", u(term as u64)),
                ("start", u(start)),
            ],
        ),
        NodeEvent::Follower { term, leader } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("follower")),
                ("epoch", u(term as u64)),
                ("leader", leader.map(|l| l as u64).into()),
            ],
        ),
        NodeEvent::SteppedDown { term } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("stepped_down")),
                ("epoch", u(term as u64)),
            ],
        ),
        NodeEvent::Campaign { term, pre } => Report::new(
            "campaign",
            vec![("epoch", u(term as u64)), ("pre_vote", Value::Bool(pre))],
        ),
        NodeEvent::Voted { term, candidate } => Report::new(
            "voted",
            vec![
                ("epoch", u(term as u64)),
                ("candidate", u(candidate as u64)),
            ],
        ),
        NodeEvent::Truncated { from, removed } => Report::new(
            "truncated",
            vec![("from", u(from)), ("removed", u(removed))],
        ),
    }
}

impl Sequencer {
    /// Opens (or recovers) the log, binds the command port and starts the
    /// node (a follower until elected; a group of one elects itself at
    /// once) and its replayer.
    pub fn start(cfg: SequencerConfig) -> Result<Sequencer, SeqError> {
        Self::start_reporting(cfg, None)
    }

    /// [`Sequencer::start`], with the node's events (`role`, `campaign`,
    /// `voted`, `truncated`) on `report`.
    pub fn start_reporting(
        cfg: SequencerConfig,
        report: Option<Reporter>,
    ) -> Result<Sequencer, SeqError> {
        cfg.check()?;
        let log = NodeLog::open(&cfg.dir, cfg.store.clone())?;
        let socks = Sockets::bind(cfg.bind, cfg.bus, &cfg.socket)?;
        if let BusMode::Multicast {
            iface, ttl, looped, ..
        } = cfg.bus
        {
            socks.sock.multicast_sender_v4(iface, ttl, looped)?;
        }
        let local = socks.sock.local_addr()?;
        let ncfg = cfg.node(local);
        let (id, group) = (ncfg.id, ncfg.group.clone());
        let store = log.shared();
        let node = Node::new(ncfg, log, clock::now()).map_err(|_| SeqError::BadLog)?;
        let counters = node.counters().clone();
        let recovered = node.members() as u64;
        let first_next = node.next_seq();
        let shared = Arc::new(Shared {
            session: Counter::default(),
            replayed: Counter::default(),
            replays_dropped: Counter::default(),
            malformed: Counter::default(),
            witness: AtomicU64::new(u64::MAX),
            take_over: AtomicBool::new(false),
            replays: Mutex::new(VecDeque::new()),
        });
        shared.session.set(node.session());
        let sock = Arc::new(socks);
        let (rsock, rshared) = (sock.clone(), shared.clone());
        let (wait, batch, max_datagram) = (cfg.wait, cfg.batch, cfg.max_datagram);
        let replayer = Worker::spawn("tachyon-replay", None, move |ctx| {
            replay_loop(ctx, &rsock.sock, &store, &rshared, max_datagram)
        })?;
        let wake = replayer.wake_line().clone();
        let sh = shared.clone();
        let slot = max_datagram.max(crate::udp::MAX_UDP_PAYLOAD.min(65_536));
        let worker = Worker::spawn("tachyon-seq", cfg.core, move |ctx| {
            let mut b = sock.batches_with(batch, slot);
            let mut report = report;
            let mut node = node;
            run(
                ctx,
                &mut node,
                &sock,
                &mut b,
                wait,
                &sh,
                &|| wake.wake(),
                &mut report,
            );
            // The socket and the log close before the thread ends: a stop
            // that joined us finds the port free and the log unlocked.
            drop(node);
            drop(sock);
        })?;
        let pinned = worker.placement().1;
        Ok(Sequencer {
            local,
            id,
            group,
            counters,
            shared,
            worker: Slot::new(worker),
            replayer: Slot::new(replayer),
            placement: Placement {
                core: cfg.core,
                pinned,
                wait: cfg.wait,
            },
            recovered,
            first_next,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// This node's id (its index in the group).
    pub fn id(&self) -> u8 {
        self.id
    }

    pub fn group(&self) -> &[SocketAddr] {
        &self.group
    }

    /// The session (0 while this node's log is empty).
    pub fn session(&self) -> u64 {
        self.shared.session.get()
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Members whose last `member_seq` recovery found in the log.
    pub fn recovered_members(&self) -> u64 {
        self.recovered
    }

    /// The log's end at start.
    pub fn first_next(&self) -> u64 {
        self.first_next
    }

    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    /// Holds an election now (the primary's BEAM node went down, say). In a
    /// group of two with [`TwoNodes::Safe`], also the witness's vote for
    /// this node (if it holds every committed entry).
    pub fn take_over(&self) {
        self.shared.take_over.store(true, Ordering::Release);
        self.worker.wake();
    }

    /// The witness reports node `id` down (its BEAM node): a primary of a
    /// group of two commits alone, a follower may take over.
    pub fn witness_down(&self, id: u8) {
        self.shared.witness.store(id as u64, Ordering::Release);
        self.worker.wake();
    }

    pub fn stats(&self) -> SequencerStats {
        let c = &self.counters;
        let role = match c.role.get() {
            3 => "primary",
            2 => "candidate",
            1 => "pre_candidate",
            _ => "follower",
        };
        SequencerStats {
            messages: c.messages.get(),
            datagrams: c.datagrams.get(),
            heartbeats: c.heartbeats.get(),
            duplicates: c.duplicates.get(),
            held: c.held.get(),
            out_of_order: c.out_of_order.get(),
            nacks: c.nacks.get(),
            replays: c.replays.get(),
            replayed: self.shared.replayed.get(),
            replays_dropped: self.shared.replays_dropped.get(),
            malformed: c.malformed.get() + self.shared.malformed.get(),
            strangers: c.strangers.get(),
            wrong_session: c.wrong_session.get(),
            oversized: c.oversized.get(),
            send_errors: c.send_errors.get(),
            store_errors: c.store_errors.get(),
            members: c.members.get(),
            backpressure: c.backpressure.get(),
            not_primary: c.not_primary.get(),
            taken: c.taken.get(),
            elections: c.elections.get(),
            terms_led: c.terms_led.get(),
            stepped_down: c.stepped_down.get(),
            truncated: c.truncated.get(),
            copied: c.copied.get(),
            acks: c.acks.get(),
            next_seq: c.next_seq.get(),
            commit: c.commit.get(),
            epoch: c.term.get(),
            role,
            leader: Some(c.leader.get()).filter(|l| *l != u64::MAX),
            session: self.shared.session.get(),
        }
    }

    /// Stops and joins the threads (idempotent): a primary first tells the
    /// bus its term ends (followers elect at once); the port is free and
    /// the log closed on return. Blocks: from the BEAM, on a dirty
    /// scheduler. Readers (`stats`, `is_running`) never wait behind it.
    pub fn stop(&self) {
        let _ = self.worker.join();
        let _ = self.replayer.join();
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &Ctx,
    node: &mut Node<NodeLog>,
    socks: &Sockets,
    b: &mut Batches,
    wait: WaitStrategy,
    sh: &Shared,
    wake_replayer: &dyn Fn(),
    report: &mut Option<Reporter>,
) {
    let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), socks.poll_fd());
    let mut q = SendBatch::new(SEND_QUEUE);
    let counters = node.counters().clone();
    loop {
        let mut env = NodeEnv {
            sink: QueueSink {
                q: &mut q,
                sock: &socks.sock,
                errors: &counters.send_errors,
            },
            shared: sh,
            wake_replayer,
            report,
        };
        if ctx.stopped() {
            node.stop(clock::now(), &mut env);
            env.sink.flush();
            return;
        }
        let now = clock::now();
        let w = sh.witness.swap(u64::MAX, Ordering::AcqRel);
        if w != u64::MAX || sh.take_over.swap(false, Ordering::AcqRel) {
            node.witness_down(now, (w != u64::MAX).then_some(w as u8));
        }
        let n = socks
            .recv(b, usize::MAX, &counters.oversized, &mut |d, from| {
                if let Some(from) = from {
                    node.on_datagram(now, from, d, &mut env);
                }
            })
            .unwrap_or(0);
        if n > 0 {
            waiter.reset();
            node.end_batch(clock::now(), &mut env);
            env.sink.flush();
            sh.session.set(node.session());
            continue;
        }
        // Only after a read found nothing: the timers.
        let now = clock::now();
        let due = node.tick(now, &mut env);
        env.sink.flush();
        sh.session.set(node.session());
        let now = clock::now();
        if due > now {
            waiter.idle_at_most(Some(Duration::from_nanos(due - now)), || false);
        }
    }
}

/// The replayer: answers the primary's replays from the log, off its
/// sequencing thread, one `sendmmsg` per batch of datagrams.
fn replay_loop(ctx: &Ctx, sock: &Socket, store: &SharedStore, sh: &Shared, max_datagram: usize) {
    let mut waiter = ctx.waiter(WaitStrategy::Park, Duration::from_millis(100));
    let mut q = SendBatch::new(64);
    let errors = Counter::default();
    let mut buf = Vec::with_capacity(max_datagram);
    while !ctx.stopped() {
        let job = sh
            .replays
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        let Some(job) = job else {
            waiter.idle(|| {
                !sh.replays
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty()
            });
            continue;
        };
        waiter.reset();
        let s = store.get();
        let mut sink = QueueSink {
            q: &mut q,
            sock,
            errors: &errors,
        };
        let sent = replay_datagrams(&*s, &job, &mut buf, &mut |d| sink.send(&[job.to_addr], d));
        sink.flush();
        if let Ok(n) = sent {
            sh.replayed.bump(n);
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
