//! Targeted scenarios: the combinations of faults that random runs rarely
//! make (a lagging follower, then a wiped disk, then a crash), scripted.
//! Each is run over several seeds (the traffic and the network's timing
//! still come from the seed), with every invariant checked as in a random
//! run. They replay the findings of a review of the protocol; each names
//! the invariant that caught it before its fix.

use super::group::{Durability, Retention};
use super::members::Start;
use super::{Action, SimConfig, Trigger};
use crate::seq::core::{Nanos, MILLI};

/// The retention of the scenarios that need one: tight, so that it cuts
/// within a second of traffic.
const RETENTION: Option<Retention> = Some(Retention {
    retain: 64,
    segment: 16,
    every: 20 * MILLI,
});

/// A scripted run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    /// What it replays, and what found it before the fix.
    pub what: &'static str,
    pub nodes: usize,
    /// Members from the start (rewinding from sequence 1).
    pub members: usize,
    /// Members that open later: when, and from where.
    pub late_members: Vec<(Nanos, Start)>,
    pub actions: Vec<(Nanos, Action)>,
    /// When the script's faults are healed (what is still down restarts).
    pub heal_at: Nanos,
    /// The first primary is elected in this window, not before its start
    /// (safety: a new group waits for its nodes) and by its end
    /// (liveness under the script's faults).
    pub primary_between: Option<(Nanos, Nanos)>,
    /// The run's retention (none: the log keeps everything).
    pub retention: Option<Retention>,
    /// What retention must have done by the end (`install`,
    /// `member_skip`, `trimmed_open`), or a node (`log_cut_whole`,
    /// `hello_via`, `crash_in_install`), or which triggers fired
    /// (`on_caught_up`, ...: [`Trigger::name`]): the script reached its
    /// path.
    pub expects: &'static [&'static str],
    /// The durability the script is aimed at (`None`: either): what it
    /// takes from a node is lost only there (a power loss, under
    /// `:replicated`). Its runs use it, whatever the battery's.
    pub durability: Option<Durability>,
    /// The share of large (fragmented) messages (`None`: the default):
    /// each fragment an entry of its own, so a replay takes many receive
    /// batches.
    pub large: Option<f64>,
}

impl Scenario {
    /// The run's settings for `seed`.
    pub fn config(&self, seed: u64) -> SimConfig {
        let mut c = SimConfig::new(seed);
        c.faults = Vec::new();
        c.swarm = false;
        c.fault_time = self.heal_at;
        c.scenario = Some(self.clone());
        if let Some(l) = self.large {
            c.large = l;
        }
        c
    }

