//! A member of the bus: publishes commands to the sequencer and delivers
//! the bus in sequence order, exactly once.
//!
//! Two locks, never held together: `tx` (publishing and the commands not
//! yet seen sequenced) and `rx` (the receive buffers and the ordering
//! state). Whoever drives the member calls [`Member::poll`] (a thread of its
//! own, or a BEAM process polling on its scheduler) and [`Member::tick`]
//! when nothing arrived: resends, gap requests and hellos are timed there.

mod config;
mod rx;
mod welcome;

pub use config::{MemberConfig, MemberStats, PublishError};
use config::{RxCounters, TxCounters};
use welcome::welcome;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::wire::{self, CmdKind, Msg, CONT, MORE};
use super::{BusMode, SeqError};
use crate::spin::SpinMutex;
use crate::udp::sys::{Batch, Epoll, Socket, SocketOptions};

/// Commands resent at once when the oldest is overdue.
const RESEND_WINDOW: usize = 32;

struct Pending {
    last_seq: u64,
    sent: Instant,
    dgram: Vec<u8>,
}

struct Tx {
    next_member_seq: u64,
    pending: VecDeque<Pending>,
    pool: Vec<Vec<u8>>,
    closed: bool,
}

/// A message held while a gap before it is filled.
struct Held {
    member_id: u32,
    member_seq: u64,
    flags: u8,
    data: Vec<u8>,
}

/// The receive buffers and the ordering state, under one lock.
struct RxAll {
    batch: Batch,
    mbatch: Option<Batch>,
    st: Rx,
}

struct Rx {
    next: u64,
    /// Every sequence number below this one exists.
    known: u64,
    held: BTreeMap<u64, Held>,
    partial: HashMap<u32, Vec<u8>>,
    /// An outstanding replay request: up to which sequence number, when.
    requested: Option<(u64, Instant)>,
    heard: bool,
    last_heard: Instant,
    own_seen: u64,
    rng: u64,
    scratch: Vec<u8>,
    epoch: u32,
    /// A new primary's address, to send to after this poll.
    switch_to: Option<SocketAddr>,
    /// When the last datagram came (a standby watches it).
    last_datagram: Instant,
}

/// Where [`Member::poll_into`] hands what is now in order.
pub enum Deliver<'a> {
    /// Whole messages (fragments reassembled, control entries skipped):
    /// `(seq, member_id, data)`.
    Messages(&'a mut dyn FnMut(u64, u32, &[u8])),
    /// Every log entry as it is, control entries and fragments too (a
    /// standby copying the log).
    Entries(&'a mut dyn FnMut(u64, &Msg<'_>)),
}

/// A member of the bus. `Sync`: any thread publishes, one at a time drives.
pub struct Member {
    cfg: MemberConfig,
    sock: Socket,
    mcast: Option<Socket>,
    epoll: Epoll,
    session: u64,
    frag: usize,
    /// Where commands go (the primary); the socket is connected to it
    /// when there are no alternates.
    target: SpinMutex<SocketAddr>,
    connected: bool,
    tx: SpinMutex<Tx>,
    rx: SpinMutex<RxAll>,
    txc: CachePadded<TxCounters>,
    rxc: CachePadded<RxCounters>,
}

