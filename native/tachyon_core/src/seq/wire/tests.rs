//! The wire format: round trips, and garbage refused without a panic.

use std::net::SocketAddr;

use super::*;

fn garbage(len: usize, x: &mut u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x as u8
        })
        .collect()
}

#[test]
fn bus_round_trip_and_truncations_refused() {
    let h = BusHeader {
        term: 3,
        session: 77,
        seq: 10,
        commit: 9,
        node: 2,
    };
    let mut b = Vec::new();
    bus_header(&mut b, BusKind::Data, &h, 0);
    write_msg(&mut b, 3, 5, 0, 3, b"hello");
    write_msg(&mut b, 4, 1, MORE, 3, b"");
    set_count(&mut b, 2);
    let bus = Bus::parse(&b).unwrap();
    assert_eq!((bus.kind, bus.h, bus.count), (BusKind::Data, h, 2));
    assert_eq!(bus.end(), 12);
    let got: Vec<_> = bus.messages().collect();
    assert_eq!(got[0].0, 10);
    assert_eq!((got[0].1.data, got[0].1.term), (&b"hello"[..], 3));
    assert_eq!(
        (got[1].0, got[1].1.member_id, got[1].1.flags),
        (11, 4, MORE)
    );
    for cut in 0..b.len() {
        assert!(Bus::parse(&b[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(Bus::parse(&longer).is_err());
    set_commit(&mut b, 11);
    assert_eq!(Bus::parse(&b).unwrap().h.commit, 11);

    let w = WelcomeBody {
        last: 8,
        epoch_end: 99,
        epoch: 2,
        max_datagram: 1472,
        incarnation: 0,
        first: 0,
        snap_from: 0,
        snap_epoch: 0,
        snap_as_of: 0,
    };
    full(&mut b, &h, 77);
    assert_eq!(Bus::parse(&b).unwrap().refused(), Some(77));
    welcome(&mut b, &h, TAKEN, &w);
    let bus = Bus::parse(&b).unwrap();
    assert_eq!((bus.welcome(), bus.flags), (Some(w), TAKEN));
    for cut in 0..b.len() {
        assert!(Bus::parse(&b[..cut]).is_err(), "cut at {cut}");
    }
    nack(&mut b, &h, 42);
    assert_eq!(Bus::parse(&b).unwrap().nacked(), Some(42));
    bus_header(&mut b, BusKind::End, &h, 0);
    assert_eq!(Bus::parse(&b).unwrap().kind, BusKind::End);
    assert_eq!(Bus::parse(&b).unwrap().successor(), None);
    // An END may name the node to campaign at once; one byte, no more.
    b.push(2);
    assert_eq!(Bus::parse(&b).unwrap().successor(), Some(2));
    b.push(1);
    assert!(Bus::parse(&b).is_err());
}

#[test]
fn commands_round_trip_skip_and_garbage_refused() {
    let mut c = Vec::new();
    cmd_header(&mut c, CmdKind::Publish, 9, 1234, 5);
    write_cmd_msg(&mut c, 1, 0, b"a");
    write_cmd_msg(&mut c, 2, MORE, b"bc");
    set_cmd_count(&mut c, 2);
    let cmd = Cmd::parse(&c).unwrap();
    let ps: Vec<_> = cmd.published().collect();
    assert_eq!(ps.len(), 2);
    assert_eq!(
        (ps[1].member_seq, ps[1].flags, ps[1].data),
        (2, MORE, &b"bc"[..])
    );
    for cut in 0..c.len() {
        assert!(Cmd::parse(&c[..cut]).is_err());
    }
    let whole = c.clone();
    assert_eq!(skip_to(&mut c, 3), None);
    assert_eq!(c, whole);
    assert_eq!(skip_to(&mut c, 2), Some(2));
    let ps: Vec<_> = Cmd::parse(&c)
        .unwrap()
        .published()
        .map(|p| (p.member_seq, p.flags, p.data.to_vec()))
        .collect();
    assert_eq!(ps, [(2, MORE | SKIP, b"bc".to_vec())]);
    replay(&mut c, 9, 1, 5, 8);
    assert_eq!(Cmd::parse(&c).unwrap().range(), (5, 8));
    let hb = HelloBody {
        flags: UNICAST,
        incarnation: 0xdead,
        epoch: 4,
        next: 77,
    };
    hello(&mut c, 9, 0, &hb);
    assert_eq!(Cmd::parse(&c).unwrap().hello(), Some(hb));
    hello(&mut c, 0, 0, &hb);
    assert!(Cmd::parse(&c).is_err(), "member id 0 is reserved");
    // A stranger may not publish control entries.
    cmd_header(&mut c, CmdKind::Publish, 9, 1, 5);
    write_cmd_msg(&mut c, 1, CONTROL, b"x");
    set_cmd_count(&mut c, 1);
    assert!(Cmd::parse(&c).is_err());
}

#[test]
fn addresses_round_trip_in_a_peer_body() {
    for a in [
        SocketAddr::from(([127, 0, 0, 1], 7000)),
        SocketAddr::from(([255, 255, 255, 255], 65535)),
        SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0xff, 1], 9)),
    ] {
        let (x, y, z) = addr_body(a);
        assert_eq!(body_addr(x, y, z), Some(a));
    }
    assert_eq!(body_addr(4 << 16, 1, 0), None, "port 0");
    assert_eq!(body_addr(5 << 16 | 1, 1, 0), None, "family 5");
    assert_eq!(body_addr(4 << 16 | 1, 1 << 32, 0), None, "not an IPv4");
}

#[test]
fn peers_round_trip() {
    let kinds = [
        PeerKind::PreVote,
        PeerKind::PreVoteReply,
        PeerKind::Vote,
        PeerKind::VoteReply,
        PeerKind::Ack,
        PeerKind::Sync,
        PeerKind::SyncReply,
        PeerKind::Probe,
        PeerKind::ProbeReply,
        PeerKind::Join,
        PeerKind::JoinReply,
        PeerKind::CheckpointReq,
        PeerKind::Retain,
        PeerKind::JoinVia,
        PeerKind::HelloVia,
    ];
    let mut d = Vec::new();
    for kind in kinds {
        let n = Peer::body_len(kind) / 8;
        let p = Peer {
            h: PeerHeader {
                kind,
                term: 7,
                session: 5,
                node: 1,
                flags: GRANTED | LEARNER,
                log_id: 0x0123_4567_89ab_cdef,
                incarnation: 42,
            },
            a: if n > 0 { 11 } else { 0 },
            b: if n > 1 { 12 } else { 0 },
            c: if n > 2 { 13 } else { 0 },
        };
        p.write(&mut d);
        assert_eq!(Peer::parse(&d), Ok(p));
        for cut in 0..d.len() {
            assert!(Peer::parse(&d[..cut]).is_err());
        }
    }
}

#[test]
fn checkpoint_chunks_carry_their_bytes_and_trimmed_its_first() {
    use crate::seq::core::{CheckpointJob, CHECKPOINT_CHUNK};
    let bytes: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let job = CheckpointJob {
        to: "127.0.0.1:9".parse().unwrap(),
        checkpoint: std::sync::Arc::new(bytes.clone()),
        offset: 0,
        term: 3,
        session: 5,
        node: 1,
        log_id: 9,
        incarnation: 4,
    };
    let (mut out, mut got, mut n) = (Vec::new(), Vec::new(), 0);
    job.each_datagram(&mut out, &mut |d| {
        let p = Peer::parse(d).unwrap();
        assert_eq!(
            (p.h.kind, p.a, p.b),
            (PeerKind::Checkpoint, got.len() as u64, 3000)
        );
        got.extend_from_slice(Peer::payload(d));
        n += 1;
    });
    assert_eq!((got, n), (bytes, 3000 / CHECKPOINT_CHUNK + 1));
    // Another kind's body is never read as a payload.
    let mut d = Vec::new();
    Peer {
        h: PeerHeader {
            kind: PeerKind::Ack,
            term: 1,
            session: 1,
            node: 0,
            flags: 0,
            log_id: 1,
            incarnation: 1,
        },
        a: 1,
        b: 2,
        c: 0,
    }
    .write(&mut d);
    assert!(Peer::payload(&d).is_empty());

    let h = BusHeader {
        term: 2,
        session: 5,
        seq: 10,
        commit: 10,
        node: 0,
    };
    trimmed(&mut d, &h, 700, 66);
    let b = Bus::parse(&d).unwrap();
    assert_eq!((b.kind, b.trimmed()), (BusKind::Trimmed, Some((700, 66))));
    for cut in 0..d.len() {
        assert!(Bus::parse(&d[..cut]).is_err());
    }
}

#[test]
fn garbage_never_panics() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in 0..300 {
        for _ in 0..20 {
            let mut g = garbage(len, &mut x);
            let _ = Cmd::parse(&g);
            let _ = Bus::parse(&g);
            let _ = Peer::parse(&g);
            // With a valid magic and version, the rest garbage.
            for m in [BUS_MAGIC, CMD_MAGIC, PEER_MAGIC] {
                if g.len() >= 4 {
                    g[0..2].copy_from_slice(&m.to_le_bytes());
                    g[2] = VERSION;
                    g[3] %= 16;
                    if let Ok(b) = Bus::parse(&g) {
                        let _ = b.messages().count();
                        let _ = (b.welcome(), b.nacked(), b.trimmed());
                    }
                    if let Ok(c) = Cmd::parse(&g) {
                        let _ = c.published().count();
                        let _ = (c.range(), c.hello());
                    }
                    let _ = Peer::parse(&g);
                    let _ = skip_to(&mut g, 3);
                }
            }
        }
    }
}
