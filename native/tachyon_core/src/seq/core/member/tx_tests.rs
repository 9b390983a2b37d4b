//! The publishing side's congestion control: the timer from measured
//! round trips (Karn's rule, backoff), the window (growth, halving) and
//! coalescing behind it.

use std::net::SocketAddr;

use super::*;
use crate::seq::core::member::cc::{INITIAL_CWND, MIN_CWND};
use crate::seq::core::{Outbox, MICRO, MILLI};
use crate::seq::wire::Cmd;

const MS: Nanos = MILLI;

fn primary() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000))
}

fn welcome(last: u64) -> Welcome {
    Welcome {
        session: 9,
        term: 1,
        next: 1,
        commit: 1,
        last,
        epoch: 1,
        first: 0,
        snap: (0, 0, 0),
        max_datagram: 1472,
        from: primary(),
        taken: false,
        delivered: 0,
        config: None,
        read_only: false,
    }
}

fn new_tx() -> Tx {
    let mut cfg = MemberConfig::new(primary(), 1);
    cfg.resend_after = std::time::Duration::from_millis(10);
    Tx::new(&cfg, 1400, &welcome(0))
}

/// The (first, last) `member_seq` of each publish command sent.
fn sent(out: &Outbox) -> Vec<(u64, u64)> {
    out.iter()
        .filter_map(|(_, d)| {
            let c = Cmd::parse(d).ok()?;
            let seqs: Vec<u64> = c.published().map(|p| p.member_seq).collect();
            Some((*seqs.first()?, *seqs.last()?))
        })
        .collect()
}

/// Publishes `n` small messages one by one at `now`.
fn publish(tx: &mut Tx, now: Nanos, n: usize, out: &mut Outbox) {
    for _ in 0..n {
        tx.publish_many(now, [b"hello".as_slice()], out)
            .expect("publish");
    }
}

#[test]
fn an_idle_window_sends_every_publish_at_once() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 5, &mut out);
    assert_eq!(sent(&out), vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]);
    assert_eq!((tx.in_flight(), tx.waiting()), (5, 0));
    assert_eq!(tx.counters().commands.get(), 5);
}

#[test]
fn publishes_beyond_the_window_coalesce_and_go_when_it_opens() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, INITIAL_CWND, &mut out);
    assert_eq!(out.len(), INITIAL_CWND);
    out.clear();
    // The window is full: 50 more publishes become one datagram waiting.
    publish(&mut tx, 0, 50, &mut out);
    assert!(out.is_empty());
    assert_eq!((tx.in_flight(), tx.waiting()), (INITIAL_CWND, 1));
    assert_eq!(tx.counters().coalesced.get(), 49);
    assert_eq!(tx.pending(), INITIAL_CWND + 1);
    // Heard: room in the window, the datagram goes, all 50 in it.
    tx.heard(MS, 1, &mut out);
    let n = INITIAL_CWND as u64;
    assert_eq!(sent(&out), vec![(n + 1, n + 50)]);
    assert_eq!(tx.waiting(), 0);
}

#[test]
fn coalescing_stops_at_max_datagram() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, INITIAL_CWND, &mut out);
    out.clear();
    // 1,000 small messages: more than one datagram's worth.
    publish(&mut tx, 0, 1000, &mut out);
    assert!(out.is_empty());
    let waiting = tx.waiting();
    assert!(waiting > 1, "{waiting} datagrams");
    tx.heard(MS, INITIAL_CWND as u64, &mut out);
    let mut expect = INITIAL_CWND as u64 + 1;
    for (d, (a, z)) in out.iter().zip(sent(&out)) {
        assert!(d.1.len() <= 1472);
        assert_eq!(a, expect);
        expect = z + 1;
    }
    assert_eq!(expect, INITIAL_CWND as u64 + 1001);
    assert_eq!(out.len(), waiting);
}

#[test]
fn the_timer_follows_the_round_trip() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    assert_eq!(tx.rto(), 10 * MS, "the floor before a sample");
    for i in 0..20u64 {
        let t = i * 100 * MS;
        publish(&mut tx, t, 1, &mut out);
        tx.heard(t + 30 * MS, i + 1, &mut out);
    }
    // 30 ms every time: SRTT 30 ms, RTTVAR shrinking towards 0.
    assert!(
        tx.rto() > 30 * MS && tx.rto() < 40 * MS,
        "{} us",
        tx.rto() / MICRO
    );
    assert_eq!(tx.counters().rto.get(), tx.rto());
}

