//! The primary and its members' commands: publishes taken in
//! `member_seq` order (one ahead of a gap held in the member's [`Window`]
//! and the gap nacked), hellos and welcomes (a member bound to its id),
//! replays handed to the replayer.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::leader::Refused;
use super::{Binding, Departed, Node, Role};
use crate::seq::core::{fence, Env, Log, Nanos, Replay};
use crate::seq::wire::{self, Cmd, CmdKind, PeerKind, Published, WelcomeBody, READ_ONLY, TAKEN};

/// Bytes of commands held per member at most.
const WINDOW_BYTES: usize = 1 << 20;

/// A member's commands held until an earlier one arrives.
#[derive(Debug, Clone, Hash)]
pub struct Window {
    pub(super) held: BTreeMap<u64, (u8, Vec<u8>)>,
    pub(super) bytes: usize,
    pub(super) nacked: Option<(u64, Nanos)>,
    /// Where the member's commands come from (its nacks go there).
    pub(super) addr: SocketAddr,
}

impl Window {
    pub(super) fn new(addr: SocketAddr) -> Window {
        Window {
            held: BTreeMap::new(),
            bytes: 0,
            nacked: None,
            addr,
        }
    }
}

impl<L: Log> Node<L> {
    /// A command from a member (any role: hellos are recorded by every
    /// node, the rest is for the primary).
    pub(super) fn on_command(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        cmd: &Cmd<'_>,
        env: &mut dyn Env,
    ) {
        match cmd.kind {
            CmdKind::Hello => self.on_hello(now, from, cmd, env),
            CmdKind::Bye => {
                let inc = cmd.incarnation;
                if let Some(b) = self
                    .bindings
                    .get(&cmd.member_id)
                    .filter(|b| b.addr == from && (inc == 0 || b.incarnation == inc))
                {
                    let gone = Departed {
                        addr: from,
                        incarnation: b.incarnation,
                        at: now,
                    };
                    self.bindings.remove(&cmd.member_id);
                    let lease = self.cfg.binding_lease;
                    if self.departed.len() >= 4 * super::MAX_MEMBERS {
                        self.departed
                            .retain(|_, d| now.saturating_sub(d.at) < lease);
                    }
                    self.departed.insert(cmd.member_id, gone);
                    self.ld.windows.remove(&cmd.member_id);
                    self.retarget();
                }
            }
            _ if self.role != Role::Leader => self.c.not_primary.bump(1),
            CmdKind::Replay => {
                let node = self.membership().id_of(from).is_some();
                if cmd.session != self.ls.session && !(node && cmd.session == 0) {
                    self.c.wrong_session.bump(1);
                    return;
                }
                let (a, z) = cmd.range();
                let floor = if node {
                    0
                } else {
                    self.cfg.acl.floor(cmd.member_id)
                };
                self.replay(now, from, (a, z), floor, env);
            }
            CmdKind::Publish => {
                if cmd.session != self.ls.session {
                    self.c.wrong_session.bump(1);
                    return;
                }
                if self.departed_sent(now, cmd.member_id, from, cmd.incarnation)
                    || self.stale_incarnation(now, cmd, from)
                {
                    return;
                }
                if self
                    .bind(now, cmd.member_id, from, cmd.incarnation, false)
                    .is_err()
                {
                    self.c.taken.bump(cmd.count as u64);
                    self.welcome(from, cmd.member_id, None, cmd.incarnation, TAKEN, env);
                    return;
                }
                if !self.cfg.acl.may_publish(cmd.member_id) {
                    // A member that may only read: refused, and told.
                    self.c.forbidden.bump(cmd.count as u64);
                    self.welcome(from, cmd.member_id, None, cmd.incarnation, 0, env);
                    return;
                }
                for p in cmd.published() {
                    self.accept(now, cmd.member_id, from, &p, env);
                }
            }
        }
    }

    /// Whether a datagram of member `id` from `from` (a hello's
    /// `incarnation`, or 0) is a late one of a member that said goodbye
    /// within the lease: dropped and counted (`departed`). A late publish
    /// or hello would bind the id to the member that left, and keep it
    /// from whoever takes it next for a lease (UDP may deliver a command
    /// sent before the Bye after it).
    fn departed_sent(&mut self, now: Nanos, id: u32, from: SocketAddr, incarnation: u64) -> bool {
        let Some(d) = self.departed.get(&id) else {
            return false;
        };
        if now.saturating_sub(d.at) >= self.cfg.binding_lease {
            self.departed.remove(&id);
            return false;
        }
        let same = if incarnation != 0 && d.incarnation != 0 {
            incarnation == d.incarnation
        } else {
            from == d.addr
        };
        if same {
            self.c.departed.bump(1);
        }
        same
    }

