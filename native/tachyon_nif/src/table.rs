//! `Tachyon.Native.table_*`: the NIFs behind `Tachyon.Table`.
//!
//! `put`, `get`, `delete`, `count`, small `put_many` and `take_events` run on
//! normal schedulers (each is a hash lookup plus a copy: well under a
//! millisecond for values up to the 1 MiB default limit). Opening (recovery),
//! `sync`, `compact`, `stats` (fstat per segment), `close`, snapshots and big
//! batches run on dirty I/O schedulers. The table's background thread
//! (hints, periodic sync, compaction) belongs to the core `Table`: it is
//! stopped and joined by `close` or, failing that, when the resource is
//! garbage-collected (`Table`'s `Drop`).
//!
//! The hot NIFs take the table as `&TableResource` (borrowed for the call:
//! the argument term keeps it alive) rather than a `Handle`, which would
//! add a reference-count increment and decrement, on a cache line shared by
//! every process using the table, to each call. `TableResource` is a
//! `crate::res` type: decoding it is one `enif_get_resource`, without
//! rustler's per-call type lookup.

use std::sync::Mutex;
use std::time::Duration;

use rustler::{Atom, Binary, Encoder, Env, Error, NewBinary, NifResult, ResourceArc, Term};
use tachyon_core::table::{
    Compaction, Config, Event, Recovery, Snapshot, Table, TableError, ValueMode,
};

use crate::atoms;
use crate::res::Handle;
use crate::terms::raise;

mod names {
    rustler::atoms! {
        mode,
        segment_size,
        initial_segment_size,
        max_key_size,
        max_value_size,
        sync_interval_ms,
        compaction_threshold,
        compaction_interval_ms,
        shards,
        capacity,
        pretouch,
        prepared_segments,
        // recovery / stats / compaction maps
        segments,
        hinted_segments,
        scanned_segments,
        records,
        keys,
        truncated_bytes,
        cut,
        removed_files,
        duration_ns,
        puts,
        deletes,
        batches,
        disk_bytes,
        live_bytes,
        total_bytes,
        compactions,
        compacted_bytes_in,
        compacted_bytes_out,
        syncs,
        next_seq,
        compaction,
        segments_in,
        segments_out,
        bytes_in,
        bytes_out,
        entries_copied,
        tombstones_dropped,
    }
}

/// A table owned by a BEAM term.
pub struct TableResource {
    pub table: Table,
}

crate::hot_resource!(TableResource, c"TableResource");

/// A `stream/1` snapshot.
pub struct SnapshotResource(Mutex<Option<Snapshot>>);

#[rustler::resource_impl]
impl rustler::Resource for SnapshotResource {}

fn opt<'a, T: rustler::Decoder<'a>>(opts: Term<'a>, key: Atom) -> NifResult<Option<T>> {
    match opts.map_get(key) {
        Ok(v) if v.is_atom() && v.decode::<Atom>()? == atoms::nil() => Ok(None),
        Ok(v) => Ok(Some(v.decode()?)),
        Err(_) => Ok(None),
    }
}

/// An interval option, clamped to 1 ms..1 day like the Elixir check, so
/// that a direct call with a huge value cannot overflow a deadline in the
/// background thread.
fn interval(ms: u64) -> Duration {
    Duration::from_millis(ms.clamp(1, 86_400_000))
}

