//! Where the members' state machine snapshots are in the log (the node
//! never reads what they hold). A snapshot is a run of messages of one
//! member, each flagged SNAP, the last also SNAP_END; each message's data
//! begins with the snapshot's position (u64 `as_of`: the state after
//! every message below it). The node keeps where the latest complete ones
//! are: retention keeps the log from the latest committed one's `as_of`
//! on, and a welcome names it, so that a member can start from it (the
//! snapshot, then the log from `as_of`).
//!
//! A message is delivered at its last fragment's index; one cut in
//! fragments may have begun below `as_of` and end at or above it (the
//! snapshot does not hold it). A member starting from the snapshot must
//! read its first fragment too: each snapshot also says where to read from
//! (`read_from`, the first fragment of the earliest such message), from
//! the spans of the fragmented messages the node saw.

use std::collections::{HashMap, VecDeque};

use crate::seq::wire::{Msg, CONT, MORE, SNAP, SNAP_END};

/// Complete snapshots remembered (the latest committed one is what
/// counts; a few more cover those not committed yet).
const KEPT: usize = 8;
/// Spans of fragmented messages remembered at most.
const SPANS: usize = 1 << 16;

/// A complete snapshot in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Snap {
    pub member: u32,
    /// The index of its first and of its last message.
    pub start: u64,
    pub end: u64,
    /// Its state is that after the messages delivered below `as_of`.
    pub as_of: u64,
    /// Where a member starting from it reads from (at most `as_of`).
    pub read_from: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Snaps {
    /// Snapshots being written: member -> (first index, as_of).
    open: HashMap<u32, (u64, u64)>,
    done: VecDeque<Snap>,
    /// Fragmented messages begun, not ended: member -> first fragment.
    frags: HashMap<u32, u64>,
    /// Fragmented messages: (first fragment, last fragment), by last.
    spans: VecDeque<(u64, u64)>,
}

impl Snaps {
    /// Every field, maps in key order ([`crate::seq::core::fingerprint`]).
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use crate::seq::core::fingerprint::hash_sorted;
        use std::hash::Hash;
        let Snaps {
            open,
            done,
            frags,
            spans,
        } = self;
        hash_sorted(open.iter(), h);
        done.hash(h);
        hash_sorted(frags.iter(), h);
        spans.hash(h);
    }

    /// Entry `i` was appended.
    pub fn applied(&mut self, i: u64, m: &Msg<'_>) {
        if m.member_id == 0 {
            return;
        }
        if m.flags & (MORE | CONT) == MORE {
            self.frags.insert(m.member_id, i);
        } else if m.flags & (MORE | CONT) == CONT {
            if let Some(f) = self.frags.remove(&m.member_id) {
                self.spans.push_back((f, i));
                if self.spans.len() > SPANS {
                    self.spans.pop_front();
                }
            }
        }
        if m.flags & SNAP == 0 {
            return;
        }
        if m.flags & CONT == 0 {
            let Some(as_of) = m
                .data
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            else {
                return;
            };
            match self.open.get(&m.member_id) {
                Some(&(_, a)) if a == as_of => {}
                // A new snapshot (or the first chunk of one).
                _ => {
                    self.open.insert(m.member_id, (i, as_of));
                }
            }
        }
        if m.flags & SNAP_END != 0 && m.flags & MORE == 0 {
            if let Some((start, as_of)) = self.open.remove(&m.member_id) {
                if as_of <= start {
                    let read_from = self.read_from(as_of);
                    self.done.push_back(Snap {
                        member: m.member_id,
                        start,
                        end: i,
                        as_of,
                        read_from,
                    });
                    if self.done.len() > KEPT {
                        self.done.pop_front();
                    }
                }
            }
        }
    }

    /// The first fragment of the earliest message begun below `as_of`
    /// and ended at or above it (or `as_of`).
    fn read_from(&self, as_of: u64) -> u64 {
        let ended = self.spans.iter().rev().take_while(|s| s.1 >= as_of);
        let open = self.frags.values().map(|f| (*f, u64::MAX));
        ended
            .copied()
            .chain(open)
            .filter(|s| s.0 < as_of)
            .map(|s| s.0)
            .min()
            .unwrap_or(as_of)
    }

    /// The entries from `from` on were removed.
    pub fn truncate(&mut self, from: u64) {
        self.open.retain(|_, s| s.0 < from);
        self.frags.retain(|_, f| *f < from);
        while self.spans.back().is_some_and(|s| s.1 >= from) {
            self.spans.pop_back();
        }
        while self.done.back().is_some_and(|s| s.end >= from) {
            self.done.pop_back();
        }
    }

    /// The latest snapshot whose every message is below `commit`.
    pub fn latest(&self, commit: u64) -> Option<Snap> {
        self.done.iter().rev().find(|s| s.end < commit).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::wire;

    fn entry(member: u32, seq: u64, flags: u8, as_of: u64) -> Vec<u8> {
        let mut e = Vec::new();
        let mut d = as_of.to_le_bytes().to_vec();
        d.extend_from_slice(b"state");
        wire::write_msg(&mut e, member, seq, flags, 1, &d);
        e
    }

    #[test]
    fn a_snapshot_counts_once_its_last_message_is_in_and_committed() {
        let mut s = Snaps::default();
        let es = [
            entry(7, 1, 0, 0),
            entry(7, 2, SNAP, 10),
            entry(8, 1, 0, 0),
            entry(7, 3, SNAP | MORE, 10),
            entry(7, 4, SNAP | SNAP_END | CONT, 10),
        ];
        for (i, e) in es.iter().enumerate() {
            s.applied(11 + i as u64, &Msg::from_entry(e).unwrap());
        }
        let want = Snap {
            member: 7,
            start: 12,
            end: 15,
            as_of: 10,
            read_from: 10,
        };
        assert_eq!(s.latest(15), None);
        assert_eq!(s.latest(16), Some(want));
        s.truncate(15);
        assert_eq!(s.latest(100), None);
        // A snapshot that claims a position after its own start: refused.
        s.applied(
            20,
            &Msg::from_entry(&entry(7, 9, SNAP | SNAP_END, 30)).unwrap(),
        );
        assert_eq!(s.latest(100), None);
    }

    #[test]
    fn a_member_reads_from_the_first_fragment_of_a_message_across_the_position() {
        let mut s = Snaps::default();
        let es = [
            (30, entry(5, 1, MORE, 0)),
            (31, entry(6, 1, 0, 0)),
            (32, entry(5, 2, CONT, 0)),
            (33, entry(8, 1, MORE, 0)),
            // Member 6 snapshots as of 32: 5's message (30..=32) ended at
            // or above it, 8's (from 33) is not below it.
            (34, entry(6, 2, SNAP | SNAP_END, 32)),
        ];
        for (i, e) in &es {
            s.applied(*i, &Msg::from_entry(e).unwrap());
        }
        assert_eq!(s.latest(35).map(|x| (x.as_of, x.read_from)), Some((32, 30)));
    }
}
