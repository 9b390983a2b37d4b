//! Where what a member delivered and a new primary's log part, so that
//! after a fork the member goes on in the new primary's order from
//! exactly there (Raft's log matching through epochs; Kafka's leader-epoch
//! truncation, KIP-101/KIP-279).
//!
//! Every entry of epoch `e` in any log was written by the primary of term
//! `e`, which appended them at its log end: two logs that both hold entries
//! of `e` hold them from the same position, and agree on everything before
//! it. So the member remembers where each epoch it delivered began
//! ([`Epochs`]), says its last epoch in its hello, and the welcome answers
//! the primary's largest epoch not above it and where that ends: the two
//! agree below the smaller of the two ends of that epoch. When the member
//! does not have the primary's epoch, it cannot tell yet: it moves back to
//! what is certainly no further than the agreement and asks again about
//! its own earlier epoch (each round asks about a lower epoch, so this
//! ends).

use std::collections::VecDeque;

/// Epoch changes a member remembers; a fork reaching behind the oldest one
/// kept resumes at the oldest one kept.
const KEPT: usize = 64;

/// Where each epoch this member delivered began, oldest first (never
/// empty: the first is the epoch the member started in, from where it
/// started).
#[derive(Debug, Clone, Hash)]
pub struct Epochs {
    starts: VecDeque<(u32, u64)>,
}

/// What a welcome says about the member's delivered history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// The primary's log holds everything the member delivered.
    Whole,
    /// The two agree below `at` and not at `at`: a fork; the member goes on
    /// from `at` in the primary's order.
    At(u64),
    /// The two agree at most below `at`: the member moves back there and
    /// asks again (its last epoch is then an earlier one).
    Ask(u64),
}

impl Epochs {
    /// A member that starts at `start`, in `epoch`.
    pub fn new(epoch: u32, start: u64) -> Epochs {
        Epochs {
            starts: VecDeque::from([(epoch, start)]),
        }
    }

    /// The epoch of the last entry delivered (or the starting one).
    pub fn last(&self) -> u32 {
        self.starts.back().map_or(0, |s| s.0)
    }

    /// Where the member started (or the oldest epoch kept began).
    pub fn floor(&self) -> u64 {
        self.starts.front().map_or(0, |s| s.1)
    }

    /// The epoch record of `epoch` was delivered at `seq`.
    pub fn record(&mut self, epoch: u32, seq: u64) {
        if epoch == self.last() {
            return;
        }
        self.starts.push_back((epoch, seq));
        if self.starts.len() > KEPT {
            self.starts.pop_front();
        }
    }

    /// The primary's largest epoch not above the member's last is `epoch`,
    /// ending at `end`; the member delivered below `next`.
    pub fn matching(&self, epoch: u32, end: u64, next: u64) -> Matching {
        // The member's largest epoch not above the primary's.
        let Some(k) = self.starts.iter().rposition(|s| s.0 <= epoch) else {
            // Every epoch the member delivered is above what the primary
            // has, the one it started in too (the epoch of the entry just
            // before its start): the two logs differ from there on, so
            // they agree at most where the member started, or where the
            // primary's epoch ends if that is before (it goes back there,
            // the new order's messages from there on are its own). Where
            // the primary's epoch ends after the member's start is no
            // agreement: a member that joined at 3293 in epoch 128 and met
            // a primary whose epoch 65 ends at 4997 resumed at 4997 and
            // kept what it had delivered from 3293 (`tachyon_sim --nodes 2
            // --two-nodes available --seed 410`: diverged).
            return Matching::At(end.min(self.floor()).min(next));
        };
        let own_end = self.starts.get(k + 1).map_or(next, |s| s.1);
        let at = own_end.min(end);
        if self.starts[k].0 != epoch {
            Matching::Ask(at)
        } else if k + 1 == self.starts.len() && end >= next {
            Matching::Whole
        } else {
            Matching::At(at)
        }
    }

    /// Forgets the epochs that began at or after `at` (the member moved
    /// back there; if before where it started, it starts there now, in
    /// `epoch` at most).
    pub fn truncate(&mut self, at: u64, epoch: u32) {
        while self.starts.len() > 1 && self.starts.back().is_some_and(|s| s.1 >= at) {
            self.starts.pop_back();
        }
        if let Some(first) = self.starts.front_mut() {
            if first.1 > at {
                *first = (first.0.min(epoch), at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that started at 1 in epoch 1, saw epoch 3 begin at 400 and
    /// delivered below 2093.
    fn member() -> Epochs {
        let mut e = Epochs::new(1, 1);
        e.record(1, 1);
        e.record(3, 400);
        e
    }

    #[test]
    fn the_same_epoch_ending_at_or_after_next_is_no_fork() {
        let e = member();
        assert_eq!(e.last(), 3);
        assert_eq!(e.matching(3, 2093, 2093), Matching::Whole);
        assert_eq!(e.matching(3, 5000, 2093), Matching::Whole);
    }

    #[test]
    fn the_same_epoch_ending_before_next_forks_where_it_ends() {
        assert_eq!(member().matching(3, 747, 2093), Matching::At(747));
    }

    #[test]
    fn an_earlier_epoch_the_member_has_forks_at_the_first_end() {
        // The primary's largest epoch not above 3 is 1, ending at 500: the
        // member's epoch 1 ended at 400.
        assert_eq!(member().matching(1, 500, 2093), Matching::At(400));
        // ... ending at 300: the primary's epoch 1 is shorter.
        assert_eq!(member().matching(1, 300, 2093), Matching::At(300));
    }

    #[test]
    fn an_epoch_the_member_lacks_asks_again_about_an_earlier_one() {
        // The primary has epoch 2 (ending at 500) where the member has 1
        // and then 3: they agree at most below 400, and the next question
        // is about epoch 1.
        let mut e = member();
        assert_eq!(e.matching(2, 500, 2093), Matching::Ask(400));
        e.truncate(400, 2);
        assert_eq!(e.last(), 1);
        // The primary's epoch 1 ends at 300 (epoch 2 began there).
        assert_eq!(e.matching(1, 300, 400), Matching::At(300));
    }

    #[test]
    fn nothing_in_common_resumes_where_the_primarys_epoch_ends() {
        let mut e = Epochs::new(4, 100);
        e.record(5, 150);
        // Even before where the member started: the new order from there
        // on is what it must deliver.
        assert_eq!(e.matching(2, 90, 300), Matching::At(90));
        // The primary's epoch 2 ending after the member's start: the entry
        // before the start is of epoch 4 here and of 2 there, so nothing
        // the member delivered is in the primary's log.
        assert_eq!(e.matching(2, 120, 300), Matching::At(100));
        assert_eq!(
            Epochs::new(128, 3293).matching(65, 4997, 6485),
            Matching::At(3293)
        );
        e.truncate(90, 2);
        assert_eq!((e.floor(), e.last()), (90, 2));
    }

    #[test]
    fn truncating_keeps_the_start_and_forgets_later_epochs() {
        let mut e = member();
        e.truncate(1, 1);
        assert_eq!((e.last(), e.floor()), (1, 1));
        let mut e = member();
        e.truncate(401, 3);
        assert_eq!(e.last(), 3);
    }

    #[test]
    fn only_the_last_epochs_are_kept() {
        let mut e = Epochs::new(1, 1);
        for i in 2..200u32 {
            e.record(i, i as u64 * 10);
        }
        assert_eq!(e.starts.len(), KEPT);
        assert_eq!(e.last(), 199);
        assert_eq!(e.floor(), (200 - KEPT as u64) * 10);
    }
}
