//! The sockets of a member (and of a sequencer node): its own
//! unicast socket, the multicast group's on a multicast bus, one epoll
//! descriptor over both, and their receive batches.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

use crate::counter::Counter;
use crate::seq::core::Sink;
use crate::seq::guard::Guard;
use crate::seq::{BusMode, SeqError};
use crate::spin::SpinMutex;
use crate::udp::sys::{Batch, Epoll, Socket, SocketOptions};

pub struct Sockets {
    pub sock: Socket,
    pub mcast: Option<Socket>,
    epoll: Epoll,
}

impl Sockets {
    /// Binds `bind` and, on a multicast bus, the group's socket.
    pub fn bind(bind: SocketAddr, bus: BusMode, opts: &SocketOptions) -> Result<Sockets, SeqError> {
        let sock = Socket::bind(bind, opts)?;
        let mcast = match bus {
            BusMode::Unicast => None,
            BusMode::Multicast { group, iface, .. } => {
                let IpAddr::V4(g) = group.ip() else {
                    return Err(SeqError::BadConfig);
                };
                let opts = SocketOptions {
                    reuseaddr: true,
                    reuseport: true,
                    ..*opts
                };
                let m = Socket::bind(group, &opts)?;
                m.join_multicast_v4(g, iface)?;
                Some(m)
            }
        };
        let mut fds = vec![sock.fd()];
        fds.extend(mcast.as_ref().map(|m| m.fd()));
        let epoll = Epoll::new(&fds)?;
        Ok(Sockets { sock, mcast, epoll })
    }

    /// Receive batches of `batch` datagrams of at most `slot` bytes.
    pub fn batches_with(&self, batch: usize, slot: usize) -> Batches {
        Batches {
            batch: Batch::new(batch, slot),
            mbatch: self.mcast.as_ref().map(|_| Batch::new(batch, slot)),
        }
    }

    /// Readable when a datagram waits on any of the sockets.
    pub fn poll_fd(&self) -> RawFd {
        self.epoll.fd()
    }

    /// Reads up to `max` datagrams per socket; calls `f(data, from)` for
    /// each whole one (`truncated` is bumped for the others). Returns the
    /// datagrams read.
    pub fn recv(
        &self,
        b: &mut Batches,
        max: usize,
        truncated: &Counter,
        f: &mut dyn FnMut(&[u8], Option<SocketAddr>),
    ) -> io::Result<usize> {
        let mut total = 0;
        let socks = [
            (&self.sock, Some(&mut b.batch)),
            (self.mcast.as_ref().unwrap_or(&self.sock), b.mbatch.as_mut()),
        ];
        for (sock, batch) in socks {
            let Some(batch) = batch else { break };
            let n = match batch.recv_max(sock, max) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                // The ICMP answer to a command sent while no sequencer
                // listened (it restarts): nothing to read.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => 0,
                Err(e) => return Err(e),
            };
            for i in 0..n {
                if batch.is_truncated(i) {
                    truncated.bump(1);
                    continue;
                }
                f(batch.data(i), batch.addr(i));
            }
            total += n;
        }
        Ok(total)
    }
}

pub struct Batches {
    batch: Batch,
    mbatch: Option<Batch>,
}

/// Sends from a member's own socket: `send` when it is connected to the
/// sequencer, `send_to` otherwise; errors counted (a lost datagram like
/// any other: resent or asked for again later). With keys, each datagram
/// is sealed first (the member's sealing guard, held for the send only).
pub struct SockSink<'a> {
    pub sock: &'a Socket,
    pub connected: bool,
    pub errors: &'a Counter,
    pub seal: Option<&'a SpinMutex<Sealer>>,
}

/// A member's sealing guard and its buffer.
pub struct Sealer {
    pub guard: Guard,
    pub buf: Vec<u8>,
}

impl Sink for SockSink<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        let mut sealer = self.seal.map(|s| s.lock());
        for a in to {
            let d = match sealer.as_deref_mut() {
                None => d,
                Some(Sealer { guard, buf }) => {
                    guard.seal(*a, d, buf);
                    buf.as_slice()
                }
            };
            let r = if self.connected {
                self.sock.send(d)
            } else {
                self.sock.send_to(d, a)
            };
            if r.is_err() {
                self.errors.bump(1);
            }
        }
    }
}
