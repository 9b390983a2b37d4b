//! Seed inputs of every target, made by the real encoders and writers
//! (and, for the actor targets, recorded in a small lossless world of
//! three nodes and a member). `tests/replay.rs` checks that each seed
//! still decodes; `cargo test -p tachyon_fuzz_targets --release -- --ignored
//! write_seeds` writes them to `native/fuzz/corpus/<target>/`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tachyon_core::seq::core::node::checkpoint::Checkpoint;
use tachyon_core::seq::core::node::Membership;
use tachyon_core::seq::core::{CheckpointJob, MILLI};
use tachyon_core::seq::wire::{self, BusHeader, BusKind, HelloBody, Peer, PeerHeader, PeerKind};

use crate::actors::{addr, MemberActor, NodeActor, Sent};
use crate::ops::{self, Op};

/// Every target's seeds, by target name.
pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    crate::TARGETS.iter().map(|t| (t.0, of(t.0))).collect()
}

/// The seeds of target `name` (none for an unknown name).
pub fn of(name: &str) -> Vec<Vec<u8>> {
    match name {
        "wire_bus" => bus(),
        "wire_cmd" => cmd(),
        "wire_peer" => peer(),
        "wire_msg" => msg(),
        "membership" => memberships().iter().map(enc).collect(),
        "checkpoint" => checkpoints(),
        "dir_manifest" => dir_manifests(),
        "table_segment" => crate::seeds_disk::table_segments(),
        "table_hints" => crate::seeds_disk::table_hints(),
        "table_manifest" => crate::seeds_disk::table_manifests(),
        "store_segment" => crate::seeds_disk::store_segments(),
        "node" => recorded().nodes,
        "member" => recorded().members,
        "guard_open" => crate::guard::seeds(),
        "key_file" => crate::guard::key_files(),
        _ => Vec::new(),
    }
}

/// `b` after the mode byte `mode`.
pub(crate) fn moded(mode: u8, b: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(b);
    v
}

fn header() -> BusHeader {
    BusHeader {
        term: 3,
        session: 77,
        seq: 10,
        commit: 9,
        node: 0,
    }
}

fn memberships() -> Vec<Membership> {
    let m = Membership::initial(&[addr(0), addr(1), addr(2)]);
    let v6 = SocketAddr::from(([0xfe80u16, 0, 0, 0, 0, 0, 0, 7], 7001));
    let (_, m2) = m.with_added(v6).expect("a free id");
    vec![m, m2, Membership::initial(&[addr(0)])]
}

fn enc(m: &Membership) -> Vec<u8> {
    let mut b = Vec::new();
    m.encode(&mut b);
    b
}

fn bus() -> Vec<Vec<u8>> {
    let h = header();
    let mut out = Vec::new();
    // Data: a message, an epoch record, a membership change, fragments.
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::Data, &h, wire::HOLDS);
    wire::write_msg(&mut d, 1, 5, 0, 3, b"hello");
    let mut e = Vec::new();
    wire::epoch_record(&mut e, 3);
    d.extend_from_slice(&e);
    wire::write_msg(
        &mut d,
        0,
        0,
        wire::CONTROL | wire::CONFIG,
        3,
        &enc(&memberships()[1]),
    );
    wire::write_msg(&mut d, 2, 1, wire::MORE, 3, &[7; 40]);
    wire::write_msg(&mut d, 2, 2, wire::CONT, 3, &[8; 9]);
    wire::set_count(&mut d, 5);
    out.push(d);
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::Heartbeat, &h, wire::HOLDS);
    out.push(d);
    for tail in [Vec::new(), enc(&memberships()[0])] {
        let w = wire::WelcomeBody {
            last: 4,
            epoch_end: 10,
            epoch: 3,
            max_datagram: 1472,
            incarnation: 0x5eed_0001,
            first: 0,
            snap_from: 0,
            snap_epoch: 0,
            snap_as_of: 0,
        };
        let mut d = Vec::new();
        wire::welcome(&mut d, &h, 0, &w);
        d.extend_from_slice(&tail);
        out.push(d);
    }
    let mut d = Vec::new();
    wire::bus_header(&mut d, BusKind::End, &h, 0);
    out.push(d.clone());
    d.push(1);
    out.push(d);
    let mut d = Vec::new();
    wire::nack(&mut d, &h, 5);
    out.push(d.clone());
    wire::full(&mut d, &h, 6);
    out.push(d.clone());
    wire::trimmed(&mut d, &h, 100, 2);
    out.push(d);
    out
}

fn cmd() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut d = Vec::new();
    wire::cmd_header(&mut d, wire::CmdKind::Publish, 1, 77, 9);
    wire::write_cmd_msg(&mut d, 1, 0, b"one");
    wire::write_cmd_msg(&mut d, 2, wire::MORE, &[1; 30]);
    wire::write_cmd_msg(&mut d, 2, wire::CONT, &[2; 3]);
    wire::set_cmd_count(&mut d, 3);
    out.push(d);
    let hb = HelloBody {
        flags: wire::UNICAST,
        incarnation: 9,
        epoch: u32::MAX,
        next: 1,
    };
    let mut d = Vec::new();
    wire::hello(&mut d, 1, 0, &hb);
    out.push(d.clone());
    wire::replay(&mut d, 1, 77, 3, 40);
    out.push(d.clone());
    wire::cmd_header(&mut d, wire::CmdKind::Bye, 1, 77, 9);
    out.push(d);
    out
}