impl Member {
    /// Binds the member's socket(s), says hello and waits for the
    /// sequencer's welcome (up to `connect_timeout`). Blocks.
    pub fn open(cfg: MemberConfig) -> Result<Member, SeqError> {
        let frag = cfg
            .max_datagram
            .checked_sub(wire::BUS_HEADER + wire::MSG_HEADER)
            .filter(|f| *f > 0 && cfg.max_datagram <= crate::udp::MAX_UDP_PAYLOAD)
            .ok_or(SeqError::BadConfig)?
            .min(u16::MAX as usize);
        if cfg.member_id == 0 || cfg.batch == 0 || cfg.replay_chunk == 0 || cfg.max_pending == 0 {
            return Err(SeqError::BadConfig);
        }
        let sock = Socket::bind(cfg.bind, &cfg.socket)?;
        let mcast = match cfg.bus {
            BusMode::Unicast => None,
            BusMode::Multicast { group, iface, .. } => {
                let IpAddr::V4(g) = group.ip() else {
                    return Err(SeqError::BadConfig);
                };
                let opts = SocketOptions {
                    reuseaddr: true,
                    reuseport: true,
                    ..cfg.socket
                };
                let m = Socket::bind(group, &opts)?;
                m.join_multicast_v4(g, iface)?;
                Some(m)
            }
        };
        let mut fds = vec![sock.fd()];
        fds.extend(mcast.as_ref().map(|m| m.fd()));
        let epoll = Epoll::new(&fds)?;
        let unicast = mcast.is_none();
        let w = welcome(&sock, &cfg, unicast)?;
        let (session, next_seq, last) = (w.session, w.next, w.last);
        // Connected (without alternates): sends skip the route lookup, and
        // only the sequencer's datagrams reach this socket.
        let connected = cfg.alternates.is_empty();
        if connected {
            sock.connect(&w.from)?;
        }
        let slot = cfg.max_datagram.max(wire::BUS_HEADER + 8);
        let now = Instant::now();
        let next = cfg
            .from
            .map_or(next_seq, |f| if cfg.raw { f } else { f.max(1) });
        let rx = Rx {
            next,
            known: next_seq,
            held: BTreeMap::new(),
            partial: HashMap::new(),
            requested: None,
            heard: true,
            last_heard: now,
            own_seen: last,
            rng: 0x2545_f491_4f6c_dd1d ^ (cfg.member_id as u64) << 7,
            scratch: Vec::with_capacity(64),
            epoch: w.epoch,
            switch_to: None,
            last_datagram: now,
        };
        let rxc = CachePadded::new(RxCounters::default());
        rxc.hellos.bump(1);
        Ok(Member {
            target: SpinMutex::new(w.from),
            connected,
            tx: SpinMutex::new(Tx {
                next_member_seq: last + 1,
                pending: VecDeque::new(),
                pool: Vec::new(),
                closed: false,
            }),
            rx: SpinMutex::new(RxAll {
                batch: Batch::new(cfg.batch, slot),
                mbatch: mcast.as_ref().map(|_| Batch::new(cfg.batch, slot)),
                st: rx,
            }),
            txc: CachePadded::new(TxCounters::default()),
            rxc,
            session,
            frag,
            epoll,
            sock,
            mcast,
            cfg,
        })
    }

    pub fn member_id(&self) -> u32 {
        self.cfg.member_id
    }