fn config(opts: Term<'_>) -> NifResult<Config> {
    let mut c = Config::default();
    if let Some(m) = opt::<Atom>(opts, names::mode())? {
        let s = m.to_term(opts.get_env()).atom_to_string()?;
        c.mode = ValueMode::parse(&s).ok_or(Error::BadArg)?;
    }
    if let Some(v) = opt::<u64>(opts, names::segment_size())? {
        c.segment_size = v as usize;
    }
    if let Some(v) = opt::<u64>(opts, names::initial_segment_size())? {
        c.initial_segment_size = v as usize;
    }
    if let Some(v) = opt::<u64>(opts, names::max_key_size())? {
        c.max_key_size = v as usize;
    }
    if let Some(v) = opt::<u64>(opts, names::max_value_size())? {
        c.max_value_size = v as usize;
    }
    c.sync_interval = opt::<u64>(opts, names::sync_interval_ms())?.map(interval);
    // Absent: the default; nil: no background compaction.
    if opts.map_get(names::compaction_interval_ms()).is_ok() {
        c.compaction_interval = opt::<u64>(opts, names::compaction_interval_ms())?.map(interval);
    }
    if let Some(v) = opt::<f64>(opts, names::compaction_threshold())? {
        c.compaction_threshold = v;
    }
    if let Some(v) = opt::<u64>(opts, names::shards())? {
        c.shards = v as usize;
    }
    if let Some(v) = opt::<u64>(opts, names::capacity())? {
        c.capacity = v.min(1 << 32) as usize;
    }
    if let Some(v) = opt::<bool>(opts, names::pretouch())? {
        c.pretouch = v;
    }
    if let Some(v) = opt::<u64>(opts, names::prepared_segments())? {
        c.prepared_segments = v.min(u32::MAX as u64) as usize;
    }
    Ok(c)
}

fn map<'a>(env: Env<'a>, pairs: Vec<(Atom, Term<'a>)>) -> NifResult<Term<'a>> {
    let pairs: Vec<(Term<'a>, Term<'a>)> =
        pairs.into_iter().map(|(k, v)| (k.encode(env), v)).collect();
    Term::map_from_pairs(env, &pairs)
}

fn recovery_map<'a>(env: Env<'a>, r: &Recovery) -> NifResult<Term<'a>> {
    let cut = match r.cut {
        Some((seg, off)) => (seg, off).encode(env),
        None => atoms::nil().encode(env),
    };
    map(
        env,
        vec![
            (names::segments(), r.segments.encode(env)),
            (names::hinted_segments(), r.hinted_segments.encode(env)),
            (names::scanned_segments(), r.scanned_segments.encode(env)),
            (names::records(), r.records.encode(env)),
            (names::keys(), r.keys.encode(env)),
            (names::truncated_bytes(), r.truncated_bytes.encode(env)),
            (names::cut(), cut),
            (names::removed_files(), r.removed_files.encode(env)),
            (
                names::duration_ns(),
                (r.duration.as_nanos() as u64).encode(env),
            ),
        ],
    )
}

fn compaction_map<'a>(env: Env<'a>, c: &Compaction) -> NifResult<Term<'a>> {
    map(
        env,
        vec![
            (names::segments_in(), c.segments_in.encode(env)),
            (names::segments_out(), c.segments_out.encode(env)),
            (names::bytes_in(), c.bytes_in.encode(env)),
            (names::bytes_out(), c.bytes_out.encode(env)),
            (names::entries_copied(), c.entries_copied.encode(env)),
            (
                names::tombstones_dropped(),
                c.tombstones_dropped.encode(env),
            ),
            (
                names::duration_ns(),
                (c.duration.as_nanos() as u64).encode(env),
            ),
        ],
    )
}

/// Opens a table: `{:ok, table, recovery_map}` or `{:error, reason}`.
/// Options the core rejects raise `ArgumentError` (Elixir validates first).
#[rustler::nif(schedule = "DirtyIo")]
fn table_open<'a>(env: Env<'a>, path: String, opts: Term<'a>) -> NifResult<Term<'a>> {
    let cfg = config(opts)?;
    match Table::open(&path, cfg) {
        Ok(table) => {
            let rec = recovery_map(env, table.recovery())?;
            let res = Handle::new(TableResource { table });
            Ok((atoms::ok(), res, rec).encode(env))
        }
        Err(TableError::BadConfig(_)) => Err(Error::BadArg),
        Err(e) => Err(raise(e)),
    }
}

#[rustler::nif]
fn table_put(t: &TableResource, key: Binary, value: Binary) -> NifResult<Atom> {
    t.table
        .put(key.as_slice(), value.as_slice())
        .map_err(raise)?;
    Ok(atoms::ok())
}

