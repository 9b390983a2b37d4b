//! `Tachyon.Native.segment_*`: what the shared segment layer knows of a
//! directory, for every part on segment files (store, table, sequencer).

use std::path::Path;

use rustler::{Encoder, Env, Term};

use crate::atoms;

/// The last segment `path` could not get for lack of disk space, as
/// `{asked_bytes, free_bytes}`, or `nil` (see
/// `tachyon_core::segment::shortfall`). `Tachyon.Error` reads it to say
/// how much an `{:error, :enospc}` asked for, and where.
#[rustler::nif]
fn segment_shortfall(env: Env<'_>, path: String) -> Term<'_> {
    match tachyon_core::segment::shortfall::last(Path::new(&path)) {
        Some(s) => (s.asked, s.free).encode(env),
        None => atoms::nil().encode(env),
    }
}
