//! `auth_*`: key files (`mix tachyon.gen_key`, `Tachyon.Auth`), and the
//! `auth` option of a sequencer node and a member (packet protection,
//! `tachyon_core::seq::guard`). A key's text passes through here only on
//! its way to a guard; it is never returned but as a file's text to write.

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, NifResult, Term};
use tachyon_core::seq::core::node::Acl;
use tachyon_core::seq::guard::{Auth, Key, Keys};

use crate::atoms;
use crate::terms::{atom, get, map};

/// Decodes the `auth` option: `nil`, or `%{keys: text, encrypt: bool}`.
/// `Err` names why the keys were refused (`{:error, {:bad_key, why}}`).
pub(crate) fn decode_auth<'a>(
    env: Env<'a>,
    opts: Term<'a>,
) -> NifResult<Result<Option<Auth>, String>> {
    let t: Term = get(env, opts, "auth")?;
    if t.decode::<Atom>().is_ok_and(|a| a == atoms::nil()) {
        return Ok(Ok(None));
    }
    let text: Binary = get(env, t, "keys")?;
    let encrypt: bool = get(env, t, "encrypt")?;
    let Ok(text) = std::str::from_utf8(text.as_slice()) else {
        return Ok(Err("not a Tachyon key file: not text".into()));
    };
    Ok(Keys::parse(text)
        .map(|keys| Some(Auth { keys, encrypt }))
        .map_err(|e| e.to_string()))
}

/// Decodes the access control of the `auth` option: `acl: nil`, or
/// `%{publishers: nil | [id], read_from: [{id, seq}], default_read_from: n}`.
pub(super) fn decode_acl<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Acl> {
    let t: Term = get(env, opts, "auth")?;
    if t.decode::<Atom>().is_ok() {
        return Ok(Acl::default());
    }
    let a: Term = get(env, t, "acl")?;
    if a.decode::<Atom>().is_ok() {
        return Ok(Acl::default());
    }
    let publishers: Option<Vec<u32>> = get(env, a, "publishers")?;
    let read_from: Vec<(u32, u64)> = get(env, a, "read_from")?;
    Ok(Acl {
        publishers: publishers.map(|p| p.into_iter().collect()),
        read_from: read_from.into_iter().collect(),
        default_read_from: get(env, a, "default_read_from")?,
    })
}

/// The error a refused key gives: `{:error, {:bad_key, why}}`.
pub(crate) fn bad_key<'a>(env: Env<'a>, why: &str) -> Term<'a> {
    (atoms::error(), (atom(env, "bad_key"), why)).encode(env)
}

fn secrets_of(text: &str) -> Result<Vec<Key>, String> {
    // A group file's secrets, in order (the file is parsed as keys too).
    Keys::parse(text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for l in text
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        if l.starts_with('#') {
            continue;
        }
        let mut b = [0u8; 32];
        if l.len() != 64 {
            return Err("not a group's key file (a member's credential?)".into());
        }
        for (i, x) in b.iter_mut().enumerate() {
            *x = u8::from_str_radix(&l[2 * i..2 * i + 2], 16)
                .map_err(|_| "a key is 64 hex digits".to_string())?;
        }
        out.push(Key::from_bytes(b));
    }
    Ok(out)
}

/// Key files: `op` `:new` (a group's key file's text, one new key),
/// `:add` (`text` with a new key accepted beside the one that seals: a
/// rotation's first step), `:promote` (the second key seals, the first is
/// still accepted), `:retire` (only the one that seals), `:member` (member
/// `id`'s credential from the group's `text`), `:check` (what `text`
/// holds). Returns `{:ok, text}` (`:check`: `{:ok, %{kind, generations,
/// member}}`) or `{:error, why}`.
#[rustler::nif]
fn auth_keys<'a>(env: Env<'a>, op: Atom, text: Binary<'a>, id: u32) -> NifResult<Term<'a>> {
    let text = std::str::from_utf8(text.as_slice()).unwrap_or("");
    let op = op.to_term(env).atom_to_string()?;
    let r: Result<String, String> = match op.as_str() {
        "new" => Key::random()
            .map(|k| Keys::group_file(&[k]))
            .map_err(|e| e.to_string()),
        "add" => secrets_of(text).and_then(|mut s| {
            if s.len() >= 2 {
                return Err("two keys already: promote or retire first".into());
            }
            // A key whose generation id differs from the current one's.
            loop {
                s.push(Key::random().map_err(|e| e.to_string())?);
                if Keys::of_secrets(&s).is_ok() {
                    return Ok(Keys::group_file(&s));
                }
                s.pop();
            }
        }),
        "promote" => secrets_of(text).and_then(|mut s| {
            if s.len() != 2 {
                return Err("promote needs two keys (add one first)".into());
            }
            s.swap(0, 1);
            Ok(Keys::group_file(&s))
        }),
        "retire" => secrets_of(text).map(|s| Keys::group_file(&s[..1])),
        "member" => {
            secrets_of(text).and_then(|s| Keys::member_file(&s, id).map_err(|e| e.to_string()))
        }
        "check" => {
            return Ok(match Keys::parse(text) {
                Ok(k) => {
                    let kind = if k.is_group() { "group" } else { "member" };
                    let info = map(
                        env,
                        &[
                            ("kind", atom(env, kind)),
                            ("generations", k.gens.len().encode(env)),
                            ("member", k.member.encode(env)),
                        ],
                    )?;
                    (atoms::ok(), info).encode(env)
                }
                Err(e) => (atoms::error(), e.to_string()).encode(env),
            })
        }
        _ => return Err(rustler::Error::BadArg),
    };
    Ok(match r {
        Ok(s) => (atoms::ok(), s).encode(env),
        Err(e) => (atoms::error(), e).encode(env),
    })
}
