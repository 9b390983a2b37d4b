//! A UDP endpoint whose receive thread hands each datagram to a [`Sink`]
//! (in Tachyon.UDP, a sink that sends it to the owner process), and whose
//! socket any thread may send on.
//!
//! ## Lifetime
//! [`Endpoint::bind`] opens the socket, [`Endpoint::start`] starts the
//! receive thread. The receive thread closes the socket itself when it stops,
//! so the port is free as soon as it is gone; [`Endpoint::close`] stops it and
//! waits for that, [`Endpoint::request_stop`] only asks (for callers that must
//! not block, such as a BEAM monitor callback). Senders hold a read lock on
//! the socket for the duration of one `sendto`, so the descriptor is never
//! closed under them (nor reused by another file).
//!
//! ## Backpressure
//! Credits ([`crate::credit::Credits`]): datagrams handed to the sink are
//! counted (`delivered`); the consumer acknowledges what it processed with
//! [`Endpoint::ack`]. With a `max_queue` bound, a datagram that arrives
//! while `delivered - acked` is at the bound is dropped and counted
//! (`dropped`): tail drop, the newest datagram goes, the kernel buffer keeps
//! draining and stale data never queues up. Without a bound nothing is
//! dropped by the endpoint.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crossbeam_utils::CachePadded;

use super::sys::{Batch, Socket, SocketOptions, MAX_UDP_PAYLOAD};
use super::{validate_sizes, Placement};
use crate::counter::Counter;
use crate::credit::Credits;
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::{Ctx, Worker};

/// How to run an [`Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    pub bind: SocketAddr,
    /// What the receive thread does when no datagram is waiting.
    pub wait: WaitStrategy,
    /// Core to pin the receive thread to.
    pub core: Option<usize>,
    /// Datagrams taken per `recvmmsg`, at most.
    pub batch: usize,
    /// Largest datagram delivered whole; larger ones are dropped and counted
    /// in `truncated`.
    pub max_datagram: usize,
    /// Most datagrams delivered and not yet acknowledged (`None`: no bound).
    pub max_queue: Option<u64>,
    pub socket: SocketOptions,
}

impl EndpointConfig {
    /// Defaults: back off (yield, then block in `poll`) when idle, no
    /// pinning, batches of 16, datagrams up to 65,507 bytes, no queue bound.
    pub fn new(bind: SocketAddr) -> EndpointConfig {
        EndpointConfig {
            bind,
            wait: WaitStrategy::Backoff,
            core: None,
            batch: 16,
            max_datagram: MAX_UDP_PAYLOAD,
            max_queue: None,
            socket: SocketOptions::default(),
        }
    }
}

/// Where received datagrams go: called on the receive thread (then the sink
/// must also be `Send + 'static`), or (poll mode) on the thread that calls
/// [`Endpoint::poll`].
pub trait Sink {
    /// Called before the datagrams of each received batch, with the bytes
    /// they hold at most (a sink can allocate once for the whole batch).
    fn begin_batch(&mut self, _bytes: usize) {}
    /// Takes one datagram. Returns false if it could not be delivered (it is
    /// then counted in `undelivered`, not in `delivered`).
    fn deliver(&mut self, from: SocketAddr, data: &[u8]) -> bool;
    /// Called after the datagrams of each received batch.
    fn end_batch(&mut self) {}
}

impl<F: FnMut(SocketAddr, &[u8]) -> bool> Sink for F {
    fn deliver(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        self(from, data)
    }
}

/// Counters of the receive thread (its only writer).
#[derive(Debug, Default)]
struct RxCounters {
    received: Counter,
    received_bytes: Counter,
    dropped: Counter,
    undelivered: Counter,
    truncated: Counter,
    recv_errors: Counter,
    kernel_drops: Counter,
    batches: Counter,
}

/// Counters of the sending threads (many writers).
#[derive(Debug, Default)]
struct TxCounters {
    sent: Counter,
    sent_bytes: Counter,
    send_errors: Counter,
}

