//! A member of the bus: the shell around the member's state machines
//! (`seq::core::member`): its sockets, and two locks never held together:
//! `tx` (publishing and the commands not yet seen delivered) and `rx` (the
//! receive buffers and the ordering state). Whoever drives the member
//! calls [`Member::poll`] (a thread of its own, or a BEAM process polling
//! on its scheduler) and [`Member::tick`] when nothing arrived: resends,
//! gap requests and hellos are timed there.
//!
//! A caller that must not wait (a normal BEAM scheduler, see
//! `worker::may_block`) never waits for `tx`, which a large publish holds
//! for as long as it takes to send every fragment: it publishes with
//! [`Member::try_publish_many`] (and goes to a dirty scheduler when that
//! says the lock is busy), its poll leaves what it found for the publishing
//! side to the lock's holder ([`Member::poll`]), its tick skips the resends,
//! and [`Member::is_closed`] and [`Member::stats`] read atomics only.

mod socks;

pub use super::core::member::{MemberConfig, MemberEvent, MemberStats, PublishError};
pub(crate) use socks::{Batches, Sealer, SockSink, Sockets};

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

pub use super::core::member::looked;
use super::core::member::{self as core, Deliver, Handover, Join, Rx, RxCounters, Tx, TxCounters};
use super::core::Nanos;
use super::guard::{self, Guard};
use super::{clock, SeqError};
use crate::counter::Counter;
use crate::spin::{SpinGuard, SpinMutex};
use crate::worker::may_block;

/// How long [`Member::try_publish_many`] polls a busy `tx` lock before it
/// gives up (another publish holds it: a few microseconds for a small one).
const TRY_LOCK_FOR: Duration = Duration::from_micros(20);

/// The most bytes of a state machine's snapshot in one message
/// ([`Member::publish_snapshot_all`]): a large snapshot is a few messages
/// per megabyte (each sent in fragments under the datagram size), well
/// under the default `max_message_size` of the members that restore it.
pub const SNAPSHOT_CHUNK: usize = 64 * 1024;

/// The receive buffers and the ordering state, under one lock.
struct RxAll {
    batches: Batches,
    rx: Rx,
    /// Opens what is read, keys given (the windows of this member's
    /// senders), and its buffer.
    open: Option<(Guard, Vec<u8>)>,
}

/// A member of the bus. `Sync`: any thread publishes, one at a time drives.
pub struct Member {
    cfg: MemberConfig,
    socks: Sockets,
    session: u64,
    /// The socket is connected to the sequencer (a group of one).
    connected: bool,
    tx: SpinMutex<Tx>,
    rx: SpinMutex<RxAll>,
    events: SpinMutex<Vec<MemberEvent>>,
    /// What polls found for the publishing side while `tx` was busy and
    /// the poller must not wait: applied in order by the next holder.
    deferred: SpinMutex<Vec<Handover>>,
    /// Mirrors of `tx`'s state, read without its lock.
    closed: AtomicBool,
    /// No more publishes (a close waits for what is pending).
    shut: AtomicBool,
    frag: AtomicUsize,
    txc: Arc<CachePadded<TxCounters>>,
    rxc: Arc<CachePadded<RxCounters>>,
    /// Opened `from_snapshot` and the welcome named one: its position
    /// (`as_of`), its messages delivered first.
    snapshot: Option<u64>,
    /// The bus's next sequence number when the member was welcomed: its
    /// own publishes are sequenced from there on.
    joined_seq: u64,
    /// Keys given: seals what the member sends (held for a send only).
    seal: Option<SpinMutex<Sealer>>,
    /// Keys given: packet protection's shared state (its counters).
    guard: Option<Arc<guard::Shared>>,
}

