//! The model: stateright's actor model of the processes, wrapped to add
//! the steps no actor takes by itself (faults, restarts, the witness, a
//! membership change), the budgets that bound them, the history the
//! properties read, and the clock horizon.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use stateright::actor::{
    ActorModel, ActorModelAction, Envelope, Id, LossyNetwork, Network, RandomChoices, Timers,
};
use stateright::{Model, Property};
use tachyon_core::seq::core::Nanos;

use crate::actor::{Ctx, McActor, McState, Timer};
use crate::config::{Bounds, Layout, NetKind};
use crate::datagram::Datagram;
use crate::history::{record_out, Hist};
use crate::node::{Effects, NodeState};
use crate::props::{self, State};

/// A step of the check.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// An actor's step: a datagram delivered (or dropped), a timer.
    Step(ActorModelAction<Datagram, Timer, ()>),
    /// kill -9 of node `i` (it goes down; with eager restarts it starts
    /// again in the same step, as do the next two).
    Crash(usize),
    /// Node `node`'s host loses power; the platter keeps `keep` entries.
    PowerLoss { node: usize, keep: u64 },
    /// Node `i`'s disk is replaced by an empty one.
    ReplaceDisk(usize),
    /// Down node `i` starts again (a spare: for the first time).
    Restart(usize),
    /// In a group of two: node `i` is told its peer (down) is down.
    Witness(usize),
    /// In a group of two: node `i` is told its peer (up) is down.
    FalseWitness(usize),
    /// The primary `primary` removes node `id`.
    Remove { primary: usize, id: u8 },
}

/// The check's model.
pub struct McModel {
    pub ctx: Arc<Ctx>,
    pub actors: Vec<McActor>,
    inner: ActorModel<McActor, (), Hist>,
    init: State,
    /// The prologue's end, in lines.
    pub prologue: Vec<String>,
    /// A scenario's script after the prologue, step by step.
    pub script: Vec<String>,
    /// Each actor's clock when the prologue ended.
    t0: Vec<Nanos>,
    /// Deliveries and the primary's term when the prologue ended.
    pub init_deliveries: usize,
    pub init_term: u32,
    /// A time limit, in milliseconds since `born` (`u64::MAX`: none): past
    /// it no state is expanded (the search drains and stops; stateright's
    /// own limit is not seen by a lone depth-first thread), and
    /// `timed_out` is set. Lifted again before counterexamples are
    /// rebuilt (stateright replays them through `actions`).
    born: std::time::Instant,
    pub deadline_ms: AtomicU64,
    pub timed_out: AtomicBool,
}

fn empty_network(kind: NetKind) -> Network<Datagram> {
    match kind {
        NetKind::Duplicating => Network::new_unordered_duplicating([]),
        NetKind::NonDuplicating => Network::new_unordered_nonduplicating([]),
    }
}

impl McModel {
    /// The model for `bounds`, from the end of its prologue.
    pub fn new(bounds: Bounds) -> Result<McModel, String> {
        let layout = Layout::of(&bounds);
        let ctx = Arc::new(Ctx { bounds, layout });
        let noops = Arc::new(crate::actor::NoOps::default());
        let actors: Vec<McActor> = (0..layout.actors())
            .map(|index| McActor {
                ctx: ctx.clone(),
                index,
                noops: noops.clone(),
            })
            .collect();
        let b = &ctx.bounds;
        let inner = ActorModel::new((), Hist::default())
            .actors(actors.iter().cloned())
            .init_network(empty_network(b.net))
            .lossy_network(if b.lossy {
                LossyNetwork::Yes
            } else {
                LossyNetwork::No
            })
            .record_msg_out(record_out);
        let start = crate::prologue::run(&actors, b)?;
        let n = actors.len();
        let mut init = State {
            actor_states: start.states.into_iter().map(Arc::new).collect(),
            network: empty_network(b.net),
            timers_set: vec![Timers::new(); n],
            random_choices: vec![RandomChoices::default(); n],
            crashed: vec![false; n],
            history: Hist::default(),
            actor_storages: vec![None; n],
        };
        for i in 0..n {
            set_timers(&mut init, i, b);
        }
        init.history.observe(&init.actor_states);
        let t0 = init.actor_states.iter().map(|s| s.now()).collect();
        Ok(McModel {
            init_deliveries: props::deliveries(&init),
            init_term: props::top_term(&init),
            ctx: ctx.clone(),
            actors,
            inner,
            init,
            prologue: start.summary,
            script: Vec::new(),
            t0,
            born: std::time::Instant::now(),
            deadline_ms: AtomicU64::new(u64::MAX),
            timed_out: AtomicBool::new(false),
        })
    }

