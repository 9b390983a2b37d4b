//! Joining the bus: hello until a welcome (of several, the highest
//! epoch's).

use std::net::SocketAddr;

use super::config::MemberConfig;
use crate::seq::core::{Nanos, Sink, MILLI};
use crate::seq::wire::{self, Bus, BusKind};

/// Hellos go out again this often until a welcome comes.
const HELLO_EVERY: Nanos = 20 * MILLI;
/// With alternates, how long a welcome waits for a higher epoch's.
const PREFER_WAIT: Nanos = 5 * MILLI;

/// What the welcome said, and who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    pub session: u64,
    pub next: u64,
    pub last: u64,
    pub epoch: u32,
    pub from: SocketAddr,
}

/// A member saying hello until welcomed.
pub struct Join {
    hello: Vec<u8>,
    targets: Vec<SocketAddr>,
    said: Option<Nanos>,
    best: Option<Welcome>,
    wait_for_higher: bool,
}

impl Join {
    pub fn new(cfg: &MemberConfig, unicast: bool) -> Join {
        let mut hello = Vec::new();
        wire::hello(&mut hello, cfg.member_id, unicast);
        let mut targets = vec![cfg.sequencer];
        targets.extend(cfg.alternates.iter().copied());
        Join {
            hello,
            wait_for_higher: !cfg.alternates.is_empty(),
            targets,
            said: None,
            best: None,
        }
    }

    /// A datagram while joining: remembers the best welcome.
    pub fn on_datagram(&mut self, d: &[u8], from: Option<SocketAddr>) {
        let (Ok(w), Some(from)) = (Bus::parse(d), from) else {
            return;
        };
        if w.kind == BusKind::Welcome && self.best.as_ref().is_none_or(|x| w.epoch > x.epoch) {
            self.best = Some(Welcome {
                session: w.session,
                next: w.seq,
                last: w.welcome_last(),
                epoch: w.epoch,
                from,
            });
        }
    }

    /// Says hello when due; returns the welcome once it is the one to take
    /// (alternates answer too, a deposed primary still may: a welcome waits
    /// a little for a higher epoch's).
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Result<Welcome, Nanos> {
        if self.best.is_some() {
            let waited = self
                .said
                .is_some_and(|s| now.saturating_sub(s) >= PREFER_WAIT);
            if !self.wait_for_higher || waited {
                return Ok(self.best.take().expect("best"));
            }
        }
        if self
            .said
            .is_none_or(|s| now.saturating_sub(s) >= HELLO_EVERY)
        {
            for to in &self.targets {
                sink.send(std::slice::from_ref(to), &self.hello);
            }
            self.said = Some(now);
        }
        let said = self.said.unwrap_or(now);
        Err(if self.best.is_some() {
            said + PREFER_WAIT
        } else {
            said + HELLO_EVERY
        })
    }
}
