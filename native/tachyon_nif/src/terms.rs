//! Term helpers shared by every NIF module.

use rustler::types::atom::Atom;
use rustler::{Encoder, Env, NifResult, Term};

use crate::atoms;

/// The atom `name` (`:error` if the atom table refuses it).
pub fn atom<'a>(env: Env<'a>, name: &str) -> Term<'a> {
    Atom::from_str(env, name)
        .map(|a| a.encode(env))
        .unwrap_or_else(|_| atoms::error().encode(env))
}

/// A map with atom keys.
pub fn map<'a>(env: Env<'a>, pairs: &[(&str, Term<'a>)]) -> NifResult<Term<'a>> {
    let kv: Vec<(Term<'a>, Term<'a>)> = pairs.iter().map(|(k, v)| (atom(env, k), *v)).collect();
    Term::map_from_pairs(env, &kv)
}

/// The value under the atom key `key` of the options map `opts`, decoded.
pub fn get<'a, T: rustler::Decoder<'a>>(env: Env<'a>, opts: Term<'a>, key: &str) -> NifResult<T> {
    let k = Atom::from_str(env, key)?;
    opts.map_get(k)?.decode()
}

/// The atom for an OS error: `:enospc`, `:eaddrinuse`, ... (`:eio` when
/// unknown); the names come from `tachyon_core::errno`.
pub fn errno_atom<'a>(env: Env<'a>, e: &std::io::Error) -> Term<'a> {
    atom(env, tachyon_core::errno::name(e))
}
