//! What a node's acknowledgement covers, and a full disk.
//!
//! With [`Durability::Fsync`] a node acknowledges an entry only once it is
//! on its disk, and a primary counts its own log toward the commit only as
//! far: committed then means on the disk of a majority. Syncs are group
//! commits (Kafka's and etcd's batched WAL syncs): after a receive batch
//! that appended, the node asks its shell for one sync of everything
//! appended ([`Env::sync`]); the shell syncs off the node's thread and
//! answers with [`Node::synced`]; appends go on meanwhile, and the next
//! sync takes everything appended since. A truncation (durable itself)
//! makes the answers to syncs asked before it stale (`gen`).
//!
//! A full disk: an append that finds no room makes a primary step down
//! (its members are told, `BusKind::Full`, and look for the next primary)
//! and keeps any node from campaigning until its disk has room again,
//! which it checks every half election timeout.

use super::{Node, Role};
use crate::seq::core::{Env, Log, Nanos, NodeEvent};
use crate::seq::wire;

#[derive(Clone, Hash)]
pub(super) struct Durable {
    /// The entries below this are on the disk.
    pub upto: u64,
    /// A sync is asked and not answered.
    pending: bool,
    /// Bumped by every truncation: a sync asked before it is stale.
    pub gen: u64,
    /// An append failed for want of space.
    pub full: bool,
    full_checked: Nanos,
}

impl Durable {
    pub fn new() -> Durable {
        // What a restarted node holds may be in its page cache only: it
        // syncs once before it acknowledges anything.
        Durable {
            upto: 0,
            pending: false,
            gen: 0,
            full: false,
            full_checked: 0,
        }
    }
}

impl<L: Log> Node<L> {
    /// The end of what this node's acknowledgement covers: its log, or
    /// what of it is on the disk.
    pub(super) fn acked_end(&self) -> u64 {
        if self.cfg.durability.on_disk() {
            self.dur.upto.min(self.ls.next)
        } else {
            self.ls.next
        }
    }

    /// Asks for a sync of everything appended, if one is due (one at a
    /// time).
    pub(super) fn want_sync(&mut self, env: &mut dyn Env) {
        if self.cfg.durability.on_disk() && !self.dur.pending && self.ls.next > self.dur.upto {
            self.dur.pending = true;
            self.c.sync_requests.bump(1);
            env.sync(self.ls.next, self.dur.gen);
        }
    }

    /// The shell synced the log up to `upto` (asked at generation `gen`):
    /// acknowledge it, or count it toward the commit.
    pub fn synced(&mut self, now: Nanos, upto: u64, gen: u64, env: &mut dyn Env) {
        self.observe(now);
        if gen != self.dur.gen {
            return;
        }
        self.dur.pending = false;
        self.c.syncs_done.bump(1);
        if upto > self.dur.upto {
            self.dur.upto = upto.min(self.ls.next);
            match self.role {
                Role::Leader => {
                    self.leader_end_batch(now, env);
                    // Its datagrams do not say what it synced (no HOLDS).
                    let end = self.acked_end();
                    self.ack_members(end, env);
                }
                Role::Follower => {
                    self.fl.ack_due = true;
                    self.follower_end_batch(now, env);
                    self.catch_up(env);
                }
                _ => {}
            }
        }
        self.want_sync(env);
        self.mirror();
    }

    /// The log was cut at `from` (durably): what is on the disk ends there
    /// at most, and syncs asked before are stale.
    pub(super) fn truncated_to(&mut self, from: u64) {
        self.dur.gen += 1;
        self.dur.pending = false;
        self.dur.upto = self.dur.upto.min(from);
    }

    /// An append found no room: a primary steps down (telling the bus and
    /// the group that its term ends, so that a node with room takes over
    /// at once); no node campaigns until its disk has room again.
    pub(super) fn disk_full(&mut self, now: Nanos, env: &mut dyn Env) {
        self.c.full.bump(1);
        let was_full = self.dur.full;
        self.dur.full = true;
        self.dur.full_checked = now;
        let primary = self.role == Role::Leader;
        if primary {
            self.stop(now, env);
            self.silent = 0;
        }
        if !was_full || primary {
            env.event(NodeEvent::DiskFull { primary });
        }
    }

    /// A node whose disk was full looks again for room.
    pub(super) fn check_space(&mut self, now: Nanos, env: &mut dyn Env) {
        if !self.dur.full
            || now.saturating_sub(self.dur.full_checked) < self.cfg.election_timeout / 2
        {
            return;
        }
        self.dur.full_checked = now;
        if self.log.has_space() {
            self.dur.full = false;
            env.event(NodeEvent::DiskSpace);
        }
    }

    /// Tells the member at `to` that its command `member_seq` could not be
    /// appended.
    pub(super) fn refuse_full(
        &mut self,
        to: std::net::SocketAddr,
        member_seq: u64,
        env: &mut dyn Env,
    ) {
        let h = self.bus_header(self.ls.next);
        wire::full(&mut self.scratch, &h, member_seq);
        env.send(&[to], &self.scratch);
    }
}