    /// Sets the time limit (from now), or lifts it.
    pub fn set_time_limit(&self, t: Option<std::time::Duration>) {
        let at = t.map_or(u64::MAX, |t| (self.born.elapsed() + t).as_millis() as u64);
        self.deadline_ms.store(at, Ordering::Relaxed);
    }

    pub fn init_state(&self) -> &State {
        &self.init
    }

    /// The check starts from `s` (a scenario's script ran to it): the
    /// clocks' horizon is counted from there.
    pub fn restart_from(&mut self, s: State) {
        self.t0 = s.actor_states.iter().map(|a| a.now()).collect();
        self.init_deliveries = props::deliveries(&s);
        self.init_term = props::top_term(&s);
        self.init = s;
    }

    fn node<'a>(&self, s: &'a State, i: usize) -> Option<&'a NodeState> {
        s.actor_states.get(i).and_then(|a| a.as_node())
    }

    /// What every step does after the actors': the duplicating network
    /// forgets which datagram came last (stateright keeps it to tell apart
    /// states that differ by nothing else: here they are the same state),
    /// and the history takes in the new state.
    fn post(&self, s: &mut State) {
        if let Network::UnorderedDuplicating(_, last) = &mut s.network {
            *last = None;
        }
        s.history.depth = s.history.depth.saturating_add(1);
        s.history.observe(&s.actor_states);
    }

    /// Applies `f` to node `i` outside the actor model (a fault, a
    /// restart, the witness, a change): its timers follow its new state,
    /// what it sent joins the network.
    fn alter(
        &self,
        s: &State,
        i: usize,
        f: impl FnOnce(&mut NodeState, &mut Effects) -> bool,
    ) -> Option<State> {
        let mut n = self.node(s, i)?.clone();
        let mut fx = Effects::default();
        if !f(&mut n, &mut fx) {
            return None;
        }
        let mut s = s.clone();
        s.actor_states[i] = Arc::new(McState::Node(n));
        set_timers(&mut s, i, &self.ctx.bounds);
        self.send(&mut s, i, fx.sent);
        Some(s)
    }

    /// Datagrams sent outside the actor model join the network (which
    /// stateright only rebuilds from its envelopes).
    fn send(&self, s: &mut State, src: usize, sent: Vec<(SocketAddr, Vec<u8>)>) {
        if sent.is_empty() {
            return;
        }
        let mut envs: Vec<Envelope<Datagram>> =
            s.network.iter_all().map(|e| e.to_cloned_msg()).collect();
        for (to, d) in sent {
            let Some(dst) = self.ctx.layout.id_of(to) else {
                continue;
            };
            let env = Envelope {
                src: Id::from(src),
                dst,
                msg: Datagram::new(d),
            };
            let seen = Envelope {
                src: env.src,
                dst,
                msg: &env.msg,
            };
            if let Some(h) = record_out(&(), &s.history, seen) {
                s.history = h;
            }
            envs.push(env);
        }
        s.network = match self.ctx.bounds.net {
            NetKind::Duplicating => Network::new_unordered_duplicating(envs),
            NetKind::NonDuplicating => Network::new_unordered_nonduplicating(envs),
        };
    }

    /// The steps outside the actor model possible in `s`.
    fn extra_actions(&self, s: &State, out: &mut Vec<Action>) {
        let (b, l) = (&self.ctx.bounds, &self.ctx.layout);
        let h = &s.history;
        let fault = h.faults < b.faults;
        for i in 0..l.node_slots() {
            let Some(n) = self.node(s, i) else { continue };
            // A frozen actor takes no step, faults included.
            if b.frozen.contains(&i) {
                continue;
            }
            if n.is_up() && fault && i < l.nodes {
                if b.kinds.crash {
                    out.push(Action::Crash(i));
                }
                if b.kinds.power_loss {
                    for keep in n.power_loss_outcomes(b.power_loss) {
                        out.push(Action::PowerLoss { node: i, keep });
                    }
                }
                if b.kinds.replace_disk {
                    out.push(Action::ReplaceDisk(i));
                }
            }
            if n.is_down() || (i >= l.nodes && h.changes == 0 && !n.is_up() && b.membership) {
                out.push(Action::Restart(i));
            }
        }
        if l.nodes == 2 {
            for i in 0..2 {
                let (me, peer) = (self.node(s, i), self.node(s, 1 - i));
                let (Some(me), Some(peer)) = (me, peer) else {
                    continue;
                };
                if !me.is_up() || b.frozen.contains(&i) {
                    continue;
                }
                if peer.is_down() && h.witnessed & (1 << i) == 0 {
                    out.push(Action::Witness(i));
                }
                if peer.is_up() && fault && b.kinds.false_witness {
                    out.push(Action::FalseWitness(i));
                }
            }
        }
        if b.membership && h.changes == 0 {
            for p in (0..l.node_slots()).filter(|p| !b.frozen.contains(p)) {
                let Some(node) = self.node(s, p).and_then(|n| n.node()) else {
                    continue;
                };
                if !node.is_leader() {
                    continue;
                }
                for id in node.membership().voters() {
                    out.push(Action::Remove { primary: p, id });
                }
            }
        }
    }

    /// Whether `a` spends the fault budget.
    fn is_fault(a: &Action) -> bool {
        matches!(
            a,
            Action::Crash(_)
                | Action::PowerLoss { .. }
                | Action::ReplaceDisk(_)
                | Action::FalseWitness(_)
        )
    }

    /// The node an action outside the actor model acts on.
    fn target(a: &Action) -> Option<usize> {
        match *a {
            Action::Step(_) => None,
            Action::Crash(i)
            | Action::ReplaceDisk(i)
            | Action::Restart(i)
            | Action::Witness(i)
            | Action::FalseWitness(i) => Some(i),
            Action::PowerLoss { node, .. } => Some(node),
            Action::Remove { primary, .. } => Some(primary),
        }
    }

    /// What an action outside the actor model does to its node (false:
    /// nothing, the step is not taken). A node that goes down restarts in
    /// the same step if restarts are eager.
    fn apply(&self, n: &mut NodeState, a: &Action, fx: &mut Effects) -> bool {
        let (b, l) = (&self.ctx.bounds, &self.ctx.layout);
        let Some(i) = Self::target(a) else {
            return false;
        };
        match *a {
            Action::Step(_) => return false,
            Action::Crash(_) => n.crash(),
            Action::PowerLoss { keep, .. } => n.power_loss(keep),
            Action::ReplaceDisk(_) => n.replace_disk(),
            Action::Restart(_) => {
                n.restart(b, l, i, fx);
                return true;
            }
            Action::Witness(_) | Action::FalseWitness(_) => {
                n.witness((1 - i) as u8);
                return true;
            }
            Action::Remove { id, .. } => return n.remove_node(i, id, fx),
        }
        if b.eager_restart {
            n.restart(b, l, i, fx);
        }
        true
    }

    /// The next state of an action outside the actor model.
    fn extra_step(&self, s: &State, a: &Action) -> Option<State> {
        let l = &self.ctx.layout;
        let i = Self::target(a)?;
        let mut next = self.alter(s, i, |n, fx| self.apply(n, a, fx))?;
        let h = &mut next.history;
        if Self::is_fault(a) {
            h.faults += 1;
        }
        match *a {
            Action::Witness(i) => h.witnessed |= 1 << i,
            // The peer is back: a later fall is told again.
            Action::Restart(i) if l.nodes == 2 && i < 2 => h.witnessed &= !(1 << (1 - i)),
            Action::Restart(i) if i >= l.nodes => h.changes += 1,
            Action::Remove { .. } => h.changes += 1,
            _ => {}
        }
        Some(next)
    }

    /// The actions possible in `s` but those of the actors in `frozen`,
    /// and the timers of those in `paused`.
    pub fn collect(
        &self,
        s: &State,
        actions: &mut Vec<Action>,
        frozen: &[usize],
        paused: &[usize],
    ) {
        let mut inner = Vec::new();
        self.inner.actions(s, &mut inner);
        let free = |a: &ActorModelAction<Datagram, Timer, ()>| match a {
            ActorModelAction::Deliver { dst, .. } => !frozen.contains(&usize::from(*dst)),
            ActorModelAction::Timeout(id, _) => {
                let i = usize::from(*id);
                !frozen.contains(&i) && !paused.contains(&i)
            }
            _ => true,
        };
        actions.extend(inner.into_iter().filter(free).map(Action::Step));
        self.extra_actions(s, actions);
    }

    /// An action in words.
    pub fn describe(&self, a: &Action) -> String {
        let l = &self.ctx.layout;
        let name = |id: Id| l.name(usize::from(id));
        match a {
            Action::Step(ActorModelAction::Deliver { src, dst, msg }) => {
                format!("deliver {} -> {}: {msg:?}", name(*src), name(*dst))
            }
            Action::Step(ActorModelAction::Drop(e)) => {
                format!("drop {} -> {}: {:?}", name(e.src), name(e.dst), e.msg)
            }
            Action::Step(ActorModelAction::Timeout(id, t)) => match t {
                Timer::Tick => format!("tick {}", name(*id)),
                Timer::Sync => format!("sync done {}", name(*id)),
                Timer::Publish => format!("publish {}", name(*id)),
            },
            Action::Step(other) => format!("{other:?}"),
            Action::Crash(i) => format!("CRASH {} (kill -9)", l.name(*i)),
            Action::PowerLoss { node, keep } => format!(
                "POWER LOSS {}: the platter keeps {keep} entries",
                l.name(*node)
            ),
            Action::ReplaceDisk(i) => format!("REPLACE DISK {}", l.name(*i)),
            Action::Restart(i) => format!("restart {}", l.name(*i)),
            Action::Witness(i) => format!("witness tells {} its peer is down", l.name(*i)),
            Action::FalseWitness(i) => {
                format!("FALSE WITNESS tells {} its live peer is down", l.name(*i))
            }
            Action::Remove { primary, id } => {
                format!("primary {} removes node {id}", l.name(*primary))
            }
        }
    }

    /// What happened in step `a` from `s`, in words (the step run again,
    /// traced): the action, then the events.
    pub fn explain(&self, s: &State, a: &Action) -> Vec<String> {
        let mut lines = vec![self.describe(a)];
        let mut fx = Effects::traced();
        match a {
            Action::Step(ActorModelAction::Deliver { src, dst, msg }) => {
                let i = usize::from(*dst);
                let mut st = (*s.actor_states[i]).clone();
                self.actors[i].deliver(&mut st, usize::from(*src), &msg.0, &mut fx);
            }
            Action::Step(ActorModelAction::Timeout(id, t)) => {
                let i = usize::from(*id);
                let mut st = (*s.actor_states[i]).clone();
                self.actors[i].fire(&mut st, t, &mut fx);
            }
            a => {
                if let Some(mut n) = Self::target(a).and_then(|i| self.node(s, i)).cloned() {
                    self.apply(&mut n, a, &mut fx);
                }
            }
        }
        lines.extend(
            fx.notes
                .unwrap_or_default()
                .into_iter()
                .map(|n| format!("    {n}")),
        );
        lines
    }
}

