//! Messages from Rust threads to BEAM processes: one way for every part.
//!
//! [`ProcessSender`] builds terms in an `OwnedEnv` of its own and sends each
//! one *copied* into the receiver's heap (`enif_send` with no message env):
//! a tight heap fragment of a few words per message. Handing the env itself
//! over (`send_and_clear`) would give the receiver the env's whole heap
//! block per message and make it collect garbage hundreds of times more
//! often while it reads them. The env is cleared once per batch
//! ([`ProcessSender::end_batch`]), not per message.
//!
//! Used by `Tachyon.UDP`'s receive thread (with `tachyon_core::credit` for
//! flow control) and by [`reporter`], the report channel every part's
//! threads use for stats and events.

use rustler::{Encoder, Env, LocalPid, OwnedEnv, Term};

use tachyon_core::report::{Report, Reporter, Value};

use crate::atoms;
use crate::terms::atom;

/// Sends terms built on a Rust thread (never a scheduler thread) to
/// processes.
pub struct ProcessSender {
    env: OwnedEnv,
}

impl Default for ProcessSender {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessSender {
    pub fn new() -> ProcessSender {
        ProcessSender {
            env: OwnedEnv::new(),
        }
    }

    /// Builds a term with `build` and sends a copy of it to `pid`. False if
    /// the process is gone.
    pub fn send<F>(&mut self, pid: &LocalPid, build: F) -> bool
    where
        F: for<'a> FnOnce(Env<'a>) -> Term<'a>,
    {
        self.env.run(|env| {
            let msg = build(env);
            env.send(pid, msg).is_ok()
        })
    }

    /// Builds a term with `build` once and sends a copy of it to each of
    /// `pids` (a bus member's owner and subscribers). Returns how many
    /// processes were alive to take it.
    pub fn send_all<'p, I, F>(&mut self, pids: I, build: F) -> usize
    where
        I: IntoIterator<Item = &'p LocalPid>,
        F: for<'a> FnOnce(Env<'a>) -> Term<'a>,
    {
        self.env.run(|env| {
            let msg = build(env);
            pids.into_iter()
                .filter(|pid| env.send(pid, msg).is_ok())
                .count()
        })
    }

    /// Frees the terms built since the last call (already copied out).
    pub fn end_batch(&mut self) {
        self.env.clear();
    }

    /// [`ProcessSender::send`] then [`ProcessSender::end_batch`].
    pub fn send_one<F>(&mut self, pid: &LocalPid, build: F) -> bool
    where
        F: for<'a> FnOnce(Env<'a>) -> Term<'a>,
    {
        let ok = self.send(pid, build);
        self.end_batch();
        ok
    }
}

/// The report channel: a [`Reporter`] that sends every [`Report`] of a
/// part's thread to `pid` as `{:tachyon_report, part, id, kind, fields}`
/// (`fields` a map with atom keys). `Tachyon.Telemetry` turns them into
/// events.
pub fn reporter(pid: LocalPid, part: &'static str, id: u64) -> Reporter {
    let mut sender = ProcessSender::new();
    Box::new(move |r: Report| {
        sender.send_one(&pid, |env| {
            let fields = report_map(env, &r.fields);
            (
                atom(env, "tachyon_report"),
                atom(env, part),
                id,
                atom(env, r.kind),
                fields,
            )
                .encode(env)
        });
    })
}

/// A report's fields as a map with atom keys.
pub fn report_map<'a>(env: Env<'a>, fields: &[(&'static str, Value)]) -> Term<'a> {
    let kv: Vec<(Term<'a>, Term<'a>)> = fields
        .iter()
        .map(|(k, v)| (atom(env, k), value(env, v)))
        .collect();
    Term::map_from_pairs(env, &kv).unwrap_or_else(|_| atoms::error().encode(env))
}

fn value<'a>(env: Env<'a>, v: &Value) -> Term<'a> {
    match v {
        Value::U64(n) => n.encode(env),
        Value::I64(n) => n.encode(env),
        Value::F64(x) => x.encode(env),
        Value::Bool(b) => b.encode(env),
        Value::Atom(a) => atom(env, a),
        Value::Text(s) => s.as_str().encode(env),
        Value::Nil => atoms::nil().encode(env),
        Value::Map(m) => report_map(env, m),
    }
}
