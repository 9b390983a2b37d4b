//! A group of sequencer nodes and its members over real sockets:
//! failover, forks, a node joining.

use super::*;

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
