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
//! flow control).

use rustler::{Env, LocalPid, OwnedEnv, Term};

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

    /// Frees the terms built since the last call (already copied out).
    pub fn end_batch(&mut self) {
        self.env.clear();
    }
}
