//! One sequencer and its members over real sockets: one order, gap
//! fills, fragments, goodbyes, restarts, garbage, multicast.

use super::*;

#[test]
fn three_members_see_one_order() {
    let dir = tmp("three");
    let s = sequencer(&dir, 0);
    let ms: Vec<Arc<Member>> = (1..=3).map(|i| Arc::new(member(&s, i, None))).collect();
    let per = 2000;
    let threads: Vec<_> = ms
        .iter()
        .cloned()
        .map(|m| {
            std::thread::spawn(move || {
                let mut got = Got::new();
                for i in 0..per {
                    let msg = format!("{}:{i}", m.member_id());
                    while m.publish(msg.as_bytes()) == Err(member::PublishError::Busy) {
                        m.poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
                            .unwrap();
                    }
                    if i % 16 == 0 {
                        m.poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
                            .unwrap();
                    }
                }
                collect(&m, 3 * per, &mut got);
                got
            })
        })
        .collect();
    let all: Vec<Got> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, got) in all.iter().enumerate() {
        assert_eq!(got.len(), 3 * per);
        assert_eq!(digest(got), digest(&all[0]), "member {} differs", i + 1);
        // Index 0 is the session record, 1 the epoch record of the first
        // term: messages start at 2, one number each.
        let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(seqs, (2..2 + (3 * per) as u64).collect::<Vec<_>>());
        for id in 1..=3 {
            check_own_order(got, id, per);
        }
    }
    assert_eq!(s.stats().messages, 3 * per as u64);
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn losses_are_filled_and_fragments_reassembled() {
    let dir = tmp("loss");
    let s = sequencer(&dir, 0);
    let mut cfg = MemberConfig::new(s.local_addr(), 7);
    cfg.loss = 0.1;
    let lossy = Member::open(cfg).unwrap();
    let clean = member(&s, 8, None);
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let mut sent = Vec::new();
    for i in 0..500 {
        let m = if i % 50 == 0 {
            big.clone()
        } else {
            format!("m{i}").into_bytes()
        };
        clean.publish(&m).unwrap();
        sent.push(m);
    }
    let (mut a, mut b) = (Got::new(), Got::new());
    collect(&clean, 500, &mut b);
    collect(&lossy, 500, &mut a);
    assert_eq!(a, b);
    let data: Vec<Vec<u8>> = a.iter().map(|g| g.2.clone()).collect();
    assert_eq!(data, sent);
    let st = lossy.stats();
    assert!(st.injected_losses > 0 && st.replay_requests > 0, "{st:?}");
    assert_eq!(st.delivered, 500);
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn small_gap_fills_are_answered_by_the_sequencing_thread_rewinds_by_the_replayer() {
    let dir = tmp("inline-replay");
    let s = sequencer(&dir, 0);
    let mut cfg = MemberConfig::new(s.local_addr(), 7);
    cfg.loss = 0.2;
    let lossy = Member::open(cfg).unwrap();
    // Ping-pong: one message in flight, each one waited for; a lost bus
    // datagram is a gap of one entry.
    let mut got = Got::new();
    for i in 0..300 {
        lossy.publish(format!("p{i}").as_bytes()).unwrap();
        collect(&lossy, i + 1, &mut got);
        assert_eq!(got.len(), i + 1, "round trip {i} completed");
    }
    let data: Vec<Vec<u8>> = got.iter().map(|g| g.2.clone()).collect();
    let want: Vec<Vec<u8>> = (0..300).map(|i| format!("p{i}").into_bytes()).collect();
    assert_eq!(data, want);
    let st = s.stats();
    assert!(lossy.stats().injected_losses > 0, "{:?}", lossy.stats());
    assert!(st.replayed_inline > 0, "{st:?}");
    assert_eq!(st.replayed, st.replayed_inline, "only small replays so far");
    // A member that rewinds from 0 asks for more than a small replay: the
    // replayer thread answers it.
    let late = member(&s, 8, Some(0));
    let mut all = Got::new();
    collect(&late, 300, &mut all);
    assert_eq!(all.len(), 300);
    let st = s.stats();
    assert!(st.replayed > st.replayed_inline, "{st:?}");
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_command_that_arrives_after_the_goodbye_does_not_bind_the_id_again() {
    let dir = tmp("departed");
    let s = sequencer(&dir, 0);
    let a = member(&s, 7, None);
    let a_addr = a.local_addr().unwrap();
    a.publish(b"a").unwrap();
    let mut got = Got::new();
    collect(&a, 1, &mut got);
    let session = s.session();
    a.close();
    drop(a);
    // The Bye is in once the member left the unicast fan-out.
    wait_until("the goodbye", || s.stats().members == 0);
    // A command of the departed member, sent before its Bye and delivered
    // after it (UDP reorders), from its address.
    let late = Socket::bind(a_addr, &SocketOptions::default()).unwrap();
    let mut d = Vec::new();
    wire::cmd_header(&mut d, wire::CmdKind::Publish, 7, session, 0);
    wire::write_cmd_msg(&mut d, 2, 0, b"late");
    wire::set_cmd_count(&mut d, 1);
    late.send_to(&d, &s.local_addr()).unwrap();
    wait_until("the late command counted", || s.stats().departed > 0);
    // The id is still free: it was not bound to the departed member again.
    let b = Member::open(MemberConfig::new(s.local_addr(), 7)).expect("id 7 free");
    b.publish(b"b").unwrap();
    let mut got_b = Got::new();
    collect(&b, 1, &mut got_b);
    assert!(got_b.iter().any(|g| g.2 == b"b"), "{got_b:?}");
    assert!(
        !got_b.iter().any(|g| g.2 == b"late"),
        "the late command was sequenced"
    );
    b.close();
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn restart_continues_numbering_and_sequences_resent_commands_once() {
    let dir = tmp("restart");
    let s = sequencer(&dir, 0);
    let port = s.local_addr().port();
    let m = member(&s, 5, None);
    for i in 0..10 {
        m.publish(format!("5:{i}").as_bytes()).unwrap();
    }
    let mut got = Got::new();
    collect(&m, 10, &mut got);
    let session = s.session();
    s.stop();
    // Published while the sequencer is down: resent after the restart.
    for i in 10..20 {
        m.publish(format!("5:{i}").as_bytes()).unwrap();
    }
    let s = sequencer(&dir, port);
    assert_eq!(s.session(), session);
    assert_eq!(s.recovered_members(), 1);
    collect(&m, 20, &mut got);
    check_own_order(&got, 5, 20);
    // The restarted node's term opens with an epoch record: one number
    // skipped.
    let seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    let want: Vec<u64> = (2..12).chain(13..23).collect();
    assert_eq!(seqs, want);
    // A late member rewinds from 0 and sees the same.
    let late = member(&s, 6, Some(0));
    let mut again = Got::new();
    collect(&late, 20, &mut again);
    assert_eq!(again, got);
    assert!(m.stats().resent > 0);
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn garbage_is_counted_and_dropped() {
    let dir = tmp("garbage");
    let s = sequencer(&dir, 0);
    let m = member(&s, 1, None);
    let stranger = Socket::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &SocketOptions::default(),
    )
    .unwrap();
    let mut x = 1u64;
    for len in [0usize, 1, 3, 19, 20, 27, 28, 100, 1500] {
        let g: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        let _ = stranger.send_to(&g, &s.local_addr());
        let _ = stranger.send_to(&g, &m.local_addr().unwrap());
    }
    // A well-formed command of another session.
    let mut c = Vec::new();
    wire::cmd_header(&mut c, wire::CmdKind::Publish, 9, s.session() ^ 1, 0);
    wire::write_cmd_msg(&mut c, 1, 0, b"x");
    wire::set_cmd_count(&mut c, 1);
    stranger.send_to(&c, &s.local_addr()).unwrap();
    m.publish(b"after").unwrap();
    let mut got = Got::new();
    collect(&m, 1, &mut got);
    assert_eq!(got[0].2, b"after");
    let st = s.stats();
    assert!(st.malformed >= 8 && st.wrong_session == 1, "{st:?}");
    // The member's socket is connected to the sequencer: the kernel drops
    // a stranger's datagrams (garbage on the multicast group is counted,
    // see multicast_bus).
    assert_eq!(m.stats().malformed, 0);
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn multicast_bus() {
    let dir = tmp("mcast");
    let group = SocketAddr::from(([239, 255, 42, 7], 0));
    // A free port for the group.
    let probe = Socket::bind(
        SocketAddr::from(([0, 0, 0, 0], 0)),
        &SocketOptions::default(),
    )
    .unwrap();
    let group = SocketAddr::new(group.ip(), probe.local_addr().unwrap().port());
    drop(probe);
    let bus = BusMode::Multicast {
        group,
        iface: Ipv4Addr::UNSPECIFIED,
        ttl: 0,
        looped: true,
    };
    let mut cfg = SequencerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), &dir);
    cfg.store = small_store();
    cfg.wait = WaitStrategy::Park;
    cfg.bus = bus;
    let s = match Sequencer::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("skipped: no multicast here ({e})");
            return;
        }
    };
    let mut mc = MemberConfig::new(s.local_addr(), 1);
    mc.bus = bus;
    let a = Member::open(mc.clone()).unwrap();
    mc.member_id = 2;
    let b = Member::open(mc).unwrap();
    for i in 0..100 {
        a.publish(format!("1:{i}").as_bytes()).unwrap();
    }
    let (mut ga, mut gb) = (Got::new(), Got::new());
    collect(&a, 100, &mut ga);
    collect(&b, 100, &mut gb);
    if s.stats().send_errors > 0 && ga.is_empty() {
        eprintln!("skipped: multicast sends fail here");
        s.stop();
        return;
    }
    assert_eq!(ga, gb);
    check_own_order(&ga, 1, 100);
    // Garbage on the group is counted and dropped.
    let stranger = Socket::bind(
        SocketAddr::from(([0, 0, 0, 0], 0)),
        &SocketOptions::default(),
    )
    .unwrap();
    for len in [0usize, 5, 28, 300] {
        let _ = stranger.send_to(&vec![0xEE; len], &group);
    }
    a.publish(b"1:100").unwrap();
    collect(&a, 101, &mut ga);
    collect(&b, 101, &mut gb);
    assert_eq!(ga, gb);
    // Not from a node of the group: dropped before parsing.
    assert!(b.stats().strangers >= 3, "{:?}", b.stats());
    assert_eq!(s.stats().members, 0, "no unicast fan-out in multicast mode");
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