    /// Whether `cmd` is a publish of an earlier incarnation of the member
    /// bound to its id at the same address (sent before its goodbye, or
    /// resent while it closed, and late): its numbers are the later
    /// incarnation's now, so it is dropped and counted (`departed`).
    fn stale_incarnation(&mut self, now: Nanos, cmd: &Cmd<'_>, from: SocketAddr) -> bool {
        let Some(b) = self.bindings.get(&cmd.member_id) else {
            return false;
        };
        let stale = b.addr == from
            && b.incarnation != 0
            && cmd.incarnation != 0
            && b.incarnation != cmd.incarnation
            && now.saturating_sub(b.heard) < self.cfg.binding_lease;
        if stale {
            self.c.departed.bump(1);
        }
        stale
    }

    /// Binds `id` to the member at `from`; `Err` if another member holds it
    /// (heard within the lease).
    fn bind(
        &mut self,
        now: Nanos,
        id: u32,
        from: SocketAddr,
        incarnation: u64,
        unicast: bool,
    ) -> Result<(), ()> {
        let lease = self.cfg.binding_lease;
        let changed;
        match self.bindings.get_mut(&id) {
            Some(b) if b.addr == from || (incarnation != 0 && b.incarnation == incarnation) => {
                if incarnation != 0 {
                    b.incarnation = incarnation;
                }
                changed = b.addr != from || (unicast && !b.unicast);
                b.addr = from;
                b.heard = now;
                b.unicast |= unicast;
            }
            Some(b) if now.saturating_sub(b.heard) < lease => return Err(()),
            _ => {
                if self.bindings.len() >= 4 * super::MAX_MEMBERS {
                    self.bindings
                        .retain(|_, b| now.saturating_sub(b.heard) < lease);
                }
                self.bindings.insert(
                    id,
                    Binding {
                        addr: from,
                        incarnation,
                        heard: now,
                        unicast,
                        next: u64::MAX,
                    },
                );
                changed = unicast;
            }
        }
        if changed {
            self.retarget();
        }
        Ok(())
    }

    fn on_hello(&mut self, now: Nanos, from: SocketAddr, cmd: &Cmd<'_>, env: &mut dyn Env) {
        let Some(h) = cmd.hello() else { return };
        if self.departed_sent(now, cmd.member_id, from, h.incarnation) {
            return;
        }
        // Someone else (a new incarnation) asks for the id: the goodbye is
        // history.
        self.departed.remove(&cmd.member_id);
        let unicast = h.flags & wire::UNICAST != 0;
        let taken = self
            .bind(now, cmd.member_id, from, h.incarnation, unicast)
            .is_err();
        if taken {
            self.c.taken.bump(1);
        } else if let Some(b) = self.bindings.get_mut(&cmd.member_id) {
            b.next = h.next;
        }
        if self.role == Role::Leader {
            if h.epoch == u32::MAX && self.commit <= self.ld.term_start {
                // A joining member starts at the commit position, or from
                // the latest committed snapshot: a primary knows both once
                // its term committed its first entry. Before that a node
                // restarted and elected knows neither (its commit index is
                // where its log starts): it would start a live member at
                // the log's start and name no snapshot. The member asks
                // again (every 20 ms).
                return;
            }
            if !taken && h.flags & wire::KEEPALIVE == 0 {
                // The member asks where it stands in this term: what it
                // sent before (held beyond a gap) waits for a welcome that
                // may show a fork, after which it skips the lost numbers.
                // It resends what the welcome shows missing.
                self.ld.windows.remove(&cmd.member_id);
            }
            let flags = if taken { TAKEN } else { 0 };
            self.welcome(from, cmd.member_id, Some(&h), h.incarnation, flags, env);
        } else if !taken && h.flags & wire::KEEPALIVE == 0 {
            self.pass_hello(from, cmd, &h, env);
        }
    }

    /// A follower passes a member's hello to the primary it follows
    /// (HELLO_VIA, as JOIN_VIA for a joining node), which welcomes the
    /// member itself: a member cut off while a node was added and then
    /// elected knows only the nodes it had heard of, all followers now,
    /// and would ask them for ever (Raft §8: a follower redirects a
    /// client to the leader). Hellos are not per message: the copy is not
    /// on a hot path.
    fn pass_hello(
        &mut self,
        from: SocketAddr,
        cmd: &Cmd<'_>,
        h: &wire::HelloBody,
        env: &mut dyn Env,
    ) {
        let me = self.id();
        let Some(to) = self
            .leader
            .filter(|l| *l != me)
            .and_then(|l| self.addr_of(l))
        else {
            return;
        };
        let mut hello = Vec::with_capacity(wire::CMD_HEADER + wire::HELLO_BODY);
        wire::hello(&mut hello, cmd.member_id, cmd.session, h);
        let (a, b, c) = wire::addr_body(from);
        let term = self.term;
        self.send_peer_with(&[to], PeerKind::HelloVia, term, 0, ((a, b), c), &hello, env);
    }

