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
//! A *message* has the same 20-byte header on the bus and in the
//! sequencer's log, so a replay copies a log entry into a datagram as it is:
//!
//! ```text
//! 0  u32 member_id   (0: a control entry, e.g. the session record)
//! 4  u64 member_seq
//! 12 u8  flags       (MORE, CONT, CONTROL, EPOCH)
//! 13 u8  0
//! 14 u16 len         (bytes of data that follow)
//! 16 u32 term        (of the primary that sequenced it: Raft's entry term,
//!                     so that two logs compare entry by entry and a log
//!                     read back after a crash shows where terms mix)
//! ```

mod bus;
mod cmd;
mod peer;

pub use bus::*;
pub use cmd::*;
pub use peer::*;

/// Bus datagram magic, `"TB"`.
pub const BUS_MAGIC: u16 = 0x4254;
/// Command datagram magic, `"TC"`.
pub const CMD_MAGIC: u16 = 0x4354;
/// Peer datagram magic, `"TN"`.
pub const PEER_MAGIC: u16 = 0x4e54;
pub const VERSION: u8 = 3;

pub const BUS_HEADER: usize = 36;
pub const CMD_HEADER: usize = 28;
pub const PEER_HEADER: usize = 32;
pub const MSG_HEADER: usize = 20;
/// A published message's header inside a command datagram.
pub const CMD_MSG_HEADER: usize = 12;
/// The body of a welcome.
pub const WELCOME_BODY: usize = 64;
/// The body of a hello.
pub const HELLO_BODY: usize = 21;

/// More fragments of this message follow.
pub const MORE: u8 = 0x01;
/// Not the first fragment of its message.
pub const CONT: u8 = 0x02;
/// In a command: the member's messages between its last in the primary's
/// log and this one were delivered on a side a fork dropped; this one is
/// the member's next (never in the log).
pub const SKIP: u8 = 0x04;
/// A message of a member's state machine snapshot (`core::node::snapshots`:
/// its data begins with the snapshot's position, u64). Delivered only to
/// members that ask for snapshots.
pub const SNAP: u8 = 0x08;
/// With SNAP: the snapshot's last message.
pub const SNAP_END: u8 = 0x10;
/// A control entry (the session record): never delivered.
pub const CONTROL: u8 = 0x80;
/// With CONTROL: an epoch record (`member_seq` is the epoch, or term), the
/// first entry a primary writes in its term.
pub const EPOCH: u8 = 0x40;
/// With CONTROL: a change of the group's membership (the data is the whole
/// new membership, `core::node::membership`).
pub const CONFIG: u8 = 0x20;

/// Welcome flag: the member id is bound to another member.
pub const TAKEN: u8 = 0x01;
/// Welcome flag: the group's access control lets this member read, not
/// publish (its publishes are refused).
pub const READ_ONLY: u8 = 0x04;
/// Data and heartbeat flag: the primary's log holds every entry below the
/// datagram's end as far as its acknowledgement would (durability
/// `:replicated`), so a member counts it toward a majority that far
/// (`core/member/acks.rs`). Without it (`:fsync`) the primary counts only
/// by its ACKs.
pub const HOLDS: u8 = 0x02;
/// Hello flag: send me the bus (a unicast member).
pub const UNICAST: u8 = 0x01;
/// Hello flag: a keepalive of a member already welcomed (it only renews the
/// member's binding; answered like any hello).
pub const KEEPALIVE: u8 = 0x02;
/// Peer reply flag: granted.
pub const GRANTED: u8 = 0x01;
/// Peer flag: the sender is a learner (it cannot vouch for what it
/// acknowledged before it restarted: it does not vote until it caught up).
pub const LEARNER: u8 = 0x02;
/// Peer flag: the sender is the primary of the header's term.
pub const LEADER: u8 = 0x04;
/// Probe reply flag: the sender's disk never held a group's log (a new
/// node: it may start a new group, with every other node new too).
pub const FRESH: u8 = 0x08;

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
    /// To one member: its command `member_seq` (the body, u64) could not
    /// be appended (the primary's disk is full); the primary steps down.
    Full = 6,
    /// To one requester: what it asked for is below the first entry the
    /// primary's log holds (the body, u64): retention removed it.
    Trimmed = 7,
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
    /// A learner asks every node where its log stands (it votes only
    /// once it heard them all, or caught up with a primary).
    Probe = 8,
    /// Body: last log term, log end, the commit position it knows.
    ProbeReply = 9,
    /// A node that is not in the group asks to join it (from the address it
    /// will have in it).
    Join = 10,
    /// The primary added it (as a non-voter): `a` = its id.
    JoinReply = 11,
    /// A chunk of the primary's checkpoint: `a` = its offset, `b` = the
    /// checkpoint's length, then the bytes (the body is longer than 24).
    Checkpoint = 12,
    /// A node that must install the primary's checkpoint asks for the
    /// chunks from `a` on.
    CheckpointReq = 13,
    /// The primary's retention floor, `a`: the lowest entry someone still
    /// needs (a follower removes nothing at or above it).
    Retain = 14,
    /// A follower passes a JOIN to its primary (the joining node may know
    /// only the follower's address): `a`, `b`, `c` = the joining node's
    /// address ([`addr_body`]).
    JoinVia = 15,
    /// A follower passes a member's HELLO to its primary (the member may
    /// know only followers: a node added while it was cut off is the
    /// primary now, and nothing it delivered named it): `a`, `b`, `c` =
    /// the member's address ([`addr_body`]), then the HELLO datagram.
    HelloVia = 16,
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
    /// The term of the primary that sequenced it.
    pub term: u32,
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
                term: u32_at(b, 16),
                data: &b[MSG_HEADER..end],
            },
            end,
        ))
    }

    /// Appends the header and data to `out` (a log entry or a bus message).
    pub fn write(&self, out: &mut Vec<u8>) {
        write_msg(
            out,
            self.member_id,
            self.member_seq,
            self.flags,
            self.term,
            self.data,
        );
    }

    pub fn size(&self) -> usize {
        MSG_HEADER + self.data.len()
    }

    /// The epoch of an epoch record, `None` for any other entry.
    pub fn epoch(&self) -> Option<u32> {
        (self.member_id == 0 && self.flags & (CONTROL | EPOCH) == CONTROL | EPOCH)
            .then_some(self.member_seq as u32)
    }

    /// The data of a membership change, `None` for any other entry.
    pub fn config(&self) -> Option<&'a [u8]> {
        (self.member_id == 0 && self.flags & (CONTROL | CONFIG) == CONTROL | CONFIG)
            .then_some(self.data)
    }
}

/// Appends a message header and `data` to `out`. `data` is at most
/// `u16::MAX` bytes (fragments are cut below that).
pub fn write_msg(
    out: &mut Vec<u8>,
    member_id: u32,
    member_seq: u64,
    flags: u8,
    term: u32,
    data: &[u8],
) {
    debug_assert!(data.len() <= u16::MAX as usize);
    out.extend_from_slice(&member_id.to_le_bytes());
    out.extend_from_slice(&member_seq.to_le_bytes());
    out.push(flags);
    out.push(0);
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(data);
}

/// An epoch record (the first entry of a primary's term).
pub fn epoch_record(out: &mut Vec<u8>, epoch: u32) {
    out.clear();
    write_msg(out, 0, epoch as u64, CONTROL | EPOCH, epoch, &[]);
}

#[cfg(test)]
mod tests;
