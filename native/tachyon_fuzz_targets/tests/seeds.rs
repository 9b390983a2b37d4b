//! The seeds are what the real encoders make, and the targets accept
//! them (a seed that does not parse would leave a target's fuzzing at
//! the door).

use tachyon_core::seq::core::node::checkpoint::Checkpoint;
use tachyon_core::seq::core::node::Membership;
use tachyon_core::seq::wire::{Bus, Cmd, Msg, Peer};
use tachyon_fuzz_targets::seeds;

fn of(name: &str) -> Vec<Vec<u8>> {
    seeds::of(name)
}

#[test]
fn every_seed_decodes() {
    for s in of("wire_bus") {
        assert!(Bus::parse(&s).is_ok(), "{s:?}");
    }
    for s in of("wire_cmd") {
        assert!(Cmd::parse(&s).is_ok(), "{s:?}");
    }
    for s in of("wire_peer") {
        assert!(Peer::parse(&s).is_ok(), "{s:?}");
    }
    for s in of("wire_msg") {
        assert!(Msg::from_entry(&s).is_ok(), "{s:?}");
    }
    for s in of("membership") {
        assert!(Membership::decode(&s).is_some(), "{s:?}");
    }
    for s in of("checkpoint") {
        assert!(Checkpoint::decode(&s[1..]).is_some());
    }
    for s in of("table_manifest") {
        assert!(tachyon_core::table::format::decode_manifest(&s[1..]).is_some());
    }
    for s in of("dir_manifest") {
        assert!(tachyon_core::segment::dir::Manifest::decode(&s[1..]).is_ok());
    }
    assert!(!of("store_segment").is_empty());
    assert_eq!(of("node").len(), 5);
    assert_eq!(of("member").len(), 3);
}