#[test]
fn karns_rule_no_sample_from_a_resent_command() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 1, &mut out);
    // Overdue at 10 ms: resent.
    assert_eq!(tx.tick(10 * MS, &mut out), Some(30 * MS));
    assert_eq!(tx.counters().resent.get(), 1);
    // Heard much later: which send it answers is unknown, no sample.
    tx.heard(500 * MS, 1, &mut out);
    assert_eq!(tx.rto(), 10 * MS);
    // Nor from an advance that a resend may have caused.
    publish(&mut tx, 600 * MS, 2, &mut out);
    tx.on_nack(601 * MS, 2, &mut out);
    assert_eq!(tx.counters().nacked.get(), 1);
    tx.heard(700 * MS, 3, &mut out);
    assert_eq!(tx.rto(), 10 * MS);
    // A command sent once: a sample.
    publish(&mut tx, 800 * MS, 1, &mut out);
    tx.heard(820 * MS, 4, &mut out);
    assert_eq!(tx.rto(), 60 * MS);
}

#[test]
fn timeouts_probe_with_the_oldest_only() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 3, &mut out);
    out.clear();
    let mut t = 0;
    for _ in 0..8 {
        t = tx.tick(t, &mut out).expect("in flight");
        tx.tick(t, &mut out);
        assert_eq!(sent(&out), vec![(1, 1)]);
        out.clear();
    }
    assert_eq!(tx.counters().resent.get(), 8);
}

#[test]
fn backoff_is_capped_at_8_times() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 1, &mut out);
    let mut t = 0;
    let mut gaps = Vec::new();
    for _ in 0..10 {
        let due = tx.tick(t, &mut out).expect("in flight");
        gaps.push((due - t) / MS);
        t = due;
    }
    assert_eq!(gaps, vec![10, 20, 40, 80, 80, 80, 80, 80, 80, 80]);
}

#[test]
fn a_fresh_sample_resets_the_backoff() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 1, &mut out);
    tx.tick(10 * MS, &mut out);
    tx.tick(30 * MS, &mut out);
    tx.heard(35 * MS, 1, &mut out);
    // Backed off: a new command waits 4 x.
    publish(&mut tx, 40 * MS, 1, &mut out);
    assert_eq!(tx.tick(40 * MS, &mut out), Some(80 * MS));
    tx.heard(41 * MS, 2, &mut out);
    // Sampled (1 ms): back to the floor. (The tail-loss probe comes
    // first, at 2 SRTT; the timer then runs from the probe's send.)
    publish(&mut tx, 50 * MS, 1, &mut out);
    assert_eq!(tx.tick(50 * MS, &mut out), Some(52 * MS));
    assert_eq!(tx.tick(52 * MS, &mut out), Some(62 * MS));
}

#[test]
fn the_window_halves_on_a_timeout_once_per_round_trip() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, INITIAL_CWND, &mut out);
    tx.tick(10 * MS, &mut out);
    assert_eq!(tx.cwnd(), INITIAL_CWND / 2);
    // The next expiries of the same window: no further cut.
    tx.tick(30 * MS, &mut out);
    tx.tick(70 * MS, &mut out);
    assert_eq!(tx.cwnd(), INITIAL_CWND / 2);
    assert_eq!(tx.counters().cwnd.get(), (INITIAL_CWND / 2) as u64);
    // Nacks are fast retransmits: no cut.
    tx.on_nack(71 * MS, 5, &mut out);
    assert_eq!(tx.cwnd(), INITIAL_CWND / 2);
    // All heard: the recovery ends; the next timeout cuts again.
    tx.heard(80 * MS, INITIAL_CWND as u64, &mut out);
    publish(&mut tx, 80 * MS, 1, &mut out);
    tx.tick(200 * MS, &mut out);
    assert_eq!(tx.cwnd(), INITIAL_CWND / 4);
    for i in 0..10u64 {
        let t = (1_000 + 1_000 * i) * MS;
        tx.heard(t, INITIAL_CWND as u64 + 1 + i, &mut out);
        publish(&mut tx, t, 1, &mut out);
        tx.tick(t + 700 * MS, &mut out);
    }
    assert_eq!(tx.cwnd(), MIN_CWND);
}

#[test]
fn the_window_grows_by_one_per_window_of_acks_while_it_limits() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    let mut heard = 0;
    let mut t = 0;
    // Always more to send than the window: every acknowledgement counts.
    publish(&mut tx, t, INITIAL_CWND + 1, &mut out);
    for _ in 0..INITIAL_CWND {
        t += MS;
        heard += 1;
        tx.heard(t, heard, &mut out);
        publish(&mut tx, t, 1, &mut out);
    }
    assert_eq!(tx.cwnd(), INITIAL_CWND + 1);
    // Not limited (everything sent): no growth.
    let mut idle = new_tx();
    publish(&mut idle, 0, 1, &mut out);
    for i in 1..200u64 {
        idle.heard(i * MS, i, &mut out);
        publish(&mut idle, i * MS, 1, &mut out);
    }
    assert_eq!(idle.cwnd(), INITIAL_CWND);
}

