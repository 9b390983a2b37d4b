//! The input of the actor targets ([`crate::actors`]): a sequence of
//! operations, each a tag byte and what it needs:
//!
//! ```text
//! tag & 3 == 0  datagram   u8 sender (% SENDERS), u16 len, len bytes
//! tag & 3 == 1  advance    u8 n: time goes on n ms (n * 100 ms if tag
//!                          & 0x80), then the actor ticks
//! tag & 3 == 2  end batch  (the end of a poll's datagrams)
//! tag & 3 == 3  extra      u8 arg, u16 len, len bytes (the actor's own
//!                          call: a member publishes the bytes, a node is
//!                          told a peer is down)
//! ```
//!
//! A length past the input takes what is left. At most [`MAX_OPS`]
//! operations are read.

use std::net::SocketAddr;

use tachyon_core::seq::core::{Nanos, MILLI};

/// Operations read from one input at most (a bound on one run's time).
pub const MAX_OPS: usize = 512;

/// The addresses datagrams come from: the three nodes of the group, two
/// members, a node joining, a stranger, an IPv6 stranger.
pub const SENDERS: usize = 8;

pub fn sender(i: usize) -> SocketAddr {
    match i % SENDERS {
        i @ 0..=2 => node_addr(i),
        3 => SocketAddr::from(([10, 0, 0, 2], 8000)),
        4 => SocketAddr::from(([10, 0, 0, 2], 8001)),
        5 => node_addr(3),
        6 => SocketAddr::from(([192, 0, 2, 9], 9)),
        _ => SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], 7000)),
    }
}

/// The index of `a` in the senders (the stranger's for any other).
pub fn sender_index(a: SocketAddr) -> usize {
    (0..SENDERS).find(|&i| sender(i) == a).unwrap_or(6)
}

/// Node `i`'s address.
pub fn node_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 7000 + i as u16))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    Datagram { from: usize, bytes: &'a [u8] },
    Advance(Nanos),
    EndBatch,
    Extra { arg: u8, bytes: &'a [u8] },
}

/// The operations of `data`.
pub fn parse(data: &[u8]) -> impl Iterator<Item = Op<'_>> {
    let mut rest = data;
    std::iter::from_fn(move || {
        let (&tag, r) = rest.split_first()?;
        rest = r;
        let mut byte = || {
            let (&b, r) = rest.split_first().unwrap_or((&0, &[]));
            rest = r;
            b
        };
        Some(match tag & 3 {
            0 | 3 => {
                let arg = byte();
                let len = u16::from_le_bytes([byte(), byte()]) as usize;
                let (bytes, r) = rest.split_at(len.min(rest.len()));
                rest = r;
                if tag & 3 == 0 {
                    Op::Datagram {
                        from: arg as usize % SENDERS,
                        bytes,
                    }
                } else {
                    Op::Extra { arg, bytes }
                }
            }
            1 => {
                let unit = if tag & 0x80 != 0 { 100 * MILLI } else { MILLI };
                Op::Advance(byte() as Nanos * unit)
            }
            _ => Op::EndBatch,
        })
    })
    .take(MAX_OPS)
}

/// Appends `op` to `out` as [`parse`] reads it (an advance is rounded
/// down to whole ms, at most 255).
pub fn encode(op: &Op<'_>, out: &mut Vec<u8>) {
    let with_bytes = |out: &mut Vec<u8>, tag: u8, arg: u8, b: &[u8]| {
        let b = &b[..b.len().min(u16::MAX as usize)];
        out.extend_from_slice(&[tag, arg]);
        out.extend_from_slice(&(b.len() as u16).to_le_bytes());
        out.extend_from_slice(b);
    };
    match *op {
        Op::Datagram { from, bytes } => with_bytes(out, 0, from as u8, bytes),
        Op::Advance(d) => out.extend_from_slice(&[1, (d / MILLI).min(255) as u8]),
        Op::EndBatch => out.push(2),
        Op::Extra { arg, bytes } => with_bytes(out, 3, arg, bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip() {
        let ops = [
            Op::Datagram {
                from: 3,
                bytes: b"abc",
            },
            Op::Advance(7 * MILLI),
            Op::EndBatch,
            Op::Extra { arg: 9, bytes: b"" },
        ];
        let mut b = Vec::new();
        for op in &ops {
            encode(op, &mut b);
        }
        assert_eq!(parse(&b).collect::<Vec<_>>(), ops);
        assert_eq!(sender_index(sender(5)), 5);
    }
}