impl Member {
    /// Binds the member's socket(s), says hello to the sequencer (every
    /// node of its group) and waits for the primary's welcome (up to
    /// `connect_timeout`). Blocks. `Err(Taken)` if the member id is
    /// another member's.
    pub fn open(mut cfg: MemberConfig) -> Result<Member, SeqError> {
        // Keys given: sealed datagrams stay within `max_datagram` on the
        // wire, the protocol's are smaller by what sealing adds.
        let wire_max = cfg.max_datagram;
        let guard = match cfg.auth.take() {
            Some(a) => {
                let role = guard::Role::Member(cfg.member_id);
                cfg.max_datagram = cfg.max_datagram.saturating_sub(guard::OVERHEAD);
                Some(guard::Shared::new(a.keys, role, a.encrypt).map_err(|_| SeqError::BadConfig)?)
            }
            None => None,
        };
        core::fragment_size(&cfg)?;
        if cfg.incarnation == 0 {
            cfg.incarnation = super::new_session();
        }
        let socks = Sockets::bind(cfg.bind, cfg.bus, &cfg.socket)?;
        let unicast = socks.mcast.is_none();
        let seal = guard.as_ref().map(|g| {
            SpinMutex::new(Sealer {
                guard: Guard::new(g, 0),
                buf: Vec::new(),
            })
        });
        let mut open = guard.as_ref().map(|g| (Guard::new(g, 0xff), Vec::new()));
        let w = welcome(&socks, &cfg, unicast, seal.as_ref(), open.as_mut())?;
        // Connected (a group of one): sends skip the route lookup, and
        // only the sequencer's datagrams reach this socket.
        let connected = cfg.alternates.is_empty();
        if connected {
            socks.sock.connect(&w.from)?;
        }
        let (tx, rx) = core::from_welcome(&cfg, &w, unicast, clock::now())?;
        let slot = wire_max.max(super::wire::BUS_HEADER + super::wire::WELCOME_BODY);
        Ok(Member {
            snapshot: (cfg.from_snapshot && w.snap.0 > 0).then_some(w.snap.2),
            joined_seq: w.next,
            deferred: SpinMutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            frag: AtomicUsize::new(tx.fragment_size()),
            txc: tx.counters().clone(),
            rxc: rx.counters().clone(),
            tx: SpinMutex::new(tx),
            rx: SpinMutex::new(RxAll {
                batches: socks.batches_with(cfg.batch, slot),
                rx,
                open,
            }),
            events: SpinMutex::new(Vec::new()),
            session: w.session,
            connected,
            socks,
            seal,
            guard,
            cfg,
        })
    }

