//! The quorum rules of a sequencer group in one place, pure (after
//! raft-rs's `quorum/majority.rs`): how many make a majority, the end a
//! majority's logs reach (the commit candidate), whether a primary still
//! hears a majority (check-quorum), and the two-node cases. Table tests
//! in `testdata/quorum.txt`.

use super::membership::MAX_NODES;
use crate::seq::core::Nanos;

/// Nodes that make a majority of `n`.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The end a majority of `matched` (every node's acknowledged log end,
/// the primary's own included) reaches: the largest `e` such that a
/// majority has matched at least `e`.
pub fn majority_end(matched: &[u64]) -> u64 {
    let n = matched.len().min(MAX_NODES);
    if n == 0 {
        return 0;
    }
    // On the stack: called for every bus datagram a primary sends.
    let mut m = [0u64; MAX_NODES];
    m[..n].copy_from_slice(&matched[..n]);
    let m = &mut m[..n];
    m.sort_unstable_by(|a, b| b.cmp(a));
    m[majority(n) - 1]
}

/// The end a group of two commits to: with the standby, or alone when
/// the standby is taken for down (`solo`).
pub fn two_node_end(own: u64, standby: u64, solo: bool) -> u64 {
    if solo {
        own
    } else {
        own.min(standby)
    }
}

/// The commit position after an acknowledgement: `candidate` (the end a
/// quorum holds) commits only if it covers an entry of the primary's own
/// term, the one at `term_start` (Raft §5.4.2), and only forward.
pub fn advance(commit: u64, candidate: u64, term_start: u64) -> u64 {
    if candidate > term_start && candidate > commit {
        candidate
    } else {
        commit
    }
}

/// Check-quorum (Raft thesis §6.2): whether a majority, `me` included,
/// was heard within `timeout` (`silent`: running time since each node was
/// last heard).
pub fn fresh(silent: &[Nanos], me: usize, timeout: Nanos) -> bool {
    let n = silent.len();
    let heard = (0..n).filter(|&i| i == me || silent[i] < timeout).count();
    heard >= majority(n)
}

/// Whether `votes` (a bit per node that granted, the candidate's own
/// included) plus `extra` (the witness's, or a silent peer's, in a group
/// of two) make a majority of `n`.
pub fn won(votes: u64, extra: usize, n: usize) -> bool {
    votes.count_ones() as usize + extra >= majority(n)
}

/// The candidate of `term` in a group of `n`: node `term mod n`. One
/// candidate per term means two primaries of one term cannot be, even if
/// a node forgets its vote (a replaced disk): a second vote in a term can
/// only go to the same candidate.
pub fn candidate_of(term: u32, n: usize) -> u8 {
    if n <= 1 {
        0
    } else {
        (term % n as u32) as u8
    }
}

/// The first term after `term` whose candidate is `id`; `None` if there
/// is none (terms are u32, and a term taken from a datagram can be any:
/// a node at the top never campaigns rather than wrap to an earlier term).
pub fn next_term_of(term: u32, id: u8, n: usize) -> Option<u32> {
    if n <= 1 {
        return term.checked_add(1);
    }
    let n = n as u64;
    let t = term as u64 + 1;
    u32::try_from(t + (id as u64 + n - t % n) % n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `testdata/quorum.txt`: one case per line, `fn args => want`.
    #[test]
    fn the_table() {
        let table = include_str!("testdata/quorum.txt");
        let mut cases = 0;
        for (no, line) in table.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (call, want) = line.split_once("=>").expect("a case: fn args => want");
            let mut words = call.split_whitespace();
            let f = words.next().expect("a function");
            let args: Vec<&str> = words.collect();
            let nums = |s: &str| -> Vec<u64> {
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().expect("a number"))
                    .collect()
            };
            let num = |i: usize| -> u64 { args[i].parse().expect("a number") };
            let got = match f {
                "majority" => majority(num(0) as usize).to_string(),
                "majority_end" => majority_end(&nums(args[0])).to_string(),
                "two_node_end" => two_node_end(num(0), num(1), args[2] == "solo").to_string(),
                "advance" => advance(num(0), num(1), num(2)).to_string(),
                "fresh" => fresh(&nums(args[0]), num(1) as usize, num(2)).to_string(),
                "won" => {
                    let bits = nums(args[0]).iter().fold(0u64, |b, i| b | 1 << i);
                    won(bits, num(1) as usize, num(2) as usize).to_string()
                }
                "candidate_of" => candidate_of(num(0) as u32, num(1) as usize).to_string(),
                "next_term_of" => next_term_of(num(0) as u32, num(1) as u8, num(2) as usize)
                    .map_or("none".to_string(), |t| t.to_string()),
                other => panic!("line {}: unknown function {other}", no + 1),
            };
            assert_eq!(got, want.trim(), "line {}: {line}", no + 1);
            cases += 1;
        }
        assert!(cases > 30, "{cases} cases");
    }

    #[test]
    fn the_next_term_of_a_node_is_its_own_and_later() {
        for n in 1..=7usize {
            for id in 0..n as u8 {
                for t in 0..50u32 {
                    let next = next_term_of(t, id, n).expect("a term left");
                    assert!(next > t);
                    assert_eq!(candidate_of(next, n), id);
                    assert!(next <= t + n as u32);
                }
            }
        }
    }
}
