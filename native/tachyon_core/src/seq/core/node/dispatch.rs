//! Datagrams in: told apart by magic, checked (a node of the group, this
//! session), handed to the role's code; and peer datagrams out.

use std::net::SocketAddr;

use super::{Node, MAX_NODES};
use crate::seq::core::{Env, Log, Nanos};
use crate::seq::wire::{
    self, Bus, BusKind, Cmd, Peer, PeerHeader, PeerKind, BUS_MAGIC, CMD_MAGIC, PEER_MAGIC,
};

impl<L: Log> Node<L> {
    fn session_ok(&self, s: u64) -> bool {
        s == 0 || self.ls.session == 0 || s == self.ls.session
    }

    /// A primary of a later term and another session, heard by a node
    /// whose whole log is a bootstrap (a session record and an epoch
    /// record, not known committed): the log is cut and the primary taken.
    ///
    /// Two nodes of a new group can each be elected in turn before either
    /// term's first entries reach a majority (the first primary's appends
    /// lost); each writes a session of its own. Only one can commit, and
    /// a later term's primary exists only if this one did not (its voters
    /// had empty logs). Raft cuts a follower's log where it conflicts
    /// with the primary's, and entry 0 conflicts: so the node cuts it
    /// and follows, its sync copying the real session. Without this it
    /// dropped the group's every datagram for ever (`wrong_session`), and
    /// the group ran one node short. A log with anything more keeps its
    /// session: another session's datagrams are another group's.
    fn yield_bootstrap(&mut self, b: &Bus<'_>, env: &mut dyn Env) -> bool {
        let bootstrap = self.ls.first == 0 && self.ls.next <= 2 && self.commit == 0;
        // The primary's term is this node's at least (Raft takes an
        // AppendEntries of the current term), and later than the log's.
        let t = b.h.term;
        if !bootstrap || b.h.session == 0 || t < self.term || t <= self.ls.last_term() {
            return false;
        }
        if t > self.term {
            self.adopt_term(t, Some(b.h.node), env);
        }
        self.cut_log(0, env)
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
                    if !self.sent_by_node(from, b.h.node) && !self.primary_elsewhere(from, &b) {
                        self.c.strangers.bump(1);
                    } else if !self.session_ok(b.h.session) && !self.yield_bootstrap(&b, env) {
                        self.c.wrong_session.bump(1);
                    } else {
                        self.on_bus(now, from, &b, env);
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

    /// A primary's bus datagram (of this node's term or later) from an
    /// address this node's membership does not know, naming an id the
    /// membership gives another address: a node whose log is behind the
    /// group's changes (a disk replaced, or a node down, while an id went
    /// to a new node at another address) hears its primary where it is.
    /// Its log, copied from that primary, will say who is who; meanwhile
    /// it asks that primary for it at that address (`addr_of`). (Without
    /// this it dropped the primary's every datagram and never caught up:
    /// `tachyon_sim --nodes 5 --seed 47`, `silent_fork` at the end.)
    fn primary_elsewhere(&mut self, from: SocketAddr, b: &Bus<'_>) -> bool {
        // Only once no primary was heard for an election timeout: a node
        // that hears its own ignores a stranger's claim.
        let primary = matches!(b.kind, BusKind::Data | BusKind::Heartbeat | BusKind::End);
        let ok = primary
            && self.since_leader >= self.cfg.election_timeout
            && b.h.term >= self.term
            && (b.h.node as usize) < MAX_NODES
            && self.membership().id_of(from).is_none();
        if ok {
            self.learned[b.h.node as usize] = Some(from);
        }
        ok
    }

    /// Node `id`'s address: the primary this node follows where it hears
    /// it, else from the membership, or for a node that joins before its
    /// log says, its primary's from its answer.
    pub(super) fn addr_of(&self, id: u8) -> Option<SocketAddr> {
        if self.leader == Some(id) && self.role != super::Role::Leader {
            if let Some(a) = self.fl.leader_addr {
                return Some(a);
            }
        }
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
            PeerKind::Probe => self.on_probe(now, from, p, env),
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

#[cfg(test)]
mod tests {
    use super::super::testnet::{addr, Net, Out};
    use crate::seq::wire::{self, BusHeader, BusKind};

    /// A group of three whose nodes draw their own sessions, as they do.
    fn net() -> Net {
        let mut net = Net::new(3, &[]);
        for (i, n) in net.nodes.iter_mut().enumerate() {
            n.cfg.new_session = 100 + i as u64;
        }
        net
    }

    #[test]
    fn a_bootstrap_that_reached_no_one_yields_to_a_later_terms_primary() {
        let mut net = net();
        // Node 0 (eager) is elected in term 1 and writes its session and
        // epoch records, but nothing it sends as primary arrives.
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()));
        net.muted[0] = true;
        net.wire.retain(|w| w.0 != addr(0));
        assert_eq!((net.nodes[0].session(), net.nodes[0].next_seq()), (100, 2));
        // The other two elect one of them in a later term, which writes
        // a session of its own and commits: while node 0's last word
        // (new, empty, before it was elected) is fresh, as a probe reply
        // of just before could be.
        let mut split = false;
        for _ in 0..3_000 {
            let now = net.now;
            for i in 1..3 {
                net.nodes[i].heard_new_and_empty(0, now);
            }
            net.step();
            if (1..3).any(|i| net.nodes[i].is_leader() && net.nodes[i].commit() > 1) {
                split = true;
                break;
            }
        }
        assert!(split);
        let p = (1..3).find(|i| net.nodes[*i].is_leader()).unwrap();
        let session = 100 + p as u64;
        assert_eq!(net.nodes[p].session(), session);
        assert!(net.nodes[p].term() > 1);
        // Heard again, node 0 cuts its bootstrap and follows.
        net.muted[0] = false;
        assert!(
            net.run_until(3_000, |n| n.nodes[0].session() == session
                && n.nodes[0].next_seq() == n.nodes[p].next_seq()
                && n.nodes[0].leader() == Some(p as u8)),
            "{:?}",
            (
                net.nodes[0].session(),
                net.nodes[0].next_seq(),
                net.nodes[p].next_seq(),
                net.nodes[0].leader(),
                net.nodes[0].term(),
                net.nodes[p].term(),
                net.nodes[0].c.wrong_session.get(),
                net.nodes[0].role
            )
        );
        assert!(net.nodes[0].c.truncated.get() >= 2);
    }

    #[test]
    fn a_node_behind_the_groups_changes_hears_its_primary_at_a_new_address() {
        use super::super::{Node, NodeConfig};
        use crate::seq::core::MemLog;
        // Node 1 of the first membership (0, 1, 2), its disk replaced: its
        // membership is that hint. The group's primary is now id 2 at an
        // address the hint does not know (id 2 went to a new node).
        let group: Vec<_> = (0..3).map(addr).collect();
        let mut n = Node::new(NodeConfig::new(1, group), MemLog::new(), 0).unwrap();
        let elsewhere = addr(9);
        let h = BusHeader {
            term: 130,
            session: 555,
            seq: 40,
            commit: 40,
            node: 2,
        };
        let mut d = Vec::new();
        wire::bus_header(&mut d, BusKind::Heartbeat, &h, 0);
        let mut out = Out::default();
        n.on_datagram(1_000_000, elsewhere, &d, &mut out);
        assert_eq!((n.leader(), n.term()), (Some(2), 130));
        assert!(out.sent.iter().any(|(to, _)| *to == elsewhere), "its sync");
        assert!(out.sent.iter().all(|(to, _)| *to != addr(2)));
        // Following it, it takes no other address's claim to an id.
        let h = BusHeader {
            term: 131,
            node: 0,
            ..h
        };
        wire::bus_header(&mut d, BusKind::Heartbeat, &h, 0);
        n.on_datagram(2_000_000, addr(8), &d, &mut out);
        assert_eq!(n.c.strangers.get(), 1);
        assert_eq!((n.leader(), n.term()), (Some(2), 130));
    }

    #[test]
    fn a_log_beyond_its_bootstrap_keeps_its_session() {
        let mut net = net();
        assert!(net.run_until(500, |n| n.nodes[0].is_leader() && n.nodes[0].commit() > 1));
        // A third entry (a membership change), committed everywhere.
        let mut out = Out::default();
        assert!(net.nodes[0].add_node(net.now, addr(9), &mut out).is_ok());
        net.take(0, out);
        assert!(net.run_until(500, |n| n.nodes[2].next_seq() == 3
            && n.nodes[0].commit() == 3));
        // A primary of another session and a later term, at node 1's
        // address (another group's, misconfigured): node 2 ignores it.
        let term = net.nodes[2].term() + 5;
        let h = BusHeader {
            term,
            session: 777,
            seq: 5,
            commit: 5,
            node: 1,
        };
        let mut d = Vec::new();
        wire::bus_header(&mut d, BusKind::Heartbeat, &h, 0);
        let wrong = net.nodes[2].c.wrong_session.get();
        let mut out = Out::default();
        let now = net.now;
        net.nodes[2].on_datagram(now, addr(1), &d, &mut out);
        assert_eq!(net.nodes[2].c.wrong_session.get(), wrong + 1);
        assert_eq!((net.nodes[2].session(), net.nodes[2].next_seq()), (100, 3));
        assert!(net.nodes[2].term() < term);
    }

    #[test]
    fn a_term_at_the_top_of_u32_never_wraps() {
        // Found by the fuzzer (node): a VOTE of term u32::MAX from a node
        // of the group; the node took the term, and its next campaign's
        // term (`next_term_of`) overflowed (a wrap to an early term in a
        // release build).
        let mut net = Net::new(3, &[]);
        let p = wire::Peer {
            h: wire::PeerHeader {
                kind: wire::PeerKind::Vote,
                term: u32::MAX,
                session: 0,
                node: 0,
                flags: 0,
                log_id: 7,
                incarnation: 7,
            },
            a: 0,
            b: 0,
            c: 0,
        };
        let mut d = Vec::new();
        p.write(&mut d);
        net.wire.push((addr(0), addr(1), d));
        for _ in 0..1_000 {
            net.step();
            assert_eq!(net.nodes[1].term(), u32::MAX, "the term went back");
        }
        assert!(!net.nodes[1].is_leader());
    }

    #[test]
    fn a_member_seq_at_the_top_of_u64_never_wraps() {
        // A member's command numbered u64::MAX (a SKIP may jump there)
        // while the primary holds an earlier out-of-order one: the window
        // drained after it asked for the number after u64::MAX.
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader()));
        let session = net.nodes[0].session();
        let member = std::net::SocketAddr::from(([10, 0, 0, 2], 8000));
        let publish = |seq: u64, flags: u8| {
            let mut d = Vec::new();
            wire::cmd_header(&mut d, wire::CmdKind::Publish, 1, session, 9);
            wire::write_cmd_msg(&mut d, seq, flags, b"x");
            wire::set_cmd_count(&mut d, 1);
            d
        };
        net.wire.push((member, addr(0), publish(5, 0)));
        net.wire
            .push((member, addr(0), publish(u64::MAX, wire::SKIP)));
        net.wire.push((member, addr(0), publish(7, 0)));
        assert!(net.run_until(200, |n| n.nodes[0].last_of(1) == u64::MAX));
        for _ in 0..100 {
            net.step();
        }
        assert_eq!(net.nodes[0].last_of(1), u64::MAX);
    }
}
