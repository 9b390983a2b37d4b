//! Scenarios: bounds chosen for one question, and optionally a script,
//! a few steps taken after the prologue before the exhaustive search
//! (through the same model: each is one of the actions the checker would
//! choose there, named by what it is). A script holds no fault: it only
//! brings the group to a point of protocol interest (a message delivered
//! in three hops with some copies still on the way), so that the depth
//! the search can afford goes to the faults and the interleavings after
//! it. A script is a choice of where to look, not a proof that nothing
//! else is wrong: the checks without one explore from the prologue.

use stateright::actor::ActorModelAction;
use stateright::Model as _;

use crate::config::{Bounds, FaultKinds, Prologue};
use crate::datagram::describe;
use crate::model::{Action, McModel};
use tachyon_core::seq::core::node::Durability;
use tachyon_core::seq::core::MILLI;

/// In a script, the node that is primary when the script begins (the
/// prologue's end), and the others in order: a script does not depend on
/// which node the prologue elected.
pub const PRIMARY: usize = usize::MAX;
pub const FOLLOWER: usize = usize::MAX - 1;
pub const OTHER_FOLLOWER: usize = usize::MAX - 2;

/// A step of a script: the first available action that matches.
#[derive(Debug, Clone)]
pub enum Pick {
    /// Member `j` publishes.
    Publish(usize),
    /// A datagram from actor `src` to actor `dst` ([`PRIMARY`], ...
    /// stand for nodes) whose description starts with `what` (`PUBLISH`,
    /// `DATA`, `Ack`...).
    Deliver {
        src: usize,
        dst: usize,
        what: &'static str,
    },
    /// Actor `i` ticks.
    Tick(usize),
    /// The disk of node `i` finishes its pending sync.
    Sync(usize),
    /// A step outside the actor model (a fault: for tests that replay a
    /// known counterexample; scenarios' scripts hold none).
    Extra(Action),
}

/// A named set of bounds and a script.
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub bounds: Bounds,
    pub script: Vec<Pick>,
}

/// The scenarios the binary knows (`--scenario NAME`).
pub fn all() -> Vec<Scenario> {
    let member = 3; // the member's actor index in a group of three
    vec![
        Scenario {
            name: "three-hop",
            about: "Known bug 1 (three-hop silent fork): a group of three, durability \
                    replicated; the member publishes E; n0 sequences it; n1 appends it \
                    and acknowledges it to the member, which counts n1's ack and n0's \
                    HOLDS and delivers E; n1's ack to n0 and E's copy to n2 are still \
                    on the way (never delivered: lost). Then: power losses and crashes \
                    (2), every interleaving.",
            bounds: Bounds {
                nodes: 3,
                members: 1,
                messages: 1,
                faults: 2,
                kinds: FaultKinds {
                    crash: true,
                    power_loss: true,
                    replace_disk: false,
                    false_witness: false,
                },
                durability: Durability::Replicated,
                prologue: Prologue::Joined,
                horizon: 4 * MILLI,
                // A follower's gap fill repeats no sooner than an election
                // times out: a tick of a follower is an election's.
                retransmit: 4 * MILLI,
                depth: 11,
                // The member has delivered E: its further steps (hellos to
                // a new primary) matter to liveness, not to this question.
                frozen: vec![member],
                ..Bounds::default()
            },
            script: vec![
                Pick::Publish(0),
                Pick::Deliver {
                    src: member,
                    dst: PRIMARY,
                    what: "PUBLISH",
                },
                Pick::Deliver {
                    src: PRIMARY,
                    dst: FOLLOWER,
                    what: "DATA",
                },
                Pick::Deliver {
                    src: PRIMARY,
                    dst: member,
                    what: "DATA",
                },
                Pick::Deliver {
                    src: FOLLOWER,
                    dst: member,
                    what: "Ack",
                },
                // The primary's next heartbeat is on its way to everyone.
                Pick::Tick(PRIMARY),
            ],
        },
        Scenario {
            name: "three-hop-fsync",
            about: "Known bug 1's window with durability fsync: the member publishes E; \
                    the primary sequences and syncs it; a follower appends and syncs it \
                    and acknowledges it to the member; the member counts both \
                    acknowledgements and delivers E; the follower's ack to the primary \
                    and E's copy to the other follower are still on the way. Then: \
                    power losses and crashes (2), every interleaving (a power loss keeps \
                    what was synced: this window must be safe).",
            bounds: Bounds {
                nodes: 3,
                members: 1,
                messages: 1,
                faults: 2,
                kinds: FaultKinds {
                    crash: true,
                    power_loss: true,
                    replace_disk: false,
                    false_witness: false,
                },
                durability: Durability::Fsync,
                prologue: Prologue::Joined,
                horizon: 4 * MILLI,
                retransmit: 4 * MILLI,
                depth: 11,
                frozen: vec![member],
                ..Bounds::default()
            },
            script: vec![
                Pick::Publish(0),
                Pick::Deliver {
                    src: member,
                    dst: PRIMARY,
                    what: "PUBLISH",
                },
                Pick::Sync(PRIMARY),
                Pick::Deliver {
                    src: PRIMARY,
                    dst: FOLLOWER,
                    what: "DATA",
                },
                Pick::Sync(FOLLOWER),
                Pick::Deliver {
                    src: PRIMARY,
                    dst: member,
                    what: "DATA",
                },
                Pick::Deliver {
                    src: PRIMARY,
                    dst: member,
                    what: "Ack",
                },
                Pick::Deliver {
                    src: FOLLOWER,
                    dst: member,
                    what: "Ack",
                },
                Pick::Tick(PRIMARY),
            ],
        },
        Scenario {
            name: "two-disks",
            about: "Known bug 2 (two replaced disks form a new group): a group of three, \
                    no member; n0, which holds the log, is down (it takes no step: \
                    frozen); the disks of n1 and n2 are replaced, every interleaving \
                    after.",
            bounds: Bounds {
                nodes: 3,
                members: 0,
                messages: 0,
                faults: 2,
                kinds: FaultKinds {
                    crash: false,
                    power_loss: false,
                    replace_disk: true,
                    false_witness: false,
                },
                durability: Durability::Replicated,
                prologue: Prologue::Joined,
                horizon: 10 * MILLI,
                retransmit: 4 * MILLI,
                depth: 13,
                frozen: vec![0],
                ..Bounds::default()
            },
            script: Vec::new(),
        },
    ]
}

