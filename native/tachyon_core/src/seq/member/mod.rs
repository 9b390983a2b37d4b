//! A member of the bus: the shell around the member's state machines
//! (`seq::core::member`): its sockets, and two locks never held together:
//! `tx` (publishing and the commands not yet seen delivered) and `rx` (the
//! receive buffers and the ordering state). Whoever drives the member
//! calls [`Member::poll`] (a thread of its own, or a BEAM process polling
//! on its scheduler) and [`Member::tick`] when nothing arrived: resends,
//! gap requests and hellos are timed there.

mod socks;

pub use super::core::member::{MemberConfig, MemberEvent, MemberStats, PublishError};
pub(crate) use socks::{Batches, SockSink, Sockets};

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::core::member::{self as core, Handover, Join, Rx, RxCounters, Tx, TxCounters};
use super::core::Nanos;
use super::{clock, SeqError};
use crate::counter::Counter;
use crate::spin::SpinMutex;

/// The receive buffers and the ordering state, under one lock.
struct RxAll {
    batches: Batches,
    rx: Rx,
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
    txc: Arc<CachePadded<TxCounters>>,
    rxc: Arc<CachePadded<RxCounters>>,
}

impl Member {
    /// Binds the member's socket(s), says hello to the sequencer (every
    /// node of its group) and waits for the primary's welcome (up to
    /// `connect_timeout`). Blocks. `Err(Taken)` if the member id is
    /// another member's.
    pub fn open(mut cfg: MemberConfig) -> Result<Member, SeqError> {
        core::fragment_size(&cfg)?;
        if cfg.incarnation == 0 {
            cfg.incarnation = super::new_session();
        }
        let socks = Sockets::bind(cfg.bind, cfg.bus, &cfg.socket)?;
        let unicast = socks.mcast.is_none();
        let w = welcome(&socks, &cfg, unicast)?;
        // Connected (a group of one): sends skip the route lookup, and
        // only the sequencer's datagrams reach this socket.
        let connected = cfg.alternates.is_empty();
        if connected {
            socks.sock.connect(&w.from)?;
        }
        let (tx, rx) = core::from_welcome(&cfg, &w, unicast, clock::now())?;
        Ok(Member {
            txc: tx.counters().clone(),
            rxc: rx.counters().clone(),
            tx: SpinMutex::new(tx),
            rx: SpinMutex::new(RxAll {
                batches: socks.batches(&cfg),
                rx,
            }),
            events: SpinMutex::new(Vec::new()),
            session: w.session,
            connected,
            socks,
            cfg,
        })
    }

    fn sink(&self) -> SockSink<'_> {
        SockSink {
            sock: &self.socks.sock,
            connected: self.connected,
            errors: &self.txc.send_errors,
        }
    }

    pub fn member_id(&self) -> u32 {
        self.cfg.member_id
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
        self.tx.lock().fragment_size()
    }

    /// Publishes one message; returns its `member_seq` (of its last
    /// fragment, for a fragmented one).
    pub fn publish(&self, data: &[u8]) -> Result<u64, PublishError> {
        self.publish_many(std::iter::once(data))
    }

    /// Publishes messages, as many per command datagram as fit; returns
    /// the `member_seq` of the last.
    pub fn publish_many<'a, I>(&self, msgs: I) -> Result<u64, PublishError>
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: Clone,
    {
        // Sent under the tx lock: commands leave in member_seq order.
        let mut sink = self.sink();
        self.tx.lock().publish_many(clock::now(), msgs, &mut sink)
    }

    /// Reads what waits on the member's sockets (up to `max` datagrams per
    /// socket) and calls `deliver(seq, member_id, data)` for every message
    /// now in order and committed. Returns the datagrams read.
    pub fn poll(&self, max: usize, deliver: &mut dyn FnMut(u64, u32, &[u8])) -> io::Result<usize> {
        let mut sink = self.sink();
        let now = clock::now();
        let mut guard = self.rx.lock();
        let RxAll { batches, rx } = &mut *guard;
        let (own_before, heard_before) = (rx.own_seen(), rx.own_heard());
        let total = self
            .socks
            .recv(batches, max, &self.rxc.malformed, &mut |d, from| {
                rx.on_datagram(now, d, from, deliver)
            })?;
        if total == 0 {
            return Ok(0);
        }
        let switch = rx.end_batch(now, &mut sink);
        let handover = Handover::take(rx, switch);
        let mut events = rx.take_events();
        drop(guard);
        if handover.own > own_before || handover.heard != heard_before || !handover.is_empty() {
            self.hand_over(handover, now, &mut events);
        }
        if !events.is_empty() {
            self.events.lock().append(&mut events);
        }
        Ok(total)
    }

    /// What the receive side found for the publishing side: own commands
    /// delivered, a new primary (reconnected to), its welcome, nacks.
    fn hand_over(&self, h: Handover, now: Nanos, events: &mut Vec<MemberEvent>) {
        let mut tx = self.tx.lock();
        if let Some(to) = h.switch_to.filter(|_| self.connected) {
            let _ = self.socks.sock.connect(&to);
        }
        let mut sink = self.sink();
        if let Some(e) = h.apply(&mut tx, now, &mut sink) {
            events.push(e);
        }
    }

    /// Timed work, when `poll` found nothing: resends, gap requests,
    /// hellos after a silence. Returns how long until something is due.
    pub fn tick(&self) -> Duration {
        let now = clock::now();
        let mut sink = self.sink();
        let mut due = self.rx.lock().rx.tick(now, &mut sink);
        if let Some(d) = self.tx.lock().tick(now, &mut sink) {
            due = due.min(d);
        }
        Duration::from_nanos(due.saturating_sub(now))
    }

    /// What the member found since the last call (forks, a new primary,
    /// its id taken).
    pub fn take_events(&self) -> Vec<MemberEvent> {
        std::mem::take(&mut *self.events.lock())
    }

    /// Leaves the bus: no more publishes; the member id is free again (and
    /// a unicast member leaves the fan-out).
    pub fn close(&self) {
        let mut sink = self.sink();
        self.tx.lock().close(&mut sink);
    }

    pub fn is_closed(&self) -> bool {
        self.tx.lock().is_closed()
    }

    /// The counters, read without taking the receive lock.
    pub fn stats(&self) -> MemberStats {
        let (t, r) = (&self.txc, &self.rxc);
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
            nacked: t.nacked.get(),
            renumbered: t.renumbered.get(),
            strangers: r.strangers.get(),
            conflicts: r.conflicts.get(),
            welcomes: r.welcomes.get(),
            commit: r.commit.get(),
        }
    }
}

/// Says hello until the welcome (the [`Join`] state machine on the
/// member's unicast socket), up to `connect_timeout`.
pub(crate) fn welcome(
    socks: &Sockets,
    cfg: &MemberConfig,
    unicast: bool,
) -> Result<core::Welcome, SeqError> {
    let mut join = Join::new(cfg, unicast);
    let errors = Counter::default();
    let mut sink = SockSink {
        sock: &socks.sock,
        connected: false,
        errors: &errors,
    };
    let slot = cfg
        .max_datagram
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
                    join.on_datagram(now, b.data(i), b.addr(i));
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
