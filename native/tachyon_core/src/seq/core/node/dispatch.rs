//! Datagrams in: told apart by magic, checked (a node of the group, this
//! session), handed to the role's code; and peer datagrams out.

use std::net::SocketAddr;

use super::{Node, MAX_NODES};
use crate::seq::core::{Env, Log, Nanos};
use crate::seq::wire::{
    self, Bus, Cmd, Peer, PeerHeader, PeerKind, BUS_MAGIC, CMD_MAGIC, PEER_MAGIC,
};

impl<L: Log> Node<L> {
    fn session_ok(&self, s: u64) -> bool {
        s == 0 || self.ls.session == 0 || s == self.ls.session
    }

    /// One datagram from `from`.
    pub fn on_datagram(&mut self, now: Nanos, from: SocketAddr, d: &[u8], env: &mut dyn Env) {
        match wire::magic(d) {
            CMD_MAGIC => match Cmd::parse(d) {
                Ok(cmd) => self.on_command(now, from, &cmd, env),
                Err(_) => self.c.malformed.bump(1),
            },
            BUS_MAGIC => match Bus::parse(d) {
                Ok(b) => {
                    if !self.sent_by_node(from, b.h.node) {
                        self.c.strangers.bump(1);
                    } else if !self.session_ok(b.h.session) {
                        self.c.wrong_session.bump(1);
                    } else {
                        self.on_bus(now, &b, env);
                    }
                }
                Err(_) => self.c.malformed.bump(1),
            },
            PEER_MAGIC => match Peer::parse(d) {
                Ok(p) if p.h.kind == PeerKind::Join => self.on_join(now, from, env),
                Ok(p) if p.h.kind == PeerKind::JoinReply => self.on_join_reply(from, &p),
                // From whichever node the joiner asked: one removed since
                // (its id perhaps given to another) passes it on too, and
                // a JOIN is taken from anyone anyway.
                Ok(p) if p.h.kind == PeerKind::JoinVia => self.on_join_via(now, &p, env),
                // Its own acknowledgement to the members, looped back by a
                // multicast bus (`acks.rs`).
                Ok(p) if p.h.kind == PeerKind::Ack && p.h.node == self.id() => {}
                Ok(p) => {
                    if !self.sent_by_node(from, p.h.node) || p.h.node == self.id() {
                        self.c.strangers.bump(1);
                    } else if !self.session_ok(p.h.session) {
                        self.c.wrong_session.bump(1);
                    } else {
                        self.on_peer(now, &p, Peer::payload(d), env);
                    }
                }
                Err(_) => self.c.malformed.bump(1),
            },
            _ => self.c.malformed.bump(1),
        }
    }

    /// Whether `from` is node `node` of the group (for a node that joins,
    /// before its log says who is who: the node that added it).
    fn sent_by_node(&mut self, from: SocketAddr, node: u8) -> bool {
        if self.addr_of(node) == Some(from) {
            return true;
        }
        // A node this membership does not know, at an address it does not
        // know either: one of a newer membership (the session is checked
        // next).
        let m = self.membership();
        let unknown =
            (node as usize) < MAX_NODES && m.addr(node).is_none() && m.id_of(from).is_none();
        if unknown {
            self.learned[node as usize] = Some(from);
        }
        unknown
    }

    /// Node `id`'s address: from the membership, or for a node that joins
    /// before its log says, its primary's from its answer.
    pub(super) fn addr_of(&self, id: u8) -> Option<SocketAddr> {
        self.membership()
            .addr(id)
            .or_else(|| self.learned.get(id as usize).copied().flatten())
            .or_else(|| {
                self.joined
                    .filter(|j| j.1 == id && self.membership().id_of(self.cfg.addr).is_none())
                    .map(|j| j.2)
            })
    }

    /// Sends a peer datagram of `term` to node `to`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_peer(
        &mut self,
        to: u8,
        kind: PeerKind,
        term: u32,
        flags: u8,
        ab: (u64, u64),
        c: u64,
        env: &mut dyn Env,
    ) {
        let Some(addr) = self.addr_of(to) else {
            return;
        };
        self.send_peer_to(&[addr], kind, term, flags, ab, c, env);
    }

    /// Sends a peer datagram of `term` to every address of `to`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_peer_to(
        &mut self,
        to: &[SocketAddr],
        kind: PeerKind,
        term: u32,
        flags: u8,
        ab: (u64, u64),
        c: u64,
        env: &mut dyn Env,
    ) {
        self.send_peer_with(to, kind, term, flags, (ab, c), &[], env);
    }

    /// Sends a peer datagram of `term` to every address of `to` with
    /// `payload` after its body (a kind that carries one: [`Peer::payload`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_peer_with(
        &mut self,
        to: &[SocketAddr],
        kind: PeerKind,
        term: u32,
        flags: u8,
        (ab, c): ((u64, u64), u64),
        payload: &[u8],
        env: &mut dyn Env,
    ) {
        let (a, b) = ab;
        let flags = flags | if self.meta.learner { wire::LEARNER } else { 0 };
        let p = Peer {
            h: PeerHeader {
                kind,
                term,
                session: self.ls.session,
                node: self.id(),
                flags,
                log_id: self.meta.log_id,
                incarnation: self.cfg.incarnation,
            },
            a,
            b,
            c,
        };
        p.write(&mut self.scratch);
        self.scratch.extend_from_slice(payload);
        env.send(to, &self.scratch);
    }

    fn on_peer(&mut self, now: Nanos, p: &Peer, payload: &[u8], env: &mut dyn Env) {
        let from = p.h.node;
        match p.h.kind {
            PeerKind::PreVote => self.on_prevote(now, from, p, env),
            PeerKind::Vote => self.on_vote(now, from, p, env),
            PeerKind::PreVoteReply | PeerKind::VoteReply => self.on_vote_reply(now, from, p, env),
            PeerKind::Probe => self.on_probe(from, env),
            PeerKind::ProbeReply => self.on_probe_reply(now, from, p),
            _ => {
                if p.h.term > self.term {
                    // An acknowledgement or sync of a later term: a stale
                    // notice to a deposed primary (or a missed election).
                    self.adopt_term(p.h.term, None, env);
                    return;
                }
                if p.h.term < self.term {
                    self.c.stale.bump(1);
                    return;
                }
                match p.h.kind {
                    PeerKind::Ack => self.on_ack(from, p),
                    PeerKind::Sync => self.on_sync(from, p, env),
                    PeerKind::SyncReply => self.on_sync_reply(now, from, p, env),
                    PeerKind::Retain => self.on_retain(p),
                    PeerKind::CheckpointReq => self.on_checkpoint_req(from, p, env),
                    PeerKind::Checkpoint => self.on_checkpoint(now, from, p, payload, env),
                    PeerKind::HelloVia => self.on_hello_via(now, p, payload, env),
                    _ => {}
                }
            }
        }
    }
}