    /// A member's hello passed on by a follower: only a primary takes it,
    /// as if the member had sent it, and never passes it again.
    pub(super) fn on_hello_via(
        &mut self,
        now: Nanos,
        p: &wire::Peer,
        payload: &[u8],
        env: &mut dyn Env,
    ) {
        if self.role != Role::Leader {
            return;
        }
        let member = wire::body_addr(p.a, p.b, p.c);
        match (member, Cmd::parse(payload)) {
            (Some(m), Ok(cmd)) if cmd.kind == CmdKind::Hello => {
                // A member bound here at that address and incarnation reaches
                // this primary itself: a copy passed on by a follower comes
                // late, and as a hello it would reset the member's window of
                // held commands mid-stream (`order`: --nodes 2 --two-nodes
                // safe --seed 406).
                let bound = self.bindings.get(&cmd.member_id).is_some_and(|b| {
                    b.addr == m && cmd.hello().is_some_and(|h| h.incarnation == b.incarnation)
                });
                if !bound {
                    self.on_hello(now, m, &cmd, env);
                }
            }
            _ => self.c.malformed.bump(1),
        }
    }

    fn welcome(
        &mut self,
        to: SocketAddr,
        id: u32,
        h: Option<&wire::HelloBody>,
        incarnation: u64,
        flags: u8,
        env: &mut dyn Env,
    ) {
        let (epoch, epoch_end) = match h {
            Some(h) if h.epoch == u32::MAX => {
                // A member joining asks which epoch its starting point is in.
                // It starts at the commit position at most (what is beyond
                // may be cut by the next primary).
                let at = h.next.min(self.commit).min(self.ls.next).saturating_sub(1);
                self.ls.epoch_end(self.ls.term_at(at))
            }
            Some(h) => self.ls.epoch_end(h.epoch),
            None => (0, 0),
        };
        let snap = self.ls.snaps.latest(self.commit);
        // The access control: a member that may only read is told so;
        // below its floor the log begins there for it.
        let flags = if self.cfg.acl.may_publish(id) {
            flags
        } else {
            flags | READ_ONLY
        };
        let first = self.ls.first.max(self.cfg.acl.floor(id));
        let w = WelcomeBody {
            last: self.ls.last_of(id),
            epoch_end,
            epoch,
            max_datagram: self.cfg.max_datagram.min(u16::MAX as usize) as u16,
            incarnation,
            first,
            snap_from: snap.map_or(0, |s| s.read_from),
            snap_epoch: snap.map_or(0, |s| self.ls.term_at(s.read_from.saturating_sub(1))),
            snap_as_of: snap.map_or(0, |s| s.as_of),
        };
        let hd = self.bus_header(self.ls.next);
        wire::welcome(&mut self.scratch, &hd, flags, &w);
        // The group's nodes, so that a member hears (and says hello to)
        // nodes added before the point it starts at.
        let mut d = std::mem::take(&mut self.scratch);
        self.membership().encode(&mut d);
        env.send(&[to], &d);
        self.scratch = d;
    }

    /// A member's message: sequenced if it is the member's next, held if
    /// an earlier one is missing (and the member told), dropped if it was
    /// sequenced already.
    fn accept(
        &mut self,
        now: Nanos,
        id: u32,
        from: SocketAddr,
        p: &Published<'_>,
        env: &mut dyn Env,
    ) {
        let last = self.ls.last_of(id);
        if p.member_seq <= last {
            self.c.duplicates.bump(1);
            return;
        }
        if self.ls.next.saturating_sub(self.commit) >= self.cfg.max_uncommitted {
            self.c.backpressure.bump(1);
            return;
        }
        // After a fork, a member's next may skip numbers it saw delivered
        // on the side the fork dropped (`SKIP`, never stored).
        if p.member_seq == last + 1 || p.flags & wire::SKIP != 0 {
            match self.emit(id, p.member_seq, p.flags & !wire::SKIP, p.data, env) {
                Ok(()) => self.drain_window(now, id, from, env),
                Err(Refused::NoSpace) => self.full_refusal(now, from, p.member_seq, env),
                Err(_) => {}
            }
            return;
        }
        let max = self.cfg.window;
        let w = self
            .ld
            .windows
            .entry(id)
            .or_insert_with(|| Window::new(from));
        w.addr = from;
        if p.member_seq - last <= max as u64 && w.bytes + p.data.len() <= WINDOW_BYTES {
            if !w.held.contains_key(&p.member_seq) {
                w.bytes += p.data.len();
                w.held.insert(p.member_seq, (p.flags, p.data.to_vec()));
                self.c.held.bump(1);
            } else {
                self.c.duplicates.bump(1);
            }
        } else {
            self.c.out_of_order.bump(1);
        }
        self.nack(now, id, from, last + 1, env);
    }

