//! The receive side's hellos and welcomes.

use std::net::SocketAddr;

use super::*;
use crate::seq::core::Outbox;
use crate::seq::wire::{BusHeader, Cmd, CmdKind, WelcomeBody};

const MS: Nanos = MILLI;

fn primary() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000))
}

fn rx() -> Rx {
    rx_of(&[])
}

fn rx_of(alternates: &[SocketAddr]) -> Rx {
    let mut cfg = MemberConfig::new(primary(), 1);
    cfg.alternates = alternates.to_vec();
    cfg.hello_after = std::time::Duration::from_millis(20);
    cfg.keepalive = std::time::Duration::from_secs(100);
    let w = Welcome {
        session: 9,
        term: 1,
        next: 1,
        commit: 1,
        last: 0,
        epoch: 1,
        first: 0,
        snap: (0, 0, 0),
        max_datagram: 1472,
        from: primary(),
        taken: false,
        delivered: 0,
        config: None,
        read_only: false,
    };
    Rx::new(&cfg, &w, true, 0)
}

fn header() -> BusHeader {
    BusHeader {
        term: 1,
        session: 9,
        seq: 1,
        commit: 1,
        node: 0,
    }
}

/// The times of the hellos sent by ticking every millisecond until `until`.
fn hellos(rx: &mut Rx, from: Nanos, until: Nanos) -> Vec<Nanos> {
    let mut at = Vec::new();
    let mut t = from;
    while t < until {
        let mut out = Outbox::new();
        rx.tick(t, &mut out);
        for (_, d) in out.iter() {
            if Cmd::parse(d).is_ok_and(|c| c.kind == CmdKind::Hello) {
                at.push(t / MS);
            }
        }
        t += MS;
    }
    at
}

#[test]
fn unanswered_hellos_back_off_and_a_datagram_resets_them() {
    let mut rx = rx();
    // Silence: 20 ms, then 40, then 80 ms apart at most.
    assert_eq!(
        hellos(&mut rx, 0, 400 * MS),
        vec![20, 60, 140, 220, 300, 380]
    );
    // The primary is heard: back to every 20 ms of silence.
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::Heartbeat, &header(), 0);
    rx.on_datagram(400 * MS, &d, Some(primary()), &mut |_, _, _, _| {});
    assert_eq!(hellos(&mut rx, 400 * MS, 500 * MS), vec![420, 460]);
}

#[test]
fn a_welcome_of_the_term_followed_is_not_handed_over() {
    let mut rx = rx();
    let mut d = Vec::new();
    let body = WelcomeBody {
        last: 0,
        epoch_end: 1,
        epoch: 1,
        max_datagram: 1472,
        incarnation: 0,
        first: 0,
        snap_from: 0,
        snap_epoch: 0,
        snap_as_of: 0,
    };
    wire::welcome(&mut d, &header(), 0, &body);
    rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _, _| {});
    assert_eq!(rx.counters().welcomes.get(), 2);
    // Only a new term's welcome reconciles the publishing side (and
    // resends its commands).
    assert!(rx.take_welcome().is_none());
}

fn other() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7001))
}

/// A data datagram of `term` from `first` on: (member_id, member_seq,
/// flags, data) each.
fn data(term: u32, first: u64, commit: u64, msgs: &[(u32, u64, u8, &[u8])]) -> Vec<u8> {
    let h = BusHeader {
        term,
        session: 9,
        seq: first,
        commit,
        node: 0,
    };
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::Data, &h, 0);
    for (id, ms, flags, m) in msgs {
        wire::write_msg(&mut d, *id, *ms, *flags, term, m);
    }
    wire::set_count(&mut d, msgs.len() as u16);
    d
}

fn welcome_of(term: u32, next: u64, last: u64, epoch: u32, epoch_end: u64) -> Vec<u8> {
    let h = BusHeader {
        term,
        session: 9,
        seq: next,
        commit: next,
        node: 1,
    };
    let body = WelcomeBody {
        last,
        epoch_end,
        epoch,
        max_datagram: 1472,
        incarnation: 0,
        first: 0,
        snap_from: 0,
        snap_epoch: 0,
        snap_as_of: 0,
    };
    let mut d = Vec::new();
    wire::welcome(&mut d, &h, 0, &body);
    d
}

