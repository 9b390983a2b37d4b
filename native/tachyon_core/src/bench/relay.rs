//! The floors of the sequencer bench's throughput cases: the same sockets,
//! sizes and system calls as a member and a sequencer, with no sequencing
//! and no log. A client sends datagrams of the size of the bus datagrams
//! (`per` messages each) through a connected socket, pipelined up to
//! `window` ahead; a relay thread ([`crate::udp::EchoServer`]: `recvmmsg`,
//! then `sendmmsg` back to each sender) returns each one; the client
//! receives with `recvmmsg` (the member's [`Batch`]) and counts messages.
//! The round-trip floor is [`crate::bench::ping`] against the same relay.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::seq::wire::{BUS_HEADER, MSG_HEADER};
use crate::udp::{Batch, Socket, SocketOptions, MAX_UDP_PAYLOAD};

/// The size of a bus datagram carrying `per` messages of `size` bytes:
/// what the relay floors send both ways (a command datagram is a little
/// smaller: the floor carries at least the real bytes).
pub fn bus_datagram_size(size: usize, per: usize) -> usize {
    BUS_HEADER + per.max(1) * (MSG_HEADER + size)
}

crate::named_fields! {
    /// What a throughput floor measured.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Throughput {
        /// Messages that came back (`datagrams * per`).
        pub messages: u64,
        pub datagrams: u64,
        /// Datagrams given up as lost (the kernel dropped them: a full
        /// receive buffer); the window moved on without them.
        pub lost: u64,
        pub elapsed_ns: u64,
    }
}

/// How long nothing may come back before the datagrams in flight count as
/// lost.
const STALL: Duration = Duration::from_millis(50);

/// Sends `count / per` datagrams of [`bus_datagram_size`]`(size, per)`
/// bytes to the relay at `target`, at most `window` in flight, and
/// receives them back: the throughput of the path without the sequencer.
/// Socket buffers are `buffers` bytes both ways, or the kernel's default
/// with 0 (the sequencer bench passes a member's and a node's,
/// [`crate::seq::SOCKET_BUFFER`]). Fails if nothing at all comes back for
/// 5 s.
pub fn throughput(
    target: SocketAddr,
    count: u64,
    size: usize,
    per: usize,
    window: u64,
    buffers: usize,
) -> io::Result<Throughput> {
    let per = per.max(1) as u64;
    let len = bus_datagram_size(size, per as usize);
    if len > MAX_UDP_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the datagram is over 65,507 bytes",
        ));
    }
    let buffers = (buffers > 0).then_some(buffers);
    let opts = SocketOptions {
        recbuf: buffers,
        sndbuf: buffers,
        ..SocketOptions::default()
    };
    let bind = SocketAddr::new(target.ip(), 0);
    let sock = Socket::bind(bind, &opts)?;
    sock.connect(&target)?;
    let payload = vec![0x33u8; len];
    let mut batch = Batch::new(64, len);
    let datagrams = count / per;
    let window = window.max(1);
    let (mut sent, mut got, mut lost) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while got + lost < datagrams {
        // Up to 32 sends between two receives, within the window.
        for _ in 0..32 {
            if sent >= datagrams || sent - got - lost >= window {
                break;
            }
            match sock.send(&payload) {
                Ok(_) => sent += 1,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
        }
        match batch.recv(&sock) {
            Ok(n) if n > 0 => {
                got += n as u64;
                last_progress = Instant::now();
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                let idle = last_progress.elapsed();
                if idle > Duration::from_secs(5) && got == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "nothing came back from the relay",
                    ));
                }
                if idle > STALL {
                    // What is in flight was dropped: go on without it.
                    lost += sent - got - lost;
                    last_progress = Instant::now();
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Throughput {
        messages: got * per,
        datagrams: got,
        lost,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
    })
}
