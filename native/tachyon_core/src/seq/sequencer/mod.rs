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

mod admin;
mod config;
mod stats;
mod threads;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_utils::CachePadded;

use super::core::node::{Node, NodeCounters};
use super::guard;
use super::member::Sockets;
use super::nodelog::NodeLog;
use super::wire::Bad;
use super::{clock, BusMode, SeqError};
use crate::counter::Counter;
use crate::report::Reporter;
use crate::udp::Placement;
use crate::worker::{Slot, Worker};

pub use super::core::node::MAX_MEMBERS;
pub use admin::{Change, MembershipError, MembershipView};
pub use config::SequencerConfig;
pub use stats::SequencerStats;

/// What the handle shares with the node's threads.
struct Shared {
    session: Counter,
    replayed: Counter,
    /// Entries replayed by the sequencing thread itself (small replays,
    /// see `core::INLINE_REPLAY`): its own counter, one writer each.
    replayed_inline: Counter,
    replays_dropped: Counter,
    malformed: Counter,
    witness: AtomicU64,
    take_over: AtomicBool,
    /// Replays for the replayer.
    replays: Mutex<VecDeque<threads::Job>>,
    /// The node's replay fence (`seq::core::Fence`) after its last step:
    /// the replayer drops jobs made under another.
    fence: AtomicU64,
    /// Replay jobs dropped: made under another term or before a
    /// truncation.
    stale_replays: Counter,
    /// A sync asked by the node, and one done: (up to, generation).
    sync_ask: Mutex<Option<(u64, u64)>>,
    sync_done: Mutex<Option<(u64, u64)>>,
    sync_errors: Counter,
    /// Retention's work that failed (the checkpoint or the segments).
    trim_errors: Counter,
    /// The lowest entry a replay could not read back (`u64::MAX`: none):
    /// the node thread cuts its log there and copies it again.
    damaged: AtomicU64,
    /// Nanoseconds the syncer spent in syncs that succeeded.
    sync_ns: Counter,
    /// The syncer's wake-up line, and the node thread's.
    syncer_wake: OnceLock<Arc<crate::wait::Wake>>,
    node_wake: OnceLock<Arc<crate::wait::Wake>>,
    /// Membership changes for the node thread (`admin`), and whether any
    /// waits.
    changes: admin::Queue,
    changes_asked: AtomicBool,
    /// The membership as of the node's last step.
    membership: Mutex<MembershipView>,
    /// Packet protection's shared state (keys given): the threads' guards
    /// come from it; its counters are the stats' rejections.
    guard: Option<Arc<guard::Shared>>,
}

impl Shared {
    /// A replay found entry `at` unreadable: tell the node thread.
    fn damaged(&self, at: u64) {
        self.damaged.fetch_min(at, Ordering::AcqRel);
        if let Some(w) = self.node_wake.get() {
            w.wake();
        }
    }

