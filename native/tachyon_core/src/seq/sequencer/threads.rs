//! A sequencer node's two threads: `tachyon-seq` runs the node on its
//! socket (`recvmmsg` in, the node's datagrams out through a `sendmmsg`
//! queue, its events on the report channel, its replays to the replayer)
//! and `tachyon-replay` answers replays from the log.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;
use crate::counter::Counter;
use crate::report::{Report, Reporter, Value};
use crate::seq::clock;
use crate::seq::core::node::Node;
use crate::seq::core::{replay_datagrams, Env, NodeEvent, Replay, Sink};
use crate::seq::member::{Batches, Sockets};
use crate::seq::nodelog::{NodeLog, SharedStore};
use crate::udp::sys::{SendBatch, Socket};
use crate::wait::{WaitStrategy, Waiter};
use crate::worker::Ctx;

/// Sends queued before a `sendmmsg` (a receive batch's bus datagrams times
/// the unicast members).
const SEND_QUEUE: usize = 256;
/// Replays waiting for the replayer at most (more are dropped: members ask
/// again).
const REPLAY_QUEUE: usize = 4096;
/// Replays of at most this many entries are answered by the sequencing
/// thread itself, from the log, in the same `sendmmsg` as its other
/// datagrams: a gap fill of a datagram or two (what a lost datagram under
/// light loss costs) then waits for no thread to wake up. Measured on the
/// 2-core VM, the parked replayer's wake-up was tens of microseconds,
/// the whole tail of `tachyon.sequencer.roundtrip.loss`. Larger replays
/// (rewinds) go to the replayer, off the sequencing thread.
pub(super) const INLINE_REPLAY: u64 = 16;

/// How the sequencing thread answers replays: small ones itself from
/// `store`, the others by queueing them and calling `wake` (the
/// replayer's wake-up line).
pub(super) struct Replays<'a> {
    pub store: &'a SharedStore,
    pub wake: &'a dyn Fn(),
}

/// A `sendmmsg` queue as the protocol's [`Sink`]: flushed when full and at
/// the end of every receive batch.
pub(crate) struct QueueSink<'a> {
    pub q: &'a mut SendBatch,
    pub sock: &'a Socket,
    pub errors: &'a Counter,
}

impl QueueSink<'_> {
    pub fn flush(&mut self) {
        let r = self.q.flush(self.sock);
        if r.errors > 0 {
            self.errors.bump(r.errors);
        }
    }
}

impl Sink for QueueSink<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        if !self.q.has_room(to.len()) {
            self.flush();
        }
        self.q.push(d, to);
    }
}

/// The node thread's environment: datagrams to the `sendmmsg` queue,
/// replays to the replayer, events to the report channel.
struct NodeEnv<'a> {
    sink: QueueSink<'a>,
    shared: &'a Shared,
    replays: &'a Replays<'a>,
    /// The inline replays' datagram buffer.
    buf: &'a mut Vec<u8>,
    report: &'a mut Option<Reporter>,
}

impl Sink for NodeEnv<'_> {
    fn send(&mut self, to: &[SocketAddr], d: &[u8]) {
        self.sink.send(to, d)
    }
}

impl Env for NodeEnv<'_> {
    fn replay(&mut self, job: Replay) {
        if job.to.saturating_sub(job.from) <= INLINE_REPLAY {
            let log = self.replays.store.get();
            let sink = &mut self.sink;
            let sent =
                replay_datagrams(&*log, &job, self.buf, &mut |d| sink.send(&[job.to_addr], d));
            if let Ok(n) = sent {
                self.shared.replayed_inline.bump(n);
            }
            return;
        }
        let mut q = self
            .shared
            .replays
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.len() >= REPLAY_QUEUE {
            self.shared.replays_dropped.bump(1);
            return;
        }
        q.push_back(job);
        drop(q);
        (self.replays.wake)();
    }

    fn event(&mut self, e: NodeEvent) {
        if let Some(r) = self.report.as_mut() {
            r(event_report(&e));
        }
    }
}

