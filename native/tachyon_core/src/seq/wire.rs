//! The sequencer's wire format (docs/FORMAT.md, "Sequencer and bus"), all
//! integers little-endian. Every decoder checks every length against the
//! datagram before reading: garbage is an `Err`, never a panic.
//!
//! A *message* has the same 16-byte header on the bus and in the sequencer's
//! log, so a replay copies a log entry into a datagram as it is:
//!
//! ```text
//! 0  u32 member_id   (0: a control entry, e.g. the session record)
//! 4  u64 member_seq
//! 12 u8  flags       (MORE, CONT, CONTROL, EPOCH)
//! 13 u8  0
//! 14 u16 len         (bytes of data that follow)
//! ```

/// Bus datagram magic, `"TB"`.
pub const BUS_MAGIC: u16 = 0x4254;
/// Command datagram magic, `"TC"`.
pub const CMD_MAGIC: u16 = 0x4354;
pub const VERSION: u8 = 1;

pub const BUS_HEADER: usize = 28;
pub const CMD_HEADER: usize = 20;
pub const MSG_HEADER: usize = 16;
/// A published message's header inside a command datagram.
pub const CMD_MSG_HEADER: usize = 12;

/// More fragments of this message follow.
pub const MORE: u8 = 0x01;
/// Not the first fragment of its message.
pub const CONT: u8 = 0x02;
/// A control entry (the session record): never delivered.
pub const CONTROL: u8 = 0x80;
/// With CONTROL: an epoch record (`member_seq` is the epoch), the first
/// entry a sequencer writes when it takes over.
pub const EPOCH: u8 = 0x40;

/// Kinds of bus datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BusKind {
    /// `count` messages, the first with sequence number `seq`.
    Data = 1,
    /// Nothing new: the next sequence number will be `seq`.
    Heartbeat = 2,
    /// The answer to a hello: `seq` is the next sequence number, the body
    /// (8 bytes) the member's last sequenced `member_seq`.
    Welcome = 3,
}

/// Kinds of command datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CmdKind {
    /// `count` messages to sequence.
    Publish = 1,
    /// Join: body u8 flags (bit 0: send me the bus, unicast).
    Hello = 2,
    /// Resend sequence numbers `[from, to)`: body u64 from, u64 to.
    Replay = 3,
    /// Leave the unicast fan-out.
    Bye = 4,
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Too short, wrong magic, version or kind, or lengths that do not add up.
    Malformed,
    /// Of another session.
    Session,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// A message header and its data (borrowed from a datagram or a log entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    pub member_id: u32,
    pub member_seq: u64,
    pub flags: u8,
    pub data: &'a [u8],
}

