//! Exhaustive model checking of the sequencer group's real cores with
//! [stateright](https://docs.rs/stateright) 0.31: every interleaving of
//! datagrams, timers and faults within bounds, checked at every state.
//!
//! # What is checked
//!
//! The code that ships, not a model of it: each node is a
//! [`Node<MemLog>`](tachyon_core::seq::core::node::Node) and each member the
//! real `Join`, then `Tx` and `Rx` from its welcome, driven in the order
//! the simulator drives them (`seq::sim::actors::SimNode`,
//! `seq::sim::members::SimMember`; [`node`], [`member`]). They are
//! stateright actors ([`actor`]) exchanging the datagrams the cores write
//! ([`datagram`]), over stateright's network. A wrapper model ([`model`])
//! adds what no actor does by itself: faults, restarts, the witness of a
//! group of two, a membership change; and the history the properties
//! need ([`history`]). The properties ([`props`]): `no_lost_delivery`,
//! `agreement`, `one_primary_per_term`, `committed_survives`,
//! `one_session` always; `delivered` and `failover` sometimes (the check
//! is not vacuous).
//!
//! # How the processes are driven
//!
//! * **Time** is each process's own clock, in its state. A timer step
//!   advances it to the deadline the core's last `tick` returned and ticks.
//!   A datagram is handled at the receiver's current time, as one receive
//!   batch (`on_datagram`, `end_batch`), followed by the tick the simulator
//!   gives every process after a batch. Clocks are unrelated: a process
//!   may run ahead of the others by any amount (a pause, a slow thread),
//!   which Raft's safety must survive. Because time moves only in ticks,
//!   the timers are scaled so that a tick is a step of Raft's: the
//!   election timeout is 2 ms (a wait is drawn in `[2, 4)` ms, below
//!   `TICK_CAP`: one tick of a follower times it out), the primary's
//!   heartbeat 1 ms (each of its ticks), no tail heartbeats after data
//!   (`heartbeat_after` = `heartbeat`), no retention. Each process's clock
//!   may run at most the **horizon** past where the prologue left it.
//! * **Sync** (`durability: fsync`): a sync the node asked for completes
//!   in a step of its own (the entries reach the platter, then `synced`).
//! * **Replays** are answered at once from the log after the call that
//!   asked (the logs stay far below `INLINE_REPLAY`, where the node's own
//!   thread answers them).
//! * **Members** publish one small message per step of their own (at most
//!   `messages`), deliver into a list that is the history the properties
//!   read, are never killed nor closed.
//!
//! # The network
//!
//! stateright's unordered duplicating network: every datagram ever sent
//! stays deliverable, any number of times, in any order, or never. Never
//! delivering a datagram is its loss, so explicit drops (`--lossy`) add
//! no behaviour and only split states: they are off by default. A
//! delivery that changes nothing is no step (stateright drops it; the
//! actors remember such (state, datagram) pairs so as not to run the node
//! again to find out). stateright's record of the last datagram delivered
//! is cleared after each step: two states that differ by it only are the
//! same state. `--net nodup` takes the multiset network (at most once).
//!
//! # Faults
//!
//! At most `faults` per run (crash, power loss, disk replacement, false
//! witness), any node, any time:
//!
//! * a **crash** (kill -9) keeps the page cache: the node restarts on its
//!   log as a new incarnation;
//! * a **power loss** keeps what reached the platter: what was synced, and
//!   of the rest, written back oldest first, a prefix
//!   (`MemLog::sync_to(keep)` then `MemLog::power_loss` with nothing
//!   written or torn by chance). `--power-loss` picks the outcomes: only
//!   the synced part (`unsynced`), that or all but the last write
//!   (`tail`, the default), or every prefix (`prefixes`). The host boots
//!   again (another boot: in `:replicated` mode a learner);
//! * a **replaced disk**: an empty log, another boot;
//! * in a group of two, the **witness** says the peer is down: truthful
//!   (once per down period, free) or, as a fault, while the peer is up.
//!
//! In a group of three a node that goes down restarts in the same step:
//! nothing another process does depends on its being down (its datagrams
//! undelivered meanwhile stay deliverable, and never delivering them is
//! the same as their arriving while it was down), so the down period adds
//! interleavings and no behaviour. In a group of two the witness speaks
//! while the peer is down: restarts are steps of their own there.
//!
//! One **membership change** may happen (`--membership`): a primary
//! removes a node, or a spare node starts and asks to join.
//!
//! # Cutting the state space (what is explored, what is not)
//!
//! * A deterministic **prologue** runs the same drivers with no choice (the
//!   group elects, its nodes catch up, the members are welcomed; optionally
//!   the first message goes round): its end is the initial state
//!   ([`prologue`]).
//! * **Scenarios** ([`scenario`]) choose bounds for one question, and may
//!   take a few fault-free steps (a *script*) before the search, and may
//!   keep some actors from stepping (`frozen`) or their timers from firing
//!   (`paused`): each is a restriction of the behaviours searched, stated
//!   in the scenario, used to reach a known bug's depth.
//! * **Bounds**: depth (steps past the initial state), each clock's
//!   horizon, the fault budget, the messages. The depth counts in the
//!   history, so that a depth-first search bounded in depth is exhaustive
//!   within its bound (stateright skips a state already seen, even when
//!   now met at a shallower depth).
//! * **Fingerprints**: stateright deduplicates states by hash. Each actor's
//!   state carries a fingerprint of everything that decides what it does
//!   next (`Node::fingerprint`, `Tx::fingerprint`, `Rx::fingerprint`; what
//!   they leave out and why: `tachyon_core::seq::core::fingerprint`), its
//!   clock, its deadline and its driver's state.
//!
//! Not modelled: retention and checkpoints (so no InstallSnapshot),
//! fragmented messages, a multicast bus, torn writes and bit rot, read
//! errors, full disks, members killed or closed, more than one membership
//! change. Each is the same code the simulator drives at random.
//!
//! # What the bounds reach
//!
//! One checker thread, DFS, on the shared 2-core machine (748afed plus
//! this crate): about 100,000 states generated a second, each level of
//! depth 3 to 5 times the last. Exhaustive within their bounds, every
//! property holding: `--depth 8` (3 nodes, `:replicated`, 1 member, 1
//! message, 2 faults of every kind: 7.1 M states, 151 s), `--depth 9`
//! (35 M, 821 s), `--durability fsync --depth 8` (5.3 M, 84 s), `--nodes
//! 2 --depth 10` (safe, with the witness: 11.5 M, 143 s), `--membership
//! --faults 1 --depth 8` (11.5 M, 463 s), `--members 2 --depth 7` (3.4 M,
//! 70 s). `--nodes 2 --two-nodes available` forks by design: found in
//! 0.2 s. The known bugs lie deeper than a search from the prologue
//! affords (bug 1: 17 steps, bug 2: 13): the scenarios `three-hop` (bug
//! 1: 14 M states, 8 to 11 minutes) and `two-disks` (bug 2: under a
//! second) reach them; `three-hop-fsync` (the same window under fsync)
//! found nothing in 29 M states (1,000 s, not exhaustive).

pub mod actor;
pub mod config;
pub mod datagram;
pub mod history;
pub mod member;
pub mod model;
pub mod node;
pub mod prologue;
pub mod props;
pub mod run;
pub mod scenario;

pub use config::Bounds;
pub use model::{Action, McModel};

/// The hasher of every fingerprint: foldhash's quality variant with a
/// fixed seed (fast, and the same numbers in every run).
pub fn fp_hasher() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x7ac4_f00d_5eed_0001).build_hasher()
}

/// The steps possible from the initial state, one a line (a debugging
/// aid: `TACHYON_MC_ACTIONS=1`).
pub fn list_actions(m: &McModel) -> Vec<String> {
    use stateright::Model as _;
    let s = m.init_state();
    let mut acts = Vec::new();
    m.actions(s, &mut acts);
    acts.into_iter()
        .map(|a| {
            let eff = if m.next_state(s, a.clone()).is_some() {
                ""
            } else {
                " (no step)"
            };
            format!("{}{eff}", m.describe(&a))
        })
        .collect()
}
