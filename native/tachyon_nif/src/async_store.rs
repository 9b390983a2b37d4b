//! `Tachyon.Native.async_*`: the AsyncStore resource (a ring and a writer
//! thread in front of a store resource).
//!
//! Hot call: `async_append` on a normal scheduler (a mutex, a copy into the
//! ring; a full ring spins at most `spin_us`, capped at 1 ms). Everything that
//! waits (`async_flush`, `async_drain`, `async_close`) runs on a dirty I/O
//! scheduler with a bounded wait; `async_open` (ring allocation, page
//! touching, thread spawn) too. The writer thread reports to a process on the
//! report channel (`deliver::reporter`).

use std::sync::Arc;
use std::time::Duration;

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, Error, LocalPid, Monitor, NifResult, Term};

use crate::res::{Handle, Obj};
use tachyon_core::async_store::{AsyncStore, Config, OnFull, Report, Reporter, Stats};
use tachyon_core::store::Store;
use tachyon_core::wait::WaitStrategy;

use crate::atoms;
use crate::store::StoreResource;
use crate::terms::{atom, error, get};

/// The BEAM's handle on an AsyncStore. Dropping it (GC) or `async_close`
/// stops the writer after it has written everything queued and joins it.
/// With an owner process (`start_link`), the owner's death does the same and
/// closes the store if the AsyncStore opened it.
pub struct AsyncStoreResource {
    pub(crate) inner: AsyncStore,
    /// The store was opened for this AsyncStore (closed with it by `down`).
    owns_store: bool,
}

crate::hot_resource!(AsyncStoreResource, c"AsyncStoreResource", down = on_down);

impl AsyncStoreResource {
    fn on_down(this: &Obj<'_, Self>, _env: Env<'_>, _pid: LocalPid, _monitor: Monitor) {
        // The owner died without closing (e.g. killed): the writer writes
        // what is queued, closes the store if it was opened for it, and
        // ends. A monitor callback runs on a normal scheduler: nothing here
        // waits (the writer's join goes to the worker reaper).
        this.inner.close_in_background(this.owns_store);
    }
}

fn decode_config<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Config> {
    let wait: Atom = get(env, opts, "wait")?;
    let wait = WaitStrategy::parse(&wait.to_term(env).atom_to_string()?).ok_or(Error::BadArg)?;
    let on_full: Atom = get(env, opts, "on_full")?;
    let spin_us: u64 = get(env, opts, "spin_timeout")?;
    let on_full = if on_full == Atom::from_str(env, "error")? {
        OnFull::Error
    } else {
        // Never keep a normal scheduler longer than a millisecond.
        OnFull::Spin(Duration::from_micros(spin_us.min(1000)))
    };
    let core: Option<u64> = get(env, opts, "core")?;
    let interval: Option<u64> = get(env, opts, "stats_interval")?;
    let batch: u64 = get(env, opts, "batch_size")?;
    let linger_us: u64 = get(env, opts, "linger")?;
    Ok(Config {
        ring_size: get::<u64>(env, opts, "ring_size")? as usize,
        wait,
        core: core.map(|c| c as usize),
        on_full,
        batch_count: batch.clamp(1, 1 << 20) as usize,
        // Bounded like the Elixir check (1 ms..1 day): a huge interval must
        // not overflow the writer thread's `Instant + Duration`.
        stats_interval: interval.map(|ms| Duration::from_millis(ms.clamp(1, MAX_INTERVAL_MS))),
        linger: Duration::from_micros(linger_us.min(1_000_000)),
        ..Config::default()
    })
}

/// The longest interval (1 day) and wait (`u32::MAX` ms, about 49 days) a
/// NIF accepts; larger values are clamped, so that a direct call with a
/// huge value cannot overflow a deadline. The Elixir side rejects them.
const MAX_INTERVAL_MS: u64 = 86_400_000;
const MAX_TIMEOUT_MS: u64 = u32::MAX as u64;

fn timeout(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_TIMEOUT_MS))
}

fn stats_term<'a>(env: Env<'a>, s: &Stats) -> Term<'a> {
    crate::terms::fields_map(env, s)
}