crate::named_fields! {
    /// A snapshot of an endpoint's counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct EndpointStats {
        /// Datagrams received from the socket.
        pub received: u64,
        pub received_bytes: u64,
        /// Datagrams handed to the sink.
        pub delivered: u64,
        /// Datagrams acknowledged with [`Endpoint::ack`].
        pub acked: u64,
        /// `delivered - acked` (0 if more was acknowledged than delivered).
        pub in_flight: u64,
        /// Datagrams dropped because `in_flight` was at `max_queue`.
        pub dropped: u64,
        /// Datagrams the sink could not deliver (e.g. the owner had exited).
        pub undelivered: u64,
        /// Datagrams larger than `max_datagram` (dropped).
        pub truncated: u64,
        pub recv_errors: u64,
        /// Datagrams the kernel dropped because the receive buffer was full.
        pub kernel_drops: u64,
        /// Receive calls that returned at least one datagram.
        pub batches: u64,
        /// Datagrams sent with [`Endpoint::send_to`].
        pub sent: u64,
        pub sent_bytes: u64,
        pub send_errors: u64,
    }
}

/// Why a send failed.
#[derive(Debug)]
pub enum SendError {
    /// The endpoint is closed (or closing).
    Closed,
    /// The kernel refused it (`EMSGSIZE`, `EAGAIN`, `ENETUNREACH`, ...).
    Io(io::Error),
}

struct Shared {
    stop: CachePadded<AtomicBool>,
    /// A receive thread was started (no polling then).
    threaded: AtomicBool,
    credits: Credits,
    rx: CachePadded<RxCounters>,
    tx: CachePadded<TxCounters>,
    /// `None` once closed. Senders take it shared; the receive thread holds it
    /// shared for its whole life; closing takes it exclusively.
    sock: RwLock<Option<Socket>>,
    placement: Mutex<Placement>,
}

impl Shared {
    fn close_socket(&self) {
        let mut g = self.sock.write().unwrap_or_else(|e| e.into_inner());
        g.take();
    }
}

/// A bound UDP socket with an optional receive thread.
pub struct Endpoint {
    cfg: EndpointConfig,
    local: SocketAddr,
    shared: Arc<Shared>,
    worker: Mutex<Option<Worker>>,
}

