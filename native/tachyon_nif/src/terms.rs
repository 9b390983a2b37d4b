//! Term helpers shared by every NIF module.

use rustler::types::atom::Atom;
use rustler::{Encoder, Env, NifResult, Term};

use crate::atoms;
use tachyon_core::error::{Error as CoreError, Reason};

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

/// The reason of an error of any part, as the BEAM sees it: an atom
/// (`:closed`, `:enospc`, `:eaddrinuse`, ...), `{:corrupt, segment,
/// offset}`, `{:corrupt, segment, offset, records, bytes}` (damage a
/// store's `repair: true` would cut, and what it would cut), `{:corrupt,
/// :manifest}`, `{:wrong_kind, kind}`, `{:unsupported_format, version}` or
/// `{:bad_config, message}`. `Tachyon.Error.normalize/3` turns the
/// `:corrupt` tuples into `:corrupt` and logs their detail. The one mapping: every part's
/// error converts into `tachyon_core::error::Error`, whose `reason()` says
/// which.
pub struct ReasonTerm(pub Reason);

impl Encoder for ReasonTerm {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self.0 {
            Reason::Atom(a) => match a {
                // The frequent ones without an atom-table lookup (a full
                // ring or window is flow control, on a hot path).
                "busy" => atoms::busy().encode(env),
                "full" => atoms::full().encode(env),
                "closed" => atoms::closed().encode(env),
                "too_large" => atoms::too_large().encode(env),
                "not_found" => atoms::not_found().encode(env),
                "enospc" => atoms::enospc().encode(env),
                a => atom(env, a),
            },
            Reason::Corrupt { segment, offset } => (atoms::corrupt(), segment, offset).encode(env),
            Reason::Damaged {
                segment,
                offset,
                records,
                bytes,
            } => (atoms::corrupt(), segment, offset, records, bytes).encode(env),
            Reason::BadManifest => (atoms::corrupt(), atom(env, "manifest")).encode(env),
            Reason::WrongKind(k) => (atom(env, "wrong_kind"), atom(env, k)).encode(env),
            Reason::UnsupportedFormat(v) => (atom(env, "unsupported_format"), v).encode(env),
            Reason::Trimmed(first) => (atom(env, "trimmed"), first).encode(env),
            Reason::NotPrimary(a) => {
                let leader = match a {
                    Some(a) => crate::udp::encode_addr(env, &a),
                    None => rustler::types::atom::nil().encode(env),
                };
                (atom(env, "not_primary"), leader).encode(env)
            }
            Reason::BadConfig(m) => (atom(env, "bad_config"), m).encode(env),
        }
    }
}

/// `{:error, reason}` for an error of any part.
pub fn error<'a>(env: Env<'a>, e: impl Into<CoreError>) -> Term<'a> {
    (atoms::error(), ReasonTerm(e.into().reason())).encode(env)
}

/// The same as a NIF's error result (`Err(raise(e))` returns
/// `{:error, reason}`).
pub fn raise(e: impl Into<CoreError>) -> rustler::Error {
    rustler::Error::Term(Box::new(ReasonTerm(e.into().reason())))
}

/// The map of a stats snapshot (any `tachyon_core::report::Fields`): its
/// field names as atom keys. The one way a part's stats reach the BEAM.
pub fn fields_map<'a>(env: Env<'a>, s: &impl tachyon_core::report::Fields) -> Term<'a> {
    crate::deliver::report_map(env, &s.fields())
}
