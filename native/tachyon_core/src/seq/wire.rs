//! The sequencer's wire format (docs/FORMAT.md, "Sequencer and bus"), all
//! integers little-endian. Every decoder checks every length against the
//! datagram before reading: garbage is an `Err`, never a panic.
//!
//! Three kinds of datagrams, told apart by their magic:
//! * bus (`"TB"`): the primary to members and the other nodes (data,
//!   heartbeats, welcomes, nacks, the end of a term);
//! * commands (`"TC"`): a member to the primary (publish, hello, replay,
//!   bye);
//! * peer (`"TN"`): between the nodes of a sequencer group (pre-votes,
//!   votes, acknowledgements, log syncs).
//!
//! A *message* has the same 16-byte header on the bus and in the
//! sequencer's log, so a replay copies a log entry into a datagram as it is:
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
/// Peer datagram magic, `"TN"`.
pub const PEER_MAGIC: u16 = 0x4e54;
pub const VERSION: u8 = 2;

pub const BUS_HEADER: usize = 36;
pub const CMD_HEADER: usize = 20;
pub const PEER_HEADER: usize = 20;
pub const MSG_HEADER: usize = 16;
/// A published message's header inside a command datagram.
pub const CMD_MSG_HEADER: usize = 12;
/// The body of a welcome.
pub const WELCOME_BODY: usize = 24;
/// The body of a hello.
pub const HELLO_BODY: usize = 21;

/// More fragments of this message follow.
pub const MORE: u8 = 0x01;
/// Not the first fragment of its message.
pub const CONT: u8 = 0x02;
/// A control entry (the session record): never delivered.
pub const CONTROL: u8 = 0x80;
/// With CONTROL: an epoch record (`member_seq` is the epoch, or term), the
/// first entry a primary writes in its term.
pub const EPOCH: u8 = 0x40;

/// Welcome flag: the member id is bound to another member.
pub const TAKEN: u8 = 0x01;
/// Hello flag: send me the bus (a unicast member).
pub const UNICAST: u8 = 0x01;
/// Hello flag: a keepalive of a member already welcomed (it only renews the
/// member's binding; answered like any hello).
pub const KEEPALIVE: u8 = 0x02;
/// Peer reply flag: granted.
pub const GRANTED: u8 = 0x01;

/// Kinds of bus datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BusKind {
    /// `count` messages, the first with sequence number `seq`.
    Data = 1,
    /// Nothing new: the next sequence number will be `seq`.
    Heartbeat = 2,
    /// The answer to a hello (to that member only).
    Welcome = 3,
    /// The primary of this term stops (a graceful stop): look for the next.
    End = 4,
    /// To one member: its command `member_seq` (the body, u64) has not
    /// arrived, later ones have and are held; resend it.
    Nack = 5,
}

/// Kinds of command datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdKind {
    /// `count` messages to sequence.
    Publish = 1,
    /// Join (or renew the binding of the member id).
    Hello = 2,
    /// Resend sequence numbers `[from, to)`: body u64 from, u64 to.
    Replay = 3,
    /// Leave: the member id is free, the unicast fan-out forgets it.
    Bye = 4,
}

/// Kinds of peer datagrams (Raft's messages; docs/ARCHITECTURE.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    /// Would you vote for me in `term` (not yet mine)? Body: last log term,
    /// log end.
    PreVote = 1,
    PreVoteReply = 2,
    /// Vote for me in `term`. Body: last log term, log end.
    Vote = 3,
    VoteReply = 4,
    /// A follower's log matches the primary's up to `end` (exclusive).
    Ack = 5,
    /// A follower starts following the primary of `term`: where does my
    /// last epoch end in your log? Body: my last epoch, my log end.
    Sync = 6,
    /// Body: the largest epoch of the primary's log not above the one asked
    /// about, where it ends there, and the primary's log end.
    SyncReply = 7,
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

