//! A standby's protocol: follows the primary like a member (raw entries),
//! copies every entry into its own log at the same index, and takes over
//! (a [`SequencerCore`] of the next epoch on that log) when the primary
//! falls silent for `takeover_after` or when told to.

use std::net::SocketAddr;

use super::member::{self, Deliver, Join, MemberConfig, Rx};
use super::sequencer::{CoreConfig, SequencerCore};
use super::{Log, Nanos, Sink, MILLI};
use crate::seq::wire::{Msg, CONTROL, EPOCH};
use crate::seq::SeqError;

/// How long one join attempt waits for the primary's welcome.
const JOIN_TIMEOUT: Nanos = 200 * MILLI;

/// What the shell must do for the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Set the log aside (renamed, kept) and start an empty one: it is of
    /// another session, an older epoch, or disagrees with the primary's.
    ResetLog { epoch: u32 },
    /// The standby became the primary ([`StandbyCore::promoted`]).
    TookOver { last_heard: Nanos },
}

enum State<L: Log> {
    Joining {
        join: Join,
        since: Nanos,
    },
    Following {
        rx: Box<Rx>,
    },
    Promoted(Box<SequencerCore<L>>),
    /// Between a reset request and the new log.
    Resetting,
}

/// A standby's state.
pub struct StandbyCore<L: Log> {
    mcfg: MemberConfig,
    seq: CoreConfig,
    takeover_after: Nanos,
    log: Option<L>,
    /// The log's session and last epoch, if it has any entry.
    held: Option<(u64, u32)>,
    state: State<L>,
    last_heard: Option<Nanos>,
    takeover_now: bool,
    action: Option<Action>,
    /// Entries copied from the primary.
    pub copied: u64,
    pub rebuilt: u64,
}

impl<L: Log> StandbyCore<L> {
    /// `mcfg`: how it follows the primary (its address is `mcfg.sequencer`).
    pub fn new(
        mut mcfg: MemberConfig,
        seq: CoreConfig,
        takeover_after: Nanos,
        log: L,
        now: Nanos,
    ) -> Result<Self, SeqError> {
        mcfg.raw = true;
        mcfg.from = Some(log.next_index());
        member::fragment_size(&mcfg)?;
        let held = inspect(&log);
        let join = Join::new(&mcfg, matches!(seq.bus, crate::seq::BusMode::Unicast));
        Ok(StandbyCore {
            mcfg,
            seq,
            takeover_after,
            log: Some(log),
            held,
            state: State::Joining { join, since: now },
            last_heard: None,
            takeover_now: false,
            action: None,
            copied: 0,
            rebuilt: 0,
        })
    }