pub fn find(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}

impl Pick {
    /// This step with [`PRIMARY`], [`FOLLOWER`], [`OTHER_FOLLOWER`] made
    /// actual nodes.
    fn resolve(&self, roles: &[usize; 3]) -> Pick {
        let r = |i: usize| match i {
            PRIMARY => roles[0],
            FOLLOWER => roles[1],
            OTHER_FOLLOWER => roles[2],
            i => i,
        };
        match self.clone() {
            Pick::Deliver { src, dst, what } => Pick::Deliver {
                src: r(src),
                dst: r(dst),
                what,
            },
            Pick::Tick(i) => Pick::Tick(r(i)),
            Pick::Sync(i) => Pick::Sync(r(i)),
            p => p,
        }
    }

    fn matches(&self, a: &Action, model: &McModel) -> bool {
        let l = &model.ctx.layout;
        match (self, a) {
            (Pick::Sync(i), Action::Step(ActorModelAction::Timeout(id, t))) => {
                usize::from(*id) == *i && *t == crate::actor::Timer::Sync
            }
            (Pick::Publish(j), Action::Step(ActorModelAction::Timeout(id, t))) => {
                usize::from(*id) == l.member(*j) && *t == crate::actor::Timer::Publish
            }
            (Pick::Tick(i), Action::Step(ActorModelAction::Timeout(id, t))) => {
                usize::from(*id) == *i && *t == crate::actor::Timer::Tick
            }
            (
                Pick::Deliver { src, dst, what },
                Action::Step(ActorModelAction::Deliver {
                    src: s,
                    dst: d,
                    msg,
                }),
            ) => {
                usize::from(*s) == *src
                    && usize::from(*d) == *dst
                    && describe(&msg.0).starts_with(what)
            }
            (Pick::Extra(x), a) => x == a,
            _ => false,
        }
    }
}

impl McModel {
    /// Takes the script's steps from the initial state; the state after
    /// them is the check's initial state (depth 0, the clocks' horizon
    /// counted from there).
    pub fn run_script(&mut self, script: &[Pick]) -> Result<(), String> {
        let mut s = self.init_state().clone();
        let nodes = self.ctx.layout.nodes;
        let primary = (0..nodes)
            .find(|&i| s.actor_states[i].as_node().is_some_and(|n| n.is_leader()))
            .unwrap_or(0);
        let mut others = (0..nodes).filter(|&i| i != primary);
        let roles = [
            primary,
            others.next().unwrap_or(primary),
            others.next().unwrap_or(primary),
        ];
        for p in script {
            let p = &p.resolve(&roles);
            let mut acts = Vec::new();
            self.collect(&s, &mut acts, &[], &[]);
            let next = acts
                .into_iter()
                .filter(|a| p.matches(a, self))
                .find_map(|a| self.next_state(&s, a.clone()).map(|n| (a, n)));
            let Some((a, n)) = next else {
                return Err(format!("script: no step matches {p:?}"));
            };
            self.script.extend(self.explain(&s, &a));
            s = n;
        }
        s.history.depth = 0;
        self.restart_from(s);
        Ok(())
    }
}
