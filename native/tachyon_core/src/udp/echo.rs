//! The echo (pong) server: one thread that sends every datagram back to its
//! sender, in batches, without any other work per packet.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;

use super::stats::Counter;
use super::sys::{Batch, Socket, SocketOptions, Waker, MAX_UDP_PAYLOAD};
use super::waiter::Waiter;
use super::{validate_sizes, Placement};
use crate::wait::{online_cores, pin_to_core, WaitStrategy};

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
            wait: WaitStrategy::default_for_cores(online_cores()),
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

impl EchoStats {
    /// Every error counted: receive, send and truncation.
    pub fn errors(&self) -> u64 {
        self.recv_errors + self.send_errors + self.truncated
    }
}

struct Shared {
    stop: CachePadded<AtomicBool>,
    counters: CachePadded<EchoCounters>,
    waker: Waker,
}

/// A running echo server. Stopping it (or dropping it) stops and joins the
/// thread, which closes the socket: the port is free when `stop` returns.
pub struct EchoServer {
    local: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        let shared = Arc::new(Shared {
            stop: CachePadded::new(AtomicBool::new(false)),
            counters: CachePadded::new(EchoCounters::default()),
            waker: Waker::new()?,
        });
        let (ready_tx, ready_rx) = mpsc::sync_channel::<bool>(1);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tachyon-echo".into())
            .spawn(move || {
                let pinned = cfg.core.map(pin_to_core).unwrap_or(false);
                let _ = ready_tx.send(pinned);
                drop(ready_tx);
                let mut batch = Batch::new(cfg.batch, cfg.max_datagram);
                echo_loop(&sock, &thread_shared, &mut batch, Waiter::new(cfg.wait));
                // The socket is closed here, before the thread ends: a `stop`
                // that joined us finds the port free.
                drop(sock);
            })?;
        let pinned = ready_rx.recv().unwrap_or(false);
        Ok(EchoServer {
            local,
            shared,
            thread: Some(thread),
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
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    pub fn stats(&self) -> EchoStats {
        let c = &self.shared.counters;
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
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn echo_loop(sock: &Socket, shared: &Shared, batch: &mut Batch, mut waiter: Waiter) {
    let c = &shared.counters;
    let waker = shared.waker.fd();
    while !shared.stop.load(Ordering::Relaxed) {
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
            Ok(_) => waiter.wait(sock.fd(), waker, None),
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => waiter.wait(sock.fd(), waker, None),
                io::ErrorKind::Interrupted => {}
                _ => {
                    // e.g. ENOMEM: count it and back off rather than spin on it.
                    c.recv_errors.bump(1);
                    waiter.wait(sock.fd(), waker, None);
                }
            },
        }
    }
}
