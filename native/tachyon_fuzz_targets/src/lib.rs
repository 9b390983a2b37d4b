//! Fuzz targets of every parser of untrusted bytes in `tachyon_core`.
//!
//! Each target is a `pub fn name(data: &[u8])` that must never panic,
//! read out of bounds or allocate by an unchecked length, whatever
//! `data` holds. The same functions are run by libFuzzer (`native/fuzz`,
//! nightly, `bin/fuzz`) and by the stable replay test (`tests/replay.rs`:
//! the committed corpus plus deterministic mutations of it, part of
//! `cargo test --workspace`).
//!
//! * [`wire`]: the sequencer's datagrams as they come off a socket
//!   (bus, command, peer datagrams, log entries);
//! * [`state`]: what a node decodes from its log and peers (memberships,
//!   checkpoints);
//! * [`disk`]: the files a store, a table and a segment directory read
//!   back at open (manifests, hint files, segment images);
//! * [`guard`]: the envelope every datagram wears when a group has keys,
//!   and the key files;
//! * [`actors`]: arbitrary datagrams fed to a real sequencer node and to a
//!   real member, which catches unchecked lengths past the parsers.
//!
//! Formats protected by a CRC take a first *mode* byte: with its bit 0
//! set the harness recomputes the CRC(s) before decoding, so that the
//! fuzzer reaches the fields behind the checksum.

pub mod actors;
pub mod disk;
pub mod guard;
pub mod mutate;
pub mod ops;
pub mod seeds;
mod seeds_disk;
pub mod state;
pub mod wire;

/// A fuzz target.
pub type Target = fn(&[u8]);

/// Every target by name (the name of its corpus directory and of its
/// cargo-fuzz binary).
pub const TARGETS: &[(&str, Target)] = &[
    ("wire_bus", wire::wire_bus),
    ("wire_cmd", wire::wire_cmd),
    ("wire_peer", wire::wire_peer),
    ("wire_msg", wire::wire_msg),
    ("membership", state::membership),
    ("checkpoint", state::checkpoint),
    ("dir_manifest", disk::dir_manifest),
    ("table_segment", disk::table_segment),
    ("table_hints", disk::table_hints),
    ("table_manifest", disk::table_manifest),
    ("store_segment", disk::store_segment),
    ("node", actors::node),
    ("member", actors::member),
    ("guard_open", guard::guard_open),
    ("key_file", guard::key_file),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|t| t.0 == name).map(|t| t.1)
}
