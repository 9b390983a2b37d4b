//! What the simulation watches as it runs: every datagram a node sends
//! (one primary per term, commits held by a majority, one vote per term),
//! every change of a node's log, and every takeover.

use std::net::SocketAddr;

use super::engine::Sim;
use crate::seq::core::MILLI;
use crate::seq::wire::{self, Bus, BusKind, Peer, PeerKind, GRANTED};

impl Sim<'_> {
    /// The checks on what a node sends: one primary per term, commits
    /// held by a majority, one vote per term.
    pub(super) fn watch_node_datagram(
        &mut self,
        i: usize,
        from: SocketAddr,
        to: SocketAddr,
        d: &[u8],
    ) {
        if let Ok(b) = Bus::parse(d) {
            if matches!(b.kind, BusKind::Data | BusKind::Heartbeat) {
                self.check.primary(self.now, b.h.term as u64, from);
                if b.h.commit > self.logs.max_commit && !self.check.forks_allowed {
                    self.commit_announced(i, b.h.commit);
                }
            }
        } else if wire::magic(d) == wire::PEER_MAGIC {
            if let Ok(p) = Peer::parse(d) {
                if p.h.kind == PeerKind::HelloVia {
                    self.count("hello_via");
                }
                if p.h.kind == PeerKind::VoteReply && p.h.flags & GRANTED != 0 {
                    if let Some(c) = self.node_addrs.iter().position(|a| *a == to) {
                        if let Some(v) = self.logs.voted(self.now, i, p.h.term, c) {
                            self.check.violations.push(v);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn commit_announced(&mut self, primary: usize, commit: u64) {
        let voters = self.voters_of(primary);
        if voters.len() < 3 {
            // Two nodes commit with the standby or alone (the witness, or
            // silence): their modes have checks of their own.
            self.logs.max_commit = self.logs.max_commit.max(commit);
            return;
        }
        let durable = self.proto.durability().on_disk();
        let Some(plog) = self.procs[primary].actor.as_ref().and_then(|a| a.log()) else {
            return;
        };
        let logs: Vec<_> = voters
            .iter()
            .map(|&j| {
                let p = &self.procs[j];
                let log = match &p.actor {
                    Some(a) => a.log(),
                    None => p.disk.as_ref().map(|d| &d.log),
                };
                (log, self.fates[j].before_loss.as_ref())
            })
            .collect();
        if let Some(v) = self
            .logs
            .commit_announced(self.now, commit, plog, &logs, durable)
        {
            self.check.violations.push(v);
        }
    }

    /// The process indices of the voters of node `p`'s membership.
    pub fn voters_of(&self, p: usize) -> Vec<usize> {
        let Some(m) = self.procs[p].actor.as_ref().and_then(|a| a.membership()) else {
            return (0..self.initial_nodes).collect();
        };
        m.nodes()
            .iter()
            .filter(|n| n.voter)
            .filter_map(|n| self.node_addrs.iter().position(|a| *a == n.addr))
            .collect()
    }

    /// The members (voters or not) of the last primary's membership.
    pub fn members_now(&self) -> Vec<usize> {
        let Some(m) = self.procs[self.primary]
            .actor
            .as_ref()
            .and_then(|a| a.membership())
        else {
            return (0..self.initial_nodes).collect();
        };
        m.nodes()
            .iter()
            .filter_map(|n| self.node_addrs.iter().position(|a| *a == n.addr))
            .collect()
    }

    /// Log matching on what node `i` appended or truncated; a node that
    /// lost data stops being amnesiac once it holds what was committed.
    pub(super) fn node_log_changed(&mut self, i: usize) {
        let now = self.now;
        let Some(log) = self.procs[i].actor.as_mut().and_then(|a| a.log_mut()) else {
            return;
        };
        if let Some(v) = self.logs.log_changed(now, i, log) {
            self.check.violations.push(v);
        }
        let conflict = log.prefixes.as_ref().and_then(|p| {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            p.conflict.take()
        });
        if let Some(at) = conflict {
            let d = format!("node {i}: two checkpoints at {at} sum up different prefixes");
            self.check.fail("checkpoint_prefix", now, d);
        }
        if self.fates[i].latent && !log.has_read_errors() {
            // Found and cut: amnesiac until it copied it again.
            self.fates[i].latent = false;
            if log.len() < self.logs.max_commit {
                self.fates[i].amnesiac_until = Some(self.logs.max_commit);
            }
        }
        if self.fates[i].amnesiac_until.is_some_and(|c| log.len() >= c) {
            self.fates[i].amnesiac_until = None;
            self.fates[i].before_loss = None;
            self.trace(|| format!("node {i} holds what was committed when it lost data"));
        }
    }

    pub(super) fn took_over(&mut self, i: usize, term: u64) {
        self.check.takeovers += 1;
        self.first_primary.get_or_insert(self.now);
        self.trace(|| format!("node {i} primary of term {term}"));
        let p = self.primary;
        let w = self.proto.takeover_window();
        if p != i {
            let old = &self.procs[p];
            let healthy = old.runs()
                && old
                    .actor
                    .as_ref()
                    .is_some_and(|a| a.primary_term().is_some())
                && old.unhealthy_until.saturating_add(w) <= self.now
                && !self.net.link_impaired(p, i)
                && !self.net.link_impaired(i, p);
            if healthy {
                let d = format!(
                    "node {i} took over (term {term}) from node {p}, up and reachable for {} ms",
                    (self.now - old.unhealthy_until) / MILLI
                );
                self.check.fail("false_takeover", self.now, d);
            }
        }
        self.primary = i;
        if let Some(log) = self.procs[i].actor.as_ref().and_then(|a| a.log()).cloned() {
            self.check.log_holds_delivered(
                self.now,
                &log,
                &format!("node {i}, primary of term {term}"),
            );
        }
    }
}