impl<'a> Msg<'a> {
    /// Reads a log entry (a header and exactly `len` bytes).
    pub fn from_entry(e: &'a [u8]) -> Result<Msg<'a>, Bad> {
        let (m, used) = Msg::parse(e)?;
        if used != e.len() {
            return Err(Bad::Malformed);
        }
        Ok(m)
    }

    /// Reads one message at the start of `b`; returns it and its size.
    fn parse(b: &'a [u8]) -> Result<(Msg<'a>, usize), Bad> {
        if b.len() < MSG_HEADER {
            return Err(Bad::Malformed);
        }
        let len = u16_at(b, 14) as usize;
        let end = MSG_HEADER + len;
        if b.len() < end {
            return Err(Bad::Malformed);
        }
        Ok((
            Msg {
                member_id: u32_at(b, 0),
                member_seq: u64_at(b, 4),
                flags: b[12],
                data: &b[MSG_HEADER..end],
            },
            end,
        ))
    }

    /// Appends the header and data to `out` (a log entry or a bus message).
    pub fn write(&self, out: &mut Vec<u8>) {
        write_msg(out, self.member_id, self.member_seq, self.flags, self.data);
    }

    pub fn size(&self) -> usize {
        MSG_HEADER + self.data.len()
    }
}

/// Appends a message header and `data` to `out`. `data` is at most
/// `u16::MAX` bytes (fragments are cut below that).
pub fn write_msg(out: &mut Vec<u8>, member_id: u32, member_seq: u64, flags: u8, data: &[u8]) {
    debug_assert!(data.len() <= u16::MAX as usize);
    out.extend_from_slice(&member_id.to_le_bytes());
    out.extend_from_slice(&member_seq.to_le_bytes());
    out.push(flags);
    out.push(0);
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(data);
}

/// Starts a bus datagram in `out` (cleared); for [`BusKind::Data`] the
/// count is patched by [`set_count`] as messages are added.
pub fn bus_header(out: &mut Vec<u8>, kind: BusKind, epoch: u32, session: u64, seq: u64) {
    out.clear();
    out.extend_from_slice(&BUS_MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&session.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// Sets the message count of a bus datagram started by [`bus_header`].
pub fn set_count(out: &mut [u8], count: u16) {
    out[24..26].copy_from_slice(&count.to_le_bytes());
}

/// A decoded bus datagram.
#[derive(Debug, Clone, Copy)]
pub struct Bus<'a> {
    pub kind: BusKind,
    pub epoch: u32,
    pub session: u64,
    pub seq: u64,
    pub count: u16,
    body: &'a [u8],
}

impl<'a> Bus<'a> {
    /// Checks the header and that the body holds exactly `count` messages
    /// (data) or what the kind needs.
    pub fn parse(b: &'a [u8]) -> Result<Bus<'a>, Bad> {
        if b.len() < BUS_HEADER || u16_at(b, 0) != BUS_MAGIC || b[2] != VERSION {
            return Err(Bad::Malformed);
        }
        let kind = match b[3] {
            1 => BusKind::Data,
            2 => BusKind::Heartbeat,
            3 => BusKind::Welcome,
            _ => return Err(Bad::Malformed),
        };
        let bus = Bus {
            kind,
            epoch: u32_at(b, 4),
            session: u64_at(b, 8),
            seq: u64_at(b, 16),
            count: u16_at(b, 24),
            body: &b[BUS_HEADER..],
        };
        match kind {
            BusKind::Data => {
                // Walk once to check the lengths; `messages` then cannot fail.
                let mut rest = bus.body;
                for _ in 0..bus.count {
                    let (_, used) = Msg::parse(rest)?;
                    rest = &rest[used..];
                }
                if !rest.is_empty() || bus.count == 0 {
                    return Err(Bad::Malformed);
                }
                bus.seq
                    .checked_add(bus.count as u64)
                    .ok_or(Bad::Malformed)?;
            }
            BusKind::Heartbeat if !bus.body.is_empty() => return Err(Bad::Malformed),
            BusKind::Welcome if bus.body.len() != 8 => return Err(Bad::Malformed),
            _ => {}
        }
        Ok(bus)
    }

    /// The messages of a data datagram with their sequence numbers.
    pub fn messages(&self) -> impl Iterator<Item = (u64, Msg<'a>)> + 'a {
        let mut rest = self.body;
        let first = self.seq;
        (0..self.count as u64).map_while(move |i| {
            let (m, used) = Msg::parse(rest).ok()?;
            rest = &rest[used..];
            Some((first + i, m))
        })
    }

    /// A welcome's body: the member's last sequenced `member_seq`.
    pub fn welcome_last(&self) -> u64 {
        if self.body.len() == 8 {
            u64_at(self.body, 0)
        } else {
            0
        }
    }
}

/// Starts a command datagram in `out` (cleared).
pub fn cmd_header(out: &mut Vec<u8>, kind: CmdKind, member_id: u32, session: u64) {
    out.clear();
    out.extend_from_slice(&CMD_MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&member_id.to_le_bytes());
    out.extend_from_slice(&session.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
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

/// A replay request for `[from, to)`.
pub fn replay(out: &mut Vec<u8>, member_id: u32, session: u64, from: u64, to: u64) {
    cmd_header(out, CmdKind::Replay, member_id, session);
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&to.to_le_bytes());
}

/// A hello; `unicast`: the member wants the bus sent to it.
pub fn hello(out: &mut Vec<u8>, member_id: u32, unicast: bool) {
    cmd_header(out, CmdKind::Hello, member_id, 0);
    out.push(unicast as u8);
}

/// A decoded command datagram.
#[derive(Debug, Clone, Copy)]
pub struct Cmd<'a> {
    pub kind: CmdKind,
    pub member_id: u32,
    pub session: u64,
    pub count: u16,
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
            CmdKind::Hello => cmd.body.len() == 1,
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
        if self.body.len() == 16 {
            (u64_at(self.body, 0), u64_at(self.body, 8))
        } else {
            (0, 0)
        }
    }

    /// A hello's unicast flag.
    pub fn unicast(&self) -> bool {
        self.body.first().is_some_and(|f| f & 1 != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_round_trip_and_truncations_refused() {
        let mut b = Vec::new();
        bus_header(&mut b, BusKind::Data, 0, 77, 10);
        write_msg(&mut b, 3, 5, 0, b"hello");
        write_msg(&mut b, 4, 1, MORE, b"");
        set_count(&mut b, 2);
        let bus = Bus::parse(&b).unwrap();
        assert_eq!(
            (bus.kind, bus.session, bus.seq, bus.count),
            (BusKind::Data, 77, 10, 2)
        );
        let got: Vec<_> = bus.messages().collect();
        assert_eq!(got[0].0, 10);
        assert_eq!(got[0].1.data, b"hello");
        assert_eq!(
            (got[1].0, got[1].1.member_id, got[1].1.flags),
            (11, 4, MORE)
        );
        for cut in 0..b.len() {
            assert!(Bus::parse(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(Bus::parse(&longer).is_err());
    }

    #[test]
    fn commands_round_trip_and_garbage_refused() {
        let mut c = Vec::new();
        cmd_header(&mut c, CmdKind::Publish, 9, 1234);
        write_cmd_msg(&mut c, 1, 0, b"a");
        write_cmd_msg(&mut c, 2, MORE, b"bc");
        set_cmd_count(&mut c, 2);
        let cmd = Cmd::parse(&c).unwrap();
        let ps: Vec<_> = cmd.published().collect();
        assert_eq!(ps.len(), 2);
        assert_eq!(
            (ps[1].member_seq, ps[1].flags, ps[1].data),
            (2, MORE, &b"bc"[..])
        );
        for cut in 0..c.len() {
            assert!(Cmd::parse(&c[..cut]).is_err());
        }
        replay(&mut c, 9, 1, 5, 8);
        assert_eq!(Cmd::parse(&c).unwrap().range(), (5, 8));
        hello(&mut c, 9, true);
        assert!(Cmd::parse(&c).unwrap().unicast());
        hello(&mut c, 0, true);
        assert!(Cmd::parse(&c).is_err(), "member id 0 is reserved");
        // A stranger may not publish control entries.
        cmd_header(&mut c, CmdKind::Publish, 9, 1);
        write_cmd_msg(&mut c, 1, CONTROL, b"x");
        set_cmd_count(&mut c, 1);
        assert!(Cmd::parse(&c).is_err());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..200 {
            let g: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = Cmd::parse(&g);
            let _ = Bus::parse(&g);
        }
    }
}
