//! `Tachyon.Native.store_*`: the message log resource.

use std::sync::Arc;

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, Error, NifResult, OwnedBinary, Term};

use tachyon_core::store::{Config, Event, Mode, Store, StoreError, Verify};

use crate::atoms;
use crate::res::Handle;
use crate::terms::{atom, error, get, map};

/// The BEAM's handle on a store. `Arc` so that other resources (the
/// AsyncStore writer thread) can share it. The store is closed (threads
/// joined, maps dropped, lock released) by `store_close` or when the last
/// reference is garbage-collected (then the store's own drop hands the
/// unmapping to the reaper thread, off the scheduler that collected it).
pub struct StoreResource {
    pub store: Arc<Store>,
}

crate::hot_resource!(StoreResource, c"StoreResource");

fn decode_config<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Config> {
    let mode: Atom = get(env, opts, "mode")?;
    let verify: Atom = get(env, opts, "verify")?;
    let max_segments: Option<u64> = get(env, opts, "max_segments")?;
    let max_bytes: Option<u64> = get(env, opts, "max_bytes")?;
    let max_age_ms: Option<u64> = get(env, opts, "max_age_ms")?;
    Ok(Config {
        mode: if mode == Atom::from_str(env, "read")? {
            Mode::Read
        } else {
            Mode::Write
        },
        segment_size: get::<u64>(env, opts, "segment_size")? as usize,
        initial_segment_size: get::<u64>(env, opts, "initial_segment_size")? as usize,
        max_message_size: get::<u64>(env, opts, "max_message_size")? as usize,
        max_segments: max_segments.map(|n| n as usize),
        max_bytes,
        max_age_ms,
        pretouch: get(env, opts, "pretouch")?,
        pretouch_ahead: get::<u64>(env, opts, "pretouch_ahead")? as usize,
        prepared_segments: get::<u64>(env, opts, "prepared_segments")? as usize,
        repair: get(env, opts, "repair")?,
        verify: if verify == Atom::from_str(env, "all")? {
            Verify::All
        } else {
            Verify::Active
        },
        ..Config::default()
    })
}

fn opt_u64<'a>(env: Env<'a>, v: Option<u64>) -> Term<'a> {
    match v {
        Some(n) => n.encode(env),
        None => atoms::nil().encode(env),
    }
}

/// Opens a store. Returns `{:ok, ref, recovery}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn store_open<'a>(env: Env<'a>, path: String, opts: Term<'a>) -> NifResult<Term<'a>> {
    let cfg = decode_config(env, opts)?;
    match Store::open(&path, cfg) {
        Ok(store) => {
            let r = store.recovery().clone();
            let rec = map(
                env,
                &[
                    ("segments", r.segments.encode(env)),
                    ("messages", r.messages.encode(env)),
                    ("recovered", r.recovered.encode(env)),
                    ("truncated_bytes", r.truncated_bytes.encode(env)),
                    ("lost_records", r.lost_records.encode(env)),
                    (
                        "cut",
                        match r.cut {
                            Some(c) => atom(env, c),
                            None => atoms::nil().encode(env),
                        },
                    ),
                    (
                        "segment",
                        opt_u64(env, r.cut_segment.or(Some(r.scanned_segment))),
                    ),
                    ("offset", opt_u64(env, r.cut_offset)),
                    ("removed_unused", r.removed_unused.encode(env)),
                    ("duration_ns", (r.duration.as_nanos() as u64).encode(env)),
                ],
            )?;
            let res = Handle::new(StoreResource {
                store: Arc::new(store),
            });
            Ok((atoms::ok(), res, rec).encode(env))
        }
        Err(e) => Ok(error(env, e)),
    }
}

fn as_bytes<'a>(data: Term<'a>) -> NifResult<Binary<'a>> {
    match data.decode::<Binary>() {
        Ok(b) => Ok(b),
        Err(_) => Binary::from_iolist(data).map_err(|_| Error::BadArg),
    }
}

/// The hot path: copies one message (binary or iodata) into the log.
#[rustler::nif]
fn store_append<'a>(env: Env<'a>, r: &StoreResource, data: Term<'a>) -> NifResult<Term<'a>> {
    let bin = as_bytes(data)?;
    Ok(match r.store.append(bin.as_slice()) {
        Ok(i) => (atoms::ok(), i).encode(env),
        Err(e) => error(env, e),
    })
}

fn append_many<'a>(env: Env<'a>, r: &StoreResource, list: Term<'a>) -> NifResult<Term<'a>> {
    let items: Vec<Term<'a>> = list.decode()?;
    let bins = items
        .into_iter()
        .map(as_bytes)
        .collect::<NifResult<Vec<Binary<'a>>>>()?;
    Ok(
        match r.store.append_many(bins.iter().map(|b| b.as_slice())) {
            Ok(Some(i)) => (atoms::ok(), i).encode(env),
            Ok(None) => (atoms::error(), atoms::empty()).encode(env),
            Err(e) => error(env, e),
        },
    )
}

