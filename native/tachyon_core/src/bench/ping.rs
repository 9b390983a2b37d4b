//! The ping client of the round-trip benchmark, as in the seed: send one
//! datagram, wait for its echo, record the round trip, send the next.
//!
//! Each datagram carries its sequence number in its first 8 bytes (when it
//! has 8 or more), so a late echo of a lost datagram is never taken for the
//! current one. The rest is the seed's pattern (`byte i = i as u8`) and every
//! echo is compared byte for byte, outside the timed region.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::hist::Hist;
use crate::udp::sys::{unspecified_like, Socket, SocketOptions, MAX_UDP_PAYLOAD};
use crate::udp::Placement;
use crate::wait::{WaitStrategy, Waiter, Wake};
use crate::worker::Worker;

/// How to run a ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingConfig {
    /// The echo server.
    pub target: SocketAddr,
    /// Round trips recorded.
    pub count: u64,
    /// Round trips run first and not recorded.
    pub warmup: u64,
    /// Datagram size in bytes (0..=65,507).
    pub size: usize,
    /// What the thread does while waiting for an echo.
    pub wait: WaitStrategy,
    /// Core to pin the ping thread to ([`spawn_ping`] only).
    pub core: Option<usize>,
    /// A round trip with no echo after this long is counted lost.
    pub timeout: Duration,
    /// Give up (`TimedOut`) after more than this many lost round trips.
    pub max_lost: u64,
    pub socket: SocketOptions,
}

impl PingConfig {
    /// Defaults: 256 bytes, busy-spin, no pinning, 1 s timeout, 10 losses.
    pub fn new(target: SocketAddr, count: u64, warmup: u64) -> PingConfig {
        PingConfig {
            target,
            count,
            warmup,
            size: 256,
            wait: WaitStrategy::BusySpin,
            core: None,
            timeout: Duration::from_secs(1),
            max_lost: 10,
            socket: SocketOptions::default(),
        }
    }
}

/// What a ping measured.
#[derive(Clone)]
pub struct PingOutcome {
    /// Round-trip times (ns) of the measured datagrams.
    pub hist: Hist,
    /// Datagrams sent (warm-up included).
    pub sent: u64,
    /// Echoes matched to their datagram (warm-up included).
    pub received: u64,
    /// Round trips that timed out.
    pub lost: u64,
    /// Echoes of earlier (lost) datagrams, ignored.
    pub stale: u64,
    /// Echoes whose payload differed from what was sent.
    pub mismatched: u64,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// The client's own address.
    pub local: SocketAddr,
    pub placement: Placement,
}

/// Runs a ping on the calling thread (no pinning; see [`spawn_ping`]).
/// `stop` aborts it with `Interrupted`.
///
/// # Errors
/// `InvalidInput` for a size over 65,507; the socket's errors (a refused
/// connection when nothing listens on a local port: `ConnectionRefused`);
/// `TimedOut` after more than `max_lost` lost round trips.
pub fn ping(cfg: &PingConfig, stop: &AtomicBool) -> io::Result<PingOutcome> {
    ping_placed(
        cfg,
        stop,
        Placement {
            core: None,
            pinned: false,
            wait: cfg.wait,
        },
    )
}

/// Runs a ping on a worker thread (`tachyon-ping`, pinned to `cfg.core` if
/// set) and waits for it. `stop` aborts it with `Interrupted`. Blocks: from
/// the BEAM, on a dirty scheduler.
pub fn spawn_ping(cfg: PingConfig, stop: Arc<AtomicBool>) -> io::Result<PingOutcome> {
    let out: Arc<Mutex<Option<io::Result<PingOutcome>>>> = Arc::new(Mutex::new(None));
    let slot = out.clone();
    let worker = Worker::spawn("tachyon-ping", cfg.core, move |_| {
        let r = ping(&cfg, &stop);
        *crate::sys::lock(&slot) = Some(r);
    })?;
    // The worker pinned the thread before it ran the ping.
    let (core, pinned) = worker.placement();
    if worker.join().is_err() {
        return Err(io::Error::other("the ping thread panicked"));
    }
    let r = crate::sys::lock(&out).take();
    let mut r =
        r.unwrap_or_else(|| Err(io::Error::other("the ping thread ended without a result")));
    if let Ok(o) = r.as_mut() {
        o.placement = Placement {
            core,
            pinned,
            wait: cfg.wait,
        };
    }
    r
}

fn ping_placed(
    cfg: &PingConfig,
    stop: &AtomicBool,
    placement: Placement,
) -> io::Result<PingOutcome> {
    if cfg.size > MAX_UDP_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "size over 65,507 bytes",
        ));
    }
    let bind = SocketAddr::new(unspecified_like(&cfg.target.ip()), 0);
    let sock = Socket::bind(bind, &cfg.socket)?;
    // Connected: the kernel filters other senders and reports ICMP errors
    // (ECONNREFUSED) instead of leaving us to time out.
    sock.connect(&cfg.target)?;
    let local = sock.local_addr()?;

    let mut payload: Vec<u8> = (0..cfg.size).map(|i| i as u8).collect();
    let mut buf = vec![0u8; MAX_UDP_PAYLOAD + 1];
    let mut hist = Hist::new();
    let mut waiter = Waiter::with_socket(cfg.wait, Arc::new(Wake::new()?), sock.fd());
    let (mut sent, mut received, mut lost, mut stale, mut mismatched) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let total = cfg.warmup.saturating_add(cfg.count);
    let started = Instant::now();

    for seq in 0..total {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "ping stopped"));
        }
        if cfg.size >= 8 {
            payload[..8].copy_from_slice(&seq.to_le_bytes());
        }
        let t0 = Instant::now();
        loop {
            match sock.send(&payload) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => waiter.idle(|| false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        sent += 1;
        waiter.reset();
        let mut polls = 0u32;
        let t1 = loop {
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let t1 = Instant::now();
                    let ours = n == cfg.size && (cfg.size < 8 || buf[..8] == payload[..8]);
                    if !ours {
                        stale += 1;
                        continue;
                    }
                    if buf[..n] != payload[..] {
                        mismatched += 1;
                    }
                    received += 1;
                    break Some(t1);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    polls = polls.wrapping_add(1);
                    if polls.is_multiple_of(64) {
                        let waited = t0.elapsed();
                        if waited >= cfg.timeout {
                            break None;
                        }
                        if stop.load(Ordering::Relaxed) {
                            return Err(io::Error::new(io::ErrorKind::Interrupted, "ping stopped"));
                        }
                    }
                    waiter.idle_at_most(Some(cfg.timeout.saturating_sub(t0.elapsed())), || false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        match t1 {
            Some(t1) if seq >= cfg.warmup => hist.record((t1 - t0).as_nanos() as u64),
            Some(_) => {}
            None => {
                lost += 1;
                if lost > cfg.max_lost {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "too many lost round trips",
                    ));
                }
            }
        }
    }
    Ok(PingOutcome {
        hist,
        sent,
        received,
        lost,
        stale,
        mismatched,
        elapsed: started.elapsed(),
        local,
        placement,
    })
}