    /// Its state in a word (traces).
    pub fn state_name(&self) -> &'static str {
        match &self.state {
            State::Joining { .. } => "joining",
            State::Following { .. } => "following",
            State::Promoted(_) => "promoted",
            State::Resetting => "resetting",
        }
    }

    pub fn take_action(&mut self) -> Option<Action> {
        self.action.take()
    }

    pub fn take_over(&mut self) {
        self.takeover_now = true;
    }

    pub fn following(&self) -> bool {
        self.last_heard.is_some()
    }

    /// The log's next index.
    pub fn next_index(&self) -> u64 {
        match &self.state {
            State::Promoted(s) => s.next_seq(),
            _ => self.log.as_ref().map_or(0, |l| l.next_index()),
        }
    }

    pub fn promoted(&mut self) -> Option<&mut SequencerCore<L>> {
        match &mut self.state {
            State::Promoted(s) => Some(s),
            _ => None,
        }
    }

    pub fn promoted_ref(&self) -> Option<&SequencerCore<L>> {
        match &self.state {
            State::Promoted(s) => Some(s),
            _ => None,
        }
    }

    /// Its log (the promoted sequencer's, after a takeover).
    pub fn log(&self) -> Option<&L> {
        match &self.state {
            State::Promoted(s) => Some(s.log()),
            _ => self.log.as_ref(),
        }
    }

    pub fn into_promoted(self) -> Option<SequencerCore<L>> {
        match self.state {
            State::Promoted(s) => Some(*s),
            _ => None,
        }
    }

    /// Hands the log out for a reset ([`Action::ResetLog`]).
    pub fn take_log(&mut self) -> Option<L> {
        self.log.take()
    }

    /// The new, empty log after a reset.
    pub fn set_log(&mut self, log: L, now: Nanos) {
        self.mcfg.from = Some(log.next_index());
        self.held = inspect(&log);
        self.log = Some(log);
        self.rebuilt += 1;
        self.rejoin(now);
    }

    fn rejoin(&mut self, now: Nanos) {
        let unicast = matches!(self.seq.bus, crate::seq::BusMode::Unicast);
        self.state = State::Joining {
            join: Join::new(&self.mcfg, unicast),
            since: now,
        };
    }

    fn reset(&mut self, epoch: u32) {
        self.state = State::Resetting;
        self.action = Some(Action::ResetLog { epoch });
    }

    /// One datagram from `from` (the primary's bus).
    pub fn on_datagram(
        &mut self,
        now: Nanos,
        from: Option<SocketAddr>,
        d: &[u8],
        sink: &mut dyn Sink,
    ) {
        match &mut self.state {
            State::Joining { join, .. } => join.on_datagram(d, from),
            State::Following { rx } => {
                let Some(log) = self.log.as_mut() else { return };
                let mut bad = false;
                let mut copied = 0;
                let mut copy = |seq: u64, m: &Msg<'_>| {
                    let mut e = Vec::with_capacity(m.size());
                    m.write(&mut e);
                    match log.append(&e) {
                        Ok(i) if i == seq => copied += 1,
                        _ => bad = true,
                    }
                };
                rx.on_datagram(d, from, &mut Deliver::Entries(&mut copy));
                self.copied += copied;
                if bad {
                    // The log and the primary's disagree: copy it again.
                    self.reset(0);
                }
            }
            State::Promoted(s) => s.on_datagram(now, from, d, sink),
            State::Resetting => {}
        }
    }

    /// After the datagrams of one receive batch.
    pub fn end_batch(&mut self, now: Nanos, sink: &mut dyn Sink) {
        match &mut self.state {
            State::Following { rx } => {
                self.last_heard = Some(now);
                rx.end_batch(now, sink);
            }
            State::Promoted(s) => s.end_batch(now, sink),
            _ => {}
        }
    }

    /// Timed work; returns when to tick again at the latest.
    pub fn tick(&mut self, now: Nanos, sink: &mut dyn Sink) -> Nanos {
        match &mut self.state {
            State::Resetting => now + MILLI,
            State::Promoted(s) => s.tick(now, sink),
            State::Joining { join, since } => {
                if self.takeover_now && self.held.is_some() {
                    return self.promote(now, now, sink);
                }
                match join.tick(now, sink) {
                    Ok(w) => {
                        self.last_heard = Some(now);
                        if let Some((session, epoch)) = self.held {
                            if session != w.session || epoch < w.epoch {
                                // Another session, or a deposed primary rejoining.
                                self.reset(epoch);
                                return now + MILLI;
                            }
                        }
                        let unicast = matches!(self.seq.bus, crate::seq::BusMode::Unicast);
                        match member::from_welcome(&self.mcfg, &w, unicast, now) {
                            Ok((_tx, rx)) => {
                                self.state = State::Following { rx: Box::new(rx) };
                            }
                            Err(_) => self.rejoin(now),
                        }
                        now
                    }
                    Err(due) => {
                        if now.saturating_sub(*since) >= JOIN_TIMEOUT {
                            // A primary heard before and silent since: take over.
                            if let Some(t) = self.last_heard {
                                if self.held.is_some()
                                    && now.saturating_sub(t) >= self.takeover_after
                                {
                                    return self.promote(now, t, sink);
                                }
                            }
                            self.rejoin(now);
                            return now;
                        }
                        due.min(*since + JOIN_TIMEOUT)
                    }
                }
            }
            State::Following { rx } => {
                let silence = rx.silence(now);
                if silence >= self.takeover_after || self.takeover_now {
                    return self.promote(now, now - silence, sink);
                }
                let due = rx.tick(now, sink);
                due.min(now + (self.takeover_after - silence))
            }
        }
    }

    fn promote(&mut self, now: Nanos, last_heard: Nanos, sink: &mut dyn Sink) -> Nanos {
        let Some(log) = self.log.take() else {
            return now + MILLI;
        };
        let mut cfg = self.seq.clone();
        cfg.new_epoch = true;
        // Its first datagrams go out from the shell of the new primary
        // (its command port), not from this one's.
        let _ = sink;
        match SequencerCore::start(log, cfg, now) {
            Ok(s) => {
                self.state = State::Promoted(Box::new(s));
                self.action = Some(Action::TookOver { last_heard });
                now
            }
            Err(_) => {
                self.state = State::Resetting;
                now + MILLI
            }
        }
    }
}

/// The session (entry 0) and last epoch of a log, `None` if empty.
fn inspect<L: Log>(log: &L) -> Option<(u64, u32)> {
    let next = log.next_index();
    if next == 0 {
        return None;
    }
    let mut session = 0;
    let mut epoch = 0u32;
    let mut at = 0;
    while at < next {
        let n = log
            .read_range(at, 4096, &mut |i, e| {
                if let Ok(m) = Msg::from_entry(e) {
                    if i == 0 {
                        session = m.member_seq;
                    } else if m.member_id == 0 && m.flags & (CONTROL | EPOCH) == CONTROL | EPOCH {
                        epoch = m.member_seq as u32;
                    }
                }
            })
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Some((session, epoch))
}
