//! A sequencer node's threads: `tachyon-seq` runs the node on its socket
//! (`recvmmsg` in, the node's datagrams out through a `sendmmsg` queue,
//! its events on the report channel, its replays to the replayer, its
//! syncs to the syncer), `tachyon-replay` answers replays from the log,
//! and with `durability: fsync` `tachyon-sync` syncs the log (one sync
//! at a time; each takes everything appended before it: group commit).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::admin::Admin;
use super::Shared;
use crate::counter::Counter;
use crate::report::{Report, Reporter, Value};
use crate::seq::clock;
use crate::seq::core::node::Node;
use crate::seq::core::{
    replay_datagrams, CheckpointJob, Env, LogError, Nanos, NodeEvent, Replay, Sink,
};
use crate::seq::guard::Guard;
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

/// Work for the node's background thread (`tachyon-replay`).
pub(super) enum Job {
    Replay(Replay),
    /// Chunks of the checkpoint to a node installing it.
    Checkpoint(CheckpointJob),
    /// Retention: the checkpoint saved, then the segments below `first`
    /// removed.
    Trim(u64, Arc<Vec<u8>>),
}

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
    /// Seals each datagram for each address it goes to (keys given), in
    /// `buf`.
    pub seal: Option<&'a mut Guard>,
    pub buf: &'a mut Vec<u8>,
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
        match self.seal.as_deref_mut() {
            None => self.q.push(d, to),
            Some(g) => {
                for a in to {
                    g.seal(*a, d, self.buf);
                    if !self.buf.is_empty() {
                        self.q.push(self.buf, &[*a]);
                    }
                }
            }
        }
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
        if job.is_small() {
            let log = self.replays.store.get();
            let sink = &mut self.sink;
            let sent =
                replay_datagrams(&*log, &job, self.buf, &mut |d| sink.send(&[job.to_addr], d));
            match sent {
                Ok(n) => self.shared.replayed_inline.bump(n),
                Err(LogError::Damaged(at)) => self.shared.damaged(at),
                Err(_) => {}
            }
            return;
        }
        self.queue(Job::Replay(job));
    }

    fn trim(&mut self, first: u64, checkpoint: Arc<Vec<u8>>) {
        self.queue(Job::Trim(first, checkpoint));
    }

    fn send_checkpoint(&mut self, job: CheckpointJob) {
        self.queue(Job::Checkpoint(job));
    }

    fn event(&mut self, e: NodeEvent) {
        if let Some(r) = self.report.as_mut() {
            r(event_report(&e));
        }
    }

    fn sync(&mut self, upto: u64, gen: u64) {
        *self
            .shared
            .sync_ask
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((upto, gen));
        if let Some(w) = self.shared.syncer_wake.get() {
            w.wake();
        }
    }
}

impl NodeEnv<'_> {
    /// To the background thread (a replay is dropped if too many wait:
    /// its member asks again).
    fn queue(&mut self, job: Job) {
        let mut q = self
            .shared
            .replays
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.len() >= REPLAY_QUEUE && matches!(job, Job::Replay(_)) {
            self.shared.replays_dropped.bump(1);
            return;
        }
        q.push_back(job);
        drop(q);
        (self.replays.wake)();
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
        NodeEvent::Learner { reason } => {
            Report::new("learner", vec![("reason", Value::Atom(reason))])
        }
        NodeEvent::CaughtUp { term } => Report::new("caught_up", vec![("epoch", u(term as u64))]),
        NodeEvent::DiskFull { primary } => {
            Report::new("disk_full", vec![("primary", Value::Bool(primary))])
        }
        NodeEvent::DiskSpace => Report::new("disk_space", vec![]),
        NodeEvent::Trimmed { first } => Report::new("trimmed", vec![("first", u(first))]),
        NodeEvent::Installed { first } => Report::new("installed", vec![("first", u(first))]),
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
    if let (Some(reason), Some(r)) = (node.started_as(), report.as_mut()) {
        r(event_report(&NodeEvent::Learner { reason }));
    }
    // When the node's timers are due: checked after every batch too, so
    // that a socket that never empties (a saturated primary cut off from
    // its majority) still runs check-quorum and the election timers.
    let mut due: Nanos = 0;
    let mut admin = Admin::default();
    // Packet protection: one guard seals (this thread's stream), one opens
    // (the windows of what this thread reads).
    let mut seal = sh.guard.as_ref().map(|g| Guard::new(g, 0));
    let mut open = sh.guard.as_ref().map(|g| Guard::new(g, 0xff));
    let (mut seal_buf, mut open_buf) = (Vec::new(), Vec::new());
    admin.after_step(node, sh, report);
    loop {
        let mut env = NodeEnv {
            sink: QueueSink {
                q: &mut q,
                sock: &socks.sock,
                errors: &counters.send_errors,
                seal: seal.as_mut(),
                buf: &mut seal_buf,
            },
            shared: sh,
            replays,
            buf: &mut buf,
            report,
        };
        if ctx.stopped() {
            node.stop(clock::now(), &mut env);
            env.sink.flush();
            admin.close(sh);
            return;
        }
        let now = clock::now();
        admin.run(now, node, sh, &mut env);
        let w = sh.witness.swap(u64::MAX, Ordering::AcqRel);
        if w != u64::MAX || sh.take_over.swap(false, Ordering::AcqRel) {
            node.witness_down(now, (w != u64::MAX).then_some(w as u8));
        }
        let damaged = sh.damaged.swap(u64::MAX, Ordering::AcqRel);
        if damaged != u64::MAX {
            node.log_damaged(now, damaged, &mut env);
        }
        let done = sh
            .sync_done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((upto, gen)) = done {
            node.synced(now, upto, gen, &mut env);
        }
        let n = socks
            .recv(b, usize::MAX, &counters.oversized, &mut |d, from| {
                let Some(from) = from else { return };
                match open.as_mut() {
                    None => node.on_datagram(now, from, d, &mut env),
                    // Opened first: what fails never reaches the node.
                    Some(g) => {
                        if let Ok(p) = g.open(from, d, &mut open_buf) {
                            node.on_datagram(now, from, p, &mut env);
                        }
                    }
                }
            })
            .unwrap_or(0);
        let now = clock::now();
        if n > 0 {
            waiter.reset();
            node.end_batch(now, &mut env);
            if now < due {
                env.sink.flush();
                sh.after_step(node);
                admin.after_step(node, sh, env.report);
                continue;
            }
        }
        // After a read found nothing, or when the timers are due.
        due = node.tick(now, &mut env);
        env.sink.flush();
        sh.after_step(node);
        admin.after_step(node, sh, env.report);
        if n > 0 {
            continue;
        }
        let now = clock::now();
        if due > now {
            waiter.idle_at_most(Some(Duration::from_nanos(due - now)), || false);
        }
    }
}