#[rustler::nif]
fn table_get<'a>(env: Env<'a>, t: &TableResource, key: Binary) -> NifResult<Term<'a>> {
    let found = t.table.get_with(key.as_slice(), |v| {
        let mut b = NewBinary::new(env, v.len());
        v.copy_to(b.as_mut_slice()).map(|_| b)
    });
    match found {
        Ok(Some(Ok(b))) => Ok((atoms::ok(), Binary::from(b)).encode(env)),
        Ok(Some(Err(e))) => Err(raise(e)),
        Ok(None) => Ok(atoms::error().encode(env)),
        Err(e) => Err(raise(e)),
    }
}

#[rustler::nif]
fn table_delete(t: &TableResource, key: Binary) -> NifResult<Atom> {
    t.table.delete(key.as_slice()).map_err(raise)?;
    Ok(atoms::ok())
}

fn put_many(t: &TableResource, pairs: Vec<(Binary, Binary)>) -> NifResult<Atom> {
    let refs: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    t.table.put_many(&refs).map_err(raise)?;
    Ok(atoms::ok())
}

#[rustler::nif]
fn table_put_many(t: &TableResource, pairs: Vec<(Binary, Binary)>) -> NifResult<Atom> {
    put_many(t, pairs)
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_put_many_dirty(t: Handle<TableResource>, pairs: Vec<(Binary, Binary)>) -> NifResult<Atom> {
    put_many(&t, pairs)
}

#[rustler::nif]
fn table_count(t: &TableResource) -> NifResult<u64> {
    t.table.count().map_err(raise)
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_sync(t: Handle<TableResource>) -> NifResult<Atom> {
    t.table.sync().map_err(raise)?;
    Ok(atoms::ok())
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_compact<'a>(env: Env<'a>, t: Handle<TableResource>) -> NifResult<Term<'a>> {
    let c = t.table.compact().map_err(raise)?;
    Ok((atoms::ok(), compaction_map(env, &c)?).encode(env))
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_stats<'a>(env: Env<'a>, t: Handle<TableResource>) -> NifResult<Term<'a>> {
    let m = crate::terms::fields_map(env, &t.table.stats().map_err(raise)?);
    Ok((atoms::ok(), m).encode(env))
}

/// Events queued by the background thread: `[{:compaction, map}]`.
#[rustler::nif]
fn table_take_events<'a>(env: Env<'a>, t: Handle<TableResource>) -> NifResult<Vec<Term<'a>>> {
    t.table
        .take_events()
        .iter()
        .map(|e| match e {
            Event::Compacted(c) => Ok((names::compaction(), compaction_map(env, c)?).encode(env)),
        })
        .collect()
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_close(t: Handle<TableResource>) -> NifResult<Atom> {
    t.table.close().map_err(raise)?;
    Ok(atoms::ok())
}

#[rustler::nif(schedule = "DirtyIo")]
fn table_snapshot(t: Handle<TableResource>) -> NifResult<ResourceArc<SnapshotResource>> {
    let s = t.table.snapshot().map_err(raise)?;
    Ok(ResourceArc::new(SnapshotResource(Mutex::new(Some(s)))))
}

/// Up to `n` more `{key, value}` pairs; `[]` at the end (the snapshot's
/// segments are released then).
#[rustler::nif(schedule = "DirtyIo")]
fn table_snapshot_next<'a>(
    env: Env<'a>,
    s: ResourceArc<SnapshotResource>,
    n: usize,
) -> NifResult<Vec<Term<'a>>> {
    let mut g = s.0.lock().map_err(|_| Error::BadArg)?;
    let Some(snap) = g.as_mut() else {
        return Ok(Vec::new());
    };
    let batch = snap.next_batch(n.clamp(1, 100_000)).map_err(raise)?;
    if batch.is_empty() {
        *g = None;
    }
    Ok(batch
        .into_iter()
        .map(|(k, v)| {
            let k: Binary = NewBinary::from_slice(env, &k).into();
            let v: Binary = NewBinary::from_slice(env, &v).into();
            (k, v).encode(env)
        })
        .collect())
}
