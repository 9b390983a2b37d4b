//! Membership changes asked through the handle ([`Sequencer::add_node`],
//! [`Sequencer::remove_node`]): queued in [`Shared`] and the node thread
//! woken, like the witness's word and a finished sync; the node thread runs
//! `Node::add_node` / `Node::remove_node` at the top of its next loop and
//! answers once the change is committed (the commit index past its log
//! entry) or failed. The caller waits on a wake-up line of its own, up to
//! its timeout: from the BEAM, on a dirty scheduler.
//!
//! After each step the thread also publishes the membership when it
//! changed ([`Sequencer::membership`]), and reports it (`membership`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Sequencer, Shared};
use crate::report::{Report, Reporter, Value};
use crate::seq::core::node::{ChangeError, Membership, Node, NodeEntry};
use crate::seq::core::{Env, Nanos};
use crate::seq::nodelog::NodeLog;
use crate::wait::{WaitStrategy, Waiter, Wake};

/// Changes waiting for the node thread at most (more are refused: busy).
const MAX_QUEUED: usize = 16;

/// What an operator asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A node at this address, as a non-voter (the primary makes it a
    /// voter once it caught up).
    Add(SocketAddr),
    /// The node of this id.
    Remove(u8),
    /// The node at this address.
    RemoveAt(SocketAddr),
}

/// Why a change did not happen (the core's [`ChangeError`] and the
/// shell's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipError {
    /// This node is not the primary; the primary's address, if it knows
    /// one.
    NotPrimary(Option<SocketAddr>),
    /// A change is not committed yet, or the primary's term has committed
    /// nothing yet: one change at a time (ask again).
    InProgress,
    /// No node of that id or address.
    NotFound,
    /// No node id left (64 nodes).
    Full,
    /// The last voter stays.
    LastVoter,
    /// The log refused the entry (a full disk).
    Log,
    /// The change was appended, then cut from this node's log before it
    /// was committed (its primary lost its term): ask the new primary.
    Aborted,
    /// Neither committed nor failed within the timeout (no majority, say):
    /// it may still commit.
    Timeout,
    /// The node is stopped.
    Closed,
    /// Too many changes wait for the node thread.
    Busy,
}

impl MembershipError {
    /// The reason's name (an atom on the BEAM).
    pub fn name(self) -> &'static str {
        match self {
            MembershipError::NotPrimary(_) => "not_primary",
            MembershipError::InProgress => "change_in_progress",
            MembershipError::NotFound => "not_found",
            MembershipError::Full => "group_full",
            MembershipError::LastVoter => "last_voter",
            MembershipError::Log => "store_error",
            MembershipError::Aborted => "aborted",
            MembershipError::Timeout => "timeout",
            MembershipError::Closed => "closed",
            MembershipError::Busy => "busy",
        }
    }
}

type Answer = Result<u8, MembershipError>;

/// Where the node thread puts the answer, and the asker's wake-up line.
struct Reply {
    answer: Mutex<Option<Answer>>,
    wake: Arc<Wake>,
}

impl Reply {
    fn send(&self, a: Answer) {
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(a);
        self.wake.wake();
    }
}

/// A change for the node thread.
pub(super) struct Asked {
    change: Change,
    reply: Arc<Reply>,
}

/// The queue in [`Shared`].
pub(super) type Queue = Mutex<VecDeque<Asked>>;

/// The membership as of the node's last step: this node's id (`None`
/// while it joins) and every node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipView {
    pub node_id: Option<u8>,
    pub nodes: Vec<NodeEntry>,
}

/// A change appended and not committed yet.
struct Pending {
    id: u8,
    /// Its entry's index and the membership it holds (`None`: nothing was
    /// appended, the membership already was so).
    at: Option<(u64, Membership)>,
    reply: Arc<Reply>,
}

/// The node thread's side.
#[derive(Default)]
pub(super) struct Admin {
    pending: Vec<Pending>,
    /// What was published last: the membership's index and this node's id
    /// in it.
    published: Option<(Option<u64>, Option<u8>)>,
}

impl Admin {
    /// Runs the changes asked since the last step.
    pub fn run(&mut self, now: Nanos, node: &mut Node<NodeLog>, sh: &Shared, env: &mut dyn Env) {
        // A load first: the loop passes here at every step.
        if !sh.changes_asked.load(Ordering::Acquire)
            || !sh.changes_asked.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let asked: Vec<Asked> = sh
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for a in asked {
            let r = match a.change {
                Change::Add(addr) => node.add_node(now, addr, env),
                Change::Remove(id) => node.remove_node(now, id, env).map(|_| id),
                Change::RemoveAt(addr) => match node.membership().id_of(addr) {
                    Some(id) => node.remove_node(now, id, env).map(|_| id),
                    None => Err(ChangeError::NotFound),
                },
            };
            match r {
                Ok(id) => self.pending.push(Pending {
                    id,
                    at: node
                        .membership_index()
                        .map(|i| (i, node.membership().clone())),
                    reply: a.reply,
                }),
                Err(e) => a.reply.send(Err(refusal(node, a.change, e))),
            }
        }
    }

