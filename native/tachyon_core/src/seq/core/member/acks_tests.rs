//! The member's three-hop rule (`acks.rs`): entries are delivered on a
//! majority's acknowledgements of the current term, and on nothing less.

use std::net::SocketAddr;

use super::*;
use crate::seq::wire::{BusHeader, Peer, PeerHeader, PeerKind, CONTROL, EPOCH, HOLDS, LEARNER};

const MS: Nanos = MILLI;

fn node(i: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000 + i))
}

/// A member of the group of three at 7000 (its primary, of term 2),
/// 7001 and 7002, welcomed at 1 (nothing committed beyond).
fn rx() -> Rx {
    let mut cfg = MemberConfig::new(node(0), 1);
    cfg.alternates = vec![node(1), node(2)];
    let w = Welcome {
        session: 9,
        term: 2,
        next: 1,
        commit: 1,
        last: 0,
        epoch: 1,
        first: 0,
        snap: (0, 0, 0),
        max_datagram: 1472,
        from: node(0),
        taken: false,
        delivered: 0,
        config: Some(Membership::initial(&[node(0), node(1), node(2)])),
        read_only: false,
    };
    Rx::new(&cfg, &w, true, 0)
}

/// The primary's data datagram from `first` on, commit position 1:
/// (term, flags, data) each; `holds`: flagged HOLDS (`:replicated`).
fn data(first: u64, holds: bool, msgs: &[(u32, u8, &[u8])]) -> Vec<u8> {
    let h = BusHeader {
        term: 2,
        session: 9,
        seq: first,
        commit: 1,
        node: 0,
    };
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::Data, &h, if holds { HOLDS } else { 0 });
    for (i, (term, flags, m)) in msgs.iter().enumerate() {
        wire::write_msg(&mut d, 2, first + i as u64, *flags, *term, m);
    }
    wire::set_count(&mut d, msgs.len() as u16);
    d
}

/// The epoch record of term 2 at 1, then "a" and "b" at 2 and 3.
fn term_2(holds: bool) -> Vec<u8> {
    data(
        1,
        holds,
        &[(2, CONTROL | EPOCH, b""), (2, 0, b"a"), (2, 0, b"b")],
    )
}

/// Node `n`'s acknowledgement of term `term` up to `end`.
fn ack(n: u8, term: u32, end: u64, flags: u8, incarnation: u32) -> Vec<u8> {
    let p = Peer {
        h: PeerHeader {
            kind: PeerKind::Ack,
            term,
            session: 9,
            node: n,
            flags,
            log_id: 77,
            incarnation,
        },
        a: 0,
        b: end,
        c: 0,
    };
    let mut d = Vec::new();
    p.write(&mut d);
    d
}

/// Feeds `d` from `from`; the data delivered.
fn feed(rx: &mut Rx, d: &[u8], from: SocketAddr) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    rx.on_datagram(MS, d, Some(from), &mut |_, _, _, m| got.push(m.to_vec()));
    got
}

#[test]
fn a_majority_of_current_term_acknowledgements_delivers() {
    let mut rx = rx();
    assert!(feed(&mut rx, &term_2(true), node(0)).is_empty());
    // The primary holds 1..=3 (HOLDS); node 1's acknowledgement of 1..=2
    // makes a majority for "a" ...
    assert_eq!(
        feed(&mut rx, &ack(1, 2, 3, 0, 5), node(1)),
        vec![b"a".to_vec()]
    );
    // ... and of 1..=3 for "b", before any commit position says so.
    assert_eq!(
        feed(&mut rx, &ack(1, 2, 4, 0, 5), node(1)),
        vec![b"b".to_vec()]
    );
    assert_eq!(rx.commit(), 1);
    assert_eq!(rx.counters().acks.get(), 2);
}

#[test]
fn acknowledgements_of_an_older_term_do_not_deliver() {
    let mut rx = rx();
    feed(&mut rx, &term_2(true), node(0));
    assert!(feed(&mut rx, &ack(1, 1, 4, 0, 5), node(1)).is_empty());
    assert!(feed(&mut rx, &ack(2, 1, 4, 0, 5), node(2)).is_empty());
    // The primary's commit position still does.
    let mut d = term_2(true);
    wire::set_commit(&mut d, 4);
    assert_eq!(feed(&mut rx, &d, node(0)).len(), 2);
}

#[test]
fn a_learner_or_a_stranger_does_not_count() {
    let mut rx = rx();
    feed(&mut rx, &term_2(true), node(0));
    // A learner (it cannot vouch for its log).
    assert!(feed(&mut rx, &ack(1, 2, 4, LEARNER, 5), node(1)).is_empty());
    // Node 2's id from node 1's address.
    assert!(feed(&mut rx, &ack(2, 2, 4, 0, 5), node(1)).is_empty());
    assert_eq!(rx.counters().acks.get(), 0);
    assert_eq!(feed(&mut rx, &ack(2, 2, 4, 0, 5), node(2)).len(), 2);
}