    /// Sequences what the member's window holds in order after its last.
    fn drain_window(&mut self, now: Nanos, id: u32, from: SocketAddr, env: &mut dyn Env) {
        loop {
            let last = self.ls.last_of(id);
            let Some(w) = self.ld.windows.get_mut(&id) else {
                return;
            };
            while w.held.first_key_value().is_some_and(|(s, _)| *s <= last) {
                let (_, (_, d)) = w.held.pop_first().expect("first");
                w.bytes -= d.len();
            }
            // Nothing follows u64::MAX (a member's SKIP may jump there):
            // the window is empty then.
            let next = last.checked_add(1);
            let Some((next, (flags, d))) = next.and_then(|n| Some((n, w.held.remove(&n)?))) else {
                if w.held.is_empty() {
                    self.ld.windows.remove(&id);
                } else {
                    self.nack(now, id, from, last + 1, env);
                }
                return;
            };
            w.bytes -= d.len();
            match self.emit(id, next, flags, &d, env) {
                Ok(()) => {}
                Err(Refused::NoSpace) => return self.full_refusal(now, from, next, env),
                Err(_) => return,
            }
        }
    }

    /// A member's command found the disk full: it is told, and this
    /// primary steps down (a node with room takes over).
    fn full_refusal(&mut self, now: Nanos, from: SocketAddr, member_seq: u64, env: &mut dyn Env) {
        self.refuse_full(from, member_seq, env);
        if self.role == Role::Leader {
            self.disk_full(now, env);
        }
    }

    /// Tells a member that its command `member_seq` is missing (at most once
    /// a millisecond for the same one).
    pub(super) fn nack(
        &mut self,
        now: Nanos,
        id: u32,
        to: SocketAddr,
        member_seq: u64,
        env: &mut dyn Env,
    ) {
        let w = self.ld.windows.entry(id).or_insert_with(|| Window::new(to));
        if w.nacked
            .is_some_and(|(s, at)| s == member_seq && now.saturating_sub(at) < 1_000_000)
        {
            return;
        }
        w.nacked = Some((member_seq, now));
        self.c.nacks.bump(1);
        let h = self.bus_header(self.ls.next);
        wire::nack(&mut self.scratch, &h, member_seq);
        env.send(&[to], &self.scratch);
    }

    /// What a replay job's answer depends on ([`crate::seq::core::Fence`]):
    /// 0 unless primary.
    pub fn fence(&self) -> crate::seq::core::Fence {
        if self.role == Role::Leader {
            fence(self.term, self.dur.gen)
        } else {
            0
        }
    }

    /// A replay request: handed to the replayer (the same request from
    /// the same place within half a retransmit delay is one).
    fn replay(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        (a, z): (u64, u64),
        floor: u64,
        env: &mut dyn Env,
    ) {
        self.c.replay_requests.bump(1);
        let z = z
            .min(self.ls.next)
            .min(a.saturating_add(self.cfg.replay_max));
        if a >= z {
            return;
        }
        let first = self.ls.first.max(floor);
        if a < first {
            // Gone (retention), or below what the requester may read (the
            // access control): it goes on from `first`, or installs the
            // checkpoint (a node).
            if a >= self.ls.first {
                self.c.forbidden.bump(1);
            }
            let h = self.bus_header(a);
            let epoch = self.ls.term_at(first.saturating_sub(1));
            wire::trimmed(&mut self.scratch, &h, first, epoch);
            env.send(&[from], &self.scratch);
            return;
        }
        let guard = self.cfg.retransmit_after / 2;
        if self
            .ld
            .replays
            .get(&from)
            .is_some_and(|&(f, at)| f == a && now.saturating_sub(at) < guard)
        {
            return;
        }
        if self.ld.replays.len() >= 4096 {
            self.ld.replays.clear();
        }
        self.ld.replays.insert(from, (a, now));
        self.c.replays.bump(1);
        env.replay(Replay {
            to_addr: from,
            from: a,
            to: z,
            header: self.bus_header(a),
            max_datagram: self.cfg.max_datagram,
            fence: self.fence(),
        });
    }
}
