//! The receive side's welcomes (a new term's fork check, the handover to
//! the publishing side), trims and rewinds.

use super::*;

impl Rx {
    /// The welcome of the current term's primary.
    pub(super) fn welcomed(&mut self, b: &Bus<'_>) {
        let Some(w) = b.welcome() else { return };
        if w.incarnation != self.incarnation {
            // An earlier incarnation's, at the same address.
            return;
        }
        self.learn_nodes(b.welcome_tail());
        if !self.welcomed && b.flags & TAKEN == 0 {
            let config = Membership::decode(b.welcome_tail());
            self.acks.welcomed(self.leader, config, b.h.seq);
        }
        self.c.welcomes.bump(1);
        if b.flags & TAKEN != 0 {
            if !self.taken {
                self.taken = true;
                self.events.push(MemberEvent::Taken);
            }
            return;
        }
        if self.welcomed {
            // A later welcome of this term (after a trim): this member's
            // commands up to `last` are sequenced, seen or not.
            self.heard = self.heard.max(w.last);
        }
        // Checked at the first welcome of a term only: until then nothing is
        // delivered, so the welcome answers exactly what the hello asked
        // (a later one, a keepalive's, may answer an older position).
        // The welcome answers a hello, but not always the last one: a
        // member that delivered datagrams of the term before (they waited
        // in its socket) after a hello asks again about its new position,
        // and the answer to the earlier hello may come after. Taken for
        // the answer to the last, the end of the earlier epoch read as a
        // fork there, and the member delivered again what it had delivered
        // (`tachyon_sim --nodes 2 --two-nodes safe --seed 243` with
        // heartbeats by target). So an answer that names an epoch before
        // the one last asked about is taken only when asked twice, and one
        // that comes after this member delivered into a later epoch than
        // it asked about, not at all: it asks again.
        let asked = self.asked_epoch;
        if !self.welcomed && self.st.delivered_any && asked != u32::MAX {
            let moved = self.st.epochs.last() != asked;
            let earlier = w.epoch < asked && self.reasked != Some(asked);
            if moved || earlier {
                if !moved {
                    self.reasked = Some(asked);
                }
                self.hello_now = true;
                return;
            }
        }
        if !self.welcomed && (self.st.delivered_any || self.fork.is_some()) {
            let next = self.st.next;
            let m = if self.st.delivered_any {
                self.st.epochs.matching(w.epoch, w.epoch_end, next)
            } else {
                Matching::Whole
            };
            let at = match m {
                Matching::Whole => self.fork.is_some().then_some(next),
                Matching::At(at) => Some(at),
                Matching::Ask(at) => {
                    // Not known yet: back to where the two agree at most,
                    // and ask again about the epoch before.
                    self.fork.get_or_insert((next, self.st.epochs.last()));
                    self.rewind(at, w.epoch);
                    self.hello_now = true;
                    return;
                }
            };
            if let Some(at) = at {
                // The primary's log does not hold what this member
                // delivered from `at` on: it goes on from there in the
                // primary's order.
                let (next, epoch) = self.fork.take().unwrap_or((next, self.st.epochs.last()));
                self.rewind(at, w.epoch);
                self.c.forks.bump(1);
                self.events.push(MemberEvent::Fork {
                    next,
                    epoch,
                    term: self.term,
                    resume: at,
                });
            }
        }
        if !self.welcomed && self.own_at_term > w.last {
            // A fork lost commands of this member's that it had delivered:
            // the pending ones skip to after `w.last` and are done only
            // once the new primary delivers them.
            self.st.own = w.last;
            self.heard = w.last;
        }
        if !self.welcomed {
            // Not taken: a taken welcome returned above.
            self.welcome = Some(Welcome {
                delivered: self.own_at_term,
                ..Welcome::parse(b, &w, self.leader)
            });
        }
        self.welcomed = true;
        self.reasked = None;
        self.known = self.known.max(b.h.seq);
    }

    /// What this member asked for is gone (retention removed the entries
    /// below `first`, the one before it of `epoch`): it goes on from
    /// `first`, and says what it missed.
    pub(super) fn trimmed(&mut self, first: u64, epoch: u32) {
        let st = &mut self.st;
        if st.next >= first {
            return;
        }
        self.events.push(MemberEvent::Trimmed {
            from: st.next,
            first,
        });
        self.c.trimmed.bump(first - st.next);
        st.epochs = Epochs::new(epoch, first);
        // Nothing it delivered is in the log any more: no history to check
        // against a primary (a welcome may still answer a hello sent before
        // this, about an epoch it no longer holds: not a fork).
        st.delivered_any = false;
        // Its own commands sequenced in the removed range will never be
        // seen: a hello, whose welcome says the last one sequenced.
        self.hello_now = true;
        st.next = first;
        st.deliver_from = st.deliver_from.max(first);
        st.partial.clear();
        self.ring.clear();
        self.ooo = self.ooo.split_off(&first);
        // What was held from `first` on is next now: into the ring (else
        // it waits for a datagram at `first` that no gap request asks for:
        // the gap starts where the held entries do).
        self.unblock();
        self.fill.reset();
        self.c.next_seq.set(first);
    }

    /// Moves back to `at` (after a fork, in a log that agrees with this
    /// member's deliveries below `at` only): what is held goes, the gap up
    /// to the primary's end is filled from the primary.
    fn rewind(&mut self, at: u64, epoch: u32) {
        let st = &mut self.st;
        st.epochs.truncate(at, epoch);
        st.next = at;
        // The new order from `at` on is delivered, also below where the
        // member was asked to start.
        st.deliver_from = st.deliver_from.min(at);
        st.partial.clear();
        if at <= st.epochs.floor() {
            st.delivered_any = false;
        }
        self.ring.clear();
        self.ooo.clear();
        self.commit = self.commit.min(at);
        self.fill.reset();
        self.c.next_seq.set(at);
    }
}