    /// After a step: publishes the membership if it changed (and reports
    /// it: a `membership` report, not at start), then answers the changes
    /// now committed (or cut).
    pub fn after_step(&mut self, node: &Node<NodeLog>, sh: &Shared, report: &mut Option<Reporter>) {
        // The membership first: a caller answered reads it at once.
        let m = node.membership();
        let now = (node.membership_index(), m.id_of(node.config().addr));
        if self.published != Some(now) {
            let started = self.published.is_some();
            self.published = Some(now);
            let view = MembershipView {
                node_id: now.1,
                nodes: m.nodes().to_vec(),
            };
            if let (true, Some(r)) = (started, report.as_mut()) {
                r(Report::new(
                    "membership",
                    vec![
                        ("node_id", view.node_id.map(|i| i as u64).into()),
                        ("nodes", Value::U64(m.nodes().len() as u64)),
                        ("voters", Value::U64(m.n_voters() as u64)),
                        ("at", now.0.into()),
                    ],
                ));
            }
            *sh.membership.lock().unwrap_or_else(|p| p.into_inner()) = view;
        }
        if !self.pending.is_empty() {
            let commit = node.commit();
            self.pending.retain(|p| {
                let answer = match &p.at {
                    None => Ok(p.id),
                    // Still this change at its index (not cut, nor replaced
                    // by another primary's entry): committed once the
                    // commit index passes it.
                    Some((at, m)) if node.membership_at(*at) == Some(m) => {
                        if commit <= *at {
                            return true;
                        }
                        Ok(p.id)
                    }
                    Some(_) => Err(MembershipError::Aborted),
                };
                p.reply.send(answer);
                false
            });
        }
    }

    /// The thread ends: what waits is told.
    pub fn close(&mut self, sh: &Shared) {
        for p in self.pending.drain(..) {
            p.reply.send(Err(MembershipError::Closed));
        }
        for a in sh
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            a.reply.send(Err(MembershipError::Closed));
        }
    }
}

/// The core's refusal, named for the operator.
fn refusal(node: &Node<NodeLog>, change: Change, e: ChangeError) -> MembershipError {
    match e {
        ChangeError::NotPrimary => {
            let m = node.membership();
            MembershipError::NotPrimary(node.leader().and_then(|l| m.addr(l)))
        }
        ChangeError::Pending => MembershipError::InProgress,
        ChangeError::NotFound | ChangeError::Exists => MembershipError::NotFound,
        ChangeError::Full if matches!(change, Change::Add(_)) => MembershipError::Full,
        ChangeError::Full => MembershipError::LastVoter,
        ChangeError::Log => MembershipError::Log,
    }
}

impl Sequencer {
    /// Adds a node at `addr` to the group (this node must be the primary),
    /// as a non-voter: the primary makes it a voter once it has caught up.
    /// Returns its id once the change is committed (at once if `addr` is a
    /// node already). Blocks up to `timeout`: from the BEAM, on a dirty
    /// scheduler.
    pub fn add_node(&self, addr: SocketAddr, timeout: Duration) -> Result<u8, MembershipError> {
        self.change(Change::Add(addr), timeout)
    }

    /// Removes a node (by id or address) from the group (this node must be
    /// the primary; a primary that removes itself steps down once the
    /// change is committed). Returns its id once the change is committed.
    pub fn remove_node(&self, which: Change, timeout: Duration) -> Result<u8, MembershipError> {
        match which {
            Change::Add(_) => Err(MembershipError::NotFound),
            _ => self.change(which, timeout),
        }
    }

    fn change(&self, change: Change, timeout: Duration) -> Result<u8, MembershipError> {
        if !self.is_running() {
            return Err(MembershipError::Closed);
        }
        let wake = Arc::new(Wake::new().map_err(|_| MembershipError::Busy)?);
        let reply = Arc::new(Reply {
            answer: Mutex::new(None),
            wake: wake.clone(),
        });
        {
            let mut q = self
                .shared
                .changes
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if q.len() >= MAX_QUEUED {
                return Err(MembershipError::Busy);
            }
            q.push_back(Asked {
                change,
                reply: reply.clone(),
            });
        }
        self.shared.changes_asked.store(true, Ordering::Release);
        self.worker.wake();
        let deadline = Instant::now() + timeout;
        let mut waiter = Waiter::new(WaitStrategy::Park, wake, Duration::from_millis(100));
        let answered = || {
            reply
                .answer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
        };
        loop {
            if let Some(a) = answered() {
                return a;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(MembershipError::Timeout);
            }
            if !self.is_running() {
                return Err(MembershipError::Closed);
            }
            waiter.idle_at_most(Some(deadline - now), || {
                reply
                    .answer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some()
            });
        }
    }

    /// The group's membership as of the node's last step.
    pub fn membership(&self) -> MembershipView {
        self.shared
            .membership
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
