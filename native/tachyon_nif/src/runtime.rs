//! NIFs of the shared runtime (`tachyon_core::worker`).

use rustler::{Encoder, Env, NifResult, Term};

use crate::terms::map;

/// Whether the calling thread may wait for another thread: not a normal
/// scheduler (installed as `tachyon_core::worker`'s blocking check at load).
pub fn may_block() -> bool {
    // SAFETY: enif_thread_type only reads the calling thread's type.
    let t = unsafe { rustler::sys::enif_thread_type() };
    t != rustler::sys::ERL_NIF_THR_NORMAL_SCHEDULER
}

/// `%{refused_joins: n}`: joins a normal scheduler asked for and was not
/// made to wait for (each one a bug; tests assert there are none).
#[rustler::nif]
fn runtime_info<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    map(
        env,
        &[(
            "refused_joins",
            tachyon_core::worker::refused_joins().encode(env),
        )],
    )
}
