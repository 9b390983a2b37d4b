//! Retention and checkpoints: a node removes the oldest whole segments of
//! its log once a checkpoint sums up what they held ([`super::checkpoint`])
//! and nobody needs them, and a node too far behind to be filled from the
//! log installs its primary's checkpoint (Raft's InstallSnapshot).
//!
//! What is still needed (the floor, below which retention may cut):
//! committed entries only; on a primary, what every follower heard lately
//! holds (a follower a little behind is filled from the log, not sent a
//! checkpoint), and what members that said hello within their lease
//! (`binding_lease`) still have to read (their hellos say where they are),
//! and the log from the latest committed snapshot's position on
//! ([`super::snapshots`]);
//! followers take the primary's floor (RETAIN). The log's own policy
//! (bytes, age: [`Log::retention_point`]) then says where to cut, at the
//! floor at most. The checkpoint is made on the node's thread (the
//! members' lasts as of the commit: a copy of a map); saving it and
//! removing the segments are the shell's, off the node's thread
//! ([`Env::trim`]).
//!
//! A replay asked below the first entry held is answered TRIMMED: a
//! member then goes on from there (it reports it), a follower asks for the
//! checkpoint (CHECKPOINT_REQ, chunk by chunk; served off the node's
//! thread, [`Env::send_checkpoint`]), installs it ([`Log::install`]) and
//! copies the log from its first entry.

use std::sync::Arc;

use super::checkpoint::Checkpoint;
use super::logstate::LogState;
use super::{Node, Role};
use crate::seq::core::{
    CheckpointJob, Env, Log, Nanos, NodeEvent, CHECKPOINT_CHUNK, CHECKPOINT_WINDOW,
};
use crate::seq::wire::{Peer, PeerKind};

/// A checkpoint being received.
#[derive(Debug, Default, Clone, Hash)]
pub(super) struct Installing {
    bytes: Vec<u8>,
    asked_at: Option<Nanos>,
}

#[derive(Clone, Hash)]
pub(super) struct Retain {
    /// The last checkpoint made or installed, and its first index.
    pub last: Option<(u64, Arc<Vec<u8>>)>,
    /// When retention last looked.
    checked: Nanos,
    /// A follower: the primary's floor (what it still needs).
    pub primary_floor: u64,
    /// A follower receiving its primary's checkpoint.
    pub installing: Option<Installing>,
}

impl Retain {
    pub fn new(log_first: u64, saved: Option<Vec<u8>>) -> Retain {
        Retain {
            last: saved.map(|b| (log_first, Arc::new(b))),
            checked: 0,
            primary_floor: 0,
            installing: None,
        }
    }
}

impl<L: Log> Node<L> {
    /// The lowest entry still needed (see the module's doc).
    fn retention_floor(&self, now: Nanos) -> u64 {
        let mut floor = self.commit.min(self.ls.floor());
        if let Some(s) = self.ls.snaps.latest(self.commit) {
            // A member starts from the latest snapshot and the log from
            // its position.
            floor = floor.min(s.read_from);
        }
        if self.role == Role::Leader {
            let lease = self.cfg.binding_lease;
            for i in self.other_nodes() {
                let i = i as usize;
                if self.ld.peer_silent[i] < lease {
                    floor = floor.min(self.ld.matched[i]);
                }
            }
            floor = floor.min(self.members_floor(now));
        } else {
            floor = floor.min(self.rt.primary_floor);
        }
        floor
    }

