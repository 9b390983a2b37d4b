//! What a sequencer node decodes from its log, its disk and its peers:
//! a membership (a CONFIG entry's data, a welcome's tail) and a
//! checkpoint (a file beside the log, or the chunks of a primary's).

use std::hint::black_box;

use tachyon_core::seq::core::node::checkpoint::Checkpoint;
use tachyon_core::seq::core::node::{Membership, NodeConfig};
use tachyon_core::seq::core::{Log, MemLog};

use crate::actors::{addr, Quiet};

/// `Membership::decode`; what decodes re-encodes to the same membership.
pub fn membership(data: &[u8]) {
    let Some(m) = Membership::decode(data) else {
        return;
    };
    black_box((m.n_voters(), m.majority(), m.voters().count()));
    let mut out = Vec::new();
    m.encode(&mut out);
    assert_eq!(Membership::decode(&out).as_ref(), Some(&m));
}

/// `Checkpoint::decode` (mode byte bit 0: the trailing CRC32C is
/// recomputed first); a decoded checkpoint re-encodes to one that decodes
/// the same, and a node of a group of 3 starts from it (its log holding
/// the checkpoint, as after an install) and ticks.
pub fn checkpoint(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let mut b = body.to_vec();
    if mode & 1 != 0 && b.len() >= 4 {
        let n = b.len() - 4;
        let crc = tachyon_core::crc::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
    let Some(c) = Checkpoint::decode(&b) else {
        return;
    };
    assert_eq!(Checkpoint::decode(&c.encode()).as_ref(), Some(&c));
    // The in-memory log of the tests holds `first` empty slots: a bound of
    // the harness, not of the format.
    if c.first == 0 || c.first > 4096 {
        return;
    }
    let mut log = MemLog::new();
    if log.install(c.first, &b).is_err() {
        return;
    }
    let group = vec![addr(0), addr(1), addr(2)];
    let cfg = NodeConfig::new(1, group);
    if let Ok(mut node) = tachyon_core::seq::core::node::Node::new(cfg, log, 0) {
        let mut env = Quiet::default();
        node.tick(0, &mut env);
        node.tick(200_000_000, &mut env);
        black_box((
            node.term(),
            node.next_seq(),
            node.membership().nodes().len(),
        ));
    }
}
