//! Joining the bus: hello until a welcome.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::super::wire::{self, Bus, BusKind};
use super::super::SeqError;
use super::MemberConfig;
use crate::udp::sys::{Batch, Socket};

/// What the welcome said, and who said it.
pub(super) struct Welcome {
    pub(super) session: u64,
    pub(super) next: u64,
    pub(super) last: u64,
    pub(super) epoch: u32,
    pub(super) from: SocketAddr,
}

/// Says hello (to the sequencer and every alternate) until a welcome comes;
/// of several, the highest epoch's.
pub(super) fn welcome(
    sock: &Socket,
    cfg: &MemberConfig,
    unicast: bool,
) -> Result<Welcome, SeqError> {
    let mut hello = Vec::new();
    wire::hello(&mut hello, cfg.member_id, unicast);
    let mut b = Batch::new(8, cfg.max_datagram.max(wire::BUS_HEADER + 8));
    let t0 = Instant::now();
    let mut said = None::<Instant>;
    let mut best: Option<Welcome> = None;
    loop {
        if said.is_none_or(|s| s.elapsed() >= Duration::from_millis(20)) {
            for to in std::iter::once(&cfg.sequencer).chain(&cfg.alternates) {
                // A refused one (nobody there yet) is said again.
                let _ = sock.send_to(&hello, to);
            }
            said = Some(Instant::now());
        }
        match b.recv(sock) {
            Ok(n) => {
                for i in 0..n {
                    let (Ok(w), Some(from)) = (Bus::parse(b.data(i)), b.addr(i)) else {
                        continue;
                    };
                    if w.kind == BusKind::Welcome && best.as_ref().is_none_or(|x| w.epoch > x.epoch)
                    {
                        best = Some(Welcome {
                            session: w.session,
                            next: w.seq,
                            last: w.welcome_last(),
                            epoch: w.epoch,
                            from,
                        });
                    }
                }
                // Alternates answer too (a deposed primary still may):
                // wait a little for a higher epoch.
                let waited = said.is_some_and(|s| s.elapsed() >= Duration::from_millis(5));
                if let Some(w) = best.take_if(|_| cfg.alternates.is_empty() || waited) {
                    return Ok(w);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let waited = said.is_some_and(|s| s.elapsed() >= Duration::from_millis(5));
                if let Some(w) = best.take_if(|_| waited) {
                    return Ok(w);
                }
                let _ = crate::wait::poll_fds(
                    &[(sock.fd(), libc::POLLIN)],
                    Some(Duration::from_millis(1)),
                );
            }
            // ECONNREFUSED from an earlier hello: nobody there yet.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        if t0.elapsed() >= cfg.connect_timeout {
            return Err(SeqError::Timeout);
        }
    }
}