/// The syncer (`durability: fsync`): syncs the log when asked, one sync
/// at a time (each covers everything appended before it: the appends of
/// the batches that came meanwhile ride along), and tells the node.
pub(super) fn sync_loop(ctx: &Ctx, store: &SharedStore, sh: &Shared) {
    let mut waiter = ctx.waiter(WaitStrategy::Park, Duration::from_millis(100));
    while !ctx.stopped() {
        let ask = sh.sync_ask.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some((upto, gen)) = ask else {
            waiter.idle(|| {
                sh.sync_ask
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some()
            });
            continue;
        };
        waiter.reset();
        let t0 = std::time::Instant::now();
        match store.get().sync() {
            Ok(_) => {
                sh.sync_ns.bump(t0.elapsed().as_nanos() as u64);
                *sh.sync_done.lock().unwrap_or_else(|p| p.into_inner()) = Some((upto, gen));
                if let Some(w) = sh.node_wake.get() {
                    w.wake();
                }
            }
            Err(_) => {
                // The store was replaced (a truncation: the node asks
                // again) or the disk failed: counted, asked again later.
                sh.sync_errors.bump(1);
                let mut a = sh.sync_ask.lock().unwrap_or_else(|p| p.into_inner());
                a.get_or_insert((upto, gen));
                drop(a);
                ctx.sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The replayer: answers the primary's replays from the log, off its
/// sequencing thread, one `sendmmsg` per batch of datagrams; sends
/// checkpoint chunks and does retention's work (`Job`).
pub(super) fn replay_loop(
    ctx: &Ctx,
    sock: &Socket,
    store: &SharedStore,
    sh: &Shared,
    max_datagram: usize,
    dir: &Path,
) {
    let mut waiter = ctx.waiter(WaitStrategy::Park, Duration::from_millis(100));
    let mut q = SendBatch::new(64);
    let errors = Counter::default();
    let mut buf = Vec::with_capacity(max_datagram);
    // Its own stream: its counter goes up in its own order.
    let mut seal = sh.guard.as_ref().map(|g| Guard::new(g, 1));
    let mut seal_buf = Vec::new();
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
        let job = match job {
            Job::Replay(r) => r,
            Job::Checkpoint(c) => {
                let mut sink = QueueSink {
                    q: &mut q,
                    sock,
                    errors: &errors,
                    seal: seal.as_mut(),
                    buf: &mut seal_buf,
                };
                c.each_datagram(&mut buf, &mut |d| sink.send(&[c.to], d));
                sink.flush();
                continue;
            }
            Job::Trim(first, checkpoint) => {
                if crate::seq::nodelog::trim(dir, store, first, &checkpoint).is_err() {
                    sh.trim_errors.bump(1);
                }
                continue;
            }
        };
        if job.fence == 0 || job.fence != sh.fence.load(Ordering::Acquire) {
            // Made under another term, or before a truncation: the log
            // now is not the one the job's header speaks for.
            sh.stale_replays.bump(1);
            continue;
        }
        let s = store.get();
        let mut sink = QueueSink {
            q: &mut q,
            sock,
            errors: &errors,
            seal: seal.as_mut(),
            buf: &mut seal_buf,
        };
        let sent = replay_datagrams(&*s, &job, &mut buf, &mut |d| sink.send(&[job.to_addr], d));
        sink.flush();
        match sent {
            Ok(n) => sh.replayed.bump(n),
            Err(LogError::Damaged(at)) => sh.damaged(at),
            Err(_) => {}
        }
    }
}
