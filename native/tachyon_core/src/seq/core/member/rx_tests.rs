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
    let mut cfg = MemberConfig::new(primary(), 1);
    cfg.hello_after = std::time::Duration::from_millis(20);
    cfg.keepalive = std::time::Duration::from_secs(100);
    let w = Welcome {
        session: 9,
        term: 1,
        next: 1,
        commit: 1,
        last: 0,
        epoch: 1,
        max_datagram: 1472,
        from: primary(),
        taken: false,
        delivered: 0,
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
    rx.on_datagram(400 * MS, &d, Some(primary()), &mut |_, _, _| {});
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
    };
    wire::welcome(&mut d, &header(), 0, &body);
    rx.on_datagram(MS, &d, Some(primary()), &mut |_, _, _| {});
    assert_eq!(rx.counters().welcomes.get(), 2);
    // Only a new term's welcome reconciles the publishing side (and
    // resends its commands).
    assert!(rx.take_welcome().is_none());
}
