//! A whole snapshot published by one member ([`Member::publish_snapshot_all`])
//! and read back by a member opened `from_snapshot`, over a real sequencer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::*;
use crate::seq::wire::SNAP_END;
use crate::seq::{Sequencer, SequencerConfig};
use crate::wait::WaitStrategy;

fn tmp() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tachyon-seq-snapshot-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// What a member delivers: (seq, member_id, SNAP flags, data).
type Got = Vec<(u64, u32, u8, Vec<u8>)>;

/// Drives `m` until `done` says so (or 20 s).
fn drive(m: &Member, got: &mut Got, done: impl Fn(&Got) -> bool) {
    let t0 = Instant::now();
    while !done(got) && t0.elapsed() < Duration::from_secs(20) {
        let n = m
            .poll(32, &mut |s, id, snap, d| {
                got.push((s, id, snap, d.to_vec()))
            })
            .expect("poll");
        if n == 0 {
            m.tick();
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[test]
fn a_member_from_a_snapshot_gets_its_chunks_whole_then_what_follows() {
    let dir = tmp();
    let mut cfg = SequencerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), &dir);
    cfg.wait = WaitStrategy::Park;
    let seq = Sequencer::start(cfg).expect("sequencer");
    let a = Member::open(MemberConfig::new(seq.local_addr(), 1)).expect("member");
    let mut got = Got::new();
    for i in 0..10u8 {
        a.publish(&[i]).expect("publish");
    }
    drive(&a, &mut got, |g| g.len() == 10);
    let as_of = got[9].0 + 1;
    // 3.5 chunks: four messages, each in fragments.
    let state: Vec<u8> = (0..SNAPSHOT_CHUNK * 7 / 2)
        .map(|i| (i % 251) as u8)
        .collect();
    a.publish_snapshot_all(as_of, &state, None)
        .expect("snapshot");
    a.publish(b"after").expect("publish");
    // The publisher sees its own message (snapshots are for members that ask).
    drive(&a, &mut got, |g| g.len() == 11);
    assert_eq!(got[10].3, b"after");

    let mut cfg = MemberConfig::new(seq.local_addr(), 2);
    cfg.from_snapshot = true;
    let b = Member::open(cfg).expect("member from the snapshot");
    assert_eq!(b.snapshot_as_of(), Some(as_of));
    let mut got = Got::new();
    drive(&b, &mut got, |g| g.iter().any(|m| m.3 == b"after"));
    let chunks: Vec<_> = got.iter().filter(|m| m.2 != 0).collect();
    assert_eq!(chunks.len(), 4);
    assert!(chunks
        .iter()
        .all(|m| m.1 == 1 && m.3[..8] == as_of.to_le_bytes()));
    assert!(chunks[..3].iter().all(|m| m.2 & SNAP_END == 0));
    assert!(chunks[3].2 & SNAP_END != 0);
    let whole: Vec<u8> = chunks.iter().flat_map(|m| m.3[8..].to_vec()).collect();
    assert_eq!(whole, state);
    // Nothing below the snapshot's position; the message after it, once.
    assert!(got.iter().all(|m| m.0 >= as_of));
    assert_eq!(got.iter().filter(|m| m.2 == 0).count(), 1);

    // A later snapshot is not for b (it has its state): only what follows.
    a.publish_snapshot_all(as_of + 2, b"later state", None)
        .expect("second snapshot");
    a.publish(b"after the second").expect("publish");
    drive(&b, &mut got, |g| {
        g.iter().any(|m| m.3 == b"after the second")
    });
    assert_eq!(
        got.iter().filter(|m| m.2 != 0).count(),
        4,
        "a later snapshot reached b"
    );

    // Without a snapshot asked for, none is seen.
    let c = Member::open(MemberConfig::new(seq.local_addr(), 3)).expect("member");
    assert_eq!(c.snapshot_as_of(), None);
    drop((a, b, c));
    seq.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