/// A node's event as a report (`role`, `truncated`).
fn event_report(e: &NodeEvent) -> Report {
    let u = |v: u64| Value::U64(v);
    match *e {
        NodeEvent::Leader { term, start } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("primary")),
                ("epoch", u(term as u64)),
                ("start", u(start)),
            ],
        ),
        NodeEvent::Follower { term, leader } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("follower")),
                ("epoch", u(term as u64)),
                ("leader", leader.map(|l| l as u64).into()),
            ],
        ),
        NodeEvent::SteppedDown { term } => Report::new(
            "role",
            vec![
                ("role", Value::Atom("stepped_down")),
                ("epoch", u(term as u64)),
            ],
        ),
        NodeEvent::Campaign { term, pre } => Report::new(
            "campaign",
            vec![("epoch", u(term as u64)), ("pre_vote", Value::Bool(pre))],
        ),
        NodeEvent::Voted { term, candidate } => Report::new(
            "voted",
            vec![
                ("epoch", u(term as u64)),
                ("candidate", u(candidate as u64)),
            ],
        ),
        NodeEvent::Truncated { from, removed } => Report::new(
            "truncated",
            vec![("from", u(from)), ("removed", u(removed))],
        ),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    ctx: &Ctx,
    node: &mut Node<NodeLog>,
    socks: &Sockets,
    b: &mut Batches,
    wait: WaitStrategy,
    sh: &Shared,
    replays: &Replays<'_>,
    report: &mut Option<Reporter>,
) {
    let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), socks.poll_fd());
    let mut q = SendBatch::new(SEND_QUEUE);
    let counters = node.counters().clone();
    let mut buf = Vec::new();
    loop {
        let mut env = NodeEnv {
            sink: QueueSink {
                q: &mut q,
                sock: &socks.sock,
                errors: &counters.send_errors,
            },
            shared: sh,
            replays,
            buf: &mut buf,
            report,
        };
        if ctx.stopped() {
            node.stop(clock::now(), &mut env);
            env.sink.flush();
            return;
        }
        let now = clock::now();
        let w = sh.witness.swap(u64::MAX, Ordering::AcqRel);
        if w != u64::MAX || sh.take_over.swap(false, Ordering::AcqRel) {
            node.witness_down(now, (w != u64::MAX).then_some(w as u8));
        }
        let n = socks
            .recv(b, usize::MAX, &counters.oversized, &mut |d, from| {
                if let Some(from) = from {
                    node.on_datagram(now, from, d, &mut env);
                }
            })
            .unwrap_or(0);
        if n > 0 {
            waiter.reset();
            node.end_batch(clock::now(), &mut env);
            env.sink.flush();
            sh.session.set(node.session());
            continue;
        }
        // Only after a read found nothing: the timers.
        let now = clock::now();
        let due = node.tick(now, &mut env);
        env.sink.flush();
        sh.session.set(node.session());
        let now = clock::now();
        if due > now {
            waiter.idle_at_most(Some(Duration::from_nanos(due - now)), || false);
        }
    }
}

/// The replayer: answers the primary's replays from the log, off its
/// sequencing thread, one `sendmmsg` per batch of datagrams.
pub(super) fn replay_loop(
    ctx: &Ctx,
    sock: &Socket,
    store: &SharedStore,
    sh: &Shared,
    max_datagram: usize,
) {
    let mut waiter = ctx.waiter(WaitStrategy::Park, Duration::from_millis(100));
    let mut q = SendBatch::new(64);
    let errors = Counter::default();
    let mut buf = Vec::with_capacity(max_datagram);
    while !ctx.stopped() {
        let job = sh
            .replays
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        let Some(job) = job else {
            waiter.idle(|| {
                !sh.replays
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty()
            });
            continue;
        };
        waiter.reset();
        let s = store.get();
        let mut sink = QueueSink {
            q: &mut q,
            sock,
            errors: &errors,
        };
        let sent = replay_datagrams(&*s, &job, &mut buf, &mut |d| sink.send(&[job.to_addr], d));
        sink.flush();
        if let Ok(n) = sent {
            sh.replayed.bump(n);
        }
    }
}