#[test]
fn a_nack_resends_once_per_round_trip() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    // A round trip of 5 ms.
    publish(&mut tx, 0, 1, &mut out);
    tx.heard(5 * MS, 1, &mut out);
    publish(&mut tx, 10 * MS, 3, &mut out);
    out.clear();
    tx.on_nack(10 * MS + 100 * MICRO, 2, &mut out);
    assert!(out.is_empty(), "within NACK_GUARD of its send");
    tx.on_nack(11 * MS, 2, &mut out);
    assert!(out.is_empty(), "within a round trip of its send");
    tx.on_nack(15 * MS, 2, &mut out);
    assert_eq!(sent(&out), vec![(2, 2)]);
    tx.on_nack(16 * MS, 2, &mut out);
    assert_eq!(out.len(), 1, "the resend is still on its way");
    tx.on_nack(21 * MS, 2, &mut out);
    assert_eq!(out.len(), 2);
}

#[test]
fn a_new_primary_gets_the_window_not_a_burst() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 40, &mut out);
    assert_eq!(tx.waiting(), 1);
    tx.tick(10 * MS, &mut out);
    assert_eq!(tx.cwnd(), INITIAL_CWND / 2);
    let other = SocketAddr::from(([127, 0, 0, 2], 7000));
    tx.retarget(other);
    out.clear();
    // Held until the welcome: publishes wait (and coalesce).
    publish(&mut tx, MS, 10, &mut out);
    assert!(out.is_empty());
    assert_eq!(tx.tick(MS, &mut out), None);
    assert_eq!(tx.pending(), 33);
    // It holds up to 4: the rest goes to it, a window's worth.
    let mut w = welcome(4);
    w.from = other;
    assert_eq!(tx.reconcile(2 * MS, &w, 0, &mut out), 0);
    let s = sent(&out);
    assert_eq!(s.len(), INITIAL_CWND / 2);
    assert_eq!(s[0], (5, 5));
    assert!(out.iter().all(|(to, _)| to == other));
    assert_eq!(tx.in_flight(), INITIAL_CWND / 2);
    assert_eq!(tx.counters().resent.get(), 1 + (INITIAL_CWND / 2) as u64);
}

#[test]
fn close_sends_what_waits() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 50, &mut out);
    out.clear();
    assert!(tx.close(0, &mut out));
    assert_eq!(sent(&out), vec![(33, 50)]);
    assert_eq!(out.len(), 2, "then the goodbye");
}

#[test]
fn a_member_nobody_drives_sends_every_publish_at_once() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    // Published at 1 ms on: the receive side never looked since.
    publish(&mut tx, MS, INITIAL_CWND + 10, &mut out);
    assert_eq!(out.len(), INITIAL_CWND + 10);
    assert_eq!(tx.waiting(), 0);
    // It looks (a tick): from now on the window holds publishes back.
    tx.tick(2 * MS, &mut out);
    publish(&mut tx, 3 * MS, 5, &mut out);
    assert_eq!(out.len(), INITIAL_CWND + 10);
    assert_eq!(tx.waiting(), 1);
}

#[test]
fn a_lost_tail_command_is_probed_after_two_round_trips_not_the_timer() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    // A first round trip of 200 us: SRTT 200 us, so PTO 400 us (the
    // timer's floor is resend_after, 10 ms here).
    publish(&mut tx, 0, 1, &mut out);
    tx.heard(200 * MICRO, 1, &mut out);
    out.clear();
    // The second command is lost; nothing comes back.
    publish(&mut tx, MS, 1, &mut out);
    assert_eq!(sent(&out), vec![(2, 2)]);
    out.clear();
    let cwnd = tx.cwnd();
    let due = tx.tick(MS + 100 * MICRO, &mut out).expect("in flight");
    assert!(out.is_empty(), "no probe before the PTO");
    assert_eq!(due, MS + 400 * MICRO, "the probe's time, before the timer");
    tx.tick(MS + 400 * MICRO, &mut out);
    assert_eq!(sent(&out), vec![(2, 2)], "the tail goes again");
    assert_eq!(tx.counters().probes.get(), 1);
    out.clear();
    // One probe per flight: the next look waits for the timer.
    let due = tx.tick(MS + 900 * MICRO, &mut out).expect("in flight");
    assert!(out.is_empty());
    // (re-armed by the probe's send, as RFC 8985 (7.3) re-arms the RTO)
    assert_eq!(due, MS + 400 * MICRO + 10 * MS, "the retransmission timer");
    // A probe is no timeout: the window is untouched.
    assert_eq!(tx.cwnd(), cwnd);
    // Heard: the next flight may be probed again.
    tx.heard(MS + 950 * MICRO, 2, &mut out);
    publish(&mut tx, 2 * MS, 1, &mut out);
    out.clear();
    tx.tick(2 * MS + 500 * MICRO, &mut out);
    assert_eq!(sent(&out), vec![(3, 3)]);
    assert_eq!(tx.counters().probes.get(), 2);
}

