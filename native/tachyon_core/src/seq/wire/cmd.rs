//! Command datagrams (`"TC"`): a member to the primary.

use super::*;

/// Starts a command datagram in `out` (cleared). `incarnation`: the
/// member's (0 where it does not matter: replay requests): a command of
/// an earlier incarnation of the member, delayed past the hello of a
/// later one, is told apart by it.
pub fn cmd_header(
    out: &mut Vec<u8>,
    kind: CmdKind,
    member_id: u32,
    session: u64,
    incarnation: u64,
) {
    out.clear();
    out.extend_from_slice(&CMD_MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&member_id.to_le_bytes());
    out.extend_from_slice(&session.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
}

/// Sets the message count of a command datagram.
pub fn set_cmd_count(out: &mut [u8], count: u16) {
    out[16..18].copy_from_slice(&count.to_le_bytes());
}

/// Appends a published message to a command datagram.
pub fn write_cmd_msg(out: &mut Vec<u8>, member_seq: u64, flags: u8, data: &[u8]) {
    out.extend_from_slice(&member_seq.to_le_bytes());
    out.push(flags);
    out.push(0);
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(data);
}

/// Makes a publish command start at its message `seq` and marks that one
/// [`SKIP`] (after a fork lost the member's messages before it: those
/// already in the command go). Returns the command's new first
/// `member_seq`, `None` if it has no message from `seq` on or is not
/// well formed (then it is left as it was).
pub fn skip_to(d: &mut Vec<u8>, seq: u64) -> Option<u64> {
    if d.len() < CMD_HEADER {
        return None;
    }
    let count = u16_at(d, 16);
    let mut at = CMD_HEADER;
    for k in 0..count {
        if d.len() < at + CMD_MSG_HEADER {
            return None;
        }
        let s = u64::from_le_bytes(d[at..at + 8].try_into().ok()?);
        if s >= seq {
            d.drain(CMD_HEADER..at);
            d[CMD_HEADER + 8] |= SKIP;
            set_cmd_count(d, count - k);
            return Some(s);
        }
        at += CMD_MSG_HEADER + u16_at(d, at + 10) as usize;
    }
    None
}

/// The messages of a publish command whose last fragment it holds (the
/// messages it completes); 0 if it is not well formed.
pub fn final_fragments(d: &[u8]) -> u64 {
    if d.len() < CMD_HEADER {
        return 0;
    }
    let count = u16_at(d, 16);
    let (mut at, mut n) = (CMD_HEADER, 0);
    for _ in 0..count {
        if d.len() < at + CMD_MSG_HEADER {
            return n;
        }
        if d[at + 8] & MORE == 0 {
            n += 1;
        }
        at += CMD_MSG_HEADER + u16_at(d, at + 10) as usize;
    }
    n
}

/// A replay request for `[from, to)`.
pub fn replay(out: &mut Vec<u8>, member_id: u32, session: u64, from: u64, to: u64) {
    cmd_header(out, CmdKind::Replay, member_id, session, 0);
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&to.to_le_bytes());
}

/// What a member says in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloBody {
    /// [`UNICAST`], [`KEEPALIVE`].
    pub flags: u8,
    /// Chosen at random when the member opens: two members claiming one id
    /// are told apart by it.
    pub incarnation: u64,
    /// The epoch of the last entry the member delivered (`u32::MAX`: none).
    pub epoch: u32,
    /// The next sequence number the member delivers.
    pub next: u64,
}

/// A hello.
pub fn hello(out: &mut Vec<u8>, member_id: u32, session: u64, h: &HelloBody) {
    cmd_header(out, CmdKind::Hello, member_id, session, h.incarnation);
    out.push(h.flags);
    out.extend_from_slice(&h.incarnation.to_le_bytes());
    out.extend_from_slice(&h.epoch.to_le_bytes());
    out.extend_from_slice(&h.next.to_le_bytes());
}

/// A decoded command datagram.
#[derive(Debug, Clone, Copy)]
pub struct Cmd<'a> {
    pub kind: CmdKind,
    pub member_id: u32,
    pub session: u64,
    pub count: u16,
    /// The sending member's incarnation (0: not said).
    pub incarnation: u64,
    body: &'a [u8],
}

/// A published message inside a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published<'a> {
    pub member_seq: u64,
    pub flags: u8,
    pub data: &'a [u8],
}

impl<'a> Cmd<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Cmd<'a>, Bad> {
        if b.len() < CMD_HEADER || u16_at(b, 0) != CMD_MAGIC || b[2] != VERSION {
            return Err(Bad::Malformed);
        }
        let kind = match b[3] {
            1 => CmdKind::Publish,
            2 => CmdKind::Hello,
            3 => CmdKind::Replay,
            4 => CmdKind::Bye,
            _ => return Err(Bad::Malformed),
        };
        let cmd = Cmd {
            kind,
            member_id: u32_at(b, 4),
            session: u64_at(b, 8),
            count: u16_at(b, 16),
            incarnation: u64_at(b, 20),
            body: &b[CMD_HEADER..],
        };
        if cmd.member_id == 0 {
            return Err(Bad::Malformed);
        }
        let ok = match kind {
            CmdKind::Publish => {
                let mut rest = cmd.body;
                let mut ok = cmd.count > 0;
                for _ in 0..cmd.count {
                    match Self::published_at(rest) {
                        Some((_, used)) => rest = &rest[used..],
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                ok && rest.is_empty()
            }
            CmdKind::Hello => cmd.body.len() == HELLO_BODY,
            CmdKind::Replay => cmd.body.len() == 16,
            CmdKind::Bye => cmd.body.is_empty(),
        };
        if ok {
            Ok(cmd)
        } else {
            Err(Bad::Malformed)
        }
    }

    fn published_at(b: &'a [u8]) -> Option<(Published<'a>, usize)> {
        if b.len() < CMD_MSG_HEADER {
            return None;
        }
        let len = u16_at(b, 10) as usize;
        let end = CMD_MSG_HEADER + len;
        if b.len() < end || b[8] & CONTROL != 0 {
            return None;
        }
        Some((
            Published {
                member_seq: u64_at(b, 0),
                flags: b[8],
                data: &b[CMD_MSG_HEADER..end],
            },
            end,
        ))
    }

    /// The messages of a publish command.
    pub fn published(&self) -> impl Iterator<Item = Published<'a>> + 'a {
        let mut rest = self.body;
        (0..self.count).map_while(move |_| {
            let (p, used) = Self::published_at(rest)?;
            rest = &rest[used..];
            Some(p)
        })
    }

    /// A replay's `(from, to)`.
    pub fn range(&self) -> (u64, u64) {
        if self.kind == CmdKind::Replay && self.body.len() == 16 {
            (u64_at(self.body, 0), u64_at(self.body, 8))
        } else {
            (0, 0)
        }
    }

    /// A hello's body.
    pub fn hello(&self) -> Option<HelloBody> {
        (self.kind == CmdKind::Hello && self.body.len() == HELLO_BODY).then(|| HelloBody {
            flags: self.body[0],
            incarnation: u64_at(self.body, 1),
            epoch: u32_at(self.body, 9),
            next: u64_at(self.body, 13),
        })
    }
}
