//! The echo (pong) server: one thread that sends every datagram back to its
//! sender, in batches, without any other work per packet.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::sys::{Batch, Socket, SocketOptions, MAX_UDP_PAYLOAD};
use super::{validate_sizes, Placement};
use crate::counter::Counter;
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::{Ctx, Slot, Worker};

/// How to run an [`EchoServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoConfig {
    /// Address to bind (port 0: the kernel picks one; see [`EchoServer::local_addr`]).
    pub bind: SocketAddr,
    /// What the thread does when no datagram is waiting.
    pub wait: WaitStrategy,
    /// Core to pin the thread to (`None`: no pinning).
    pub core: Option<usize>,
    /// Datagrams received (and echoed) per `recvmmsg`/`sendmmsg` call, at most.
    pub batch: usize,
    /// Largest datagram echoed whole; larger ones are counted in `truncated`
    /// and not echoed. At most [`MAX_UDP_PAYLOAD`].
    pub max_datagram: usize,
    /// Socket buffer sizes and flags.
    pub socket: SocketOptions,
}

impl EchoConfig {
    /// Defaults: the machine's default wait strategy, no pinning, batches of
    /// 32, datagrams up to 65,507 bytes.
    pub fn new(bind: SocketAddr) -> EchoConfig {
        EchoConfig {
            bind,
            wait: WaitStrategy::machine_default(),
            core: None,
            batch: 32,
            max_datagram: MAX_UDP_PAYLOAD,
            socket: SocketOptions::default(),
        }
    }
}

/// Counters of the echo thread (its only writer).
#[derive(Debug, Default)]
struct EchoCounters {
    packets_in: Counter,
    bytes_in: Counter,
    packets_out: Counter,
    bytes_out: Counter,
    batches: Counter,
    truncated: Counter,
    recv_errors: Counter,
    send_errors: Counter,
    kernel_drops: Counter,
}

crate::named_fields! {
    /// A snapshot of an echo server's counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct EchoStats {
        /// Datagrams received.
        pub packets_in: u64,
        /// Payload bytes received.
        pub bytes_in: u64,
        /// Datagrams echoed.
        pub packets_out: u64,
        /// Payload bytes echoed.
        pub bytes_out: u64,
        /// Receive calls that returned at least one datagram (`packets_in /
        /// batches` is the average batch).
        pub batches: u64,
        /// Datagrams larger than `max_datagram` (dropped, not echoed).
        pub truncated: u64,
        /// Failed receives (other than "nothing waiting").
        pub recv_errors: u64,
        /// Echoes the kernel refused (or dropped on a full send buffer).
        pub send_errors: u64,
        /// Datagrams the kernel dropped because the receive buffer was full.
        pub kernel_drops: u64,
    }
    computed { errors }
}

impl EchoStats {
    /// Every error counted: receive, send and truncation.
    pub fn errors(&self) -> u64 {
        self.recv_errors + self.send_errors + self.truncated
    }
}

/// A running echo server. Stopping it stops and joins the thread, which
/// closes the socket: the port is free when `stop` returns. Dropping it
/// stops the thread without waiting (see [`crate::worker`]).
pub struct EchoServer {
    local: SocketAddr,
    counters: Arc<CachePadded<EchoCounters>>,
    worker: Slot,
    placement: Placement,
    buffers: (usize, usize),
}

impl EchoServer {
    /// Binds the socket (errors such as `EADDRINUSE` come back here) and
    /// starts the thread; returns once the thread runs (and is pinned).
    pub fn start(cfg: EchoConfig) -> io::Result<EchoServer> {
        validate_sizes(cfg.batch, cfg.max_datagram)?;
        let sock = Socket::bind(cfg.bind, &cfg.socket)?;
        let local = sock.local_addr()?;
        let buffers = sock.buffer_sizes()?;
        let counters = Arc::new(CachePadded::new(EchoCounters::default()));
        let c = counters.clone();
        let worker = Worker::spawn("tachyon-echo", cfg.core, move |ctx| {
            let mut batch = Batch::new(cfg.batch, cfg.max_datagram);
            echo_loop(ctx, &sock, &c, &mut batch, cfg.wait);
            // The socket is closed here, before the thread ends: a `stop`
            // that joined us finds the port free.
            drop(sock);
        })?;
        let pinned = worker.placement().1;
        Ok(EchoServer {
            local,
            counters,
            worker: Slot::new(worker),
            placement: Placement {
                core: cfg.core,
                pinned,
                wait: cfg.wait,
            },
            buffers,
        })
    }

    /// The bound address (with the actual port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Where the thread runs and how it waits.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Effective (`SO_RCVBUF`, `SO_SNDBUF`) in bytes.
    pub fn buffer_sizes(&self) -> (usize, usize) {
        self.buffers
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.worker.is_running()
    }

    pub fn stats(&self) -> EchoStats {
        let c = &self.counters;
        // Packet counts first (each is bumped after its companions).
        let packets_out = c.packets_out.get();
        let packets_in = c.packets_in.get();
        EchoStats {
            packets_in,
            bytes_in: c.bytes_in.get(),
            packets_out,
            bytes_out: c.bytes_out.get(),
            batches: c.batches.get(),
            truncated: c.truncated.get(),
            recv_errors: c.recv_errors.get(),
            send_errors: c.send_errors.get(),
            kernel_drops: c.kernel_drops.get(),
        }
    }

    /// Stops and joins the thread (idempotent). The port is free on return.
    /// Blocks: from the BEAM, on a dirty scheduler (`stats` never waits
    /// behind it).
    pub fn stop(&self) {
        let _ = self.worker.join();
    }
}

fn echo_loop(ctx: &Ctx, sock: &Socket, c: &EchoCounters, batch: &mut Batch, wait: WaitStrategy) {
    let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), sock.fd());
    while !ctx.stopped() {
        match batch.recv(sock) {
            Ok(n) if n > 0 => {
                waiter.reset();
                let mut bytes_in = 0u64;
                let mut truncated = 0u64;
                for i in 0..n {
                    bytes_in += batch.data(i).len() as u64;
                    truncated += batch.is_truncated(i) as u64;
                }
                // Receive-side counters first: whoever got an echo sees them.
                c.batches.bump(1);
                c.bytes_in.bump(bytes_in);
                if truncated > 0 {
                    c.truncated.bump(truncated);
                }
                c.kernel_drops.raise_to(batch.kernel_drops() as u64);
                c.packets_in.bump(n as u64);
                let out = batch.echo(sock);
                if out.errors > 0 {
                    c.send_errors.bump(out.errors);
                }
                c.bytes_out.bump(out.bytes);
                c.packets_out.bump(out.sent);
            }
            Ok(_) => waiter.idle(|| false),
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => waiter.idle(|| false),
                io::ErrorKind::Interrupted => {}
                _ => {
                    // e.g. ENOMEM: count it and back off rather than spin on it.
                    c.recv_errors.bump(1);
                    waiter.idle(|| false);
                }
            },
        }
    }
}
