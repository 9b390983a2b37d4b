//! The stateright actors: a node or a member, each a thin shell that
//! hands a datagram or a timer to the real state machine's driver
//! ([`crate::node`], [`crate::member`]) and turns what it sent into
//! messages to actor ids.
//!
//! Timers are stateright's: each actor keeps exactly the timers its state
//! calls for set (a tick always, while up; a sync while one is pending; a
//! publish while the member has messages left), and a step that changes
//! nothing sends nothing and keeps the state borrowed (stateright then
//! drops the step: a datagram delivered again to no effect is no new
//! state).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use stateright::actor::{model_timeout, Actor, Id, Out};

use crate::config::{Bounds, Layout};
use crate::datagram::Datagram;
use crate::member::MemberState;
use crate::node::{Effects, NodeState};

/// The bounds and layout every actor shares.
#[derive(Debug)]
pub struct Ctx {
    pub bounds: Bounds,
    pub layout: Layout,
}

/// A timer of an actor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// The clock runs to the deadline the state machine asked for; it
    /// ticks.
    Tick,
    /// The disk finishes the pending sync (`durability: fsync`).
    Sync,
    /// The member publishes its next message.
    Publish,
}

/// One process of the check.
#[derive(Clone)]
pub struct McActor {
    pub ctx: Arc<Ctx>,
    pub index: usize,
    /// Deliveries known to change nothing: (the actor's fingerprint, the
    /// datagram's and sender's hash). A datagram's effect depends on the
    /// state, the sender and the bytes only: most datagrams of a
    /// duplicating network are old ones delivered again to no effect, and
    /// running the node to find that out again is most of a check's time.
    pub noops: Arc<NoOps>,
}

/// A set of (state, datagram) pairs that change nothing, in shards (one
/// lock each: checker threads rarely meet), each emptied when it grows
/// past its share of [`NoOps::CAP`].
#[derive(Default)]
pub struct NoOps {
    shards: [Mutex<HashSet<(u64, u64)>>; 16],
}

impl NoOps {
    pub const CAP: usize = 1 << 22;

    fn shard(&self, k: (u64, u64)) -> &Mutex<HashSet<(u64, u64)>> {
        &self.shards[(k.0 ^ k.1) as usize % 16]
    }

    fn contains(&self, k: (u64, u64)) -> bool {
        self.shard(k)
            .lock()
            .map(|s| s.contains(&k))
            .unwrap_or(false)
    }

    fn insert(&self, k: (u64, u64)) {
        if let Ok(mut s) = self.shard(k).lock() {
            if s.len() >= Self::CAP / 16 {
                s.clear();
            }
            s.insert(k);
        }
    }
}

/// An actor's state.
#[derive(Clone, PartialEq, Eq)]
pub enum McState {
    Node(NodeState),
    Member(MemberState),
}

impl Hash for McState {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            McState::Node(n) => n.fingerprint().hash(h),
            McState::Member(m) => m.fingerprint().hash(h),
        }
    }
}

impl fmt::Debug for McState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McState::Node(n) => n.fmt(f),
            McState::Member(m) => m.fmt(f),
        }
    }
}

impl McState {
    pub fn fingerprint(&self) -> u64 {
        match self {
            McState::Node(n) => n.fingerprint(),
            McState::Member(m) => m.fingerprint(),
        }
    }

    pub fn as_node(&self) -> Option<&NodeState> {
        match self {
            McState::Node(n) => Some(n),
            McState::Member(_) => None,
        }
    }

    pub fn as_member(&self) -> Option<&MemberState> {
        match self {
            McState::Member(m) => Some(m),
            McState::Node(_) => None,
        }
    }

    /// The actor's clock.
    pub fn now(&self) -> u64 {
        match self {
            McState::Node(n) => n.now,
            McState::Member(m) => m.now,
        }
    }

    /// The timers this state calls for.
    pub fn timers(&self, b: &Bounds) -> Vec<Timer> {
        match self {
            McState::Node(n) if n.is_up() => {
                let mut t = vec![Timer::Tick];
                if n.sync_pending() {
                    t.push(Timer::Sync);
                }
                t
            }
            McState::Node(_) => Vec::new(),
            McState::Member(m) => {
                let mut t = vec![Timer::Tick];
                if m.may_publish(b.messages) {
                    t.push(Timer::Publish);
                }
                t
            }
        }
    }
}