impl Endpoint {
    /// Opens and binds the socket. No thread yet: see [`Endpoint::start`].
    pub fn bind(cfg: EndpointConfig) -> io::Result<Endpoint> {
        validate_sizes(cfg.batch, cfg.max_datagram)?;
        if cfg.max_queue == Some(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_queue must be positive",
            ));
        }
        let sock = Socket::bind(cfg.bind, &cfg.socket)?;
        let local = sock.local_addr()?;
        let shared = Arc::new(Shared {
            stop: CachePadded::new(AtomicBool::new(false)),
            threaded: AtomicBool::new(false),
            credits: Credits::new(cfg.max_queue),
            rx: CachePadded::new(RxCounters::default()),
            tx: CachePadded::new(TxCounters::default()),
            sock: RwLock::new(Some(sock)),
            placement: Mutex::new(Placement {
                core: cfg.core,
                pinned: false,
                wait: cfg.wait,
            }),
        });
        Ok(Endpoint {
            cfg,
            local,
            shared,
            worker: Mutex::new(None),
        })
    }

    /// Starts the receive thread with `sink`; returns once it runs (and is
    /// pinned). At most once per endpoint.
    pub fn start<S: Sink + Send + 'static>(&self, mut sink: S) -> io::Result<()> {
        let mut slot = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "already started",
            ));
        }
        if self.is_closed() {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "closed"));
        }
        self.shared.threaded.store(true, Ordering::Relaxed);
        let shared = self.shared.clone();
        let cfg = self.cfg;
        let worker = Worker::spawn("tachyon-udp-rx", cfg.core, move |ctx| {
            // Closes the socket when the thread ends, even by a panic in the
            // sink, so an owner-death stop frees the port without a join.
            struct CloseOnExit(Arc<Shared>);
            impl Drop for CloseOnExit {
                fn drop(&mut self) {
                    self.0.close_socket();
                }
            }
            let closer = CloseOnExit(shared.clone());
            let mut batch = Batch::new(cfg.batch, cfg.max_datagram);
            {
                let guard = shared.sock.read().unwrap_or_else(|e| e.into_inner());
                if let Some(sock) = guard.as_ref() {
                    receive_loop(ctx, &shared, sock, &mut batch, &cfg, &mut sink);
                }
            }
            drop(closer);
            // The sink (which may hold the last reference to whatever owns
            // this endpoint) goes last.
            drop(sink);
        })?;
        if let Ok(mut p) = self.shared.placement.lock() {
            p.pinned = worker.placement().1;
        }
        *slot = Some(worker);
        Ok(())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    pub fn placement(&self) -> Placement {
        *self
            .shared
            .placement
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a stop was requested (sends fail with `Closed` from then on).
    pub fn is_closed(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    /// Effective (`SO_RCVBUF`, `SO_SNDBUF`), or `None` once closed.
    pub fn buffer_sizes(&self) -> Option<(usize, usize)> {
        let g = self.shared.sock.read().unwrap_or_else(|e| e.into_inner());
        g.as_ref().and_then(|s| s.buffer_sizes().ok())
    }

    /// Sends one datagram from the calling thread (non-blocking).
    pub fn send_to(&self, data: &[u8], to: &SocketAddr) -> Result<usize, SendError> {
        self.sending(|sock| sock.send_to(data, to))
    }

    /// Sends one datagram to the peer of [`Endpoint::connect`]
    /// (non-blocking; `ENOTCONN`/`EDESTADDRREQ` if not connected). Cheaper
    /// than [`Endpoint::send_to`]: the kernel keeps the route of a
    /// connected socket instead of looking it up per datagram (about
    /// 0.5-1 us less per send on loopback on the 2-core VM).
    pub fn send(&self, data: &[u8]) -> Result<usize, SendError> {
        self.sending(|sock| sock.send(data))
    }

    /// Connects the socket to `peer` (`connect(2)`): [`Endpoint::send`]
    /// goes there, and the kernel drops datagrams from anyone else.
    pub fn connect(&self, peer: &SocketAddr) -> Result<(), SendError> {
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        let g = self.shared.sock.read().unwrap_or_else(|e| e.into_inner());
        let Some(sock) = g.as_ref() else {
            return Err(SendError::Closed);
        };
        sock.connect(peer).map_err(SendError::Io)
    }

    /// One send through `f` under the socket's read lock, counted.
    fn sending(&self, f: impl FnOnce(&Socket) -> io::Result<usize>) -> Result<usize, SendError> {
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        let g = self.shared.sock.read().unwrap_or_else(|e| e.into_inner());
        let Some(sock) = g.as_ref() else {
            return Err(SendError::Closed);
        };
        let r = f(sock);
        drop(g);
        match r {
            Ok(n) => {
                self.shared.tx.sent.add(1);
                self.shared.tx.sent_bytes.add(n as u64);
                Ok(n)
            }
            Err(e) => {
                self.shared.tx.send_errors.add(1);
                Err(SendError::Io(e))
            }
        }
    }

    /// Poll mode: receives what is waiting (at most `max` datagrams) on the
    /// calling thread and hands
    /// it to `sink` (the same path and counters as the receive thread), for
    /// an endpoint whose receive thread was never started. Never blocks:
    /// `WouldBlock` when nothing is waiting (wait for the socket to be
    /// readable, e.g. with the BEAM's `enif_select` on [`Endpoint::raw_fd`]).
    /// Callers serialise their polls (the counters have one writer): the
    /// NIF keeps the batch behind a mutex.
    pub fn poll<S: Sink>(&self, batch: &mut Batch, max: usize, sink: &mut S) -> io::Result<usize> {
        if self.shared.threaded.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the endpoint has a receive thread",
            ));
        }
        if self.is_closed() {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "closed"));
        }
        let g = self.shared.sock.read().unwrap_or_else(|e| e.into_inner());
        let Some(sock) = g.as_ref() else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "closed"));
        };
        receive_batch(&self.shared, sock, batch, max, sink)
    }

    /// The socket's descriptor while open (to wait for it in an event loop;
    /// it is closed by [`Endpoint::close`], so only use it until then).
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        let g = self.shared.sock.read().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|s| s.fd())
    }

    /// Acknowledges `n` delivered datagrams (frees room under `max_queue`).
    pub fn ack(&self, n: u64) {
        self.shared.credits.ack(n);
    }

    pub fn stats(&self) -> EndpointStats {
        let rx = &self.shared.rx;
        let tx = &self.shared.tx;
        let received = rx.received.get();
        let credits = &self.shared.credits;
        let (delivered, acked) = (credits.delivered(), credits.acked());
        EndpointStats {
            received,
            received_bytes: rx.received_bytes.get(),
            delivered,
            acked,
            in_flight: delivered.saturating_sub(acked),
            dropped: rx.dropped.get(),
            undelivered: rx.undelivered.get(),
            truncated: rx.truncated.get(),
            recv_errors: rx.recv_errors.get(),
            kernel_drops: rx.kernel_drops.get(),
            batches: rx.batches.get(),
            sent: tx.sent.get(),
            sent_bytes: tx.sent_bytes.get(),
            send_errors: tx.send_errors.get(),
        }
    }

    /// Asks the receive thread to stop, without waiting. New sends fail; the
    /// thread closes the socket as it exits (within microseconds when it is
    /// not starved of CPU).
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self
            .worker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            w.stop();
        }
    }

    /// Stops the receive thread, waits for it, and closes the socket
    /// (idempotent). On return the port is free. Called on the receive thread
    /// itself (by a sink dropping the last owner), it does not wait for itself.
    /// Blocks: from the BEAM, on a dirty scheduler.
    pub fn close(&self) {
        self.request_stop();
        let worker = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = worker {
            let _ = w.join();
        }
        self.shared.close_socket();
    }
}