#[test]
fn nothing_goes_again_after_the_goodbye() {
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 1, &mut out);
    tx.heard(200 * MICRO, 1, &mut out);
    publish(&mut tx, MS, 2, &mut out);
    assert!(tx.close(MS, &mut out));
    let bye = out.len();
    // Neither the probe (2 SRTT) nor the timer (10 ms) resends a command
    // after the Bye: the primary would bind the member id to it again.
    for t in [MS + 500 * MICRO, 12 * MS, 100 * MS] {
        tx.tick(t, &mut out);
    }
    tx.heard(101 * MS, 2, &mut out);
    tx.tick(200 * MS, &mut out);
    assert_eq!(out.len(), bye, "something was sent after the goodbye");
    assert_eq!(tx.counters().probes.get(), 0);
}

/// The (member_seq, flags) of each message of each publish command sent.
fn sent_flags(out: &Outbox) -> Vec<Vec<(u64, u8)>> {
    out.iter()
        .filter_map(|(_, d)| {
            let c = Cmd::parse(d).ok()?;
            Some(c.published().map(|p| (p.member_seq, p.flags)).collect())
        })
        .collect()
}

#[test]
fn after_a_fork_the_first_pending_message_skips_the_lost_numbers_and_keeps_its_own() {
    use crate::seq::wire::SKIP;
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    // 1..=6 published; the member saw 1..=4 delivered on a side a fork
    // dropped (the acknowledgement of 3 and 4 had not reached the
    // publishing side yet); the new primary holds its messages up to 2.
    publish(&mut tx, 0, 6, &mut out);
    tx.ack(2);
    tx.retarget(primary());
    out.clear();
    assert_eq!(tx.reconcile(MS, &welcome(2), 4, &mut out), 2);
    assert_eq!(
        sent_flags(&out),
        vec![vec![(5, SKIP)], vec![(6, 0)]],
        "3 and 4 are done; 5 skips to after 2 under its own number"
    );
    assert_eq!(tx.pending(), 2);
    // Nothing pending at the fork: the next publish skips.
    let (mut tx, mut out) = (new_tx(), Outbox::new());
    publish(&mut tx, 0, 3, &mut out);
    tx.ack(3);
    tx.retarget(primary());
    assert_eq!(tx.reconcile(MS, &welcome(1), 3, &mut out), 2);
    out.clear();
    publish(&mut tx, 2 * MS, 2, &mut out);
    assert_eq!(sent_flags(&out), vec![vec![(4, SKIP)], vec![(5, 0)]]);
}

#[test]
fn numbers_at_the_top_of_u64_never_wrap() {
    // A primary's welcome may say this member's last number is u64::MAX:
    // the next one overflowed (a panic with overflow checks, a wrap to 0
    // without). It has no number left: publishes are refused.
    let cfg = MemberConfig::new(primary(), 1);
    let mut out = Outbox::new();
    let mut tx = Tx::new(&cfg, 1400, &welcome(u64::MAX));
    assert_eq!(
        tx.publish_many(0, [b"x".as_slice()], &mut out),
        Err(PublishError::Closed)
    );
    // Two numbers left (u64::MAX itself is never one): one message, then
    // one of two fragments refused, then the last one.
    let mut tx = Tx::new(&cfg, 1400, &welcome(u64::MAX - 3));
    assert_eq!(
        tx.publish_many(0, [b"x".as_slice()], &mut out),
        Ok(u64::MAX - 2)
    );
    let two = vec![7u8; 2000];
    assert_eq!(
        tx.publish_many(0, [two.as_slice()], &mut out),
        Err(PublishError::Closed)
    );
    assert_eq!(
        tx.publish_many(0, [b"y".as_slice()], &mut out),
        Ok(u64::MAX - 1)
    );
    assert_eq!(
        tx.publish_many(0, [b"z".as_slice()], &mut out),
        Err(PublishError::Closed)
    );
    // A new primary's welcome after the member delivered its u64::MAX.
    let mut tx = Tx::new(&cfg, 1400, &welcome(3));
    publish(&mut tx, 0, 2, &mut out);
    assert_eq!(
        tx.reconcile(MS, &welcome(3), u64::MAX, &mut out),
        u64::MAX - 3
    );
}
