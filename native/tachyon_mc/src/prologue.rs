//! The deterministic prologue: the group starts on empty disks, elects
//! its first primary, its nodes catch up and the members are welcomed (and
//! with [`Prologue::Delivered`], the first member's first message goes
//! round), through the same drivers and code as the check, with no fault
//! and no choice: datagrams in the order they were sent, each delivered
//! once at once; when none is in flight, a pending sync completes, else
//! the process with the earliest deadline ticks. Its end is the check's
//! initial state: the depth the check spends goes to what follows.

use std::collections::VecDeque;

use crate::actor::{McActor, McState, Timer};
use crate::config::{Bounds, Prologue};
use crate::node::Effects;

/// Steps the prologue takes at most.
const MAX_STEPS: usize = 200_000;

/// The prologue's end.
pub struct Start {
    pub states: Vec<McState>,
    /// What it came to, in lines.
    pub summary: Vec<String>,
}

/// Whether the group has a primary every node follows, with every entry
/// committed everywhere, no learner and no sync pending; the members
/// welcomed by that primary (and with `Delivered`, the first member's
/// message delivered by every member).
fn settled(states: &[McState], b: &Bounds, delivered: bool) -> bool {
    let nodes: Vec<_> = states
        .iter()
        .filter_map(|s| s.as_node())
        .take(b.nodes)
        .collect();
    let Some(p) = nodes
        .iter()
        .filter_map(|n| n.node())
        .find(|n| n.is_leader())
    else {
        return false;
    };
    let (end, commit) = (p.next_seq(), p.commit());
    let nodes_ok = nodes.iter().all(|n| {
        n.node().is_some_and(|x| {
            !x.is_learner()
                && x.next_seq() == end
                && x.commit() == end
                && (x.is_leader() || x.leader() == Some(p.id()))
        }) && !n.sync_pending()
    });
    let members = states.iter().filter_map(|s| s.as_member());
    let members_ok = members
        .clone()
        .all(|m| m.term() == Some(p.term()) && (!delivered || !m.delivered.is_empty()));
    commit == end && nodes_ok && members_ok
}

/// Runs the prologue.
pub fn run(actors: &[McActor], b: &Bounds) -> Result<Start, String> {
    let mut states: Vec<McState> = actors.iter().map(|a| a.fresh()).collect();
    let mut wire: VecDeque<(usize, usize, Vec<u8>)> = VecDeque::new();
    let l = actors.first().map(|a| a.ctx.layout).ok_or("no actor")?;
    let post = |i: usize, fx: Effects, wire: &mut VecDeque<(usize, usize, Vec<u8>)>| {
        for (to, d) in fx.sent {
            if let Some(j) = l.id_of(to) {
                wire.push_back((i, usize::from(j), d));
            }
        }
    };
    let deliver = b.prologue == Prologue::Delivered;
    for _ in 0..MAX_STEPS {
        let mut fx = Effects::default();
        if let Some((src, dst, d)) = wire.pop_front() {
            actors[dst].deliver(&mut states[dst], src, &d, &mut fx);
            post(dst, fx, &mut wire);
            continue;
        }
        if settled(&states, b, deliver) {
            let summary = states
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{}: {s:?}", l.name(i)))
                .collect();
            return Ok(Start { states, summary });
        }
        let pending = states
            .iter()
            .position(|s| s.as_node().is_some_and(|n| n.sync_pending()));
        let publish = (deliver && settled(&states, b, false))
            .then(|| l.member(0))
            .filter(|&m| states[m].as_member().is_some_and(|m| m.published == 0));
        let (i, t) = if let Some(i) = pending {
            (i, Timer::Sync)
        } else if let Some(m) = publish {
            (m, Timer::Publish)
        } else {
            let due = |s: &McState| match s {
                McState::Node(n) if n.is_up() => Some(n.due),
                McState::Node(_) => None,
                McState::Member(m) => Some(m.due),
            };
            let i = (0..states.len())
                .filter_map(|i| due(&states[i]).map(|d| (d, i)))
                .min()
                .map(|x| x.1)
                .ok_or("nothing runs")?;
            (i, Timer::Tick)
        };
        actors[i].fire(&mut states[i], &t, &mut fx);
        post(i, fx, &mut wire);
    }
    Err(format!(
        "the group did not settle in {MAX_STEPS} steps: {:?}",
        states
    ))
}
