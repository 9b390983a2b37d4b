//! Joining the bus: hello to every node of the sequencer group until the
//! primary's welcome (of several, the highest term's).

use std::net::SocketAddr;

use super::config::MemberConfig;
use crate::seq::core::node::Membership;
use crate::seq::core::{Nanos, Sink, MILLI};
use crate::seq::wire::{self, Bus, BusKind, HelloBody, WelcomeBody, READ_ONLY, TAKEN, UNICAST};

/// Hellos go out again this often until a welcome comes.
const HELLO_EVERY: Nanos = 20 * MILLI;
/// In a group, how long a welcome waits for a higher term's.
const PREFER_WAIT: Nanos = 2 * MILLI;

/// What the welcome said, and who said it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Welcome {
    pub session: u64,
    pub term: u32,
    /// The primary's log end.
    pub next: u64,
    pub commit: u64,
    /// This member's last sequenced `member_seq`.
    pub last: u64,
    /// The epoch of the entry before the member's starting point.
    pub epoch: u32,
    /// The first entry the primary's log holds (retention removed those
    /// below).
    pub first: u64,
    /// The latest committed snapshot: where to read from, the epoch of
    /// the entry before that, its position (all 0: none).
    pub snap: (u64, u32, u64),
    pub max_datagram: usize,
    pub from: SocketAddr,
    /// The member id is bound to another member.
    pub taken: bool,
    /// This member's highest `member_seq` delivered before this term (set
    /// by the receive side: a fork check for the publishing side).
    pub delivered: u64,
    /// The group's membership as the primary has it (its nodes beyond
    /// those the member was given; the voters whose acknowledgements
    /// count, `acks.rs`).
    pub config: Option<Membership>,
    /// The group's access control lets this member read, not publish.
    pub read_only: bool,
}

impl Welcome {
    /// The welcome a bus datagram `b` (its body `w`) from `from` says:
    /// taken if the datagram says so, nothing delivered, no membership
    /// (the caller sets those it knows).
    pub(super) fn parse(b: &Bus<'_>, w: &WelcomeBody, from: SocketAddr) -> Welcome {
        Welcome {
            session: b.h.session,
            term: b.h.term,
            next: b.h.seq,
            commit: b.h.commit,
            last: w.last,
            epoch: w.epoch,
            first: w.first,
            snap: (w.snap_from, w.snap_epoch, w.snap_as_of),
            max_datagram: w.max_datagram as usize,
            from,
            taken: b.flags & TAKEN != 0,
            delivered: 0,
            config: None,
            read_only: b.flags & READ_ONLY != 0,
        }
    }
}

/// A member saying hello until welcomed.
#[derive(Debug, Clone, Hash)]
pub struct Join {
    hello: Vec<u8>,
    incarnation: u64,
    group: Vec<SocketAddr>,
    said: Option<Nanos>,
    best: Option<Welcome>,
    best_at: Nanos,
}

impl Join {
    pub fn new(cfg: &MemberConfig, unicast: bool) -> Join {
        let mut hello = Vec::new();
        let h = HelloBody {
            flags: if unicast { UNICAST } else { 0 },
            incarnation: cfg.incarnation,
            epoch: u32::MAX,
            // From a snapshot: the welcome names it (and the epoch of the
            // log's beginning, if there is none).
            next: if cfg.from_snapshot {
                1
            } else {
                cfg.from.unwrap_or(u64::MAX)
            },
        };
        wire::hello(&mut hello, cfg.member_id, 0, &h);
        Join {
            hello,
            incarnation: cfg.incarnation,
            group: cfg.group(),
            said: None,
            best: None,
            best_at: 0,
        }
    }

    /// A datagram while joining: remembers the best welcome.
    pub fn on_datagram(&mut self, now: Nanos, d: &[u8], from: Option<SocketAddr>) {
        let (Ok(b), Some(from)) = (Bus::parse(d), from) else {
            return;
        };
        if !self.group.contains(&from) {
            return;
        }
        let Some(w) = b.welcome() else { return };
        // An answer to an earlier incarnation of this member (at the same
        // address, its hellos still on the way) is not this one's.
        if w.incarnation != self.incarnation {
            return;
        }
        if b.kind == BusKind::Welcome && self.best.as_ref().is_none_or(|x| b.h.term > x.term) {
            self.best = Some(Welcome {
                config: Membership::decode(b.welcome_tail()),
                ..Welcome::parse(&b, &w, from)
            });
            self.best_at = now;
        }
    }

    /// Says hello when due; returns the welcome to take once it is (in a
    /// group a welcome waits a little for a higher term's: a primary that
    /// was paused may still answer).
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Result<Welcome, Nanos> {
        if let Some(b) = &self.best {
            if self.group.len() == 1 || now.saturating_sub(self.best_at) >= PREFER_WAIT {
                return Ok(b.clone());
            }
            return Err(self.best_at + PREFER_WAIT);
        }
        if self
            .said
            .is_none_or(|s| now.saturating_sub(s) >= HELLO_EVERY)
        {
            for to in &self.group {
                sink.send(std::slice::from_ref(to), &self.hello);
            }
            self.said = Some(now);
        }
        Err(self.said.unwrap_or(now) + HELLO_EVERY)
    }
}