impl Drop for Endpoint {
    /// Stops the thread without waiting for it (the worker's reaper joins
    /// it; a destructor may run on a normal scheduler). The thread closes
    /// the socket as it exits.
    fn drop(&mut self) {
        self.request_stop();
        if self.worker.get_mut().map_or(true, |w| w.is_none()) {
            self.shared.close_socket();
        }
    }
}

fn receive_loop<S: Sink>(
    ctx: &Ctx,
    shared: &Shared,
    sock: &Socket,
    batch: &mut Batch,
    cfg: &EndpointConfig,
    sink: &mut S,
) {
    let mut waiter = Waiter::with_socket(cfg.wait, ctx.wake().clone(), sock.fd());
    while !ctx.stopped() {
        match receive_batch(shared, sock, batch, usize::MAX, sink) {
            Ok(n) if n > 0 => waiter.reset(),
            Ok(_) => waiter.idle(|| false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => waiter.idle(|| false),
        }
    }
}

/// Receives the datagrams waiting on `sock` (one `recvmmsg`, at most
/// `max` and `batch.capacity()`, never blocking) and hands each to `sink`, counting
/// them. The one receive path of both modes: the receive thread's loop and
/// [`Endpoint::poll`]. Returns how many arrived; `WouldBlock` if none (other
/// errors are counted in `recv_errors`).
fn receive_batch<S: Sink>(
    shared: &Shared,
    sock: &Socket,
    batch: &mut Batch,
    max: usize,
    sink: &mut S,
) -> io::Result<usize> {
    let rx = &shared.rx;
    let n = match batch.recv_max(sock, max) {
        Ok(n) => n,
        Err(e) => {
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                rx.recv_errors.bump(1);
            }
            return Err(e);
        }
    };
    if n == 0 {
        return Ok(0);
    }
    let bytes: usize = (0..n).map(|i| batch.data(i).len()).sum();
    sink.begin_batch(bytes);
    for i in 0..n {
        let data = batch.data(i);
        if batch.is_truncated(i) {
            rx.truncated.bump(1);
            continue;
        }
        let Some(from) = batch.addr(i) else {
            rx.recv_errors.bump(1);
            continue;
        };
        if !shared.credits.take() {
            rx.dropped.bump(1);
            continue;
        }
        if !sink.deliver(from, data) {
            shared.credits.untake();
            rx.undelivered.bump(1);
        }
    }
    sink.end_batch();
    rx.received_bytes.bump(bytes as u64);
    rx.kernel_drops.raise_to(batch.kernel_drops() as u64);
    rx.batches.bump(1);
    // Last: a reader that sees `received` sees every other counter of these
    // datagrams.
    rx.received.bump(n as u64);
    Ok(n)
}
