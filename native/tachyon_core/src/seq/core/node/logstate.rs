//! What a node derives from its log: the session (entry 0), the epochs
//! (Raft's terms: every entry carries its term, and an epoch record opens
//! each), and every member's last sequenced `member_seq`. Appends update
//! it; a truncation undoes what it removed (an undo log of the entries
//! not known committed, or a rescan).
//!
//! A log read back at a restart is checked entry by entry: terms never go
//! down, and a new term begins with its epoch record. A log that breaks
//! this (new-term entries followed by older ones that a crash brought back,
//! or an entry that does not parse) is cut at the first such entry
//! ([`LogState::recover`] says where).

use std::collections::{HashMap, VecDeque};

use super::membership::Membership;
use super::snapshots::Snaps;
use crate::seq::core::{Log, LogError};
use crate::seq::wire::{Msg, CONTROL};

/// Entries kept undoable at most (beyond, a truncation rescans the log).
const UNDO_MAX: usize = 1 << 20;

#[derive(Debug, Default, Clone)]
pub struct LogState {
    /// 0: an empty log (no session yet).
    pub session: u64,
    /// (epoch, index of its first entry), ascending. A log whose entry 1
    /// is an epoch record counts entry 0 (the session record) in that
    /// epoch; a log of before epochs starts in epoch 0.
    epochs: Vec<(u32, u64)>,
    /// Every member's last `member_seq`: looked up and written for every
    /// message a primary sequences, so with foldhash (hashbrown's) rather
    /// than std's SipHash, which took 9% of the sequencing thread in
    /// `tachyon_seq_bench` (docs/BENCHMARKS.md).
    last: HashMap<u32, u64, hashbrown::DefaultHashBuilder>,
    /// Membership changes: (index, the membership from there on).
    configs: Vec<(u64, Membership)>,
    /// (index, member, its previous last) for the entries that may still
    /// be truncated.
    undo: VecDeque<(u64, u32, u64)>,
    /// The entries below this one are never truncated (known committed).
    floor: u64,
    undo_lost: bool,
    /// The first entry the log holds (those below were summed up in a
    /// checkpoint, [`super::checkpoint`], and removed).
    pub first: u64,
    pub next: u64,
    /// Where the members' snapshots are.
    pub snaps: Snaps,
}

