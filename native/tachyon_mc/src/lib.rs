//! Model checking of the sequencer group's real cores (design notes to come).

pub mod actor;
pub mod config;
pub mod datagram;
pub mod history;
pub mod member;
pub mod model;
pub mod node;
pub mod prologue;
pub mod props;

pub use config::Bounds;

/// The hasher of every fingerprint: foldhash's quality variant with a
/// fixed seed (fast, and the same numbers in every run).
pub fn fp_hasher() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x7ac4_f00d_5eed_0001).build_hasher()
}
pub use model::{Action, McModel};
