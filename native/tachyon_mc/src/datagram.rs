//! The message the actors exchange: the datagram's bytes as the real
//! cores wrote them, with a readable `Debug` for traces.

use std::fmt;

use tachyon_core::seq::wire::{self, Bus, BusKind, Cmd, CmdKind, Msg, Peer, PeerKind};

/// One UDP datagram (shared: a state's network is cloned with every
/// step, its datagrams are not).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Datagram(pub std::sync::Arc<[u8]>);

impl Datagram {
    pub fn new(d: Vec<u8>) -> Datagram {
        Datagram(d.into())
    }
}

impl fmt::Debug for Datagram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

/// An entry of a log or of a data datagram, in a few characters:
/// `s1000` (a session record), `e64` (an epoch record), `cfg`, `m1:1`
/// (member 1's message 1) with its payload's counter.
pub fn entry(m: &Msg<'_>) -> String {
    if m.flags & wire::CONTROL != 0 {
        if m.flags & wire::EPOCH != 0 {
            format!("e{}", m.term)
        } else if m.flags & wire::CONFIG != 0 {
            format!("cfg/{}", m.term)
        } else {
            format!("s{}/{}", m.member_seq, m.term)
        }
    } else {
        format!("m{}:{}/{}", m.member_id, m.member_seq, m.term)
    }
}

/// A datagram in a line.
pub fn describe(d: &[u8]) -> String {
    match wire::magic(d) {
        wire::BUS_MAGIC => match Bus::parse(d) {
            Ok(b) => bus(&b),
            Err(_) => "bus ?".into(),
        },
        wire::CMD_MAGIC => match Cmd::parse(d) {
            Ok(c) => cmd(&c),
            Err(_) => "cmd ?".into(),
        },
        wire::PEER_MAGIC => match Peer::parse(d) {
            Ok(p) => peer(&p),
            Err(_) => "peer ?".into(),
        },
        _ => format!("? {} bytes", d.len()),
    }
}

fn bus(b: &Bus<'_>) -> String {
    let h = &b.h;
    let head = format!(
        "from n{} term {} seq {} commit {}{}",
        h.node,
        h.term,
        h.seq,
        h.commit,
        if b.flags & wire::HOLDS != 0 && b.kind != BusKind::Welcome {
            " holds"
        } else {
            ""
        }
    );
    match b.kind {
        BusKind::Data => {
            let es: Vec<String> = b
                .messages()
                .map(|(s, m)| format!("{s}:{}", entry(&m)))
                .collect();
            format!("DATA {head} [{}]", es.join(" "))
        }
        BusKind::Heartbeat => format!("HEARTBEAT {head}"),
        BusKind::Welcome => match b.welcome() {
            Some(w) => format!(
                "WELCOME {head} last {} epoch {} ends {}{}",
                w.last,
                w.epoch,
                w.epoch_end,
                if b.flags & wire::TAKEN != 0 {
                    " taken"
                } else {
                    ""
                }
            ),
            None => format!("WELCOME {head} ?"),
        },
        BusKind::End => format!("END {head}"),
        BusKind::Nack => format!("NACK {head} {:?}", b.nacked()),
        BusKind::Full => format!("FULL {head} {:?}", b.refused()),
        BusKind::Trimmed => format!("TRIMMED {head} {:?}", b.trimmed()),
    }
}

fn cmd(c: &Cmd<'_>) -> String {
    match c.kind {
        CmdKind::Publish => {
            let ms: Vec<String> = c
                .published()
                .map(|p| format!("{}{:?}", p.member_seq, p.data))
                .collect();
            format!("PUBLISH m{} [{}]", c.member_id, ms.join(" "))
        }
        CmdKind::Hello => match c.hello() {
            Some(h) => format!(
                "HELLO m{} next {} epoch {}{}",
                c.member_id,
                h.next,
                if h.epoch == u32::MAX {
                    "-".to_string()
                } else {
                    h.epoch.to_string()
                },
                if h.flags & wire::KEEPALIVE != 0 {
                    " keepalive"
                } else {
                    ""
                }
            ),
            None => format!("HELLO m{} ?", c.member_id),
        },
        CmdKind::Replay => {
            let (a, z) = c.range();
            format!("REPLAY? m{} [{a}, {z})", c.member_id)
        }
        CmdKind::Bye => format!("BYE m{}", c.member_id),
    }
}

fn peer(p: &Peer) -> String {
    let h = &p.h;
    let flags = format!(
        "{}{}{}",
        if h.flags & wire::GRANTED != 0
            && matches!(h.kind, PeerKind::VoteReply | PeerKind::PreVoteReply)
        {
            " granted"
        } else {
            ""
        },
        if h.flags & wire::LEARNER != 0 {
            " learner"
        } else {
            ""
        },
        if h.flags & wire::LEADER != 0 && h.kind == PeerKind::ProbeReply {
            " primary"
        } else {
            ""
        },
    );
    let body = match h.kind {
        PeerKind::PreVote | PeerKind::Vote => format!("last term {} end {}", p.a, p.b),
        PeerKind::Ack => format!("end {}", p.b),
        PeerKind::Sync => format!("epoch {} end {}", p.a, p.b),
        PeerKind::SyncReply => format!("epoch {} ends {} log end {}", p.a, p.b, p.c),
        PeerKind::ProbeReply => format!("last term {} end {} commit {}", p.a, p.b, p.c),
        PeerKind::JoinReply => format!("id {}", p.a),
        _ => String::new(),
    };
    format!(
        "{:?} from n{} term {} inc {}{flags} {body}",
        h.kind, h.node, h.term, h.incarnation
    )
    .trim_end()
    .to_string()
}
