//! Bus datagrams (`"TB"`): the primary to members and the other nodes.

use super::*;

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
    /// The incarnation of the member it answers (a hello's, or a
    /// command's): a member takes only the welcomes of its own, not those
    /// of an earlier incarnation at the same address.
    pub incarnation: u64,
    /// The first entry the primary's log holds (retention removed those
    /// below): a member cannot start before it.
    pub first: u64,
    /// The latest committed snapshot (`core::node::snapshots`): where a
    /// member starting from it reads from, the epoch of the entry before
    /// that, and its position (all 0: none).
    pub snap_from: u64,
    pub snap_epoch: u32,
    pub snap_as_of: u64,
}

/// A welcome datagram.
pub fn welcome(out: &mut Vec<u8>, h: &BusHeader, flags: u8, w: &WelcomeBody) {
    bus_header(out, BusKind::Welcome, h, flags);
    out.extend_from_slice(&w.last.to_le_bytes());
    out.extend_from_slice(&w.epoch_end.to_le_bytes());
    out.extend_from_slice(&w.epoch.to_le_bytes());
    out.extend_from_slice(&w.max_datagram.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&w.incarnation.to_le_bytes());
    out.extend_from_slice(&w.first.to_le_bytes());
    out.extend_from_slice(&w.snap_from.to_le_bytes());
    out.extend_from_slice(&w.snap_as_of.to_le_bytes());
    out.extend_from_slice(&w.snap_epoch.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// To one requester: entries below `first` are gone (retention); the
/// entry before `first` is of `epoch`.
pub fn trimmed(out: &mut Vec<u8>, h: &BusHeader, first: u64, epoch: u32) {
    bus_header(out, BusKind::Trimmed, h, 0);
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
}

/// A nack to one member: `member_seq` is missing.
pub fn nack(out: &mut Vec<u8>, h: &BusHeader, member_seq: u64) {
    bus_header(out, BusKind::Nack, h, 0);
    out.extend_from_slice(&member_seq.to_le_bytes());
}

/// To one member: `member_seq` could not be appended (a full disk).
pub fn full(out: &mut Vec<u8>, h: &BusHeader, member_seq: u64) {
    bus_header(out, BusKind::Full, h, 0);
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
            6 => BusKind::Full,
            7 => BusKind::Trimmed,
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
            BusKind::Heartbeat => bus.body.is_empty() && bus.count == 0,
            // The successor's id, or nothing (none named).
            BusKind::End => bus.body.len() <= 1 && bus.count == 0,
            BusKind::Welcome => bus.body.len() >= WELCOME_BODY && bus.count == 0,
            BusKind::Nack | BusKind::Full => bus.body.len() == 8 && bus.count == 0,
            BusKind::Trimmed => bus.body.len() == 12 && bus.count == 0,
        };
        if ok {
            Ok(bus)
        } else {
            Err(Bad::Malformed)
        }
    }

    /// The node an END names to campaign at once (Raft thesis §3.10's
    /// TimeoutNow: one named successor, not a race of every follower).
    pub fn successor(&self) -> Option<u8> {
        match self.kind {
            BusKind::End => self.body.first().copied(),
            _ => None,
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
        (self.kind == BusKind::Welcome && self.body.len() >= WELCOME_BODY).then(|| WelcomeBody {
            last: u64_at(self.body, 0),
            epoch_end: u64_at(self.body, 8),
            epoch: u32_at(self.body, 16),
            max_datagram: u16_at(self.body, 20),
            incarnation: u64_at(self.body, 24),
            first: u64_at(self.body, 32),
            snap_from: u64_at(self.body, 40),
            snap_as_of: u64_at(self.body, 48),
            snap_epoch: u32_at(self.body, 56),
        })
    }

    /// What follows a welcome's body: the group's membership as the
    /// primary has it (the data of a CONFIG entry), empty if it sent none.
    pub fn welcome_tail(&self) -> &'a [u8] {
        if self.kind == BusKind::Welcome && self.body.len() > WELCOME_BODY {
            &self.body[WELCOME_BODY..]
        } else {
            &[]
        }
    }

    /// A nack's missing `member_seq`.
    pub fn nacked(&self) -> Option<u64> {
        (self.kind == BusKind::Nack && self.body.len() == 8).then(|| u64_at(self.body, 0))
    }

    /// A trimmed notice's first entry the primary holds, and the epoch of
    /// the entry before it.
    pub fn trimmed(&self) -> Option<(u64, u32)> {
        (self.kind == BusKind::Trimmed && self.body.len() == 12)
            .then(|| (u64_at(self.body, 0), u32_at(self.body, 8)))
    }

    /// A full notice's `member_seq` (the command the primary could not
    /// append).
    pub fn refused(&self) -> Option<u64> {
        (self.kind == BusKind::Full && self.body.len() == 8).then(|| u64_at(self.body, 0))
    }
}
