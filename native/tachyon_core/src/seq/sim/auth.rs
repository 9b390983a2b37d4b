//! Packet protection in the simulator (`--auth mac|aead`): every process
//! seals what it sends and opens what it reads with the shells' own
//! [`Guard`]s, so the batteries run with keys as the real bus does. A
//! stranger on the wire ([`Fault::Forge`](super::Fault)) sends what it
//! captured again, with bits flipped, and plain protocol datagrams (a
//! vote, a hello, a publish, an acknowledgement) of its own: with keys,
//! every one is dropped before any core sees it, and every invariant
//! still holds.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::engine::Sim;
use crate::seq::core::Nanos;
use crate::seq::guard::{self, Guard, Key, Keys, Role};
use crate::seq::wire::{self, CmdKind, Peer, PeerHeader, PeerKind};

/// A process's guards: one seals, one opens (its windows).
pub(super) struct Guards {
    seal: Guard,
    open: Guard,
    buf: Vec<u8>,
}

/// Datagrams the stranger keeps to send again.
const CAPTURED: usize = 512;

/// The stranger: what it saw on the wire.
#[derive(Default)]
pub(super) struct Stranger {
    /// (from, to, datagram), as sent.
    pub captured: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Its datagrams sent, by kind.
    pub sent: u64,
}

impl Sim<'_> {
    /// The run's group keys (from its seed).
    fn group_keys(&self) -> Keys {
        let mut b = [0u8; guard::keys::KEY_LEN];
        let s = self.cfg.seed.to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = s[i % 8] ^ (i as u8).wrapping_mul(37);
        }
        Keys::of_secrets(&[Key::from_bytes(b)]).expect("one key")
    }

    /// Process `i`'s guards (a node's at a start, a member's once), where
    /// the run has keys.
    pub(super) fn new_guards(&self, i: usize) -> Option<Guards> {
        let encrypt = self.cfg.auth?;
        let keys = self.group_keys();
        let p = &self.procs[i];
        let (keys, role) = if p.member_id > 0 {
            (
                keys.credential(p.member_id).ok()?,
                Role::Member(p.member_id),
            )
        } else {
            (keys, Role::Node(p.addr))
        };
        let shared = guard::Shared::new(keys, role, encrypt).ok()?;
        // The counter from the simulated clock (it goes up across restarts
        // as a host's does); deterministic.
        let start = self.local(i).max(1);
        Some(Guards {
            seal: Guard::starting_at(&shared, 0, start),
            open: Guard::starting_at(&shared, 0xff, start),
            buf: Vec::new(),
        })
    }

    /// `d` as process `i` sends it to `to`: sealed where the run has keys
    /// (the stranger keeps a copy).
    pub(super) fn sealed(&mut self, i: usize, to: SocketAddr, d: &[u8]) -> Vec<u8> {
        let out = match self.procs[i].guards.as_mut() {
            Some(g) => {
                g.seal.seal(to, d, &mut g.buf);
                g.buf.clone()
            }
            None => d.to_vec(),
        };
        if self.stranger.captured.len() >= CAPTURED {
            self.stranger.captured.pop_front();
        }
        let from = self.procs[i].addr;
        self.stranger.captured.push_back((from, to, out.clone()));
        out
    }

    /// `d` from `from` as process `i` reads it: opened where the run has
    /// keys (`None`: rejected, counted by its guard).
    pub(super) fn opened(&mut self, i: usize, from: SocketAddr, d: Vec<u8>) -> Option<Vec<u8>> {
        let Some(g) = self.procs[i].guards.as_mut() else {
            return Some(d);
        };
        g.open.open(from, &d, &mut g.buf).ok().map(|p| p.to_vec())
    }

    /// Datagrams every process's guard rejected.
    pub(super) fn rejected(&self) -> u64 {
        self.procs
            .iter()
            .filter_map(|p| p.guards.as_ref())
            .map(|g| g.open.counters().rejected())
            .sum()
    }

    /// The stranger's attack: every captured datagram sent again to where
    /// it went (replays), some with a bit flipped (forgeries), and plain
    /// datagrams claiming to be a node or a member. Only with keys.
    pub(super) fn forge(&mut self, now: Nanos) -> bool {
        if self.cfg.auth.is_none() && !self.cfg.forge_without_keys {
            return false;
        }
        let captured: Vec<_> = self.stranger.captured.iter().cloned().collect();
        let mut sent = Vec::new();
        for (k, (from, to, d)) in captured.into_iter().enumerate() {
            let mut d = d;
            if let Some(mut p) = Peer::parse(&d).ok().filter(|p| p.h.kind == PeerKind::Ack) {
                // A plain acknowledgement (no keys): it now claims the whole
                // log, so that a primary would count what the node lacks.
                p.b = u64::MAX >> 8;
                p.write(&mut d);
            } else if k % 3 == 1 && d.len() > guard::HEADER {
                let at = guard::HEADER + k % (d.len() - guard::HEADER);
                d[at] ^= 1 << (k % 8);
            }
            sent.push((from, to, d));
        }
        // Plain datagrams of its own, to every node: a vote request and an
        // acknowledgement of a far later term, a hello and a publish of
        // member 1.
        let session = 0;
        for n in 0..self.node_addrs.len() {
            let to = self.node_addrs[n];
            for kind in [PeerKind::Vote, PeerKind::Ack] {
                let p = Peer {
                    h: PeerHeader {
                        kind,
                        term: 1 << 30,
                        session,
                        node: (n as u8 + 1) % 3,
                        flags: 0,
                        log_id: 1,
                        incarnation: 1,
                    },
                    a: u64::MAX >> 8,
                    b: u64::MAX >> 8,
                    c: 0,
                };
                let mut d = Vec::new();
                p.write(&mut d);
                let claimed = self.node_addrs[(n + 1) % 3];
                sent.push((claimed, to, d));
            }
            let mut d = Vec::new();
            wire::cmd_header(&mut d, CmdKind::Publish, 1, session, 77);
            wire::write_cmd_msg(&mut d, 1 << 40, 0, b"forged");
            wire::set_cmd_count(&mut d, 1);
            let member = self.procs[self.procs.len() - 1].addr;
            sent.push((member, to, d));
        }
        let n = sent.len() as u64;
        for (from, to, d) in sent {
            if let Some(j) = self.process_at(to) {
                let at = now + 1;
                let fake = self.procs.len();
                self.net.send(&mut self.rng, at, fake, from, j, to, &d);
            }
        }
        self.stranger.sent += n;
        self.trace(|| format!("stranger sends {n} replayed, forged and plain datagrams"));
        true
    }
}
