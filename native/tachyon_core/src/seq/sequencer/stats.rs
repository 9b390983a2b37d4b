//! A sequencer node's statistics: the snapshot of its counters and state.

use super::Sequencer;

crate::named_fields! {
    /// A snapshot of a node's counters and state.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct SequencerStats {
        /// Messages sequenced (appended and sent) since start.
        pub messages: u64,
        /// Bus data datagrams sent (live, not replays).
        pub datagrams: u64,
        pub heartbeats: u64,
        /// Commands dropped as already sequenced.
        pub duplicates: u64,
        /// Commands held until an earlier one of their member arrived.
        pub held: u64,
        /// Commands dropped: too far ahead of their member's next.
        pub out_of_order: u64,
        pub nacks: u64,
        pub replays: u64,
        /// Entries replayed (by the replayer thread, or inline: below).
        pub replayed: u64,
        /// Of `replayed`, entries the sequencing thread replayed itself
        /// (small gap fills), without waking the replayer.
        pub replayed_inline: u64,
        pub replays_dropped: u64,
        pub malformed: u64,
        pub strangers: u64,
        /// Datagrams of a member after its goodbye, dropped.
        pub departed: u64,
        pub wrong_session: u64,
        pub oversized: u64,
        pub send_errors: u64,
        pub store_errors: u64,
        /// Members (and other nodes) in the unicast fan-out.
        pub members: u64,
        pub backpressure: u64,
        pub not_primary: u64,
        pub taken: u64,
        pub elections: u64,
        pub terms_led: u64,
        pub stepped_down: u64,
        /// Entries removed by truncations.
        pub truncated: u64,
        /// Entries copied from primaries.
        pub copied: u64,
        pub acks: u64,
        /// The next sequence number (the log's end).
        pub next_seq: u64,
        pub commit: u64,
        /// The current term (epoch).
        pub epoch: u64,
        /// `"primary"`, `"follower"`, `"pre_candidate"`, `"candidate"`.
        pub role: &'static str,
        /// The primary's node id, if known.
        pub leader: Option<u64>,
        pub session: u64,
        /// True while a learner: it cannot vouch for what it acknowledged
        /// before it restarted (a new disk, a reboot, a cut log) and votes
        /// for nobody until it has caught up.
        pub learner: bool,
        /// Entries on the disk (`durability: :fsync`), else the log end:
        /// what this node's acknowledgement covers.
        pub durable: u64,
        /// Syncs asked (one per receive batch at most) and done
        /// (`durability: :fsync`), and syncs that failed (retried).
        pub sync_requests: u64,
        pub syncs: u64,
        pub sync_errors: u64,
        /// Microseconds the syncer spent in the syncs done: divided by
        /// `syncs`, how long a sync takes on this node's disk.
        pub sync_time_us: u64,
        /// Appends refused for want of space (a primary then steps down).
        pub disk_full: u64,
        /// Replay jobs dropped: made under another term or before a
        /// truncation.
        pub stale_replays: u64,
        /// Probes sent as a learner, and votes refused as one.
        pub probes: u64,
        pub learner_refusals: u64,
        /// Datagrams dropped by packet protection (keys given) before the
        /// node saw them: every one, then forged (a tag that does not
        /// verify, a key not held, a malformed envelope), replayed,
        /// unsealed (no envelope), forbidden (a member speaking as another
        /// or as a node).
        pub rejected: u64,
        pub rejected_forged: u64,
        pub rejected_replayed: u64,
        pub rejected_unsealed: u64,
        pub rejected_forbidden: u64,
    }
}

impl Sequencer {
    pub fn stats(&self) -> SequencerStats {
        let c = &self.counters;
        let r = self
            .shared
            .guard
            .as_ref()
            .map_or([0; 5], |g| g.counters.rejections());
        let role = match c.role.get() {
            3 => "primary",
            2 => "candidate",
            1 => "pre_candidate",
            _ => "follower",
        };
        SequencerStats {
            messages: c.messages.get(),
            datagrams: c.datagrams.get(),
            heartbeats: c.heartbeats.get(),
            duplicates: c.duplicates.get(),
            held: c.held.get(),
            out_of_order: c.out_of_order.get(),
            nacks: c.nacks.get(),
            replays: c.replays.get(),
            replayed: self.shared.replayed.get() + self.shared.replayed_inline.get(),
            replayed_inline: self.shared.replayed_inline.get(),
            replays_dropped: self.shared.replays_dropped.get(),
            malformed: c.malformed.get() + self.shared.malformed.get(),
            strangers: c.strangers.get(),
            departed: c.departed.get(),
            wrong_session: c.wrong_session.get(),
            oversized: c.oversized.get(),
            send_errors: c.send_errors.get(),
            store_errors: c.store_errors.get(),
            members: c.members.get(),
            backpressure: c.backpressure.get(),
            not_primary: c.not_primary.get(),
            taken: c.taken.get(),
            elections: c.elections.get(),
            terms_led: c.terms_led.get(),
            stepped_down: c.stepped_down.get(),
            truncated: c.truncated.get(),
            copied: c.copied.get(),
            acks: c.acks.get(),
            next_seq: c.next_seq.get(),
            commit: c.commit.get(),
            epoch: c.term.get(),
            role,
            leader: Some(c.leader.get()).filter(|l| *l != u64::MAX),
            session: self.shared.session.get(),
            learner: c.learner.get() == 1,
            durable: c.durable.get(),
            sync_requests: c.sync_requests.get(),
            syncs: c.syncs_done.get(),
            sync_errors: self.shared.sync_errors.get(),
            sync_time_us: self.shared.sync_ns.get() / 1000,
            disk_full: c.full.get(),
            stale_replays: self.shared.stale_replays.get(),
            probes: c.probes.get(),
            learner_refusals: c.learner_refusals.get(),
            rejected: r[0],
            rejected_forged: r[1],
            rejected_replayed: r[2],
            rejected_unsealed: r[3],
            rejected_forbidden: r[4],
        }
    }
}