#[test]
fn after_a_fork_the_member_moves_back_and_delivers_the_new_order_from_there() {
    use crate::seq::wire::{CONTROL, EPOCH};
    let mut rx = rx_of(&[other()]);
    let mut got: Vec<(u64, u32, Vec<u8>)> = Vec::new();
    // Term 1: the epoch record, then messages 2..=5, its own (member 1)
    // among them, committed.
    let d = data(
        1,
        1,
        6,
        &[
            (0, 1, CONTROL | EPOCH, b""),
            (2, 1, 0, b"a"),
            (1, 1, 0, b"mine"),
            (2, 2, 0, b"b"),
            (1, 2, 0, b"mine too"),
        ],
    );
    rx.on_datagram(MS, &d, Some(primary()), &mut |s, id, _, m| {
        got.push((s, id, m.to_vec()))
    });
    assert_eq!(got.len(), 4);
    assert_eq!((rx.next_seq(), rx.own_seen()), (6, 2));
    // Term 3 from the other node, whose log ends epoch 1 at 3 (it has the
    // record and "a" only) and holds none of member 1's commands.
    let w = welcome_of(3, 5, 0, 1, 3);
    rx.on_datagram(2 * MS, &w, Some(other()), &mut |_, _, _, _| unreachable!());
    let ev = rx.take_events();
    assert!(
        ev.contains(&MemberEvent::Fork {
            next: 6,
            epoch: 1,
            term: 3,
            resume: 3
        }),
        "{ev:?}"
    );
    assert_eq!(rx.next_seq(), 3);
    assert_eq!(rx.counters().forks.get(), 1);
    // Its own commands delivered at 3 and 5 are lost: the publishing side
    // is told it delivered 2 that the new primary lacks (so its pending
    // commands skip to 3, and none of them is acknowledged early).
    assert_eq!(rx.own_seen(), 0);
    let w = rx
        .take_welcome()
        .expect("the welcome for the publishing side");
    assert_eq!((w.last, w.delivered), (0, 2));
    // The gap from 3 is asked for, and the new order delivered from 3.
    let mut out = Outbox::new();
    rx.end_batch(2 * MS, &mut out);
    let replay = out
        .iter()
        .filter_map(|(_, d)| Cmd::parse(d).ok())
        .find(|c| c.kind == CmdKind::Replay)
        .expect("a replay request");
    assert_eq!(replay.range().0, 3);
    let d = data(3, 3, 5, &[(0, 3, CONTROL | EPOCH, b""), (2, 3, 0, b"c")]);
    got.clear();
    rx.on_datagram(3 * MS, &d, Some(other()), &mut |s, id, _, m| {
        got.push((s, id, m.to_vec()))
    });
    assert_eq!(got, vec![(4, 2, b"c".to_vec())]);
    assert_eq!(rx.next_seq(), 5);
}

#[test]
fn a_message_delivered_in_part_is_not_acknowledged_to_the_publishing_side() {
    use crate::seq::wire::{CONT, MORE};
    let mut rx = rx();
    let d = data(1, 1, 3, &[(1, 1, MORE, b"he"), (1, 2, CONT | MORE, b"ll")]);
    rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _, _| unreachable!());
    assert_eq!((rx.next_seq(), rx.own_seen()), (3, 0));
    let d = data(1, 3, 4, &[(1, 3, CONT, b"o")]);
    let mut got = Vec::new();
    rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _, m| {
        got.push(m.to_vec())
    });
    assert_eq!(got, vec![b"hello".to_vec()]);
    assert_eq!(rx.own_seen(), 3);
}

