//! Targeted scenarios: the combinations of faults that random runs rarely
//! make (a lagging follower, then a wiped disk, then a crash), scripted.
//! Each is run over several seeds (the traffic and the network's timing
//! still come from the seed), with every invariant checked as in a random
//! run. They replay the findings of a review of the protocol; each names
//! the invariant that caught it before its fix.

use super::engine::Sim;
use super::faults::{Down, Heal};
use super::group::Retention;
use super::members::Start;
use super::SimConfig;
use crate::seq::core::{Nanos, MILLI};

/// A scripted step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Node `i` is killed (-9: its page cache survives); it stays down
    /// until [`Action::Restart`] (or the heal).
    Kill(usize),
    /// Node `i`'s host loses power (unsynced writes lost or torn); down
    /// until restarted.
    PowerLoss(usize),
    /// Node `i`'s disk is replaced by an empty one; down until restarted.
    ReplaceDisk(usize),
    Restart(usize),
    Pause(usize, Nanos),
    /// Processes `a` and `b` cut from each other (both ways) until mended.
    Cut(usize, usize),
    /// Datagrams from `a` to `b` lost until mended.
    CutOneWay(usize, usize),
    Mend(usize, usize),
    /// Process `i` cut from every other until it rejoins.
    Isolate(usize),
    Rejoin(usize),
    /// The datagrams of the next node elected are lost from that moment
    /// (its first as primary included) until the heal.
    MuteNextPrimary,
    /// Node `i`'s disk is full (`true`) or has room again; a scenario's
    /// full disk outlasts the heal.
    DiskFull(usize, bool),
    /// Node `i`'s witness says node `down` is down (a group of two).
    Witness(usize, u8),
    /// Member `id`'s process is killed; down until opened.
    MemberKill(u32),
    /// Member `id` closes with what it has in flight; down until opened.
    MemberClose(u32),
    MemberOpen(u32, Start),
    /// Member `id`'s process is frozen this long.
    MemberPause(u32, Nanos),
}

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
    /// A primary must have been elected by then (liveness under the
    /// script's faults).
    pub primary_by: Option<Nanos>,
    /// The run's retention (none: the log keeps everything).
    pub retention: Option<Retention>,
    /// What retention must have done by the end (`install`,
    /// `member_skip`, `trimmed_open`), or a node (`log_cut_whole`): the
    /// script reached its path.
    pub expects: &'static [&'static str],
}