    pub fn session(&self) -> u64 {
        self.session
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// One descriptor readable when a datagram waits on any of the
    /// member's sockets (for a loop's waiter, or the VM's `select`).
    pub fn poll_fd(&self) -> RawFd {
        self.epoll.fd()
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
        let it = msgs.into_iter();
        if it.clone().any(|m| m.len() > self.cfg.max_message_size) {
            return Err(PublishError::TooLarge);
        }
        let mut tx = self.tx.lock();
        if tx.closed {
            return Err(PublishError::Closed);
        }
        if tx.pending.len() >= self.cfg.max_pending {
            return Err(PublishError::Busy);
        }
        let now = Instant::now();
        let mut d = tx.pool.pop().unwrap_or_default();
        let mut count = 0u16;
        let mut published = 0u64;
        for m in it {
            published += 1;
            let mut chunks = m.chunks(self.frag).peekable();
            let mut first = true;
            if m.is_empty() {
                self.add_cmd(&mut tx, &mut d, &mut count, now, 0, &[]);
            }
            while let Some(c) = chunks.next() {
                let mut flags = if first { 0 } else { CONT };
                if chunks.peek().is_some() {
                    flags |= MORE;
                }
                first = false;
                self.add_cmd(&mut tx, &mut d, &mut count, now, flags, c);
            }
        }
        self.send_cmd(&mut tx, d, count, now);
        // Counters of the tx side are bumped under the tx lock: one writer
        // at a time, no locked instruction.
        self.txc.published.bump(published);
        Ok(tx.next_member_seq - 1)
    }

    /// Adds one message to the command being built, sending it first if
    /// it would not fit.
    fn add_cmd(
        &self,
        tx: &mut Tx,
        d: &mut Vec<u8>,
        count: &mut u16,
        now: Instant,
        flags: u8,
        c: &[u8],
    ) {
        if *count > 0
            && (d.len() + wire::CMD_MSG_HEADER + c.len() > self.cfg.max_datagram
                || *count == u16::MAX)
        {
            let full = std::mem::replace(d, tx.pool.pop().unwrap_or_default());
            self.send_cmd(tx, full, *count, now);
            *count = 0;
        }
        if *count == 0 {
            wire::cmd_header(d, CmdKind::Publish, self.cfg.member_id, self.session);
        }
        let seq = tx.next_member_seq;
        tx.next_member_seq += 1;
        wire::write_cmd_msg(d, seq, flags, c);
        *count += 1;
    }

    fn send_cmd(&self, tx: &mut Tx, mut d: Vec<u8>, count: u16, now: Instant) {
        if count == 0 {
            tx.pool.push(d);
            return;
        }
        wire::set_cmd_count(&mut d, count);
        // Sent under the tx lock: commands leave in member_seq order, the
        // only order the sequencer takes them in.
        if self.send_bytes(&d).is_err() {
            // Lost like any datagram: resent after `resend_after`.
            self.txc.send_errors.bump(1);
        }
        self.txc.commands.bump(1);
        tx.pending.push_back(Pending {
            last_seq: tx.next_member_seq - 1,
            sent: now,
            dgram: d,
        });
    }

    /// Reads what waits on the member's sockets (up to `max` datagrams per
    /// socket) and calls `deliver(seq, member_id, data)` for every message
    /// now in order. Returns the datagrams read.
    pub fn poll(&self, max: usize, deliver: &mut dyn FnMut(u64, u32, &[u8])) -> io::Result<usize> {
        self.poll_into(max, &mut Deliver::Messages(deliver))
    }

    /// [`Member::poll`] into either kind of [`Deliver`].
    pub fn poll_into(&self, max: usize, deliver: &mut Deliver<'_>) -> io::Result<usize> {
        let mut guard = self.rx.lock();
        let RxAll {
            batch,
            mbatch,
            st: rx,
        } = &mut *guard;
        let mut total = 0;
        let own_before = rx.own_seen;
        let socks = [
            (&self.sock, Some(batch)),
            (self.mcast.as_ref().unwrap_or(&self.sock), mbatch.as_mut()),
        ];
        for (sock, b) in socks {
            let Some(b) = b else { break };
            let n = match b.recv_max(sock, max) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                // The ICMP answer to a command sent while no sequencer
                // listened (it restarts): nothing to read.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => 0,
                Err(e) => return Err(e),
            };
            for i in 0..n {
                if b.is_truncated(i) {
                    self.rxc.malformed.bump(1);
                    continue;
                }
                self.datagram(rx, b.data(i), b.addr(i), deliver);
            }
            total += n;
        }
        if total > 0 {
            rx.heard = true;
            rx.last_datagram = Instant::now();
            if let Some(to) = rx.switch_to.take() {
                self.retarget(to);
            }
            if rx.next < rx.known {
                self.want(rx, Instant::now());
            }
        }
        let own = rx.own_seen;
        drop(guard);
        if own > own_before {
            self.ack(own);
        }
        Ok(total)
    }

    /// Sends a command to the current primary.
    pub(super) fn send_bytes(&self, d: &[u8]) -> io::Result<usize> {
        if self.connected {
            self.sock.send(d)
        } else {
            let to = *self.target.lock();
            self.sock.send_to(d, &to)
        }
    }