/// Retention removed what a slow member still lacked, while it held later
/// entries beyond the gap: told TRIMMED, it goes on from the first entry,
/// and what it held from there is delivered (before, it waited for a
/// datagram at `first` that no gap request asked for, for ever).
#[test]
fn a_trimmed_member_delivers_what_it_held_from_the_first_entry() {
    let mut rx = rx();
    let mut got: Vec<u64> = Vec::new();
    let mut on = |seq: u64, _: u32, _: u8, _: &[u8]| got.push(seq);
    // Entry 1 delivered; 2..=9 lost; 10 and 11 held beyond the gap.
    rx.on_datagram(
        MS,
        &data(1, 1, 2, &[(2, 1, 0, b"a")]),
        Some(primary()),
        &mut on,
    );
    let held = data(1, 10, 2, &[(2, 10, 0, b"j"), (2, 11, 0, b"k")]);
    rx.on_datagram(2 * MS, &held, Some(primary()), &mut on);
    assert_eq!(rx.next_seq(), 2);
    // The primary's log starts at 10 now.
    let mut t = Vec::new();
    wire::trimmed(&mut t, &header(), 10, 1);
    rx.on_datagram(3 * MS, &t, Some(primary()), &mut on);
    // The event first (nothing delivered with it), then what follows.
    assert!(rx
        .take_events()
        .iter()
        .any(|e| matches!(e, MemberEvent::Trimmed { from: 2, first: 10 })));
    // Committed up to 12: 10 and 11 go out, without another datagram of them.
    let mut hb = Vec::new();
    let h = BusHeader {
        seq: 12,
        commit: 12,
        ..header()
    };
    wire::bus_header(&mut hb, BusKind::Heartbeat, &h, 0);
    rx.on_datagram(4 * MS, &hb, Some(primary()), &mut on);
    assert_eq!(got, vec![1, 10, 11]);
    assert_eq!(rx.next_seq(), 12);
}

/// A welcome that answers a hello sent before a TRIMMED (about an epoch
/// whose entries retention removed) is not a fork: the member delivered
/// nothing the log still holds (found by the simulator: a member paused
/// past its lease while its single node restarted in a new term reported
/// a fork where none can be).
#[test]
fn a_welcome_about_an_epoch_before_a_trim_is_no_fork() {
    let mut rx = rx();
    let mut on = |_: u64, _: u32, _: u8, _: &[u8]| {};
    rx.on_datagram(
        MS,
        &data(1, 1, 2, &[(2, 1, 0, b"a")]),
        Some(primary()),
        &mut on,
    );
    let mut t = Vec::new();
    wire::trimmed(&mut t, &header(), 10, 1);
    rx.on_datagram(2 * MS, &t, Some(primary()), &mut on);
    // A new term, and a welcome saying epoch 1 ends at 5 there (it
    // answers the hello this member sent from 2, before the trim).
    rx.on_datagram(
        3 * MS,
        &data(2, 12, 12, &[(2, 12, 0, b"x")]),
        Some(primary()),
        &mut on,
    );
    rx.on_datagram(
        4 * MS,
        &welcome_of(2, 13, 0, 1, 5),
        Some(primary()),
        &mut on,
    );
    assert!(!rx
        .take_events()
        .iter()
        .any(|e| matches!(e, MemberEvent::Fork { .. })));
    assert_eq!(rx.next_seq(), 10);
}

/// Its own commands sequenced in a range retention removed are never seen
/// by the member: after a TRIMMED it says hello, and the welcome's `last`
/// counts them as heard (found by the simulator: the member resent its
/// command 19 for ever, the primary dropping it as a duplicate).
#[test]
fn after_a_trim_the_welcome_says_which_own_commands_were_sequenced() {
    let mut rx = rx();
    let mut on = |_: u64, _: u32, _: u8, _: &[u8]| {};
    rx.on_datagram(
        MS,
        &data(1, 1, 2, &[(1, 1, 0, b"own")]),
        Some(primary()),
        &mut on,
    );
    assert_eq!(rx.own_heard(), 1);
    let mut t = Vec::new();
    wire::trimmed(&mut t, &header(), 10, 1);
    rx.on_datagram(2 * MS, &t, Some(primary()), &mut on);
    let mut out = Outbox::new();
    rx.end_batch(2 * MS, &mut out);
    assert!(out
        .iter()
        .any(|(_, d)| Cmd::parse(d).is_ok_and(|c| c.kind == CmdKind::Hello)));
    // The same term's welcome: its commands up to 5 are sequenced.
    rx.on_datagram(
        3 * MS,
        &welcome_of(1, 12, 5, 1, 12),
        Some(primary()),
        &mut on,
    );
    assert_eq!(rx.own_heard(), 5);
}