#[test]
fn a_learners_acknowledgement_forgets_what_that_node_said_before() {
    // Node 1 restarted a learner (its disk replaced, or its host lost
    // power: incarnation 6), or a damaged entry cut its log (the same
    // incarnation, 5): it may lack what it said. Its earlier word must
    // not count for "b" with a later acknowledgement of the primary.
    for incarnation in [6, 5] {
        let mut rx = rx_with_term_2_acked();
        assert!(feed(&mut rx, &ack(1, 2, 2, LEARNER, incarnation), node(1)).is_empty());
        assert!(feed(&mut rx, &ack(0, 2, 4, 0, 3), node(0)).is_empty());
        // Its word once it caught up counts again.
        let caught_up = ack(1, 2, 4, 0, incarnation);
        assert_eq!(feed(&mut rx, &caught_up, node(1)), vec![b"b".to_vec()]);
    }
}

/// A member of `:fsync` (the primary counts by its own acknowledgements)
/// whose node 1 acknowledged 1..=3 and the primary 1..=2: "a" delivered,
/// "b" waits for the primary.
fn rx_with_term_2_acked() -> Rx {
    let mut rx = rx();
    feed(&mut rx, &term_2(false), node(0));
    assert!(feed(&mut rx, &ack(1, 2, 4, 0, 5), node(1)).is_empty());
    assert_eq!(
        feed(&mut rx, &ack(0, 2, 3, 0, 3), node(0)),
        vec![b"a".to_vec()]
    );
    rx
}

#[test]
fn nothing_commits_before_an_entry_of_the_current_term() {
    let mut rx = rx();
    // Entries of term 1 (the primary's log before its term), held.
    let old = data(1, true, &[(1, 0, b"x"), (1, 0, b"y")]);
    assert!(feed(&mut rx, &old, node(0)).is_empty());
    // A majority holds them, but no entry of term 2 yet: Raft §5.4.2.
    assert!(feed(&mut rx, &ack(1, 2, 3, 0, 5), node(1)).is_empty());
    assert!(feed(&mut rx, &ack(2, 2, 3, 0, 5), node(2)).is_empty());
    // Term 2's epoch record at 3, held by a majority: everything before
    // it commits with it.
    let rec = data(3, true, &[(2, CONTROL | EPOCH, b"")]);
    assert!(feed(&mut rx, &rec, node(0)).is_empty());
    assert_eq!(
        feed(&mut rx, &ack(1, 2, 4, 0, 5), node(1)),
        vec![b"x".to_vec(), b"y".to_vec()]
    );
}

#[test]
fn a_restarted_node_counts_for_what_it_holds_now() {
    let mut rx = rx();
    // `:fsync`: the primary's datagrams are not flagged HOLDS, it counts
    // by its own acknowledgements only.
    feed(&mut rx, &term_2(false), node(0));
    // One follower alone is no majority.
    assert!(feed(&mut rx, &ack(1, 2, 4, 0, 5), node(1)).is_empty());
    // Node 1 restarts (another incarnation) and holds 1..=1 now: its
    // earlier word is gone; node 2's 1..=3 and node 1's 1 make a
    // majority for the epoch record only (nothing to deliver).
    assert!(feed(&mut rx, &ack(1, 2, 2, 0, 6), node(1)).is_empty());
    assert!(feed(&mut rx, &ack(2, 2, 4, 0, 9), node(2)).is_empty());
    // The current incarnation catches up to 1..=2: "a".
    assert_eq!(
        feed(&mut rx, &ack(1, 2, 3, 0, 6), node(1)),
        vec![b"a".to_vec()]
    );
    // The primary's own acknowledgement (of what it synced) counts.
    assert_eq!(
        feed(&mut rx, &ack(0, 2, 4, 0, 1), node(0)),
        vec![b"b".to_vec()]
    );
}

#[test]
fn a_group_of_two_counts_no_acknowledgements() {
    let mut cfg = MemberConfig::new(node(0), 1);
    cfg.alternates = vec![node(1)];
    let w = Welcome {
        session: 9,
        term: 2,
        next: 1,
        commit: 1,
        last: 0,
        epoch: 1,
        first: 0,
        snap: (0, 0, 0),
        max_datagram: 1472,
        from: node(0),
        taken: false,
        delivered: 0,
        config: Some(Membership::initial(&[node(0), node(1)])),
        read_only: false,
    };
    let mut rx = Rx::new(&cfg, &w, true, 0);
    feed(&mut rx, &term_2(true), node(0));
    assert!(feed(&mut rx, &ack(1, 2, 4, 0, 5), node(1)).is_empty());
}