/// Batch append for small batches (the Elixir side picks this one when the
/// batch is small enough to stay well under a millisecond).
#[rustler::nif]
fn store_append_many<'a>(
    env: Env<'a>,
    r: Handle<StoreResource>,
    list: Term<'a>,
) -> NifResult<Term<'a>> {
    append_many(env, &r, list)
}

/// Batch append for large batches, on a dirty I/O scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn store_append_many_dirty<'a>(
    env: Env<'a>,
    r: Handle<StoreResource>,
    list: Term<'a>,
) -> NifResult<Term<'a>> {
    append_many(env, &r, list)
}

fn copy_binary<'a>(env: Env<'a>, p: &[u8]) -> NifResult<Binary<'a>> {
    let mut b = OwnedBinary::new(p.len());
    b.as_mut_slice().copy_from_slice(p);
    Ok(b.release(env))
}

#[rustler::nif]
fn store_read<'a>(env: Env<'a>, r: &StoreResource, index: u64) -> NifResult<Term<'a>> {
    let mut out: Option<NifResult<Binary<'a>>> = None;
    match r
        .store
        .read_with(index, |p| out = Some(copy_binary(env, p)))
    {
        Ok(()) => Ok((atoms::ok(), out.unwrap_or(Err(Error::BadArg))?).encode(env)),
        Err(e) => Ok(error(env, e)),
    }
}

/// Up to `max_count` messages / `max_bytes` bytes from `from`:
/// `{:ok, [binary]}` (empty at the end) or `{:error, reason}`.
#[rustler::nif]
fn store_read_many<'a>(
    env: Env<'a>,
    r: Handle<StoreResource>,
    from: u64,
    max_count: u64,
    max_bytes: u64,
) -> NifResult<Term<'a>> {
    let mut out: Vec<Term<'a>> = Vec::new();
    let mut failed = None;
    let res = r.store.read_range(
        from,
        max_count.min(10_000) as usize,
        max_bytes as usize,
        |_, p| match copy_binary(env, p) {
            Ok(b) => out.push(b.encode(env)),
            Err(e) => failed = Some(e),
        },
    );
    if let Some(e) = failed {
        return Err(e);
    }
    match res {
        Ok(_) => Ok((atoms::ok(), out).encode(env)),
        Err(StoreError::NotFound) => Ok((atoms::ok(), Vec::<Term<'a>>::new()).encode(env)),
        Err(e) => Ok(error(env, e)),
    }
}

/// `{:ok, {first_index, next_index}}`.
#[rustler::nif]
fn store_indices<'a>(env: Env<'a>, r: Handle<StoreResource>) -> NifResult<Term<'a>> {
    let first = r.store.first_index();
    let next = r.store.next_index();
    Ok(match (first, next) {
        (Ok(f), Ok(n)) => (atoms::ok(), (f, n)).encode(env),
        (Err(e), _) | (_, Err(e)) => error(env, e),
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn store_sync<'a>(env: Env<'a>, r: Handle<StoreResource>) -> NifResult<Term<'a>> {
    Ok(match r.store.sync() {
        Ok(bytes) => (atoms::ok(), bytes).encode(env),
        Err(e) => error(env, e),
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn store_close(r: Handle<StoreResource>) -> Atom {
    r.store.close();
    atoms::ok()
}

#[rustler::nif]
fn store_stats<'a>(env: Env<'a>, r: Handle<StoreResource>) -> NifResult<Term<'a>> {
    if r.store.is_closed() {
        return Ok(error(env, StoreError::Closed));
    }
    let m = crate::terms::fields_map(env, &r.store.stats());
    Ok((atoms::ok(), m).encode(env))
}

/// Queued roll and retention events, oldest first, as maps.
#[rustler::nif]
fn store_take_events<'a>(env: Env<'a>, r: Handle<StoreResource>) -> NifResult<Term<'a>> {
    let mut out = Vec::new();
    for ev in r.store.take_events() {
        match ev {
            Event::Roll {
                segment,
                base_index,
                prepared,
                roll_ns,
                deleted_segments,
            } => out.push(map(
                env,
                &[
                    ("event", atom(env, "roll")),
                    ("segment", segment.encode(env)),
                    ("base_index", base_index.encode(env)),
                    ("prepared", (prepared as u64).encode(env)),
                    ("roll_ns", roll_ns.encode(env)),
                    ("deleted_segments", deleted_segments.encode(env)),
                ],
            )?),
            Event::Retention {
                reason,
                deleted_segments,
                deleted_bytes,
                first_index,
            } => out.push(map(
                env,
                &[
                    ("event", atom(env, "retention")),
                    ("reason", atom(env, reason.name())),
                    ("deleted_segments", deleted_segments.encode(env)),
                    ("deleted_bytes", deleted_bytes.encode(env)),
                    ("first_index", first_index.encode(env)),
                ],
            )?),
        }
    }
    Ok(out.encode(env))
}