/// A welcome may answer a hello earlier than the last: a member that
/// delivered into a later epoch since (datagrams of the term before, that
/// waited in its socket) must not read the end of the earlier epoch as a
/// fork; an answer that names an earlier epoch than the one last asked
/// about counts only when asked twice.
#[test]
fn a_welcome_to_an_earlier_question_is_not_a_fork() {
    use crate::seq::wire::{CONTROL, EPOCH};
    let third = SocketAddr::from(([127, 0, 0, 1], 7002));
    // Epoch 1 (1..=5), then epoch 3 from another primary (6..=7).
    let start = |rx: &mut Rx| {
        let d = data(1, 1, 6, &[(0, 1, CONTROL | EPOCH, b""), (2, 1, 0, b"a")]);
        rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _, _| {});
        let d = data(
            1,
            3,
            6,
            &[(2, 2, 0, b"b"), (2, 3, 0, b"c"), (2, 4, 0, b"d")],
        );
        rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _, _| {});
        let w = welcome_of(3, 6, 0, 1, 6);
        rx.on_datagram(2 * MS, &w, Some(other()), &mut |_, _, _, _| {});
        let d = data(3, 6, 8, &[(0, 3, CONTROL | EPOCH, b""), (2, 5, 0, b"e")]);
        rx.on_datagram(3 * MS, &d, Some(other()), &mut |_, _, _, _| {});
        assert_eq!(rx.next_seq(), 8);
        rx.take_events();
        // It asks about epoch 3 (a hello to whoever is primary next).
        rx.hello(0, true, &mut Outbox::new());
    };
    let forks = |rx: &mut Rx| {
        rx.take_events()
            .iter()
            .filter(|e| matches!(e, MemberEvent::Fork { .. }))
            .count()
    };
    let hellos = |rx: &mut Rx| {
        let mut out = Outbox::new();
        rx.end_batch(5 * MS, &mut out);
        out.iter()
            .filter_map(|(_, d)| Cmd::parse(d).ok())
            .filter(|c| c.kind == CmdKind::Hello)
            .count()
    };
    // The new primary's welcome names epoch 1, ending at 6 (its answer to
    // a hello about epoch 1): asked again, no fork...
    let mut rx = rx_of(&[other(), third]);
    start(&mut rx);
    let stale = welcome_of(5, 8, 0, 1, 6);
    rx.on_datagram(
        4 * MS,
        &stale,
        Some(third),
        &mut |_, _, _, _| unreachable!(),
    );
    assert_eq!((forks(&mut rx), rx.next_seq()), (0, 8));
    assert_eq!(hellos(&mut rx), 1, "asked again");
    // ...and the answer about epoch 3 holds everything.
    let fresh = welcome_of(5, 8, 0, 3, 8);
    rx.on_datagram(
        6 * MS,
        &fresh,
        Some(third),
        &mut |_, _, _, _| unreachable!(),
    );
    assert_eq!((forks(&mut rx), rx.next_seq()), (0, 8));
    // The same answer twice is one: the new primary lacks epoch 3.
    let mut rx = rx_of(&[other(), third]);
    start(&mut rx);
    rx.on_datagram(
        4 * MS,
        &stale,
        Some(third),
        &mut |_, _, _, _| unreachable!(),
    );
    assert_eq!(hellos(&mut rx), 1);
    rx.on_datagram(
        6 * MS,
        &stale,
        Some(third),
        &mut |_, _, _, _| unreachable!(),
    );
    assert_eq!(forks(&mut rx), 1);
    assert_eq!(rx.next_seq(), 6);
}