/// A peer datagram of `kind` from node 0.
fn peer_of(kind: PeerKind, (a, b, c): (u64, u64, u64), payload: &[u8]) -> Vec<u8> {
    let p = Peer {
        h: PeerHeader {
            kind,
            term: 3,
            session: 77,
            node: 0,
            flags: wire::LEADER,
            log_id: 1000,
            incarnation: 100,
        },
        a,
        b,
        c,
    };
    let mut d = Vec::new();
    p.write(&mut d);
    d.extend_from_slice(payload);
    d
}

fn peer() -> Vec<Vec<u8>> {
    use PeerKind::*;
    let mut out = Vec::new();
    for kind in [
        PreVote,
        PreVoteReply,
        Vote,
        VoteReply,
        Ack,
        Sync,
        SyncReply,
        Probe,
        ProbeReply,
        Join,
        JoinReply,
        CheckpointReq,
        Retain,
    ] {
        out.push(peer_of(kind, (3, 10, 9), &[]));
    }
    out.push(peer_of(JoinVia, wire::addr_body(addr(3)), &[]));
    let v6 = SocketAddr::from(([0xfe80u16, 0, 0, 0, 0, 0, 0, 7], 7001));
    out.push(peer_of(JoinVia, wire::addr_body(v6), &[]));
    out.push(peer_of(
        HelloVia,
        wire::addr_body(ops::sender(3)),
        &cmd()[1],
    ));
    out.push(peer_of(Checkpoint, (0, 40, 0), &[5; 40]));
    out
}

fn msg() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut e = Vec::new();
    wire::write_msg(&mut e, 1, 5, 0, 3, b"data");
    out.push(e.clone());
    wire::epoch_record(&mut e, 4);
    out.push(e.clone());
    e.clear();
    wire::write_msg(
        &mut e,
        0,
        0,
        wire::CONTROL | wire::CONFIG,
        3,
        &enc(&memberships()[0]),
    );
    out.push(e.clone());
    e.clear();
    let mut snap = 40u64.to_le_bytes().to_vec();
    snap.extend_from_slice(b"state");
    wire::write_msg(&mut e, 2, 9, wire::SNAP | wire::SNAP_END, 3, &snap);
    out.push(e);
    out
}

/// A checkpoint of a log whose first held entry is `first`.
pub fn checkpoint_of(first: u64, session: u64, term: u32) -> Checkpoint {
    Checkpoint {
        first,
        session,
        epochs: vec![(1, 1), (term, first / 2)],
        configs: vec![(first / 3, memberships()[0].clone())],
        last: HashMap::from([(1, 5), (2, 17)]),
    }
}

fn checkpoints() -> Vec<Vec<u8>> {
    let mut empty = checkpoint_of(1, 77, 1);
    empty.epochs.clear();
    empty.configs.clear();
    empty.last.clear();
    vec![
        moded(0, &checkpoint_of(900, 77, 3).encode()),
        moded(0, &empty.encode()),
    ]
}

fn dir_manifests() -> Vec<Vec<u8>> {
    use tachyon_core::segment::dir::{Kind, Manifest};
    Kind::ALL
        .iter()
        .map(|k| moded(0, &Manifest::current(*k).encode()))
        .collect()
}

/// The recorded operations of the actor targets.
pub struct Recorded {
    pub nodes: Vec<Vec<u8>>,
    pub members: Vec<Vec<u8>>,
}

/// Three nodes and a member on a lossless network, each actor's input
/// recorded as the operations of its target.
struct World {
    nodes: Vec<NodeActor>,
    member: MemberActor,
    /// Datagrams in flight: (from, to, bytes).
    wire: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Node `i` is stopped (it hears and says nothing).
    down: [bool; 3],
    /// Each node's input, then the member's.
    rec: [Vec<u8>; 4],
    published: u32,
}

impl World {
    fn new() -> World {
        let mut nodes: Vec<NodeActor> = (0..3).map(NodeActor::new).collect();
        for n in &mut nodes {
            n.keep = true;
        }
        let mut member = MemberActor::new();
        member.keep = true;
        World {
            nodes,
            member,
            wire: Vec::new(),
            down: [false; 3],
            rec: [vec![0], vec![1], vec![2], Vec::new()],
            published: 0,
        }
    }