    /// The lowest entry a member heard within its lease still reads.
    fn members_floor(&self, now: Nanos) -> u64 {
        let lease = self.cfg.binding_lease;
        self.bindings
            .values()
            .filter(|b| now.saturating_sub(b.heard) < lease)
            .map(|b| b.next)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Retention, every `retention_every` of running time: a checkpoint at
    /// the point the log's policy cuts (at the floor at most), handed to
    /// the shell to save and trim; a primary tells its followers its floor.
    pub(super) fn retention_tick(&mut self, now: Nanos, env: &mut dyn Env) {
        let every = self.cfg.retention_every;
        if every == 0 || now.saturating_sub(self.rt.checked) < every {
            return;
        }
        self.rt.checked = now;
        let floor = self.retention_floor(now);
        if self.role == Role::Leader {
            let term = self.term;
            for i in self.other_nodes() {
                self.send_peer(i, PeerKind::Retain, term, 0, (floor, 0), 0, env);
            }
        }
        let t = self.log.retention_point(floor).min(floor);
        if t <= self.ls.first {
            return;
        }
        let Some(c) = self.ls.checkpoint(t) else {
            return;
        };
        let bytes = Arc::new(c.encode());
        self.ls.first = t;
        self.rt.last = Some((t, bytes.clone()));
        self.c.trims.bump(1);
        env.trim(t, bytes);
        env.event(NodeEvent::Trimmed { first: t });
    }

    /// A primary's floor (a follower trims below it only).
    pub(super) fn on_retain(&mut self, p: &Peer) {
        if self.role == Role::Follower && Some(p.h.node) == self.leader {
            self.rt.primary_floor = p.a;
        }
    }

    /// A follower asks for a chunk of this primary's checkpoint.
    pub(super) fn on_checkpoint_req(&mut self, from: u8, p: &Peer, env: &mut dyn Env) {
        let (Role::Leader, Some((_, bytes)), Some(to)) =
            (self.role, self.rt.last.clone(), self.addr_of(from))
        else {
            return;
        };
        env.send_checkpoint(CheckpointJob {
            to,
            checkpoint: bytes,
            offset: p.a,
            term: self.term,
            session: self.ls.session,
            node: self.id(),
            log_id: self.meta.log_id,
            incarnation: self.cfg.incarnation,
        });
    }

    /// The primary says what this follower asked for is gone: it asks for
    /// the primary's checkpoint.
    pub(super) fn on_trimmed(&mut self, now: Nanos, first: u64, env: &mut dyn Env) {
        if self.role != Role::Follower || self.ls.next >= first || self.rt.installing.is_some() {
            return;
        }
        self.rt.installing = Some(Installing::default());
        self.ask_checkpoint(now, env);
    }

    fn ask_checkpoint(&mut self, now: Nanos, env: &mut dyn Env) {
        let (Some(l), Some(inst)) = (self.leader, self.rt.installing.as_mut()) else {
            return;
        };
        inst.asked_at = Some(now);
        let (term, at) = (self.term, inst.bytes.len() as u64);
        self.send_peer(l, PeerKind::CheckpointReq, term, 0, (at, 0), 0, env);
    }

    /// A chunk of the primary's checkpoint: taken in order; the whole one
    /// is installed.
    pub(super) fn on_checkpoint(
        &mut self,
        now: Nanos,
        from: u8,
        p: &Peer,
        data: &[u8],
        env: &mut dyn Env,
    ) {
        if Some(from) != self.leader {
            return;
        }
        let Some(inst) = self.rt.installing.as_mut() else {
            return;
        };
        if p.a != inst.bytes.len() as u64 || p.b > (1 << 26) {
            return;
        }
        inst.bytes.extend_from_slice(data);
        inst.asked_at = Some(now);
        if (inst.bytes.len() as u64) < p.b {
            if inst.bytes.len() % (CHECKPOINT_CHUNK * CHECKPOINT_WINDOW) == 0 {
                // The window is in: the next one.
                self.ask_checkpoint(now, env);
            }
            return;
        }
        let bytes = self
            .rt
            .installing
            .take()
            .map(|i| i.bytes)
            .unwrap_or_default();
        let Some(c) = Checkpoint::decode(&bytes) else {
            return;
        };
        if c.first <= self.ls.next || c.session != self.ls.session && self.ls.session != 0 {
            return;
        }
        let first = c.first;
        if !self.hold_log() || self.log.install(first, &bytes).is_err() {
            self.c.store_errors.bump(1);
            return;
        }
        self.ls = LogState::from_checkpoint(c);
        self.truncated_to(first);
        self.dur.upto = first;
        // Everything below a checkpoint is committed.
        self.commit = first;
        self.rt.last = Some((first, Arc::new(bytes)));
        self.fl.reset();
        self.c.installs.bump(1);
        env.event(NodeEvent::Installed { first });
        self.mirror();
    }

    /// A follower installing a checkpoint asks again for what it lacks.
    pub(super) fn installing_tick(&mut self, now: Nanos, env: &mut dyn Env) {
        let stale = self.rt.installing.as_ref().is_some_and(|i| {
            i.asked_at
                .is_none_or(|a| now.saturating_sub(a) >= 4 * self.cfg.retransmit_after)
        });
        if stale {
            self.ask_checkpoint(now, env);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::checkpoint::Checkpoint;
    use super::super::testnet::addr;
    use super::super::{Node, NodeConfig};
    use crate::seq::core::{Log, MemLog};
    use crate::seq::wire::{self, CONTROL, EPOCH};

    #[test]
    fn an_install_a_crash_cut_short_is_finished_at_the_restart() {
        // A follower's log: 10 entries of term 64.
        let mut log = MemLog::new();
        let mut e = Vec::new();
        wire::write_msg(&mut e, 0, 77, CONTROL, 64, &[]);
        log.append(&e).unwrap();
        for k in 1..10u64 {
            e.clear();
            let (flags, seq) = if k == 1 {
                (CONTROL | EPOCH, 64)
            } else {
                (0, k)
            };
            wire::write_msg(&mut e, if k == 1 { 0 } else { 9 }, seq, flags, 64, b"x");
            log.append(&e).unwrap();
        }
        // It installs its primary's checkpoint at 100, and dies between
        // saving the checkpoint and resetting the log.
        let cp = Checkpoint {
            first: 100,
            session: 77,
            epochs: vec![(64, 0)],
            configs: Vec::new(),
            last: HashMap::from([(9, 98)]),
        }
        .encode();
        log.crash_in_install = true;
        assert!(log.install(100, &cp).is_err());
        assert!(log.crashed && log.next_index() == 10);
        log.crashed = false;
        // Restarted: the install is finished (the log goes on from 100,
        // where the node's state says it does).
        let group: Vec<_> = (0..3).map(addr).collect();
        let n = Node::new(NodeConfig::new(1, group), log, 0).unwrap();
        assert_eq!(n.next_seq(), 100);
        assert_eq!(n.log().next_index(), 100, "the log's own end");
        assert_eq!(n.log().first_index(), 100);
        assert_eq!(n.last_of(9), 98);
    }
}