    /// Every scenario.
    pub fn all() -> Vec<Scenario> {
        use Action::*;
        let ms = |n: u64| n * MILLI;
        vec![
            Scenario {
                name: "late_join_during_failover",
                what: "the followers are killed, so the primary holds an uncommitted tail; a \
                       member opens live; the primary is killed; the followers restart on their \
                       logs and elect: the late member must get every message published after \
                       its open returned (it started at the welcome's log end: `missed`)",
                nodes: 3,
                members: 2,
                // Within the election timeout (50 ms) of the followers'
                // death, before check-quorum deposes the primary.
                late_members: vec![(ms(305), Start::Live)],
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Kill(1)),
                    (ms(300), Kill(2)),
                    (ms(340), Kill(0)),
                    (ms(360), Restart(1)),
                    (ms(360), Restart(2)),
                ],
                heal_at: ms(1_500),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "power_loss_then_crash",
                what: "entries committed on A and B (C down); B's host loses power, A is \
                       killed; B and C restart and elect: B's acknowledgement outlived what it \
                       acknowledged (`fork`)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Kill(2)),
                    (ms(1_200), PowerLoss(1)),
                    (ms(1_201), Kill(0)),
                    (ms(1_210), Restart(1)),
                    (ms(1_210), Restart(2)),
                ],
                heal_at: ms(2_500),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "replaced_disk",
                what: "entries committed on A and C while B is cut off; C's disk is replaced; \
                       A is killed; C restarts empty and B rejoins: C must not vote B in \
                       (`fork`)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Isolate(1)),
                    (ms(1_200), ReplaceDisk(2)),
                    (ms(1_210), Kill(0)),
                    (ms(1_211), Restart(2)),
                    (ms(1_212), Rejoin(1)),
                ],
                heal_at: ms(2_500),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "full_disk_primary",
                what: "the primary's disk fills for good: it must step down so that a node \
                       with room sequences (it stayed primary and delivery stopped: \
                       `lost_publish`)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),(ms(400), DiskFull(0, true))],
                heal_at: ms(2_000),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "close_with_publishes_in_flight",
                what: "a member closes while its commands cannot reach the primary: every \
                       publish that returned ok is delivered, or the close says how many were \
                       not (they were sent once and never again: `lost_publish`)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(400), CutOneWay(3, 0)),
                    (ms(500), MemberClose(1)),
                    (ms(600), Mend(3, 0)),
                    (ms(900), MemberOpen(1, Start::From(1))),
                ],
                heal_at: ms(1_500),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "late_witness",
                what: "two nodes (safe): the standby is cut off, the primary commits alone on \
                       the witness's word; later the primary dies and the witness tells the \
                       standby, which never heard the new commits: a late witness must not \
                       elect it (`fork`)",
                nodes: 2,
                members: 2,
                late_members: vec![],
                actions: vec![
                    (ms(300), Isolate(1)),
                    (ms(350), Witness(0, 1)),
                    (ms(900), Kill(0)),
                    (ms(905), Rejoin(1)),
                    (ms(910), Witness(1, 0)),
                ],
                heal_at: ms(2_000),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "new_group_waits_for_its_last_node",
                what: "a new group of three whose third node starts 600 ms late: the two \
                       that start (learners with empty logs, a majority) must not elect a \
                       primary before it (they cannot tell a new group from one whose log is \
                       on the node they do not hear); with the third, they elect one",
                nodes: 3,
                members: 2,
                late_members: vec![],
                actions: vec![(0, Kill(2)), (ms(600), Restart(2))],
                heal_at: ms(1_500),
                primary_between: Some((ms(600), ms(1_000))),
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "split_bootstrap",
                what: "a new group's first primary is elected, but nothing it sends as primary \
                       arrives; the other two elect one of them in a later term, which writes a \
                       session of its own: the first, heard again, must cut its bootstrap and \
                       follow (it dropped the group's datagrams as another session's for ever, \
                       and the group ran one node short: every delivered message must be in \
                       every node's log at the end; in about half the seeds the other two wait \
                       for it instead: they heard it new and empty too long ago)",
                nodes: 3,
                members: 2,
                late_members: vec![],
                actions: vec![(0, MuteNextPrimary)],
                heal_at: ms(800),
                primary_between: None,
                retention: None,
                // Not every seed: a new group elects only while every node
                // was heard new and empty lately; where the other two heard
                // node 0 too long ago, they wait for it instead.
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "follower_behind_retention",
                what: "a follower is down while the others' retention removes what it lacks: \
                       restarted, it must install the primary's checkpoint and copy the log \
                       from there (Raft's InstallSnapshot), every invariant holding",
                nodes: 3,
                members: 3,
                late_members: vec![],
                // Down longer than the lease a silent follower holds the
                // floor for (3 s); the primary killed once it caught up.
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Kill(2)),
                    (ms(3_800), Restart(2)),
                    (ms(4_600), Kill(0)),
                ],
                heal_at: ms(5_500),
                primary_between: None,
                retention: RETENTION,
                expects: &["install"],
                durability: None,
                large: None,
            },
            Scenario {
                name: "member_paused_past_its_lease",
                what: "a member is frozen longer than its lease: retention removes what it has \
                       not read; resumed, it is told (a `trimmed` event) and goes on from the \
                       first entry kept, and misses nothing after it",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),(ms(300), MemberPause(2, ms(3_600)))],
                heal_at: ms(4_500),
                primary_between: None,
                retention: RETENTION,
                expects: &["member_skip"],
                durability: None,
                large: None,
            },
            Scenario {
                name: "rewind_below_the_first_entry",
                what: "a member opens from sequence 1 after retention removed the start of the \
                       log: `{:error, {:trimmed, first}}`, then from `first`, missing nothing \
                       from there",
                nodes: 3,
                members: 2,
                late_members: vec![(ms(1_500), Start::From(1))],
                actions: vec![],
                heal_at: ms(2_500),
                primary_between: None,
                retention: RETENTION,
                expects: &["trimmed_open"],
                durability: None,
                large: None,
            },
            Scenario {
                name: "three_hops_lost_ack_power_loss",
                what: "commit in three hops: C is cut off; follower B, frozen for a moment, \
                       resumes and acknowledges E; that reaches the members (who count it with the primary's HOLDS and deliver \
                       E) but its copy to the primary A is lost, and B's host loses power right \
                       after (E unsynced); B restarts a learner and catches up; at that moment \
                       A is killed and C rejoins: B and C must not elect a log without E (B \
                       caught up to A's commit, below E, and voted again: `silent_fork`)",
                nodes: 3,
                members: 2,
                late_members: vec![],
                // B frozen 20 ms: its next receive batch takes everything
                // the primary sequenced meanwhile, and its acknowledgement
                // to the members reaches far past the primary's commit.
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Isolate(2)),
                    (ms(795), WriteBack(1)),
                    (ms(800), Pause(1, ms(20))),
                    (
                        ms(805),
                        When(
                            Trigger::AckToMembers(1, 10),
                            vec![
                                DropSent(1, 0),
                                PowerLoss(1),
                                After(ms(10), vec![Restart(1)]),
                                When(
                                    Trigger::CaughtUp(1),
                                    vec![Kill(0), DropInFlight(0, 1), Rejoin(2)],
                                ),
                            ],
                        ),
                    ),
                ],
                heal_at: ms(2_500),
                primary_between: None,
                retention: None,
                expects: &["on_ack_to_members", "on_caught_up"],
                durability: Some(Durability::Replicated),
                large: None,
            },
            Scenario {
                name: "three_hops_lost_ack_replaced_disk",
                what: "as three_hops_lost_ack_power_loss, B's disk replaced instead (under \
                       `:fsync` too: what B synced and acknowledged is gone with the disk)",
                nodes: 3,
                members: 2,
                late_members: vec![],
                // B frozen 20 ms: its next receive batch takes everything
                // the primary sequenced meanwhile, and its acknowledgement
                // to the members reaches far past the primary's commit.
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Isolate(2)),
                    (ms(800), Pause(1, ms(20))),
                    (
                        ms(805),
                        When(
                            Trigger::AckToMembers(1, 10),
                            vec![
                                DropSent(1, 0),
                                ReplaceDisk(1),
                                After(ms(10), vec![Restart(1), Loss(0, 1, 50)]),
                                When(
                                    Trigger::CaughtUp(1),
                                    vec![Kill(0), DropInFlight(0, 1), Rejoin(2)],
                                ),
                            ],
                        ),
                    ),
                ],
                heal_at: ms(2_500),
                primary_between: None,
                retention: None,
                expects: &["on_ack_to_members", "on_caught_up"],
                durability: None,
                large: Some(1.0),
            },
            Scenario {
                name: "two_replaced_disks",
                what: "node 0, the primary, is killed as the disks of nodes 1 and 2 are \
                       replaced; they restart: two empty logs, a majority, that hear no log \
                       must not start a new group beside the old one (they elected a primary of \
                       a new session: `new_session`, `silent_fork`); node 0 restarts later and \
                       the group goes on from its log",
                nodes: 3,
                members: 2,
                late_members: vec![],
                // At one instant: nothing is committed on the other two
                // alone before their disks go (node 0, the primary, holds
                // every committed entry).
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Kill(0)),
                    (ms(300), ReplaceDisk(1)),
                    (ms(300), ReplaceDisk(2)),
                    (ms(410), Restart(1)),
                    (ms(410), Restart(2)),
                    (ms(1_500), Restart(0)),
                ],
                heal_at: ms(3_000),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "crash_in_install",
                what: "a follower behind retention installs its primary's checkpoint and is \
                       killed after the checkpoint is saved, before its log is reset: restarted, \
                       it must finish (or undo) the install, not append for ever at an index \
                       its log does not have (`silent_fork` at the end: its log lacks what was \
                       delivered)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), Kill(2)),
                    (ms(3_800), CrashInInstall(2)),
                    (ms(3_800), Restart(2)),
                    (ms(4_800), Kill(0)),
                ],
                heal_at: ms(5_500),
                primary_between: None,
                retention: RETENTION,
                expects: &["crash_in_install"],
                durability: None,
                large: None,
            },
            Scenario {
                name: "acks_to_members_lost",
                what: "commit in three hops, the acknowledgements' pacing and no heartbeat on a \
                       commit the members count: every follower's acknowledgement to the members \
                       is lost for 600 ms: they must deliver from the primary's commit position \
                       (its heartbeats after data), not wait for acknowledgements",
                nodes: 3,
                members: 2,
                late_members: vec![],
                // Processes 0-4 are the node slots (two spare), 5 and 6
                // the members.
                actions: vec![
                    (ms(290), PrimaryIs0),
                    (ms(300), CutOneWay(1, 5)),
                    (ms(300), CutOneWay(1, 6)),
                    (ms(300), CutOneWay(2, 5)),
                    (ms(300), CutOneWay(2, 6)),
                    (ms(900), Mend(1, 5)),
                    (ms(900), Mend(1, 6)),
                    (ms(900), Mend(2, 5)),
                    (ms(900), Mend(2, 6)),
                ],
                heal_at: ms(1_500),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "tail_lost_to_a_follower",
                what: "heartbeats by target: the primary's datagrams to follower 1 are lost at \
                       40% while it acknowledges what it has: the heartbeats after data must \
                       still reach it while its acknowledgement is short of the log's end (a \
                       follower that acknowledged the end gets none), so it finds its lost tail \
                       and keeps up",
                nodes: 3,
                members: 2,
                late_members: vec![],
                actions: vec![
                    (ms(290), PrimaryIs0),(ms(300), Loss(0, 1, 40)), (ms(1_300), Mend(0, 1))],
                heal_at: ms(2_000),
                primary_between: None,
                retention: None,
                expects: &[],
                durability: None,
                large: None,
            },
            Scenario {
                name: "hello_via_a_follower",
                what: "HELLO_VIA: a member opens while what it sends to the primary is lost: \
                       its hellos reach the followers, which pass them on; the primary must \
                       welcome it (its open returns) and, once the link is mended, sequence \
                       what it publishes",
                nodes: 3,
                members: 2,
                late_members: vec![(ms(400), Start::Live)],
                // The late member is process 7 (after five node slots and
                // two members).
                actions: vec![
                    (ms(290), PrimaryIs0),(ms(350), CutOneWay(7, 0)), (ms(1_200), Mend(7, 0))],
                heal_at: ms(2_000),
                primary_between: None,
                retention: None,
                expects: &["hello_via"],
                durability: None,
                large: None,
            },
        ]
    }

    pub fn by_name(name: &str) -> Option<Scenario> {
        Scenario::all().into_iter().find(|s| s.name == name)
    }
}
