//! Fingerprints of the state machines, for a model checker that
//! deduplicates the states it explores (`native/tachyon_mc`, after
//! stateright): two states with the same fingerprint are taken for the
//! same state, so a fingerprint covers every field that can change what a
//! state machine does next, and a field left out makes the check unsound.
//!
//! Each state machine hashes its fields by name, destructured without
//! `..` ([`Node::fingerprint`](super::node::Node::fingerprint),
//! [`Tx::fingerprint`](super::member::Tx::fingerprint),
//! [`Rx::fingerprint`](super::member::Rx::fingerprint)): a field added
//! later does not compile until it is hashed or named as left out. Parts
//! with no field to leave out derive `Hash`. Left out, each for a reason
//! given where it is:
//!
//! * statistics counters (`c`), which no state machine reads back, except
//!   the member's `looked` (read by [`Tx`](super::member::Tx)'s window),
//!   which is hashed;
//! * scratch buffers, written from empty before every use (`scratch`, the
//!   primary's `beat_to`, the publishing side's buffer `pool`), and the
//!   primary's datagram being built when it holds no message (`out`);
//! * the gap fill's count of requests ([`Fill`](super::fill::Fill)), a
//!   statistic kept across resets;
//! * the simulated disk's record of prefix hashes and of what changed
//!   ([`MemLog`](super::MemLog): `chain`, `changed_from`, `prefixes`),
//!   which the simulator reads, never a node.
//!
//! Maps are hashed in key order (their iteration order depends on their
//! hasher's keys, not on their content); the receive side's ring by the
//! entries it holds, not by its buffer's layout.

use std::hash::{Hash, Hasher};

/// Hashes a map's entries in key order.
pub(crate) fn hash_sorted<'a, K, V, H>(entries: impl Iterator<Item = (&'a K, &'a V)>, h: &mut H)
where
    K: Ord + Hash + 'a,
    V: Hash + 'a,
    H: Hasher,
{
    let mut v: Vec<(&K, &V)> = entries.collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v.len().hash(h);
    for (k, x) in v {
        k.hash(h);
        x.hash(h);
    }
}