    fn sink(&self) -> SockSink<'_> {
        SockSink {
            sock: &self.socks.sock,
            connected: self.connected,
            errors: &self.txc.send_errors,
            seal: self.seal.as_ref(),
        }
    }

    /// Replaces the member's credential (a rotation). `Err(None)`: opened
    /// without keys.
    pub fn set_keys(&self, keys: guard::Keys) -> Result<(), Option<guard::KeyError>> {
        match &self.guard {
            Some(g) => g.set_keys(keys).map_err(Some),
            None => Err(None),
        }
    }

    pub fn member_id(&self) -> u32 {
        self.cfg.member_id
    }

    /// Opened `from_snapshot`: the position (`as_of`) of the snapshot it
    /// starts from (its messages come first, with the messages from
    /// `as_of` on around them); `None` if there was none (it starts at the
    /// log's beginning) or it was not asked for.
    pub fn snapshot_as_of(&self) -> Option<u64> {
        self.snapshot
    }

    /// The bus's next sequence number when the member was welcomed: what
    /// it publishes is sequenced from there on (what it delivers below
    /// it, its own id's included, was published before it joined).
    pub fn joined_seq(&self) -> u64 {
        self.joined_seq
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socks.sock.local_addr()
    }

    /// One descriptor readable when a datagram waits on any of the
    /// member's sockets (for a loop's waiter, or the VM's `select`).
    pub fn poll_fd(&self) -> RawFd {
        self.socks.poll_fd()
    }

    /// Largest fragment: messages above it go out as several.
    pub fn fragment_size(&self) -> usize {
        self.frag.load(Ordering::Relaxed)
    }

    /// About how many command datagrams publishing `msgs` sends (each
    /// message with its header, packed, in fragments): what a caller that
    /// must not block for long weighs before publishing on its thread.
    pub fn datagrams_for<'a>(&self, msgs: impl IntoIterator<Item = &'a [u8]>) -> usize {
        let frag = self.fragment_size().max(1);
        let bytes: usize = msgs
            .into_iter()
            .map(|m| m.len() + super::wire::CMD_MSG_HEADER)
            .sum();
        bytes.div_ceil(frag)
    }

    /// Publishes one message; returns its `member_seq` (of its last
    /// fragment, for a fragmented one).
    pub fn publish(&self, data: &[u8]) -> Result<u64, PublishError> {
        self.publish_many(std::iter::once(data))
    }

    /// Publishes messages, as many per command datagram as fit; returns
    /// the `member_seq` of the last. Waits for the `tx` lock.
    pub fn publish_many<'a, I>(&self, msgs: I) -> Result<u64, PublishError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        if self.closed.load(Ordering::Acquire) || self.shut.load(Ordering::Acquire) {
            return Err(PublishError::Closed);
        }
        self.publish_locked(self.tx.lock(), msgs)
    }

    /// [`Member::publish_many`], or `None` if another publish holds the
    /// `tx` lock past a few microseconds (the caller publishes from a
    /// thread that may wait instead).
    pub fn try_publish_many<'a, I>(&self, msgs: I) -> Option<Result<u64, PublishError>>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        if self.closed.load(Ordering::Acquire) || self.shut.load(Ordering::Acquire) {
            return Some(Err(PublishError::Closed));
        }
        let tx = self.try_lock_tx(TRY_LOCK_FOR)?;
        Some(self.publish_locked(tx, msgs))
    }

    /// Publishes one message of a state machine's snapshot of the state
    /// after every message below `as_of` (`last`: the snapshot's last
    /// message): members that start from a snapshot start from it
    /// (`MemberConfig::from_snapshot`), and the sequencer's retention keeps
    /// the log from `as_of` on.
    pub fn publish_snapshot(
        &self,
        as_of: u64,
        chunk: &[u8],
        last: bool,
    ) -> Result<u64, PublishError> {
        if self.closed.load(Ordering::Acquire) || self.shut.load(Ordering::Acquire) {
            return Err(PublishError::Closed);
        }
        let mut data = Vec::with_capacity(8 + chunk.len());
        data.extend_from_slice(&as_of.to_le_bytes());
        data.extend_from_slice(chunk);
        let kind = super::wire::SNAP | if last { super::wire::SNAP_END } else { 0 };
        let mut tx = self.tx.lock();
        let mut sink = self.sink();
        let r = tx.publish_flagged(clock::now(), std::iter::once(&data[..]), kind, &mut sink);
        self.apply_deferred(&mut tx, &mut sink);
        r
    }

    /// Publishes a whole snapshot (`state`, of any size) as of `as_of`: in
    /// messages of [`SNAPSHOT_CHUNK`] bytes at most (less if the member's
    /// `max_message_size` is smaller), the last flagged. When too many
    /// commands are pending (`Busy`) and `wait` is given (another thread
    /// drives the member), waits for room, giving up after `wait` without
    /// any; the error of a snapshot left incomplete is returned (its
    /// messages are ignored: members start from complete snapshots only;
    /// publish the next one at a later position). Returns the
    /// `member_seq` of the last message. Blocks: from the BEAM, on a dirty
    /// scheduler.
    pub fn publish_snapshot_all(
        &self,
        as_of: u64,
        state: &[u8],
        wait: Option<Duration>,
    ) -> Result<u64, PublishError> {
        let size = SNAPSHOT_CHUNK.min(self.cfg.max_message_size.saturating_sub(8).max(1));
        let n = state.len().div_ceil(size).max(1);
        let mut member_seq = 0;
        for i in 0..n {
            let chunk = &state[(i * size).min(state.len())..((i + 1) * size).min(state.len())];
            let t0 = Instant::now();
            member_seq = loop {
                match self.publish_snapshot(as_of, chunk, i + 1 == n) {
                    Err(PublishError::Busy) if wait.is_some_and(|w| t0.elapsed() < w) => {
                        std::thread::sleep(Duration::from_micros(200))
                    }
                    r => break r?,
                }
            };
        }
        Ok(member_seq)
    }

    fn publish_locked<'a, I>(&self, mut tx: SpinGuard<'_, Tx>, msgs: I) -> Result<u64, PublishError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        // Sent under the tx lock: commands leave in member_seq order.
        let mut sink = self.sink();
        let r = tx.publish_many(clock::now(), msgs, &mut sink);
        self.apply_deferred(&mut tx, &mut sink);
        r
    }

    /// The `tx` lock, polled for at most `d`.
    fn try_lock_tx(&self, d: Duration) -> Option<SpinGuard<'_, Tx>> {
        if let Some(g) = self.tx.try_lock() {
            return Some(g);
        }
        let t0 = Instant::now();
        loop {
            std::hint::spin_loop();
            if let Some(g) = self.tx.try_lock() {
                return Some(g);
            }
            if t0.elapsed() >= d {
                return None;
            }
        }
    }

    /// The `tx` lock: waited for where the caller may wait, else only if
    /// free now.
    fn tx_if_free(&self) -> Option<SpinGuard<'_, Tx>> {
        if may_block() {
            Some(self.tx.lock())
        } else {
            self.tx.try_lock()
        }
    }

    /// Applies what polls left while `tx` was busy (the caller holds it).
    fn apply_deferred(&self, tx: &mut Tx, sink: &mut SockSink<'_>) {
        let mut d = self.deferred.lock();
        if d.is_empty() {
            return;
        }
        let mut events = Vec::new();
        for h in d.drain(..) {
            self.apply_handover(tx, h, clock::now(), sink, &mut events);
        }
        drop(d);
        if !events.is_empty() {
            self.events.lock().append(&mut events);
        }
    }

    /// Reads what waits on the member's sockets (up to `max` datagrams per
    /// socket) and calls `deliver(seq, member_id, data)` for every message
    /// now in order and committed. Returns the datagrams read.
    pub fn poll(&self, max: usize, deliver: &mut Deliver<'_>) -> io::Result<usize> {
        let mut sink = self.sink();
        let now = clock::now();
        // The publishing side's acknowledgements come through here: its
        // window holds publishes back only while someone looks.
        looked(&self.txc, now);
        let mut guard = self.rx.lock();
        let RxAll { batches, rx, open } = &mut *guard;
        let mark = rx.mark();
        let total = self.socks.recv(
            batches,
            max,
            &self.rxc.malformed,
            &mut |d, from| match open {
                None => rx.on_datagram(now, d, from, deliver),
                // Opened first: what fails never reaches the member.
                Some((g, buf)) => {
                    if let Some(p) = from.and_then(|f| g.open(f, d, buf).ok()) {
                        rx.on_datagram(now, p, from, deliver);
                    }
                }
            },
        )?;
        if total == 0 {
            return Ok(0);
        }
        let handover = rx.finish(now, mark, &mut sink);
        let mut events = rx.take_events();
        drop(guard);
        if let Some(h) = handover {
            self.hand_over(h, now, &mut events);
        }
        if !events.is_empty() {
            self.events.lock().append(&mut events);
        }
        Ok(total)
    }

    /// What the receive side found for the publishing side: own commands
    /// delivered, a new primary (reconnected to), its welcome, nacks. If
    /// the caller must not wait and a publish holds `tx`, it is left for
    /// the holder (or the next poll or tick), in order.
    fn hand_over(&self, h: Handover, now: Nanos, events: &mut Vec<MemberEvent>) {
        let Some(mut tx) = self.tx_if_free() else {
            self.deferred.lock().push(h);
            return;
        };
        let mut sink = self.sink();
        self.apply_deferred(&mut tx, &mut sink);
        self.apply_handover(&mut tx, h, now, &mut sink, events);
    }

    fn apply_handover(
        &self,
        tx: &mut Tx,
        h: Handover,
        now: Nanos,
        sink: &mut SockSink<'_>,
        events: &mut Vec<MemberEvent>,
    ) {
        if let Some(to) = h.switch_to.filter(|_| self.connected) {
            let _ = self.socks.sock.connect(&to);
        }
        if let Some(e) = h.apply(tx, now, sink) {
            events.push(e);
        }
        self.frag.store(tx.fragment_size(), Ordering::Relaxed);
    }

    /// Timed work, when `poll` found nothing: resends, gap requests,
    /// hellos after a silence. Returns how long until something is due.
    pub fn tick(&self) -> Duration {
        let now = clock::now();
        let mut sink = self.sink();
        let mut due = self.rx.lock().rx.tick(now, &mut sink);
        // A publish holding `tx` where the caller must not wait: the
        // resends are looked at again soon.
        match self.tx_if_free() {
            Some(mut tx) => {
                self.apply_deferred(&mut tx, &mut sink);
                if let Some(d) = tx.tick(now, &mut sink) {
                    due = due.min(d);
                }
            }
            None => due = due.min(now + 100_000),
        }
        Duration::from_nanos(due.saturating_sub(now))
    }

    /// What the member found since the last call (forks, a new primary,
    /// its id taken).
    pub fn take_events(&self) -> Vec<MemberEvent> {
        std::mem::take(&mut *self.events.lock())
    }

    /// No more publishes: what is pending is still sent and resent (by
    /// whoever drives the member) until it is delivered; see
    /// [`Member::drain`].
    pub fn shut(&self) {
        self.shut.store(true, Ordering::Release);
        self.tx.lock().shut();
    }

    /// Commands published and not yet delivered to this member (a mirror:
    /// no lock).
    pub fn pending(&self) -> u64 {
        self.txc.pending.get()
    }

    /// A close that waits: no more publishes, then (driving the member
    /// itself if `drive`, else waiting for whoever drives it) until every
    /// message published is delivered to this member, at most `timeout`;
    /// then the goodbye. Returns the messages that were not delivered (0:
    /// every publish that returned `Ok` is in the bus's order). Blocks:
    /// from the BEAM, on a dirty scheduler. Messages delivered meanwhile
    /// go to `deliver`.
    pub fn drain(&self, timeout: Duration, drive: bool, deliver: &mut Deliver<'_>) -> u64 {
        self.shut();
        let t0 = Instant::now();
        while self.pending() > 0 && t0.elapsed() < timeout && !self.is_closed() {
            if drive {
                if self.poll(64, deliver).unwrap_or(0) == 0 {
                    let due = self.tick().min(Duration::from_millis(1));
                    let _ = crate::wait::poll_fds(&[(self.poll_fd(), libc::POLLIN)], Some(due));
                }
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let undelivered = self.tx.lock().undelivered();
        self.close();
        undelivered
    }

    /// Leaves the bus: no more publishes; the member id is free again (and
    /// a unicast member leaves the fan-out). Waits for the `tx` lock to say
    /// goodbye (see [`Member::try_close`]). What is pending is sent once
    /// more and then forgotten: [`Member::drain`] waits for it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut sink = self.sink();
        self.tx.lock().close(clock::now(), &mut sink);
    }

    /// [`Member::close`] without waiting: publishes are refused from now
    /// on; false if a publish holds the `tx` lock, so that the goodbye is
    /// still to be said (by a [`Member::close`] from a thread that may
    /// wait).
    pub fn try_close(&self) -> bool {
        self.closed.store(true, Ordering::Release);
        let Some(mut tx) = self.tx.try_lock() else {
            return false;
        };
        let mut sink = self.sink();
        tx.close(clock::now(), &mut sink);
        true
    }

    /// Closed by [`Member::close`] or [`Member::try_close`] (an atomic: never
    /// waits).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The counters, read without taking the receive lock.
    pub fn stats(&self) -> MemberStats {
        let (t, r) = (&self.txc, &self.rxc);
        let g = self
            .guard
            .as_ref()
            .map_or([0; 5], |g| g.counters.rejections());
        MemberStats {
            published: t.published.get(),
            commands: t.commands.get(),
            resent: t.resent.get(),
            send_errors: t.send_errors.get(),
            delivered: r.delivered.get(),
            datagrams: r.datagrams.get(),
            duplicates: r.duplicates.get(),
            gaps: r.gaps.get(),
            replay_requests: r.replay_requests.get(),
            malformed: r.malformed.get(),
            wrong_session: r.wrong_session.get(),
            dropped_ahead: r.dropped_ahead.get(),
            injected_losses: r.injected_losses.get(),
            oversized: r.oversized.get(),
            hellos: r.hellos.get(),
            next_seq: r.next_seq.get(),
            pending: t.pending.get(),
            epoch: r.epoch.get(),
            stale_epoch: r.stale_epoch.get(),
            forks: r.forks.get(),
            trimmed: r.trimmed.get(),
            nacked: t.nacked.get(),
            probes: t.probes.get(),
            renumbered: t.renumbered.get(),
            strangers: r.strangers.get(),
            conflicts: r.conflicts.get(),
            welcomes: r.welcomes.get(),
            commit: r.commit.get(),
            cwnd: t.cwnd.get(),
            rto_us: t.rto.get() / 1_000,
            coalesced: t.coalesced.get(),
            rejected: g[0],
            rejected_forged: g[1],
            rejected_replayed: g[2],
            rejected_unsealed: g[3],
            rejected_forbidden: g[4],
        }
    }
}

