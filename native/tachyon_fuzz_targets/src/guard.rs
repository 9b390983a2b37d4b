//! The guard (`tachyon_core::seq::guard`): the first thing every datagram
//! meets when a group has keys, so every byte of it is untrusted.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use tachyon_core::seq::guard::keys::KEY_LEN;
use tachyon_core::seq::guard::{Guard, Key, Keys, Role, Shared, OVERHEAD};

/// The member id whose credential the target's member holds.
const MEMBER: u32 = 7;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

fn bus() -> SocketAddr {
    SocketAddr::from(([239, 1, 2, 3], 7400))
}

fn group() -> Keys {
    let secrets = [Key::from_bytes([1; KEY_LEN]), Key::from_bytes([2; KEY_LEN])];
    Keys::of_secrets(&secrets).expect("two generations")
}

fn guard(keys: Keys, role: Role, encrypt: bool) -> Guard {
    Guard::new(
        &Shared::new(keys, role, encrypt).expect("keys for the role"),
        0,
    )
}

/// The first byte is a mode: bit 0 `encrypt`; bit 1 clear, the rest is a
/// datagram off the wire, opened by a node and by a member (any outcome,
/// no panic, and an opened datagram is never longer than what came in);
/// bit 1 set, the rest is a datagram that a node seals (for a node, then
/// for the bus), then opened: it must come back the same, once (a second
/// copy is a replay), and a copy with one byte flipped (at the offset the
/// mode's upper bits and the next byte pick) must be refused.
pub fn guard_open(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let encrypt = mode & 1 != 0;
    let g = group();
    let mut node = guard(g.clone(), Role::Node(addr(2)), encrypt);
    let mut member = guard(
        g.credential(MEMBER).expect("a credential"),
        Role::Member(MEMBER),
        encrypt,
    );
    let mut out = Vec::new();
    if mode & 2 == 0 {
        for from in [addr(1), addr(9)] {
            if let Ok(p) = node.open(from, rest, &mut out) {
                assert!(
                    p.len() + OVERHEAD - 16 <= rest.len(),
                    "opened more than came"
                );
            }
            if let Ok(p) = member.open(from, rest, &mut out) {
                assert!(p.len() <= rest.len(), "opened more than came");
            }
        }
        black_box(node.counters().rejections());
        return;
    }
    let mut sender = guard(g, Role::Node(addr(1)), encrypt);
    let flip = ((mode as usize >> 2) << 8) | *rest.first().unwrap_or(&0) as usize;
    let mut sealed = Vec::new();
    // A member cannot check the nodes' second tag of a bus datagram (it
    // does not hold their key): flips go before it.
    for (to, receiver, unchecked) in [(addr(2), &mut node, 0), (bus(), &mut member, 16)] {
        sender.seal(to, rest, &mut sealed);
        assert_eq!(
            receiver.open(addr(1), &sealed, &mut out).ok(),
            Some(rest),
            "a sealed datagram did not open as itself"
        );
        assert!(
            receiver.open(addr(1), &sealed, &mut out).is_err(),
            "a replay opened"
        );
        sender.seal(to, rest, &mut sealed);
        let at = flip % (sealed.len() - unchecked);
        sealed[at] ^= 0x01 << (mode >> 5);
        assert!(
            receiver.open(addr(1), &sealed, &mut out).is_err(),
            "a datagram with byte {at} flipped opened"
        );
    }
}

/// `Keys::parse` of a key file's text (a credential or a group's), then
/// what a node and a member derive from what parsed.
pub fn key_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(keys) = Keys::parse(&text) else { return };
    black_box(keys.is_group());
    for id in [0, 1, MEMBER, u32::MAX] {
        black_box(keys.for_member(id).is_ok());
        black_box(keys.credential(id).is_ok());
    }
    black_box(Arc::new(keys));
}

/// Seeds of `guard_open`: datagrams a node sealed for a node and for the
/// bus, and a member for the nodes (both modes), and plain datagrams to
/// seal (mode bit 1).
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let g = group();
    let plain: Vec<Vec<u8>> = crate::seeds::of("wire_peer")
        .into_iter()
        .take(3)
        .chain(crate::seeds::of("wire_cmd").into_iter().take(2))
        .collect();
    for encrypt in [false, true] {
        let mode = encrypt as u8;
        let mut node = guard(g.clone(), Role::Node(addr(1)), encrypt);
        let cred = g.credential(MEMBER).expect("a credential");
        let mut member = guard(cred, Role::Member(MEMBER), encrypt);
        let mut sealed = Vec::new();
        for p in &plain {
            for to in [addr(2), bus()] {
                node.seal(to, p, &mut sealed);
                out.push([&[mode][..], &sealed].concat());
            }
            member.seal(addr(2), p, &mut sealed);
            out.push([&[mode][..], &sealed].concat());
            out.push([&[mode | 2][..], p].concat());
        }
    }
    out
}

/// Seeds of `key_file`: a group's file of one and of two generations, and
/// a member's credential.
pub fn key_files() -> Vec<Vec<u8>> {
    let one = [Key::from_bytes([1; KEY_LEN])];
    let two = [Key::from_bytes([1; KEY_LEN]), Key::from_bytes([2; KEY_LEN])];
    vec![
        Keys::group_file(&one).into_bytes(),
        Keys::group_file(&two).into_bytes(),
        Keys::member_file(&two, MEMBER)
            .expect("a credential")
            .into_bytes(),
    ]
}
