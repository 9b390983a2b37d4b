use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::store;
use crate::udp::sys::{Socket, SocketOptions};
use crate::wait::WaitStrategy;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tachyon-seq-{name}-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn small_store() -> store::Config {
    store::Config {
        segment_size: 1 << 20,
        max_message_size: 1 << 16,
        prepared_segments: 1,
        pretouch: false,
        ..store::Config::default()
    }
}

fn sequencer(dir: &PathBuf, port: u16) -> Sequencer {
    let mut cfg = SequencerConfig::new(SocketAddr::from(([127, 0, 0, 1], port)), dir);
    cfg.store = small_store();
    cfg.wait = WaitStrategy::Park;
    Sequencer::start(cfg).expect("sequencer")
}

fn member(seq: &Sequencer, id: u32, from: Option<u64>) -> Member {
    let mut cfg = MemberConfig::new(seq.local_addr(), id);
    cfg.from = from;
    Member::open(cfg).expect("member")
}

type Got = Vec<(u64, u32, Vec<u8>)>;

/// Drives `m` until `want` messages were delivered (or 20 s).
fn collect(m: &Member, want: usize, got: &mut Got) {
    let t0 = Instant::now();
    while got.len() < want && t0.elapsed() < Duration::from_secs(20) {
        let n = m
            .poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
            .expect("poll");
        if n == 0 {
            m.tick();
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn digest(got: &Got) -> Vec<(u64, u32, Vec<u8>)> {
    got.clone()
}

fn check_own_order(got: &Got, id: u32, n: usize) {
    let own: Vec<&Vec<u8>> = got.iter().filter(|g| g.1 == id).map(|g| &g.2).collect();
    assert_eq!(own.len(), n, "member {id}: every own message once");
    for (i, d) in own.iter().enumerate() {
        assert_eq!(
            d.as_slice(),
            format!("{id}:{i}").as_bytes(),
            "own messages in publish order"
        );
    }
}

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

fn free_port() -> u16 {
    let s = Socket::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &SocketOptions::default(),
    )
    .unwrap();
    s.local_addr().unwrap().port()
}

fn group_node(dir: &PathBuf, group: &[SocketAddr], i: usize) -> Sequencer {
    let mut cfg = SequencerConfig::new(group[i], dir);
    cfg.group = group.to_vec();
    cfg.store = small_store();
    cfg.wait = WaitStrategy::Park;
    cfg.eager = i == 0;
    Sequencer::start(cfg).expect("node")
}

fn read_log(d: &PathBuf) -> Vec<(u64, Vec<u8>)> {
    let st = store::Store::open(
        d,
        store::Config {
            mode: store::Mode::Read,
            ..small_store()
        },
    )
    .unwrap();
    let mut all = Vec::new();
    st.read_range(0, usize::MAX, usize::MAX, |i, e| all.push((i, e.to_vec())))
        .unwrap();
    all
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_group_of_three_fails_over_and_members_follow_without_loss_or_duplicates() {
    let dirs: Vec<PathBuf> = (0..3).map(|i| tmp(&format!("node{i}"))).collect();
    let group: Vec<SocketAddr> = (0..3)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let mut nodes: Vec<Sequencer> = (0..3).map(|i| group_node(&dirs[i], &group, i)).collect();
    wait_until("a primary", || {
        nodes.iter().any(|n| n.stats().role == "primary")
    });
    let first = nodes
        .iter()
        .position(|n| n.stats().role == "primary")
        .unwrap();
    let ms: Vec<Arc<Member>> = (1..=3)
        .map(|id| {
            let mut c = MemberConfig::new(group[0], id);
            c.alternates = group[1..].to_vec();
            c.hello_after = Duration::from_millis(20);
            c.resend_after = Duration::from_millis(10);
            Arc::new(Member::open(c).unwrap())
        })
        .collect();
    let per = 1500;
    let stop_at = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = ms
        .iter()
        .cloned()
        .map(|m| {
            let stop_at = stop_at.clone();
            std::thread::spawn(move || {
                let mut got = Got::new();
                for i in 0..per {
                    if i == per / 2 {
                        stop_at.wait(); // the primary stops here
                        stop_at.wait();
                    }
                    let msg = format!("{}:{i}", m.member_id());
                    while m.publish(msg.as_bytes()) == Err(member::PublishError::Busy) {
                        m.poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
                            .unwrap();
                        m.tick();
                    }
                    m.poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
                        .unwrap();
                }
                collect(&m, 3 * per, &mut got);
                got
            })
        })
        .collect();
    stop_at.wait();
    std::thread::sleep(Duration::from_millis(20));
    nodes[first].stop();
    stop_at.wait();
    let all: Vec<Got> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, got) in all.iter().enumerate() {
        assert_eq!(got.len(), 3 * per, "member {}: {:?}", i + 1, ms[i].stats());
        assert_eq!(got, &all[0]);
        for id in 1..=3 {
            check_own_order(got, id, per);
        }
    }
    let second = (0..3)
        .find(|&i| i != first && nodes[i].stats().role == "primary")
        .expect("a new primary");
    assert!(nodes[second].stats().epoch > nodes[first].stats().epoch);
    for m in &ms {
        assert_eq!(m.stats().forks, 0);
        assert_eq!(m.stats().epoch, nodes[second].stats().epoch);
    }
    // The stopped node comes back as a follower and catches up.
    nodes[first] = group_node(&dirs[first], &group, first);
    let want = nodes[second].stats().next_seq;
    wait_until("the old primary catches up", || {
        nodes
            .iter()
            .all(|n| n.stats().commit >= want - 1 && n.stats().next_seq >= want)
    });
    assert_eq!(nodes[second].stats().role, "primary");
    // The followers first: a primary that stops sends END, on which a
    // follower still running elects itself and appends its epoch record.
    for i in (0..3).filter(|&i| i != second).chain([second]) {
        nodes[i].stop();
    }
    let logs: Vec<_> = dirs.iter().map(read_log).collect();
    assert!(
        logs[0] == logs[1] && logs[1] == logs[2],
        "one log everywhere: lengths {:?}, want {want}",
        logs.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert_eq!(logs[0].len() as u64, want);
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Publishes `msgs` from `m`, polling meanwhile.
fn publish_all(m: &Member, msgs: impl IntoIterator<Item = String>, got: &mut Got) {
    for msg in msgs {
        while m.publish(msg.as_bytes()) == Err(member::PublishError::Busy) {
            m.poll(32, &mut |s, id, _, d| got.push((s, id, d.to_vec())))
                .unwrap();
            m.tick();
        }
    }
}

#[test]
fn two_nodes_available_a_fork_is_reported_and_the_member_goes_on_in_the_new_order() {
    let dirs: Vec<PathBuf> = (0..2).map(|i| tmp(&format!("avail{i}"))).collect();
    let group: Vec<SocketAddr> = (0..2)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let node = |i: usize| {
        let mut cfg = SequencerConfig::new(group[i], &dirs[i]);
        cfg.group = group.clone();
        cfg.store = small_store();
        cfg.wait = WaitStrategy::Park;
        cfg.eager = i == 0;
        cfg.two_nodes = TwoNodes::Available;
        // Silence stands for death in this mode: a scheduling stall of a
        // loaded machine longer than the election timeout would fork the
        // bus before the test does.
        cfg.election_timeout = Duration::from_millis(500);
        Sequencer::start(cfg).expect("node")
    };
    let a = node(0);
    let mut b = node(1);
    wait_until("a primary", || a.stats().role == "primary");
    let mut c = MemberConfig::new(group[0], 1);
    c.alternates = group[1..].to_vec();
    c.hello_after = Duration::from_millis(20);
    c.resend_after = Duration::from_millis(10);
    let m = Member::open(c).unwrap();
    let mut got = Got::new();
    // Both nodes hold the first 50; then the standby stops and the
    // primary, alone, commits 50 more (availability over safety).
    publish_all(&m, (0..50).map(|i| format!("a{i}")), &mut got);
    collect(&m, 50, &mut got);
    wait_until("the standby has the first 50", || {
        let (sa, sb) = (a.stats(), b.stats());
        sa.role == "primary" && sb.next_seq >= sa.next_seq && sb.commit >= sa.commit
    });
    assert_eq!(m.stats().forks, 0);
    b.stop();
    publish_all(&m, (0..50).map(|i| format!("b{i}")), &mut got);
    collect(&m, 100, &mut got);
    assert_eq!(got.len(), 100, "{:?}", m.stats());
    let first_b = got[50].0;
    // The primary stops; the standby comes back alone, without the b's,
    // and becomes primary: its log forks from what the member delivered.
    a.stop();
    b = node(1);
    publish_all(&m, (0..30).map(|i| format!("c{i}")), &mut got);
    let mut after = Got::new();
    collect(&m, 30, &mut after);
    let events = m.take_events();
    let fork = events
        .iter()
        .find_map(|e| match e {
            MemberEvent::Fork { next, resume, .. } => Some((*next, *resume)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no fork among {events:?}"));
    assert_eq!(fork, (got[99].0 + 1, first_b), "{events:?}");
    assert!(events.contains(&MemberEvent::Renumbered { lost: 50 }));
    assert_eq!(m.stats().forks, 1);
    // From the fork on, the new order: the c's, each once, in order, at
    // sequence numbers from where the member moved back.
    let data: Vec<String> = after
        .iter()
        .map(|(_, _, d)| String::from_utf8_lossy(d).into_owned())
        .collect();
    let want: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
    assert_eq!(data, want);
    assert!(after.iter().all(|(s, _, _)| *s >= first_b));
    assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(b.stats().role, "primary");
    b.stop();
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_node_started_with_join_is_added_and_made_a_voter_and_changes_answer_once_committed() {
    let (da, db) = (tmp("join-a"), tmp("join-b"));
    let a_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let b_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let a = group_node(&da, &[a_addr], 0);
    wait_until("a primary", || a.stats().role == "primary");
    let t = Duration::from_secs(5);
    assert_eq!(
        a.remove_node(Change::Remove(0), t),
        Err(MembershipError::LastVoter)
    );
    assert_eq!(
        a.remove_node(Change::Remove(9), t),
        Err(MembershipError::NotFound)
    );
    let m = member(&a, 1, None);
    for i in 0..50 {
        m.publish(format!("1:{i}").as_bytes()).unwrap();
    }
    let mut got = Got::new();
    collect(&m, 50, &mut got);

    let mut cfg = SequencerConfig::new(b_addr, &db);
    cfg.join = vec![a_addr];
    cfg.store = small_store();
    cfg.wait = WaitStrategy::Park;
    let b = Sequencer::start(cfg).expect("a joining node");
    wait_until("b a voter", || {
        a.membership()
            .nodes
            .iter()
            .any(|n| n.addr == b_addr && n.voter)
    });
    assert_eq!(b.membership().node_id, Some(1));
    wait_until("b holds the log", || {
        b.stats().next_seq == a.stats().next_seq
    });
    // Asked of the follower: the primary's address.
    assert_eq!(
        b.add_node(SocketAddr::from(([127, 0, 0, 1], 9)), t),
        Err(MembershipError::NotPrimary(Some(a_addr)))
    );
    // The primary's own address is its id; removing b answers once committed.
    assert_eq!(a.add_node(a_addr, t), Ok(0));
    assert_eq!(a.remove_node(Change::RemoveAt(b_addr), t), Ok(1));
    assert_eq!(a.membership().nodes.len(), 1);
    b.stop();
    a.stop();
    assert_eq!(a.add_node(b_addr, t), Err(MembershipError::Closed));
    let _ = std::fs::remove_dir_all(&da);
    let _ = std::fs::remove_dir_all(&db);
}
