//! Peer datagrams (`"TN"`): between the nodes of a sequencer group.
//!
//! ```text
//! 0  u16 magic "TN"   2 u8 version   3 u8 kind
//! 4  u32 term
//! 8  u64 session
//! 16 u8  node         17 u8 flags (GRANTED, LEARNER, LEADER)   18 u16 0
//! 20 u64 log id       (the sender's log: made when it was created)
//! 28 u32 incarnation  (the sender's process: random at each start)
//! 32 body: up to three u64
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::*;

/// An address as a peer body: `a` = family (4 or 6) << 16 | port, `b` the
/// IPv4 address (or the first 8 bytes of the IPv6 one), `c` the IPv6
/// address's last 8 bytes.
pub fn addr_body(addr: SocketAddr) -> (u64, u64, u64) {
    let port = addr.port() as u64;
    match addr.ip() {
        IpAddr::V4(ip) => (4 << 16 | port, u32::from(ip) as u64, 0),
        IpAddr::V6(ip) => {
            let o = ip.octets();
            let half = |r: &[u8]| u64::from_be_bytes(r.try_into().unwrap_or([0; 8]));
            (6 << 16 | port, half(&o[..8]), half(&o[8..]))
        }
    }
}

/// The address of [`addr_body`] (`None` for another family or a port 0).
pub fn body_addr(a: u64, b: u64, c: u64) -> Option<SocketAddr> {
    let port = (a & 0xffff) as u16;
    let ip: IpAddr = match a >> 16 {
        4 if b <= u32::MAX as u64 && c == 0 => Ipv4Addr::from(b as u32).into(),
        6 => {
            let mut o = [0u8; 16];
            o[..8].copy_from_slice(&b.to_be_bytes());
            o[8..].copy_from_slice(&c.to_be_bytes());
            Ipv6Addr::from(o).into()
        }
        _ => return None,
    };
    (port != 0).then_some(SocketAddr::new(ip, port))
}

/// A peer datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHeader {
    pub kind: PeerKind,
    pub term: u32,
    pub session: u64,
    pub node: u8,
    pub flags: u8,
    /// The sender's log: an acknowledgement of another log (a replaced
    /// disk) is not the same node's word.
    pub log_id: u64,
    /// The sender's process: a restarted node acknowledges anew.
    pub incarnation: u32,
}

/// A decoded peer datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub h: PeerHeader,
    /// PreVote/Vote: (last log term, log end); Ack: (0, match end); Sync:
    /// (last epoch, log end); SyncReply: (epoch, epoch end) with `c` the
    /// primary's log end; ProbeReply: (last log term, log end) with `c`
    /// the commit position the sender knows.
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

impl Peer {
    /// Whether datagrams of `kind` carry bytes after the body.
    fn has_payload(kind: u8) -> bool {
        kind == PeerKind::Checkpoint as u8 || kind == PeerKind::HelloVia as u8
    }

    /// A CHECKPOINT's chunk or a HELLO_VIA's hello (empty for any other).
    pub fn payload(b: &[u8]) -> &[u8] {
        if b.len() > PEER_HEADER + 24 && Self::has_payload(b[3]) {
            &b[PEER_HEADER + 24..]
        } else {
            &[]
        }
    }

    pub(super) fn body_len(kind: PeerKind) -> usize {
        match kind {
            PeerKind::PreVoteReply | PeerKind::VoteReply | PeerKind::Probe | PeerKind::Join => 0,
            PeerKind::SyncReply
            | PeerKind::ProbeReply
            | PeerKind::Checkpoint
            | PeerKind::JoinVia
            | PeerKind::HelloVia => 24,
            _ => 16,
        }
    }

    /// Writes the datagram to `out` (cleared).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&PEER_MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(self.h.kind as u8);
        out.extend_from_slice(&self.h.term.to_le_bytes());
        out.extend_from_slice(&self.h.session.to_le_bytes());
        out.push(self.h.node);
        out.push(self.h.flags);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.h.log_id.to_le_bytes());
        out.extend_from_slice(&self.h.incarnation.to_le_bytes());
        let n = Self::body_len(self.h.kind);
        for (i, v) in [self.a, self.b, self.c].iter().enumerate() {
            if i * 8 < n {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    pub fn parse(b: &[u8]) -> Result<Peer, Bad> {
        if b.len() < PEER_HEADER || u16_at(b, 0) != PEER_MAGIC || b[2] != VERSION {
            return Err(Bad::Malformed);
        }
        let kind = match b[3] {
            1 => PeerKind::PreVote,
            2 => PeerKind::PreVoteReply,
            3 => PeerKind::Vote,
            4 => PeerKind::VoteReply,
            5 => PeerKind::Ack,
            6 => PeerKind::Sync,
            7 => PeerKind::SyncReply,
            8 => PeerKind::Probe,
            9 => PeerKind::ProbeReply,
            10 => PeerKind::Join,
            11 => PeerKind::JoinReply,
            12 => PeerKind::Checkpoint,
            13 => PeerKind::CheckpointReq,
            14 => PeerKind::Retain,
            15 => PeerKind::JoinVia,
            16 => PeerKind::HelloVia,
            _ => return Err(Bad::Malformed),
        };
        let n = Self::body_len(kind);
        let ok = if Self::has_payload(kind as u8) {
            b.len() >= PEER_HEADER + n
        } else {
            b.len() == PEER_HEADER + n
        };
        if !ok {
            return Err(Bad::Malformed);
        }
        let at = |i: usize| {
            if i * 8 < n {
                u64_at(b, PEER_HEADER + i * 8)
            } else {
                0
            }
        };
        Ok(Peer {
            h: PeerHeader {
                kind,
                term: u32_at(b, 4),
                session: u64_at(b, 8),
                node: b[16],
                flags: b[17],
                log_id: u64_at(b, 20),
                incarnation: u32_at(b, 28),
            },
            a: at(0),
            b: at(1),
            c: at(2),
        })
    }
}
