//! Moving a call to a dirty scheduler from inside a NIF, when its input
//! turns out to be slow to handle (a large bus publish) or a lock it needs
//! is held by such a call: `enif_schedule_nif` replaces the running NIF
//! with another function, run on a dirty I/O scheduler with the same
//! arguments. The Elixir side calls one NIF and never knows; a normal
//! scheduler is never held for longer than the check.
//!
//! Declare the dirty function with [`dirty_nif!`] (the raw C signature
//! `enif_schedule_nif` takes) and hand it to [`reschedule`].

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use rustler::sys::{ErlNifEnv, ErlNifTerm, ERL_NIF_DIRTY_JOB_IO_BOUND};
use rustler::{Env, NifResult, Term};

/// A NIF as ERTS calls it.
pub type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, c_int, *const ErlNifTerm) -> ErlNifTerm;

/// Tells the VM how much of a time slice (about 1 ms) a NIF call that
/// started at `t0` used, 1% per 10 us begun (none under 2 us): a process
/// that calls a NIF doing a system call (a `sendto`) in a loop is
/// scheduled out on time rather than after thousands of calls, each
/// counted as one reduction.
pub fn charge(env: Env<'_>, t0: Instant) {
    let us = t0.elapsed().as_micros();
    if us >= 2 {
        rustler::schedule::consume_timeslice(env, us.div_ceil(10).min(100) as i32);
    }
}

/// The most arguments a rescheduled call takes.
const MAX_ARGS: usize = 4;

/// Ends the running NIF by scheduling `fun` (named `name` in stack traces)
/// on a dirty I/O scheduler with `args`; return the result from the NIF.
pub fn reschedule<'a>(
    env: Env<'a>,
    name: &'static CStr,
    fun: RawNif,
    args: &[Term<'a>],
) -> Term<'a> {
    let mut argv = [crate::atoms::nil().to_term(env).as_c_arg(); MAX_ARGS];
    let n = args.len().min(MAX_ARGS);
    for (slot, t) in argv.iter_mut().zip(&args[..n]) {
        *slot = t.as_c_arg();
    }
    // SAFETY: `env` is the running NIF's environment, `name` is a static
    // NUL-terminated string, `fun` has the signature ERTS calls, and the
    // `n` argument terms belong to `env` (ERTS copies `argv`).
    let t = unsafe {
        rustler::sys::enif_schedule_nif(
            env.as_c_arg(),
            name.as_ptr(),
            ERL_NIF_DIRTY_JOB_IO_BOUND as c_int,
            fun,
            n as c_int,
            argv.as_ptr(),
        )
    };
    // SAFETY: a term of `env` (the NIF returns it as its result).
    unsafe { Term::new(env, t) }
}

/// Runs `body` for a raw NIF call: the arguments as terms, a panic or an
/// error made a `badarg` (never unwound into ERTS).
///
/// # Safety
/// `env`, `argc` and `argv` as ERTS passes them to a NIF.
pub unsafe fn run(
    env: *mut ErlNifEnv,
    argc: c_int,
    argv: *const ErlNifTerm,
    body: for<'a> fn(Env<'a>, &[Term<'a>]) -> NifResult<Term<'a>>,
) -> ErlNifTerm {
    let lifetime = ();
    // SAFETY: the environment of this call, valid until it returns.
    let env = unsafe { Env::new(&lifetime, env) };
    let n = (argc.max(0) as usize).min(MAX_ARGS);
    // SAFETY: ERTS passes `argc` terms at `argv` (at least `n`).
    let raw = unsafe { std::slice::from_raw_parts(argv, n) };
    let placeholder = crate::atoms::nil().to_term(env);
    let mut args = [placeholder; MAX_ARGS];
    for (slot, t) in args.iter_mut().zip(raw) {
        // SAFETY: a term of this call's environment.
        *slot = unsafe { Term::new(env, *t) };
    }
    match catch_unwind(AssertUnwindSafe(|| body(env, &args[..n]))) {
        Ok(Ok(t)) => t.as_c_arg(),
        // SAFETY: the call's environment.
        _ => unsafe { rustler::sys::enif_make_badarg(env.as_c_arg()) },
    }
}

/// `dirty_nif!(raw_name, body)`: a [`RawNif`] named `raw_name` that runs
/// `body(env, args) -> NifResult<Term>` (through [`run`]).
#[macro_export]
macro_rules! dirty_nif {
    ($raw:ident, $body:path) => {
        unsafe extern "C" fn $raw(
            env: *mut rustler::sys::ErlNifEnv,
            argc: std::ffi::c_int,
            argv: *const rustler::sys::ErlNifTerm,
        ) -> rustler::sys::ErlNifTerm {
            // SAFETY: called by ERTS as a NIF (through enif_schedule_nif).
            unsafe { $crate::dirty::run(env, argc, argv, $body) }
        }
    };
}