impl LogState {
    /// Every field, the members' lasts in key order
    /// ([`crate::seq::core::fingerprint`]).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use crate::seq::core::fingerprint::hash_sorted;
        use std::hash::Hash;
        let LogState {
            session,
            epochs,
            last,
            configs,
            undo,
            floor,
            undo_lost,
            first,
            next,
            snaps,
        } = self;
        (session, epochs).hash(h);
        hash_sorted(last.iter(), h);
        (configs, undo, floor, undo_lost, first, next).hash(h);
        snaps.fingerprint(h);
    }

    /// Reads the whole log, up to its first entry that does not parse or
    /// breaks the order of terms; returns the state of the entries before
    /// it and, if there is one, its index (the caller cuts the log there).
    pub fn recover<L: Log>(log: &L) -> Result<(LogState, Option<u64>), LogError> {
        let cp = log
            .load_checkpoint()
            .and_then(|b| super::checkpoint::Checkpoint::decode(&b));
        let mut s = match cp {
            Some(c) => LogState::from_checkpoint(c),
            None => LogState::default(),
        };
        let end = log.next_index();
        let mut at = s.next;
        let mut bad = None;
        while at < end && bad.is_none() {
            let r = log.read_range(at, 4096, &mut |i, e| {
                if bad.is_some() {
                    return;
                }
                match Msg::from_entry(e) {
                    Ok(m) if s.follows(i, &m) => s.applied(i, &m),
                    _ => bad = Some(i),
                }
            });
            let n = match r {
                Ok(n) => n,
                // An entry that cannot be read is cut with what follows.
                Err(LogError::Damaged(i)) => {
                    bad = Some(i);
                    break;
                }
                Err(e) => return Err(e),
            };
            if n == 0 {
                break;
            }
            at += n as u64;
        }
        s.undo.clear();
        s.floor = s.next;
        Ok((s, bad))
    }

    /// The state summed up in a checkpoint: the log goes on from its
    /// `first` entry.
    pub fn from_checkpoint(c: super::checkpoint::Checkpoint) -> LogState {
        LogState {
            session: c.session,
            epochs: c.epochs,
            last: c.last.into_iter().collect(),
            configs: c.configs,
            undo: VecDeque::new(),
            floor: c.first,
            undo_lost: false,
            first: c.first,
            next: c.first,
            snaps: Snaps::default(),
        }
    }

    /// The entries below this are committed.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The epochs that began below `at`.
    pub fn epochs_below(&self, at: u64) -> Vec<(u32, u64)> {
        self.epochs.iter().copied().filter(|e| e.1 < at).collect()
    }

    /// The membership changes below `at`.
    pub fn configs_below(&self, at: u64) -> Vec<(u64, Membership)> {
        self.configs.iter().filter(|c| c.0 < at).cloned().collect()
    }

    /// Every member's last `member_seq` as of the commit position (the
    /// undo log takes back what is above it); `None` if the undo log
    /// overflowed.
    pub fn lasts_at_floor(&self) -> Option<HashMap<u32, u64>> {
        if self.undo_lost {
            return None;
        }
        let mut last: HashMap<u32, u64> = self.last.iter().map(|(&m, &s)| (m, s)).collect();
        for &(_, member, prev) in self.undo.iter().rev() {
            if prev == 0 {
                last.remove(&member);
            } else {
                last.insert(member, prev);
            }
        }
        Some(last)
    }

    /// Whether entry `i` may follow the log as it is: its term is not
    /// below the last one, and a higher term starts at its epoch record.
    fn follows(&self, i: u64, m: &Msg<'_>) -> bool {
        if i == 0 || (i == self.first && self.next == self.first) {
            return true;
        }
        let last = self.last_term();
        m.term == last || (m.term > last && m.epoch() == Some(m.term))
    }

    /// Entry `i` (the next one) was appended.
    pub fn applied(&mut self, i: u64, m: &Msg<'_>) {
        debug_assert_eq!(i, self.next);
        if i == 0 {
            if m.member_id == 0 && m.flags & CONTROL != 0 {
                self.session = m.member_seq;
            }
            // The session record belongs to the first primary's term.
            self.epochs = vec![(m.term, 0)];
        } else if self.epochs.last().is_none_or(|e| e.0 != m.term) {
            self.epochs.push((m.term, i));
        }
        if let Some(c) = m.config().and_then(Membership::decode) {
            self.configs.push((i, c));
        }
        self.snaps.applied(i, m);
        if m.member_id != 0 {
            let prev = self.last.insert(m.member_id, m.member_seq).unwrap_or(0);
            if !self.undo_lost {
                if self.undo.len() < UNDO_MAX {
                    self.undo.push_back((i, m.member_id, prev));
                } else {
                    self.undo_lost = true;
                }
            }
        }
        self.next = i + 1;
    }

    /// The entries below `commit` are committed: never truncated.
    pub fn committed(&mut self, commit: u64) {
        self.floor = self.floor.max(commit);
        while self.undo.front().is_some_and(|u| u.0 < self.floor) {
            self.undo.pop_front();
        }
        if self.undo.is_empty() {
            self.undo_lost = false;
        }
    }

    /// Removes the entries from `from` on, from the log and from this.
    pub fn truncate<L: Log>(&mut self, log: &mut L, from: u64) -> Result<(), LogError> {
        if from >= self.next {
            return Ok(());
        }
        if from < self.first {
            // Below the checkpoint: never (the entries there are
            // committed, and a truncation never reaches a commit).
            return Err(LogError::NotFound);
        }
        log.truncate(from)?;
        if self.undo_lost || from < self.floor {
            let (s, _) = LogState::recover(log)?;
            *self = s;
            return Ok(());
        }
        while let Some(&(i, member, prev)) = self.undo.back() {
            if i < from {
                break;
            }
            self.undo.pop_back();
            if prev == 0 {
                self.last.remove(&member);
            } else {
                self.last.insert(member, prev);
            }
        }
        while self.epochs.len() > 1 && self.epochs.last().is_some_and(|e| e.1 >= from) {
            self.epochs.pop();
        }
        while self.configs.last().is_some_and(|c| c.0 >= from) {
            self.configs.pop();
        }
        self.snaps.truncate(from);
        if from == 0 {
            self.epochs.clear();
            self.session = 0;
        }
        self.next = from;
        Ok(())
    }

    pub fn last_of(&self, member: u32) -> u64 {
        self.last.get(&member).copied().unwrap_or(0)
    }

    pub fn members(&self) -> usize {
        self.last.len()
    }

    /// The epoch of entry `i` (of the last entry for `i` at or past the
    /// end).
    pub fn term_at(&self, i: u64) -> u32 {
        match self.epochs.iter().rposition(|e| e.1 <= i) {
            Some(k) => self.epochs[k].0,
            None => 0,
        }
    }

    /// The epoch of the last entry (0 for an empty log).
    pub fn last_term(&self) -> u32 {
        if self.next == 0 {
            0
        } else {
            self.term_at(self.next - 1)
        }
    }

    /// The largest epoch of this log not above `epoch`, and where it ends
    /// (the start of the next epoch, or the log end); `(0, 0)` if none.
    pub fn epoch_end(&self, epoch: u32) -> (u32, u64) {
        match self.epochs.iter().rposition(|e| e.0 <= epoch) {
            Some(k) => {
                let end = self.epochs.get(k + 1).map_or(self.next, |e| e.1);
                (self.epochs[k].0, end)
            }
            None => (0, 0),
        }
    }

    /// Where this log stops matching a log whose largest epoch not above
    /// ours is `epoch`, ending there at `end` (Kafka's leader-epoch
    /// truncation, Raft's log matching through the epoch records): the end
    /// of this log's largest epoch not above `epoch`, at most `end`. After
    /// truncating there, the two logs hold the same entries if this log's
    /// last epoch is then `epoch` (or it is empty); if not, ask again with
    /// the new last epoch.
    pub fn matching_end(&self, epoch: u32, end: u64) -> u64 {
        let own = self
            .epochs
            .iter()
            .find(|e| e.0 > epoch)
            .map_or(self.next, |e| e.1);
        own.min(end)
    }

    /// The membership change at index `at`, if the log holds one there.
    pub fn config_at(&self, at: u64) -> Option<&Membership> {
        self.configs.iter().rev().find(|c| c.0 == at).map(|c| &c.1)
    }

    /// The latest membership change in the log, and its index.
    pub fn config(&self) -> Option<(u64, &Membership)> {
        self.configs.last().map(|(i, c)| (*i, c))
    }

    /// The index of the epoch record of `epoch` (its first entry).
    pub fn epoch_start(&self, epoch: u32) -> Option<u64> {
        self.epochs.iter().find(|e| e.0 == epoch).map(|e| e.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::core::MemLog;
    use crate::seq::wire;

    fn log_of(entries: &[(u32, u64, u8, u32)]) -> MemLog {
        let mut log = MemLog::new();
        for &(id, seq, flags, term) in entries {
            let mut e = Vec::new();
            wire::write_msg(&mut e, id, seq, flags, term, b"x");
            log.append(&e).unwrap();
        }
        log
    }

    const EP: u8 = wire::CONTROL | wire::EPOCH;

    #[test]
    fn epochs_members_and_truncation() {
        // session, epoch 1, m1:1, m2:1, epoch 3, m1:2, m1:3
        let mut log = log_of(&[
            (0, 77, CONTROL, 1),
            (0, 1, EP, 1),
            (1, 1, 0, 1),
            (2, 1, 0, 1),
            (0, 3, EP, 3),
            (1, 2, 0, 3),
            (1, 3, 0, 3),
        ]);
        let (mut s, bad) = LogState::recover(&log).unwrap();
        assert_eq!(bad, None);
        assert_eq!((s.session, s.next, s.last_term()), (77, 7, 3));
        assert_eq!(
            (s.term_at(0), s.term_at(3), s.term_at(4), s.term_at(9)),
            (1, 1, 3, 3)
        );
        assert_eq!(s.epoch_end(1), (1, 4));
        assert_eq!(s.epoch_end(2), (1, 4));
        assert_eq!(s.epoch_end(3), (3, 7));
        assert_eq!(s.epoch_end(0), (0, 0));
        assert_eq!(s.epoch_start(3), Some(4));
        assert_eq!(s.last_of(1), 3);
        // Recovered entries are committed: a truncation below rescans.
        s.truncate(&mut log, 6).unwrap();
        assert_eq!((s.next, s.last_of(1), log.len()), (6, 2, 6));
        // Undo through appends not yet committed.
        let mut e = Vec::new();
        for (i, seq) in [(6, 3), (7, 4)] {
            wire::write_msg(&mut e, 1, seq, 0, 3, b"y");
            log.append(&e).unwrap();
            s.applied(i, &Msg::from_entry(&e).unwrap());
            e.clear();
        }
        wire::epoch_record(&mut e, 5);
        log.append(&e).unwrap();
        s.applied(8, &Msg::from_entry(&e).unwrap());
        assert_eq!((s.last_term(), s.last_of(1)), (5, 4));
        s.truncate(&mut log, 7).unwrap();
        assert_eq!((s.last_term(), s.last_of(1), s.next), (3, 3, 7));
        s.truncate(&mut log, 4).unwrap();
        assert_eq!((s.last_term(), s.last_of(1), s.last_of(2)), (1, 1, 1));
        s.truncate(&mut log, 0).unwrap();
        assert_eq!((s.session, s.next, s.last_term()), (0, 0, 0));
    }

    #[test]
    fn a_log_whose_terms_go_back_is_cut_where_they_do() {
        // A crash brought back term-2 entries after term-4 ones.
        let log = log_of(&[
            (0, 77, CONTROL, 2),
            (0, 2, EP, 2),
            (1, 1, 0, 2),
            (0, 4, EP, 4),
            (1, 2, 0, 4),
            (1, 3, 0, 2),
            (1, 4, 0, 4),
        ]);
        let (s, bad) = LogState::recover(&log).unwrap();
        assert_eq!(
            (bad, s.next, s.last_term(), s.last_of(1)),
            (Some(5), 5, 4, 2)
        );
        // A higher term without its epoch record first.
        let log = log_of(&[(0, 77, CONTROL, 2), (0, 2, EP, 2), (1, 1, 0, 3)]);
        assert_eq!(LogState::recover(&log).unwrap().1, Some(2));
        // An entry that does not parse.
        let mut log = log_of(&[(0, 77, CONTROL, 2), (0, 2, EP, 2)]);
        log.append(b"garbage").unwrap();
        assert_eq!(LogState::recover(&log).unwrap().1, Some(2));
    }

    #[test]
    fn matching_ends() {
        // Ours: epochs 1@0, 2@5, 4@9, end 12.
        let s = LogState {
            epochs: vec![(1, 0), (2, 5), (4, 9)],
            next: 12,
            ..LogState::default()
        };
        // Theirs: epoch 2 ends at 7 (then their epoch 3).
        assert_eq!(s.matching_end(2, 7), 7);
        // Theirs: epoch 2 went on longer than ours.
        assert_eq!(s.matching_end(2, 20), 9);
        // An epoch we never had: up to our first later one.
        assert_eq!(s.matching_end(3, 11), 9);
        assert_eq!(s.matching_end(0, 0), 0);
        // Nothing of theirs at or below epoch 0: everything goes.
        assert_eq!(s.matching_end(0, 0), 0);
    }
}