    /// What the other threads read of the node after each of its steps.
    fn after_step(&self, node: &Node<NodeLog>) {
        self.session.set(node.session());
        self.fence.store(node.fence(), Ordering::Release);
    }
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
    syncer: Option<Slot>,
    placement: Placement,
    recovered: u64,
    first_next: u64,
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
        let on_disk = cfg.durability.on_disk();
        let log = NodeLog::open(&cfg.dir, cfg.store.clone(), on_disk)?;
        let socks = Sockets::bind(cfg.bind, cfg.bus, &cfg.socket)?;
        if let BusMode::Multicast {
            iface, ttl, looped, ..
        } = cfg.bus
        {
            socks.sock.multicast_sender_v4(iface, ttl, looped)?;
        }
        let local = socks.sock.local_addr()?;
        let ncfg = cfg.node(local);
        let guard = match &cfg.auth {
            Some(a) => Some(
                guard::Shared::new(a.keys.clone(), guard::Role::Node(ncfg.addr), a.encrypt)
                    .map_err(|_| SeqError::BadConfig)?,
            ),
            None => None,
        };
        let (id, group) = (ncfg.id, ncfg.group.clone());
        let store = log.shared();
        let inline_store = store.clone();
        let sync_store = store.clone();
        let node = Node::new(ncfg, log, clock::now()).map_err(|_| SeqError::BadLog)?;
        let counters = node.counters().clone();
        let recovered = node.members() as u64;
        let first_next = node.next_seq();
        let shared = Arc::new(Shared {
            session: Counter::default(),
            replayed: Counter::default(),
            replayed_inline: Counter::default(),
            replays_dropped: Counter::default(),
            malformed: Counter::default(),
            witness: AtomicU64::new(u64::MAX),
            take_over: AtomicBool::new(false),
            replays: Mutex::new(VecDeque::new()),
            fence: AtomicU64::new(0),
            stale_replays: Counter::default(),
            sync_ask: Mutex::new(None),
            sync_done: Mutex::new(None),
            sync_errors: Counter::default(),
            trim_errors: Counter::default(),
            damaged: AtomicU64::new(u64::MAX),
            sync_ns: Counter::default(),
            syncer_wake: OnceLock::new(),
            node_wake: OnceLock::new(),
            changes: Mutex::new(VecDeque::new()),
            changes_asked: AtomicBool::new(false),
            membership: Mutex::new(MembershipView::default()),
            guard,
        });
        shared.after_step(&node);
        let sock = Arc::new(socks);
        let (rsock, rshared) = (sock.clone(), shared.clone());
        let (wait, batch, max_datagram) = (cfg.wait, cfg.batch, cfg.inner_max_datagram());
        let dir = cfg.dir.clone();
        let replayer = Worker::spawn("tachyon-replay", None, move |ctx| {
            threads::replay_loop(ctx, &rsock.sock, &store, &rshared, max_datagram, &dir)
        })?;
        let wake = replayer.wake_line().clone();
        let syncer = if on_disk {
            let sh = shared.clone();
            let w = Worker::spawn("tachyon-sync", None, move |ctx| {
                threads::sync_loop(ctx, &sync_store, &sh)
            })?;
            let _ = shared.syncer_wake.set(w.wake_line().clone());
            Some(w)
        } else {
            None
        };
        let sh = shared.clone();
        let slot = max_datagram.max(crate::udp::MAX_UDP_PAYLOAD.min(65_536));
        let worker = Worker::spawn("tachyon-seq", cfg.core, move |ctx| {
            let mut b = sock.batches_with(batch, slot);
            let mut report = report;
            let mut node = node;
            let replays = threads::Replays {
                store: &inline_store,
                wake: &|| wake.wake(),
            };
            threads::run(
                ctx,
                &mut node,
                &sock,
                &mut b,
                wait,
                &sh,
                &replays,
                &mut report,
            );
            // The socket and the log close before the thread ends: a stop
            // that joined us finds the port free and the log unlocked.
            drop(node);
            drop(sock);
        })?;
        let _ = shared.node_wake.set(worker.wake_line().clone());
        let pinned = worker.placement().1;
        Ok(Sequencer {
            local,
            id,
            group,
            counters,
            shared,
            worker: Slot::new(worker),
            replayer: Slot::new(replayer),
            syncer: syncer.map(Slot::new),
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

    /// Replaces the keys (a rotation): the first generation seals from
    /// now on, every one opens. `Err(None)`: started without keys.
    pub fn set_keys(&self, keys: guard::Keys) -> Result<(), Option<guard::KeyError>> {
        match &self.shared.guard {
            Some(g) => g.set_keys(keys).map_err(Some),
            None => Err(None),
        }
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
    /// group of two with [`TwoNodes::Safe`](super::TwoNodes::Safe), also
    /// the witness's vote for this node (if it holds every committed
    /// entry).
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

    /// Stops and joins the threads (idempotent): a primary first tells the
    /// bus its term ends (followers elect at once); the port is free and
    /// the log closed on return. Blocks: from the BEAM, on a dirty
    /// scheduler. Readers (`stats`, `is_running`) never wait behind it.
    pub fn stop(&self) {
        let _ = self.worker.join();
        let _ = self.replayer.join();
        if let Some(s) = &self.syncer {
            let _ = s.join();
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
