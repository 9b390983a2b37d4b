//! The sequencer's datagrams (`tachyon_core::seq::wire`): each target
//! parses the bytes and, if they parse, calls every accessor of the
//! decoded datagram, and checks that what a writer re-encodes parses the
//! same.

use std::hint::black_box;

use tachyon_core::seq::core::node::Membership;
use tachyon_core::seq::wire::{self, Bus, Cmd, Msg, Peer};

/// `Bus::parse`, then `messages()` (and each message's `config()`,
/// `epoch()`), `end()`, `successor()`, `welcome()`, `welcome_tail()` (as
/// a membership), `nacked()`, `trimmed()`, `refused()`.
pub fn wire_bus(data: &[u8]) {
    black_box(wire::magic(data));
    let Ok(b) = Bus::parse(data) else { return };
    let mut n = 0u64;
    for (seq, m) in b.messages() {
        assert!(
            seq >= b.h.seq && seq < b.end(),
            "a message beyond the datagram's end"
        );
        msg(&m);
        n += 1;
    }
    if b.kind == wire::BusKind::Data {
        assert_eq!(
            n, b.count as u64,
            "messages() lost messages that parse() took"
        );
    }
    black_box((b.end(), b.successor(), b.nacked(), b.trimmed(), b.refused()));
    if let Some(w) = b.welcome() {
        black_box(w);
        black_box(Membership::decode(b.welcome_tail()));
    }
}

/// `Cmd::parse`, then `published()`, `range()`, `hello()`; and the
/// raw-datagram helpers a member applies to its own commands
/// (`final_fragments`, `skip_to`).
pub fn wire_cmd(data: &[u8]) {
    black_box(wire::final_fragments(data));
    let seq = data
        .get(data.len().saturating_sub(8)..)
        .map_or(0, |t| t.iter().fold(0u64, |a, b| a << 8 | *b as u64));
    let mut copy = data.to_vec();
    if let Some(first) = wire::skip_to(&mut copy, seq) {
        assert!(first >= seq);
    }
    let Ok(c) = Cmd::parse(data) else { return };
    let mut n = 0;
    for p in c.published() {
        black_box(p);
        n += 1;
    }
    if c.kind == wire::CmdKind::Publish {
        assert_eq!(n, c.count, "published() lost messages that parse() took");
    }
    black_box((c.range(), c.hello()));
}

/// `Peer::parse`, `Peer::payload`, the address of a JOIN_VIA or
/// HELLO_VIA body (`body_addr`), and a write of the decoded datagram
/// parsing to the same.
pub fn wire_peer(data: &[u8]) {
    let payload = Peer::payload(data);
    assert!(payload.len() <= data.len());
    let Ok(p) = Peer::parse(data) else { return };
    black_box(wire::body_addr(p.a, p.b, p.c));
    if let Some(addr) = wire::body_addr(p.a, p.b, p.c) {
        let (a, b, c) = wire::addr_body(addr);
        assert_eq!(wire::body_addr(a, b, c), Some(addr));
    }
    let mut out = Vec::new();
    p.write(&mut out);
    assert_eq!(
        Peer::parse(&out),
        Ok(p),
        "a peer datagram does not round-trip"
    );
    // A HELLO_VIA carries a member's hello: the node parses it as a command.
    black_box(Cmd::parse(payload).is_ok());
}

/// `Msg::from_entry` (a log entry), `config()` (as a membership),
/// `epoch()`, and a write of the entry giving back the same bytes.
pub fn wire_msg(data: &[u8]) {
    let Ok(m) = Msg::from_entry(data) else { return };
    msg(&m);
    let mut out = Vec::new();
    m.write(&mut out);
    assert_eq!(m.size(), data.len());
    // Byte 13 is not read (0 when written).
    assert_eq!(out[..13], data[..13]);
    assert_eq!(out[14..], data[14..]);
}

fn msg(m: &Msg<'_>) {
    black_box(m.epoch());
    if let Some(c) = m.config() {
        black_box(Membership::decode(c));
    }
}