impl McActor {
    /// The initial state of this actor (a node on an empty disk, a member
    /// that opens), at time 0.
    pub fn fresh(&self) -> McState {
        let (b, l) = (&self.ctx.bounds, &self.ctx.layout);
        if l.is_node(self.index) {
            McState::Node(NodeState::start(b, l, self.index))
        } else {
            let j = self.index - l.node_slots();
            McState::Member(MemberState::start(l, j))
        }
    }

    /// A datagram from actor `src` (the state changes in place).
    pub fn deliver(&self, s: &mut McState, src: usize, d: &[u8], fx: &mut Effects) {
        let l = &self.ctx.layout;
        let from = l.addr(src);
        match s {
            McState::Node(n) => n.deliver(self.index, from, d, fx),
            McState::Member(m) => {
                let j = self.index - l.node_slots();
                m.deliver(l, j, from, d, fx)
            }
        }
    }

    /// A timer fires (the state changes in place).
    pub fn fire(&self, s: &mut McState, t: &Timer, fx: &mut Effects) {
        let (b, l) = (&self.ctx.bounds, &self.ctx.layout);
        match (s, t) {
            (McState::Node(n), Timer::Tick) => n.tick(self.index, fx),
            (McState::Node(n), Timer::Sync) => n.complete_sync(self.index, fx),
            (McState::Member(m), Timer::Tick) => m.tick(l, self.index - l.node_slots(), fx),
            (McState::Member(m), Timer::Publish) => {
                m.publish(self.index - l.node_slots(), b.messages, fx)
            }
            _ => {}
        }
    }

    /// Sends what a step sent, and sets the timers the new state calls
    /// for (cancelling the others).
    pub fn emit(&self, s: &McState, fx: Effects, o: &mut Out<McActor>) {
        let l = &self.ctx.layout;
        for (to, d) in fx.sent {
            // An address of no actor (none in these layouts) is nowhere.
            if let Some(id) = l.id_of(to) {
                o.send(id, Datagram::new(d));
            }
        }
        let want = s.timers(&self.ctx.bounds);
        for t in [Timer::Tick, Timer::Sync, Timer::Publish] {
            if want.contains(&t) {
                o.set_timer(t, model_timeout());
            } else {
                o.cancel_timer(t);
            }
        }
    }

    /// Runs `f` on a copy of the state; keeps the copy only if the step
    /// changed the state or sent something (returns whether it did).
    fn step(
        &self,
        state: &mut Cow<McState>,
        o: &mut Out<McActor>,
        f: impl FnOnce(&mut McState, &mut Effects),
    ) -> bool {
        let mut s = (**state).clone();
        let mut fx = Effects::default();
        f(&mut s, &mut fx);
        let changed = s.fingerprint() != state.fingerprint() || !fx.sent.is_empty();
        if changed {
            self.emit(&s, fx, o);
            *state = Cow::Owned(s);
        }
        changed
    }
}

impl Actor for McActor {
    type Msg = Datagram;
    type State = McState;
    type Timer = Timer;
    type Random = ();
    type Storage = ();

    fn on_start(&self, _id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> McState {
        let s = self.fresh();
        self.emit(&s, Effects::default(), o);
        s
    }

    fn on_msg(&self, _id: Id, state: &mut Cow<McState>, src: Id, msg: Datagram, o: &mut Out<Self>) {
        if let McState::Node(n) = &**state {
            if !n.is_up() {
                // Nobody reads it: lost.
                return;
            }
        }
        let key = (state.fingerprint(), {
            let mut h = crate::fp_hasher();
            (src, &msg).hash(&mut h);
            h.finish()
        });
        if self.noops.contains(key) {
            return;
        }
        let changed = self.step(state, o, |s, fx| {
            self.deliver(s, usize::from(src), &msg.0, fx)
        });
        if !changed {
            self.noops.insert(key);
        }
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<McState>, timer: &Timer, o: &mut Out<Self>) {
        if !self.step(state, o, |s, fx| self.fire(s, timer, fx)) {
            // Nothing happened: the timer stays (stateright drops the step).
            o.set_timer(timer.clone(), model_timeout());
        }
    }

    fn name(&self) -> String {
        self.ctx.layout.name(self.index)
    }
}