/// Actor `i`'s timers: those its state calls for.
fn set_timers(s: &mut State, i: usize, b: &Bounds) {
    let mut t = Timers::new();
    for x in s.actor_states[i].timers(b) {
        t.set(x);
    }
    s.timers_set[i] = t;
}

impl Model for McModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init.clone()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let d = self.ctx.bounds.depth;
        if d > 0 && s.history.depth as usize >= d {
            // At the depth bound: checked, not expanded.
            return;
        }
        let limit = self.deadline_ms.load(Ordering::Relaxed);
        if limit != u64::MAX && self.born.elapsed().as_millis() as u64 >= limit {
            self.timed_out.store(true, Ordering::Relaxed);
            return;
        }
        let b = &self.ctx.bounds;
        self.collect(s, actions, &b.frozen, &b.paused);
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let mut next = match a {
            Action::Step(a) => self.inner.next_state(s, a)?,
            a => self.extra_step(s, &a)?,
        };
        self.post(&mut next);
        Some(next)
    }

    fn format_action(&self, a: &Action) -> String {
        self.describe(a)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut v = vec![
            Property::always("no_lost_delivery", props::no_lost_delivery),
            Property::always("agreement", props::agreement),
            Property::always("one_primary_per_term", props::one_primary_per_term),
            Property::always("committed_survives", props::committed_survives),
            Property::always("one_session", props::one_session),
            Property::sometimes("delivered", props::delivered),
            Property::sometimes("failover", props::failover),
        ];
        if self.ctx.bounds.membership {
            v.push(Property::sometimes(
                "membership_changed",
                props::membership_changed,
            ));
        }
        v
    }

    /// Within the depth bound, and every process's clock within the
    /// horizon past the prologue.
    fn within_boundary(&self, s: &State) -> bool {
        let h = self.ctx.bounds.horizon;
        let d = self.ctx.bounds.depth;
        (d == 0 || s.history.depth as usize <= d)
            && s.actor_states
                .iter()
                .zip(&self.t0)
                .all(|(a, t0)| a.now() <= t0 + h)
    }
}
