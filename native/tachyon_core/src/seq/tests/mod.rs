//! The sequencer's and members' tests over real sockets, by topic, and
//! the helpers they share.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::store;
use crate::udp::sys::{Socket, SocketOptions};
use crate::wait::WaitStrategy;

mod group;
mod single;

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

fn free_port() -> u16 {
    let s = Socket::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &SocketOptions::default(),
    )
    .unwrap();
    s.local_addr().unwrap().port()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