/// Says hello until the welcome (the [`Join`] state machine on the
/// member's unicast socket), up to `connect_timeout`.
pub(crate) fn welcome(
    socks: &Sockets,
    cfg: &MemberConfig,
    unicast: bool,
    seal: Option<&SpinMutex<Sealer>>,
    mut open: Option<&mut (Guard, Vec<u8>)>,
) -> Result<core::Welcome, SeqError> {
    let mut join = Join::new(cfg, unicast);
    let errors = Counter::default();
    let mut sink = SockSink {
        sock: &socks.sock,
        connected: false,
        errors: &errors,
        seal,
    };
    let slot = (cfg.max_datagram + guard::OVERHEAD)
        .max(super::wire::BUS_HEADER + super::wire::WELCOME_BODY);
    let mut b = crate::udp::sys::Batch::new(8, slot);
    let t0 = clock::now();
    let timeout: Nanos = super::core::nanos(cfg.connect_timeout);
    loop {
        let now = clock::now();
        let due = match join.tick(now, &mut sink) {
            Ok(w) if w.taken => return Err(SeqError::Taken),
            Ok(w) => return Ok(w),
            Err(due) => due,
        };
        if now.saturating_sub(t0) >= timeout {
            return Err(SeqError::Timeout);
        }
        match b.recv(&socks.sock) {
            Ok(n) => {
                for i in 0..n {
                    match open.as_deref_mut() {
                        None => join.on_datagram(now, b.data(i), b.addr(i)),
                        Some((g, buf)) => {
                            let from = b.addr(i);
                            if let Some(p) = from.and_then(|f| g.open(f, b.data(i), buf).ok()) {
                                join.on_datagram(now, p, from);
                            }
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let wait =
                    Duration::from_nanos(due.saturating_sub(now)).min(Duration::from_millis(1));
                let _ = crate::wait::poll_fds(&[(socks.sock.fd(), libc::POLLIN)], Some(wait));
            }
            // ECONNREFUSED from an earlier hello: nobody there yet.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod snapshot_tests;