/// The writer's reports on the report channel:
/// `{:tachyon_report, :async_store, id, kind, fields}` to `pid`.
fn reporter(pid: LocalPid, id: u64) -> Reporter {
    let mut channel = crate::deliver::reporter(pid, "async_store", id);
    Box::new(move |r: Report| channel(r.into()))
}

/// Starts an AsyncStore in front of `store`. `report_to` gets the writer's
/// reports tagged with `id`; `owner` (or nil) is monitored: its death closes
/// the AsyncStore (and the store when `owns_store`). Returns
/// `{:ok, ref, max_message_size}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn async_open<'a>(
    env: Env<'a>,
    store: Handle<StoreResource>,
    opts: Term<'a>,
    report_to: Option<LocalPid>,
    id: u64,
    owner: Option<LocalPid>,
    owns_store: bool,
) -> NifResult<Term<'a>> {
    let cfg = decode_config(env, opts)?;
    let shared: Arc<Store> = Arc::clone(&store.store);
    let rep = report_to.map(|pid| reporter(pid, id));
    match AsyncStore::open(shared, cfg, rep) {
        Ok(inner) => {
            let max = inner.max_message_size() as u64;
            let res = Handle::new(AsyncStoreResource { inner, owns_store });
            if let Some(pid) = owner {
                if res.monitor(env, &pid).is_none() {
                    // Already dead: behave as if it died right after.
                    let _ = res.inner.close();
                    return Ok((atoms::error(), atom(env, "noproc")).encode(env));
                }
            }
            Ok((atoms::ok(), res, max).encode(env))
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

/// The hot path: enqueues a copy of one message (binary or iodata).
/// `{:ok, index}` or `{:error, :full | :closed | :too_large | reason}`.
#[rustler::nif]
fn async_append<'a>(env: Env<'a>, r: &AsyncStoreResource, data: Term<'a>) -> NifResult<Term<'a>> {
    let bin = as_bytes(data)?;
    Ok(match r.inner.append(bin.as_slice()) {
        Ok(i) => (atoms::ok(), i).encode(env),
        Err(e) => error(env, &e),
    })
}

/// Waits (at most `timeout_ms`, clamped to `MAX_TIMEOUT_MS`) until everything enqueued before the call is
/// in the store: `{:ok, next_index}`.
#[rustler::nif(schedule = "DirtyIo")]
fn async_flush<'a>(env: Env<'a>, r: Handle<AsyncStoreResource>, timeout_ms: u64) -> Term<'a> {
    match r.inner.flush(timeout(timeout_ms)) {
        Ok(next) => (atoms::ok(), next).encode(env),
        Err(e) => error(env, &e),
    }
}

/// Waits (at most `timeout_ms`) until the ring is empty.
#[rustler::nif(schedule = "DirtyIo")]
fn async_drain<'a>(env: Env<'a>, r: Handle<AsyncStoreResource>, timeout_ms: u64) -> Term<'a> {
    match r.inner.drain(timeout(timeout_ms)) {
        Ok(()) => atoms::ok().encode(env),
        Err(e) => error(env, &e),
    }
}

/// Refuses new appends, writes what is queued, joins the writer. `:ok`, or
/// `{:error, reason}` if the writer had failed. The store stays open (the
/// Elixir side closes a store it owns).
#[rustler::nif(schedule = "DirtyIo")]
fn async_close<'a>(env: Env<'a>, r: Handle<AsyncStoreResource>) -> Term<'a> {
    match r.inner.close() {
        Ok(()) => atoms::ok().encode(env),
        Err(f) => error(env, &f),
    }
}

#[rustler::nif]
fn async_stats<'a>(env: Env<'a>, r: &AsyncStoreResource) -> NifResult<Term<'a>> {
    Ok(stats_term(env, &r.inner.stats()))
}

/// Test hook: stop (true) or resume (false) taking from the ring.
#[rustler::nif]
fn async_pause(r: &AsyncStoreResource, paused: bool) -> Atom {
    r.inner.set_paused(paused);
    atoms::ok()
}

/// The writer's default wait strategy on this machine (by core count).
#[rustler::nif]
fn async_default_wait<'a>(env: Env<'a>) -> Term<'a> {
    let w = WaitStrategy::default_for_cores(tachyon_core::wait::online_cores());
    atom(env, w.name())
}
