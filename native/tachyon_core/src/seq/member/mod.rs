//! A member of the bus: the shell around the member's state machines
//! (`seq::core::member`): its sockets, and two locks never held together:
//! `tx` (publishing and the commands not yet seen sequenced) and `rx`
//! (the receive buffers and the ordering state). Whoever drives the member
//! calls [`Member::poll`] (a thread of its own, or a BEAM process polling
//! on its scheduler) and [`Member::tick`] when nothing arrived: resends,
//! gap requests and hellos are timed there.

mod socks;

pub use super::core::member::{Deliver, MemberConfig, MemberStats, PublishError};
pub(crate) use socks::{Batches, SockSink, Sockets};

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::core::member::{self as core, Join, Rx, RxCounters, Tx, TxCounters};
use super::core::Nanos;
use super::{clock, SeqError};
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
    frag: usize,
    /// The socket is connected to the sequencer (no alternates).
    connected: bool,
    tx: SpinMutex<Tx>,
    rx: SpinMutex<RxAll>,
    txc: Arc<CachePadded<TxCounters>>,
    rxc: Arc<CachePadded<RxCounters>>,
}

impl Member {
    /// Binds the member's socket(s), says hello and waits for the
    /// sequencer's welcome (up to `connect_timeout`). Blocks.
    pub fn open(cfg: MemberConfig) -> Result<Member, SeqError> {
        let frag = core::fragment_size(&cfg)?;
        let socks = Sockets::bind(&cfg)?;
        let unicast = socks.mcast.is_none();
        let w = welcome(&socks, &cfg, unicast)?;
        // Connected (without alternates): sends skip the route lookup, and
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
            session: w.session,
            frag,
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
        self.frag
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
    /// now in order. Returns the datagrams read.
    pub fn poll(&self, max: usize, deliver: &mut dyn FnMut(u64, u32, &[u8])) -> io::Result<usize> {
        self.poll_into(max, &mut Deliver::Messages(deliver))
    }

    /// [`Member::poll`] into either kind of [`Deliver`].
    pub fn poll_into(&self, max: usize, deliver: &mut Deliver<'_>) -> io::Result<usize> {
        let mut sink = self.sink();
        let mut guard = self.rx.lock();
        let RxAll { batches, rx } = &mut *guard;
        let own_before = rx.own_seen();
        let total = self
            .socks
            .recv(batches, max, &self.rxc.malformed, &mut |d, from| {
                rx.on_datagram(d, from, deliver)
            })?;
        let switch = if total > 0 {
            rx.end_batch(clock::now(), &mut sink)
        } else {
            None
        };
        let own = rx.own_seen();
        drop(guard);
        if own > own_before {
            self.tx.lock().ack(own);
        }
        if let Some(to) = switch {
            self.retarget(to);
        }
        Ok(total)
    }

    /// Sends to `to` from now on (a new primary), and resends at once
    /// the commands the old one may not have sequenced.
    fn retarget(&self, to: SocketAddr) {
        let mut tx = self.tx.lock();
        if tx.target() == to {
            return;
        }
        if self.connected {
            let _ = self.socks.sock.connect(&to);
        }
        let mut sink = self.sink();
        tx.retarget(clock::now(), to, &mut sink);
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

    /// Leaves the bus: no more publishes; a unicast member tells the
    /// sequencer to stop sending to it.
    pub fn close(&self) {
        let mut sink = self.sink();
        self.tx.lock().close(self.socks.mcast.is_none(), &mut sink);
    }

    pub fn is_closed(&self) -> bool {
        self.tx.lock().is_closed()
    }

    /// The counters, read without taking either lock.
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
    let errors = crate::counter::Counter::default();
    let mut sink = SockSink {
        sock: &socks.sock,
        connected: false,
        errors: &errors,
    };
    let mut b = crate::udp::sys::Batch::new(8, cfg.max_datagram.max(super::wire::BUS_HEADER + 8));
    let t0 = clock::now();
    let timeout: Nanos = super::core::nanos(cfg.connect_timeout);
    loop {
        let now = clock::now();
        let due = match join.tick(now, &mut sink) {
            Ok(w) => return Ok(w),
            Err(due) => due,
        };
        if now.saturating_sub(t0) >= timeout {
            return Err(SeqError::Timeout);
        }
        match b.recv(&socks.sock) {
            Ok(n) => {
                for i in 0..n {
                    join.on_datagram(b.data(i), b.addr(i));
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