impl Scenario {
    /// The run's settings for `seed`.
    pub fn config(&self, seed: u64) -> SimConfig {
        let mut c = SimConfig::new(seed);
        c.faults = Vec::new();
        c.swarm = false;
        c.fault_time = self.heal_at;
        c.scenario = Some(self.clone());
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
                    (ms(300), Kill(1)),
                    (ms(300), Kill(2)),
                    (ms(340), Kill(0)),
                    (ms(360), Restart(1)),
                    (ms(360), Restart(2)),
                ],
                heal_at: ms(1_500),
                primary_by: None,
                retention: None,
                expects: &[],
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
                    (ms(300), Kill(2)),
                    (ms(1_200), PowerLoss(1)),
                    (ms(1_201), Kill(0)),
                    (ms(1_210), Restart(1)),
                    (ms(1_210), Restart(2)),
                ],
                heal_at: ms(2_500),
                primary_by: None,
                retention: None,
                expects: &[],
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
                    (ms(300), Isolate(1)),
                    (ms(1_200), ReplaceDisk(2)),
                    (ms(1_210), Kill(0)),
                    (ms(1_211), Restart(2)),
                    (ms(1_212), Rejoin(1)),
                ],
                heal_at: ms(2_500),
                primary_by: None,
                retention: None,
                expects: &[],
            },
            Scenario {
                name: "full_disk_primary",
                what: "the primary's disk fills for good: it must step down so that a node \
                       with room sequences (it stayed primary and delivery stopped: \
                       `lost_publish`)",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![(ms(400), DiskFull(0, true))],
                heal_at: ms(2_000),
                primary_by: None,
                retention: None,
                expects: &[],
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
                    (ms(400), CutOneWay(3, 0)),
                    (ms(500), MemberClose(1)),
                    (ms(600), Mend(3, 0)),
                    (ms(900), MemberOpen(1, Start::From(1))),
                ],
                heal_at: ms(1_500),
                primary_by: None,
                retention: None,
                expects: &[],
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
                primary_by: None,
                retention: None,
                expects: &[],
            },
            Scenario {
                name: "new_group_without_its_last_node",
                what: "a new group of three whose third node does not start: the two that \
                       do (learners with empty logs, a majority) elect a primary without \
                       waiting for it",
                nodes: 3,
                members: 2,
                late_members: vec![],
                actions: vec![(0, Kill(2))],
                heal_at: ms(1_500),
                primary_by: Some(ms(500)),
                retention: None,
                expects: &[],
            },
            Scenario {
                name: "split_bootstrap",
                what: "a new group's first primary is elected, but nothing it sends as primary \
                       arrives; the other two elect one of them in a later term, which writes a \
                       session of its own: the first, heard again, must cut its bootstrap and \
                       follow (it dropped the group's datagrams as another session's for ever, \
                       and the group ran one node short: every delivered message must be in \
                       every node's log at the end)",
                nodes: 3,
                members: 2,
                late_members: vec![],
                actions: vec![(0, MuteNextPrimary)],
                heal_at: ms(800),
                primary_by: None,
                retention: None,
                expects: &["log_cut_whole"],
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
                    (ms(300), Kill(2)),
                    (ms(3_800), Restart(2)),
                    (ms(4_600), Kill(0)),
                ],
                heal_at: ms(5_500),
                primary_by: None,
                retention: RETENTION,
                expects: &["install"],
            },
            Scenario {
                name: "member_paused_past_its_lease",
                what: "a member is frozen longer than its lease: retention removes what it has \
                       not read; resumed, it is told (a `trimmed` event) and goes on from the \
                       first entry kept, and misses nothing after it",
                nodes: 3,
                members: 3,
                late_members: vec![],
                actions: vec![(ms(300), MemberPause(2, ms(3_600)))],
                heal_at: ms(4_500),
                primary_by: None,
                retention: RETENTION,
                expects: &["member_skip"],
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
                primary_by: None,
                retention: RETENTION,
                expects: &["trimmed_open"],
            },
        ]
    }

    pub fn by_name(name: &str) -> Option<Scenario> {
        Scenario::all().into_iter().find(|s| s.name == name)
    }
}

impl Sim<'_> {
    /// A scripted action ([`Action`]).
    pub(super) fn act(&mut self, a: Action) {
        let now = self.now;
        self.trace(|| format!("scenario: {a:?}"));
        match a {
            Action::Kill(i) => {
                self.take_down(i, Down::Kill, Nanos::MAX);
            }
            Action::PowerLoss(i) => {
                self.take_down(i, Down::PowerLoss, Nanos::MAX);
            }
            Action::ReplaceDisk(i) => {
                self.take_down(i, Down::Replace, Nanos::MAX);
            }
            Action::Restart(i) => self.procs[i].restart_at = now,
            Action::Pause(i, d) => {
                self.procs[i].paused = Some((now + d, false));
                self.mark(i, now + d);
            }
            Action::Cut(a, b) => self.cut(a, b, true, Nanos::MAX),
            Action::CutOneWay(a, b) => self.cut(a, b, false, Nanos::MAX),
            Action::Mend(a, b) => self.undo(Heal::Link(a, b)),
            Action::Isolate(i) => {
                for j in 0..self.procs.len() {
                    if j != i {
                        self.cut(i, j, true, Nanos::MAX);
                    }
                }
            }
            Action::Rejoin(i) => {
                for j in 0..self.procs.len() {
                    self.undo(Heal::Link(i, j));
                }
            }
            Action::MuteNextPrimary => self.mute_next_primary = true,
            Action::DiskFull(i, full) => self.set_full(i, full),
            Action::Witness(i, down) => {
                let at = self.local(i);
                if let Some(a) = self.procs[i].actor.as_mut() {
                    a.witness(at, down);
                }
            }
            Action::MemberKill(id) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, _, _, ev| a.kill_member(Nanos::MAX, ev));
            }
            Action::MemberClose(id) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, now, out, ev| {
                    a.close_member(now, Nanos::MAX, out, ev)
                });
            }
            Action::MemberOpen(id, start) => {
                let i = self.member_proc(id);
                self.with_member(i, |a, now, _, _| a.reopen_member(now, start));
            }
            Action::MemberPause(id, d) => {
                let i = self.member_proc(id);
                self.procs[i].paused = Some((now + d, false));
                self.mark(i, now + d);
            }
        }
    }
}