    /// Sends to `to` from now on (a new primary), and resends at once
    /// the commands the old one may not have sequenced.
    fn retarget(&self, to: SocketAddr) {
        {
            let mut t = self.target.lock();
            if *t == to {
                return;
            }
            *t = to;
            if self.connected {
                let _ = self.sock.connect(&to);
            }
        }
        self.resend_oldest(&mut self.tx.lock(), Instant::now());
    }

    /// Resends the oldest pending commands (a window: the sequencer takes a
    /// member's commands in `member_seq` order, so everything after a lost
    /// one was dropped too and goes out as these are sequenced, a window
    /// per round trip rather than a flood of the whole queue).
    fn resend_oldest(&self, tx: &mut Tx, now: Instant) {
        let mut n = 0;
        for p in tx.pending.iter_mut().take(RESEND_WINDOW) {
            let _ = self.send_bytes(&p.dgram);
            p.sent = now;
            n += 1;
        }
        self.txc.resent.bump(n);
    }

    /// How long since the last datagram from the sequencer.
    pub fn silence(&self) -> Duration {
        self.rx.lock().st.last_datagram.elapsed()
    }

    /// The epoch of the sequencer followed.
    pub fn epoch(&self) -> u32 {
        self.rx.lock().st.epoch
    }

    /// Forgets the commands sequenced up to `member_seq`.
    fn ack(&self, member_seq: u64) {
        let mut tx = self.tx.lock();
        while tx.pending.front().is_some_and(|p| p.last_seq <= member_seq) {
            let p = tx.pending.pop_front().expect("front");
            if tx.pool.len() < 64 {
                tx.pool.push(p.dgram);
            }
        }
    }

    /// Timed work, when `poll` found nothing: resends, gap requests,
    /// hellos after a silence. Returns how long until something is due.
    pub fn tick(&self) -> Duration {
        let now = Instant::now();
        let mut due = self.cfg.hello_after;
        {
            let mut g = self.rx.lock();
            let rx = &mut g.st;
            if rx.next < rx.known {
                self.want(rx, now);
                due = due.min(self.cfg.retransmit_after);
            }
            if rx.heard {
                rx.heard = false;
                rx.last_heard = now;
            } else if now.duration_since(rx.last_heard) >= self.cfg.hello_after {
                rx.last_heard = now;
                let mut h = std::mem::take(&mut rx.scratch);
                wire::hello(&mut h, self.cfg.member_id, self.mcast.is_none());
                let _ = self.send_bytes(&h);
                for a in &self.cfg.alternates {
                    let _ = self.sock.send_to(&h, a);
                }
                rx.scratch = h;
                self.rxc.hellos.bump(1);
            }
        }
        let mut tx = self.tx.lock();
        if let Some(p) = tx.pending.front() {
            let age = now.duration_since(p.sent);
            if age >= self.cfg.resend_after {
                self.resend_oldest(&mut tx, now);
            } else {
                due = due.min(self.cfg.resend_after - age);
            }
        }
        due
    }

    /// Leaves the bus: no more publishes; a unicast member tells the
    /// sequencer to stop sending to it.
    pub fn close(&self) {
        let mut tx = self.tx.lock();
        if tx.closed {
            return;
        }
        tx.closed = true;
        if self.mcast.is_none() {
            let mut b = Vec::with_capacity(wire::CMD_HEADER);
            wire::cmd_header(&mut b, CmdKind::Bye, self.cfg.member_id, self.session);
            let _ = self.send_bytes(&b);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.tx.lock().closed
    }

    pub fn stats(&self) -> MemberStats {
        let (t, r) = (&self.txc, &self.rxc);
        let (next, epoch) = {
            let g = self.rx.lock();
            (g.st.next, g.st.epoch as u64)
        };
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
            next_seq: next,
            pending: self.tx.lock().pending.len() as u64,
            epoch,
            stale_epoch: r.stale_epoch.get(),
            forks: r.forks.get(),
        }
    }
}