/// The magic of a datagram (0 if too short).
pub fn magic(d: &[u8]) -> u16 {
    if d.len() < 2 {
        0
    } else {
        u16_at(d, 0)
    }
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

    /// The epoch of an epoch record, `None` for any other entry.
    pub fn epoch(&self) -> Option<u32> {
        (self.member_id == 0 && self.flags & (CONTROL | EPOCH) == CONTROL | EPOCH)
            .then_some(self.member_seq as u32)
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

/// An epoch record (the first entry of a primary's term).
pub fn epoch_record(out: &mut Vec<u8>, epoch: u32) {
    out.clear();
    write_msg(out, 0, epoch as u64, CONTROL | EPOCH, &[]);
}

/// What every bus datagram's header says besides its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusHeader {
    pub term: u32,
    pub session: u64,
    /// Data: the first message's sequence number; otherwise the primary's
    /// next sequence number (its log end).
    pub seq: u64,
    /// Every sequence number below this one is committed.
    pub commit: u64,
    /// The sender's node id.
    pub node: u8,
}

/// Starts a bus datagram in `out` (cleared); for [`BusKind::Data`] the
/// count is patched by [`set_count`] as messages are added.
pub fn bus_header(out: &mut Vec<u8>, kind: BusKind, h: &BusHeader, flags: u8) {
    out.clear();
    out.extend_from_slice(&BUS_MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&h.term.to_le_bytes());
    out.extend_from_slice(&h.session.to_le_bytes());
    out.extend_from_slice(&h.seq.to_le_bytes());
    out.extend_from_slice(&h.commit.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.push(h.node);
    out.push(flags);
}

/// Sets the message count of a bus datagram started by [`bus_header`].
pub fn set_count(out: &mut [u8], count: u16) {
    out[32..34].copy_from_slice(&count.to_le_bytes());
}

/// Sets the commit position of a bus datagram (a replay's, say, at send).
pub fn set_commit(out: &mut [u8], commit: u64) {
    out[24..32].copy_from_slice(&commit.to_le_bytes());
}

/// A welcome: what a member needs to follow this primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WelcomeBody {
    /// The member's last sequenced `member_seq` in the primary's log.
    pub last: u64,
    /// Where the epoch the hello asked about ends in the primary's log (the
    /// member delivered up to its `next`: below this, no fork).
    pub epoch_end: u64,
    /// The largest epoch of the primary's log not above the one asked.
    pub epoch: u32,
    pub max_datagram: u16,
}

/// A welcome datagram.
pub fn welcome(out: &mut Vec<u8>, h: &BusHeader, flags: u8, w: &WelcomeBody) {
    bus_header(out, BusKind::Welcome, h, flags);
    out.extend_from_slice(&w.last.to_le_bytes());
    out.extend_from_slice(&w.epoch_end.to_le_bytes());
    out.extend_from_slice(&w.epoch.to_le_bytes());
    out.extend_from_slice(&w.max_datagram.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// A nack to one member: `member_seq` is missing.
pub fn nack(out: &mut Vec<u8>, h: &BusHeader, member_seq: u64) {
    bus_header(out, BusKind::Nack, h, 0);
    out.extend_from_slice(&member_seq.to_le_bytes());
}

/// A decoded bus datagram.
#[derive(Debug, Clone, Copy)]
pub struct Bus<'a> {
    pub kind: BusKind,
    pub h: BusHeader,
    pub count: u16,
    pub flags: u8,
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
            4 => BusKind::End,
            5 => BusKind::Nack,
            _ => return Err(Bad::Malformed),
        };
        let bus = Bus {
            kind,
            h: BusHeader {
                term: u32_at(b, 4),
                session: u64_at(b, 8),
                seq: u64_at(b, 16),
                commit: u64_at(b, 24),
                node: b[34],
            },
            count: u16_at(b, 32),
            flags: b[35],
            body: &b[BUS_HEADER..],
        };
        let ok = match kind {
            BusKind::Data => {
                // Walk once to check the lengths; `messages` then cannot fail.
                let mut rest = bus.body;
                for _ in 0..bus.count {
                    let (_, used) = Msg::parse(rest)?;
                    rest = &rest[used..];
                }
                rest.is_empty()
                    && bus.count > 0
                    && bus.h.seq.checked_add(bus.count as u64).is_some()
            }
            BusKind::Heartbeat | BusKind::End => bus.body.is_empty() && bus.count == 0,
            BusKind::Welcome => bus.body.len() == WELCOME_BODY && bus.count == 0,
            BusKind::Nack => bus.body.len() == 8 && bus.count == 0,
        };
        if ok {
            Ok(bus)
        } else {
            Err(Bad::Malformed)
        }
    }

    /// The messages of a data datagram with their sequence numbers.
    pub fn messages(&self) -> impl Iterator<Item = (u64, Msg<'a>)> + 'a {
        let mut rest = self.body;
        let first = self.h.seq;
        (0..self.count as u64).map_while(move |i| {
            let (m, used) = Msg::parse(rest).ok()?;
            rest = &rest[used..];
            Some((first + i, m))
        })
    }

    /// The end of a data datagram (its last sequence number + 1).
    pub fn end(&self) -> u64 {
        match self.kind {
            BusKind::Data => self.h.seq + self.count as u64,
            _ => self.h.seq,
        }
    }

    /// A welcome's body.
    pub fn welcome(&self) -> Option<WelcomeBody> {
        (self.kind == BusKind::Welcome && self.body.len() == WELCOME_BODY).then(|| WelcomeBody {
            last: u64_at(self.body, 0),
            epoch_end: u64_at(self.body, 8),
            epoch: u32_at(self.body, 16),
            max_datagram: u16_at(self.body, 20),
        })
    }

    /// A nack's missing `member_seq`.
    pub fn nacked(&self) -> Option<u64> {
        (self.kind == BusKind::Nack && self.body.len() == 8).then(|| u64_at(self.body, 0))
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

/// Rewrites the `member_seq` of every message of a publish command: the
/// first becomes `first` (the member renumbers its pending commands after
/// a fork). Returns the last one's.
pub fn renumber(d: &mut [u8], first: u64) -> Option<u64> {
    if d.len() < CMD_HEADER {
        return None;
    }
    let count = u16_at(d, 16);
    let mut at = CMD_HEADER;
    let mut seq = first;
    for _ in 0..count {
        if d.len() < at + CMD_MSG_HEADER {
            return None;
        }
        d[at..at + 8].copy_from_slice(&seq.to_le_bytes());
        let len = u16_at(d, at + 10) as usize;
        at += CMD_MSG_HEADER + len;
        seq += 1;
    }
    Some(seq - 1)
}

/// A replay request for `[from, to)`.
pub fn replay(out: &mut Vec<u8>, member_id: u32, session: u64, from: u64, to: u64) {
    cmd_header(out, CmdKind::Replay, member_id, session);
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
    cmd_header(out, CmdKind::Hello, member_id, session);
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

/// A peer datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHeader {
    pub kind: PeerKind,
    pub term: u32,
    pub session: u64,
    pub node: u8,
    pub flags: u8,
}

/// A decoded peer datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub h: PeerHeader,
    /// PreVote/Vote: (last log term, log end); Ack: (0, match end); Sync:
    /// (last epoch, log end); SyncReply: (epoch, epoch end) with `c` the
    /// primary's log end.
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

impl Peer {
    fn body_len(kind: PeerKind) -> usize {
        match kind {
            PeerKind::PreVoteReply | PeerKind::VoteReply => 0,
            PeerKind::SyncReply => 24,
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
            _ => return Err(Bad::Malformed),
        };
        let n = Self::body_len(kind);
        if b.len() != PEER_HEADER + n {
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
            },
            a: at(0),
            b: at(1),
            c: at(2),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn garbage(len: usize, x: &mut u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                *x as u8
            })
            .collect()
    }

    #[test]
    fn bus_round_trip_and_truncations_refused() {
        let h = BusHeader {
            term: 3,
            session: 77,
            seq: 10,
            commit: 9,
            node: 2,
        };
        let mut b = Vec::new();
        bus_header(&mut b, BusKind::Data, &h, 0);
        write_msg(&mut b, 3, 5, 0, b"hello");
        write_msg(&mut b, 4, 1, MORE, b"");
        set_count(&mut b, 2);
        let bus = Bus::parse(&b).unwrap();
        assert_eq!((bus.kind, bus.h, bus.count), (BusKind::Data, h, 2));
        assert_eq!(bus.end(), 12);
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
        set_commit(&mut b, 11);
        assert_eq!(Bus::parse(&b).unwrap().h.commit, 11);

        let w = WelcomeBody {
            last: 8,
            epoch_end: 99,
            epoch: 2,
            max_datagram: 1472,
        };
        welcome(&mut b, &h, TAKEN, &w);
        let bus = Bus::parse(&b).unwrap();
        assert_eq!((bus.welcome(), bus.flags), (Some(w), TAKEN));
        for cut in 0..b.len() {
            assert!(Bus::parse(&b[..cut]).is_err(), "cut at {cut}");
        }
        nack(&mut b, &h, 42);
        assert_eq!(Bus::parse(&b).unwrap().nacked(), Some(42));
        bus_header(&mut b, BusKind::End, &h, 0);
        assert_eq!(Bus::parse(&b).unwrap().kind, BusKind::End);
    }

    #[test]
    fn commands_round_trip_renumber_and_garbage_refused() {
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
        assert_eq!(renumber(&mut c, 40), Some(41));
        let seqs: Vec<_> = Cmd::parse(&c)
            .unwrap()
            .published()
            .map(|p| p.member_seq)
            .collect();
        assert_eq!(seqs, [40, 41]);
        replay(&mut c, 9, 1, 5, 8);
        assert_eq!(Cmd::parse(&c).unwrap().range(), (5, 8));
        let hb = HelloBody {
            flags: UNICAST,
            incarnation: 0xdead,
            epoch: 4,
            next: 77,
        };
        hello(&mut c, 9, 0, &hb);
        assert_eq!(Cmd::parse(&c).unwrap().hello(), Some(hb));
        hello(&mut c, 0, 0, &hb);
        assert!(Cmd::parse(&c).is_err(), "member id 0 is reserved");
        // A stranger may not publish control entries.
        cmd_header(&mut c, CmdKind::Publish, 9, 1);
        write_cmd_msg(&mut c, 1, CONTROL, b"x");
        set_cmd_count(&mut c, 1);
        assert!(Cmd::parse(&c).is_err());
    }

    #[test]
    fn peers_round_trip() {
        let kinds = [
            PeerKind::PreVote,
            PeerKind::PreVoteReply,
            PeerKind::Vote,
            PeerKind::VoteReply,
            PeerKind::Ack,
            PeerKind::Sync,
            PeerKind::SyncReply,
        ];
        let mut d = Vec::new();
        for kind in kinds {
            let n = Peer::body_len(kind) / 8;
            let p = Peer {
                h: PeerHeader {
                    kind,
                    term: 7,
                    session: 5,
                    node: 1,
                    flags: GRANTED,
                },
                a: if n > 0 { 11 } else { 0 },
                b: if n > 1 { 12 } else { 0 },
                c: if n > 2 { 13 } else { 0 },
            };
            p.write(&mut d);
            assert_eq!(Peer::parse(&d), Ok(p));
            for cut in 0..d.len() {
                assert!(Peer::parse(&d[..cut]).is_err());
            }
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300 {
            for _ in 0..20 {
                let mut g = garbage(len, &mut x);
                let _ = Cmd::parse(&g);
                let _ = Bus::parse(&g);
                let _ = Peer::parse(&g);
                // With a valid magic and version, the rest garbage.
                for m in [BUS_MAGIC, CMD_MAGIC, PEER_MAGIC] {
                    if g.len() >= 4 {
                        g[0..2].copy_from_slice(&m.to_le_bytes());
                        g[2] = VERSION;
                        g[3] %= 8;
                        if let Ok(b) = Bus::parse(&g) {
                            let _ = b.messages().count();
                            let _ = (b.welcome(), b.nacked());
                        }
                        if let Ok(c) = Cmd::parse(&g) {
                            let _ = c.published().count();
                            let _ = (c.range(), c.hello());
                        }
                        let _ = Peer::parse(&g);
                        let _ = renumber(&mut g, 3);
                    }
                }
            }
        }
    }
}
