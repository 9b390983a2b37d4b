//! The nodes' invariants, checked after every step (after TigerBeetle's
//! `cluster/storage_checker.zig` and Raft's safety properties):
//!
//! 1. *Log matching* (Raft §5.3): two logs with an entry of the same index
//!    and term hold the same entry and the same prefix. Every entry any
//!    node ever appends is recorded as (index, term) → the hash of its
//!    log's prefix up to it ([`MemLog::chain`]); a second entry of that
//!    index and term with another prefix is a violation.
//! 2. *A commit is held by a majority*: whenever a primary announces a
//!    commit position beyond any announced before, a majority of the nodes
//!    hold the prefix up to it as the primary does (durably, where
//!    acknowledgements promise the disk). A node that held it and then lost
//!    it (its host's power, its disk) still counts: it acknowledged
//!    honestly; what the protocol must then do (not vote on a log that
//!    lacks it) the durability checks see.
//! 3. *One vote per term*: a node, across restarts and disk replacements,
//!    grants its vote in a term to one candidate at most.

use std::collections::{HashMap, HashSet};

use crate::seq::core::{MemLog, Nanos};
use crate::seq::wire::{Msg, CONTROL};

use super::check::Violation;

/// The term of a log entry, given the term of the entry before it (the
/// term of the last epoch record at or before it; the session record,
/// before any, is of the term of the primary that wrote it: two new
/// logs' entries 0 of two terms are two entries).
pub fn entry_term(e: &[u8], prev: u32) -> u32 {
    match Msg::from_entry(e) {
        Ok(m) if prev == 0 && m.epoch().is_none() => m.term,
        Ok(m) => m.epoch().unwrap_or(prev),
        Err(_) => prev,
    }
}

#[derive(Default)]
pub struct LogChecker {
    /// (index, term) -> the chain hash of the prefix up to that entry.
    seen: HashMap<(u64, u32), u64>,
    /// Per node, the term of each of its entries.
    terms: Vec<Vec<u32>>,
    /// (voter, term) -> the candidate it granted its vote to.
    votes: HashMap<(usize, u32), usize>,
    /// The highest commit position announced.
    pub max_commit: u64,
    /// Every session a log has begun with.
    sessions: HashSet<u64>,
    pub checks: u64,
}

impl LogChecker {
    pub fn new(nodes: usize) -> LogChecker {
        LogChecker {
            terms: vec![Vec::new(); nodes],
            ..LogChecker::default()
        }
    }

    /// Node `node`'s log changed from its `take_changed` point on.
    pub fn log_changed(&mut self, at: Nanos, node: usize, log: &mut MemLog) -> Option<Violation> {
        let from = log.take_changed()?;
        if let Some(v) = self.new_session(at, node, from, log) {
            return Some(v);
        }
        let terms = &mut self.terms[node];
        terms.truncate(from as usize);
        if (terms.len() as u64) < from {
            // A checkpoint installed: the entries below it are not held;
            // the last one's term is the checkpoint's last epoch.
            terms.resize(from as usize, log.term_before_first());
        }
        let mut bad = None;
        for i in from..log.len() {
            let prev = terms.last().copied().unwrap_or(0);
            let t = entry_term(log.entry(i).unwrap_or(&[]), prev);
            terms.push(t);
            let h = log.chain(i).unwrap_or(0);
            self.checks += 1;
            match self.seen.get(&(i, t)) {
                Some(&x) if x != h && bad.is_none() => {
                    bad = Some(Violation {
                        kind: "log_matching",
                        at,
                        detail: format!(
                            "node {node}: entry {i} of term {t} follows another prefix than the same index and term elsewhere"
                        ),
                    });
                }
                Some(_) => {}
                None => {
                    self.seen.insert((i, t), h);
                }
            }
        }
        bad
    }

    /// *A group is created once*: a log whose entry 0 (changed from
    /// `from`) begins a session no log began with before, once something
    /// was committed (in the first session), is a second group beside the
    /// first. Two sessions before anything commits are a new group's split
    /// bootstrap (only one can commit; the other's nodes cut theirs).
    fn new_session(
        &mut self,
        at: Nanos,
        node: usize,
        from: u64,
        log: &MemLog,
    ) -> Option<Violation> {
        if from != 0 {
            return None;
        }
        let m = Msg::from_entry(log.entry(0)?).ok()?;
        if m.member_id != 0 || m.flags & CONTROL == 0 || m.epoch().is_some() {
            return None;
        }
        self.checks += 1;
        let first = self.sessions.is_empty();
        if !self.sessions.insert(m.member_seq) || first || self.max_commit == 0 {
            return None;
        }
        Some(Violation {
            kind: "new_session",
            at,
            detail: format!(
                "node {node} began session {:#x} after commit {} in another",
                m.member_seq, self.max_commit
            ),
        })
    }

    /// A primary whose log is `primary` announced `commit`; `logs` are
    /// every node's (with, for a node that lost data, the chain it held
    /// before; `durable`: whether only what is on the platter counts).
    pub fn commit_announced(
        &mut self,
        at: Nanos,
        commit: u64,
        primary: &MemLog,
        logs: &[(Option<&MemLog>, Option<&Vec<u64>>)],
        durable: bool,
    ) -> Option<Violation> {
        if commit <= self.max_commit || commit == 0 {
            return None;
        }
        self.max_commit = commit;
        self.checks += 1;
        let want = primary.chain(commit - 1)?;
        let holds = |l: &MemLog| {
            l.len() >= commit
                && l.chain(commit - 1) == Some(want)
                && (!durable || l.durable() >= commit)
        };
        let n = logs.len();
        let held = logs
            .iter()
            .filter(|(log, before)| {
                log.is_some_and(holds)
                    || before.is_some_and(|c| c.get(commit as usize - 1) == Some(&want))
            })
            .count();
        (held < n / 2 + 1).then(|| Violation {
            kind: "commit_not_held",
            at,
            detail: format!(
                "commit {commit} announced, held by {held} of {n} nodes{}",
                if durable { " on disk" } else { "" }
            ),
        })
    }

    /// Node `voter` granted its vote in `term` to `candidate`.
    pub fn voted(
        &mut self,
        at: Nanos,
        voter: usize,
        term: u32,
        candidate: usize,
    ) -> Option<Violation> {
        self.checks += 1;
        match self.votes.insert((voter, term), candidate) {
            Some(c) if c != candidate => Some(Violation {
                kind: "double_vote",
                at,
                detail: format!(
                    "node {voter} voted for node {c} and for node {candidate} in term {term}"
                ),
            }),
            _ => None,
        }
    }
}
