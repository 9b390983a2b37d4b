//! A node's checkpoint: what it derives from the entries below a point of
//! its log, so that those entries can go (retention) and a node that lacks
//! them can start from the checkpoint (Raft's InstallSnapshot; what is
//! snapshotted here is the sequencer's own state, not the members': their
//! state machines' snapshots are entries of the log, kept above the
//! point).
//!
//! The state below `first`: the session, the epochs (each epoch's first
//! index, up to the one `first - 1` is in), the membership changes, and
//! every member's last sequenced `member_seq` as of the commit position
//! when the checkpoint was made (at or past `first`: replaying the
//! entries from `first` on sets each member's last again in order, and a
//! committed entry is never truncated). Encoded with a checksum:
//!
//! ```text
//! u32 magic "TCKP"  u32 version 1  u64 first  u64 session
//! u32 epochs   then (u32 term, u64 start) each
//! u32 configs  then (u64 index, u32 len, len bytes) each
//! u32 members  then (u32 member, u64 last) each
//! u32 CRC32C of everything before
//! ```

use std::collections::HashMap;

use super::logstate::LogState;
use super::membership::Membership;

const MAGIC: u32 = 0x504b_4354; // "TCKP"
const VERSION: u32 = 1;

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub first: u64,
    pub session: u64,
    pub epochs: Vec<(u32, u64)>,
    pub configs: Vec<(u64, Membership)>,
    pub last: HashMap<u32, u64>,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + 12 * self.last.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.first.to_le_bytes());
        b.extend_from_slice(&self.session.to_le_bytes());
        b.extend_from_slice(&(self.epochs.len() as u32).to_le_bytes());
        for (t, s) in &self.epochs {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&s.to_le_bytes());
        }
        b.extend_from_slice(&(self.configs.len() as u32).to_le_bytes());
        let mut c = Vec::new();
        for (i, m) in &self.configs {
            c.clear();
            m.encode(&mut c);
            b.extend_from_slice(&i.to_le_bytes());
            b.extend_from_slice(&(c.len() as u32).to_le_bytes());
            b.extend_from_slice(&c);
        }
        let mut last: Vec<_> = self.last.iter().collect();
        last.sort_unstable();
        b.extend_from_slice(&(last.len() as u32).to_le_bytes());
        for (m, s) in last {
            b.extend_from_slice(&m.to_le_bytes());
            b.extend_from_slice(&s.to_le_bytes());
        }
        let crc = crate::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` unless `b` is a whole checkpoint that verifies.
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        let body = b.get(..b.len().checked_sub(4)?)?;
        let crc = u32::from_le_bytes(b[body.len()..].try_into().ok()?);
        if crate::crc::crc32c(body) != crc {
            return None;
        }
        let mut r = Reader(body);
        if r.u32()? != MAGIC || r.u32()? != VERSION {
            return None;
        }
        let (first, session) = (r.u64()?, r.u64()?);
        // Each count is checked against the bytes left before it sizes an
        // allocation (12 bytes an epoch, at least 13 a membership change,
        // 12 a member).
        let n = r.count(12)?;
        let mut epochs = Vec::with_capacity(n);
        for _ in 0..n {
            epochs.push((r.u32()?, r.u64()?));
        }
        let n = r.count(13)?;
        let mut configs = Vec::with_capacity(n);
        for _ in 0..n {
            let i = r.u64()?;
            let len = r.u32()? as usize;
            configs.push((i, Membership::decode(r.take(len)?)?));
        }
        let n = r.count(12)?;
        let mut last = HashMap::with_capacity(n);
        for _ in 0..n {
            last.insert(r.u32()?, r.u64()?);
        }
        r.0.is_empty().then_some(Checkpoint {
            first,
            session,
            epochs,
            configs,
            last,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A u32 count of items of at least `size` bytes each; `None` if the
    /// bytes left cannot hold that many.
    fn count(&mut self, size: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= self.0.len() / size).then_some(n)
    }
}

impl LogState {
    /// The checkpoint of the entries below `first` (at most the commit
    /// position); `None` if it cannot be made now (an undo log that
    /// overflowed: the members' lasts as of the commit are not known).
    pub fn checkpoint(&self, first: u64) -> Option<Checkpoint> {
        if first > self.floor() || first > self.next {
            return None;
        }
        Some(Checkpoint {
            first,
            session: self.session,
            epochs: self.epochs_below(first),
            configs: self.configs_below(first),
            last: self.lasts_at_floor()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn a_checkpoint_round_trips_and_garbage_is_none() {
        let m = Membership::initial(&[SocketAddr::from(([10, 0, 0, 1], 7000))]);
        let c = Checkpoint {
            first: 900,
            session: 77,
            epochs: vec![(64, 0), (67, 400)],
            configs: vec![(3, m)],
            last: HashMap::from([(1, 500), (2, 17)]),
        };
        let b = c.encode();
        assert_eq!(Checkpoint::decode(&b), Some(c));
        for cut in 0..b.len() {
            assert_eq!(Checkpoint::decode(&b[..cut]), None, "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[20] ^= 1;
        assert_eq!(Checkpoint::decode(&bad), None);
    }
}