    /// One actor (node `i`, or the member for 3) takes `ops`.
    fn feed(&mut self, i: usize, ops: &[Op<'_>]) {
        let me = if i < 3 { addr(i) } else { ops::sender(3) };
        let mut sent: Sent = Vec::new();
        for op in ops {
            ops::encode(op, &mut self.rec[i]);
            if i < 3 {
                self.nodes[i].apply(op, &mut sent);
            } else {
                self.member.apply(op, &mut sent);
            }
        }
        self.wire
            .extend(sent.into_iter().map(|(to, d)| (me, to, d)));
    }

    /// Time goes on `ms`, then every running actor takes what was sent
    /// to it; the member publishes `publish` (if joined).
    /// 10 ms steps until node 0 leads and the member joined.
    fn settle(&mut self) {
        for _ in 0..60 {
            if self.nodes[0].node.is_leader() && self.member.is_joined() {
                return;
            }
            self.step(10, None);
        }
        panic!("no primary, or the member never joined");
    }

    fn step(&mut self, ms: u8, publish: Option<&[u8]>) {
        let wire = std::mem::take(&mut self.wire);
        for i in 0..4 {
            if i < 3 && self.down[i] {
                continue;
            }
            let me = if i < 3 { addr(i) } else { ops::sender(3) };
            let mut batch = vec![Op::Advance(ms as u64 * MILLI)];
            for (from, to, d) in &wire {
                let from_down = (0..3).any(|n| self.down[n] && addr(n) == *from);
                if *to == me && !from_down {
                    batch.push(Op::Datagram {
                        from: ops::sender_index(*from),
                        bytes: d,
                    });
                }
            }
            batch.push(Op::EndBatch);
            if i == 3 && self.member.is_joined() {
                if let Some(p) = publish {
                    batch.push(Op::Extra { arg: 0, bytes: p });
                    self.published += 1;
                }
            }
            self.feed(i, &batch);
        }
    }
}

fn payload(n: u32) -> Vec<u8> {
    // Every fifth is cut in two fragments (max_datagram 1472).
    let len = if n % 5 == 4 {
        1600
    } else {
        8 + n as usize % 24
    };
    (0..len).map(|i| (i as u32 ^ n) as u8).collect()
}

/// The traffic of a steady group, a change of primary, retention, and a
/// follower installing its primary's checkpoint.
pub fn recorded() -> Recorded {
    let mut nodes = Vec::new();
    let mut members = Vec::new();

    // A steady group: an election, the member's join, 12 publishes.
    let mut w = World::new();
    w.settle();
    for s in 0..40u32 {
        let p = (5..=30).contains(&s).then(|| payload(s));
        w.step(1, p.as_deref());
    }
    assert!(w.published > 0, "the member never joined");
    assert!(w.member.delivered > 0, "nothing delivered");
    nodes.push(w.rec[0].clone());
    nodes.push(w.rec[1].clone());
    members.push(w.rec[3].clone());

    // A follower told the primary trimmed what it lacks, then sent the
    // primary's checkpoint in chunks.
    let n0 = &w.nodes[0].node;
    let (term, session, next) = (n0.term(), n0.session(), n0.next_seq());
    let first = next + 50;
    let h = BusHeader {
        term,
        session,
        seq: next,
        commit: n0.commit(),
        node: 0,
    };
    let mut extra = w.rec[1].clone();
    let mut d = Vec::new();
    wire::trimmed(&mut d, &h, first, term);
    let cp = Arc::new(checkpoint_of(first, session, term).encode());
    let job = CheckpointJob {
        to: addr(1),
        checkpoint: cp,
        offset: 0,
        term,
        session,
        node: 0,
        log_id: 1000,
        incarnation: 100,
    };
    let mut chunks = vec![d];
    let mut buf = Vec::new();
    job.each_datagram(&mut buf, &mut |c| chunks.push(c.to_vec()));
    for c in &chunks {
        ops::encode(&Op::Datagram { from: 0, bytes: c }, &mut extra);
        ops::encode(&Op::EndBatch, &mut extra);
    }
    ops::encode(&Op::Advance(MILLI), &mut extra);
    nodes.push(extra);

    // Node 0 stops (its END names no successor): an election, and the
    // member follows the new primary.
    let mut w = World::new();
    w.settle();
    for s in 0..160u32 {
        if s == 30 {
            let mut env = crate::actors::Quiet {
                keep: true,
                ..Default::default()
            };
            let now = w.nodes[0].now;
            w.nodes[0].node.stop(now, &mut env);
            w.wire
                .extend(env.sent.into_iter().map(|(to, d)| (addr(0), to, d)));
        }
        if s == 31 {
            w.down[0] = true;
        }
        let p = (5..=20).contains(&s).then(|| payload(s));
        w.step(1, p.as_deref());
    }
    nodes.push(w.rec[1].clone());
    members.push(w.rec[3].clone());

    // Retention: 80 publishes, then time passes (20 ms steps) beyond the
    // first look of retention.
    let mut w = World::new();
    w.settle();
    for s in 0..100u32 {
        let p = (5..85).contains(&s).then(|| payload(s % 4));
        w.step(1, p.as_deref());
    }
    for _ in 0..50 {
        w.step(20, None);
    }
    nodes.push(w.rec[0].clone());
    members.push(w.rec[3].clone());
    Recorded { nodes, members }
}
