//! Every benchmark-only NIF (`mix tachyon.bench`), over `tachyon_core::bench`:
//!
//! * `HistResource` and `hist_*`: HDR histograms owned by BEAM terms, which
//!   the Elixir timing loops record into and every Rust loop below returns.
//! * `bench_noop`, `bench_noop_store`: empty NIFs, the floor of any Elixir
//!   call (and of one that decodes a store resource).
//! * `bench_hiccup`: the machine's own hiccups.
//! * `store_bench_native`, `async_bench_native`: the store and async store
//!   appends in a Rust loop (the native floors).
//! * `udp_ping`: the UDP ping client on its own (optionally pinned) thread.
//! * `bench_relay_throughput`, `bench_fsync_floor`, `bench_seq_native`: the
//!   sequencer bench's floors (relayed datagrams, `fdatasync`s of the
//!   disk) and its Rust member loop.
//!
//! The engine modules (`store`, `async_store`, `table`, `udp`) hold no
//! benchmark code; this one borrows their resources and term helpers.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustler::{Encoder, Env, NifResult, Term};
use tachyon_core::bench::ping::{spawn_ping, PingConfig};
use tachyon_core::hist::Hist;

use crate::async_store::AsyncStoreResource;
use crate::atoms;
use crate::res::Handle;
use crate::store::StoreResource;
use crate::terms::{error, get, map};
use crate::udp::{decode_addr, decode_wait, encode_addr, encode_placement};

// -- histograms --------------------------------------------------------------------

/// A histogram owned by a BEAM term. The mutex is uncontended in practice
/// (one benchmark process records into it).
pub struct HistResource(pub Mutex<Hist>);

crate::hot_resource!(HistResource, c"HistResource");

impl HistResource {
    pub fn wrap(h: Hist) -> Handle<HistResource> {
        Handle::new(HistResource(Mutex::new(h)))
    }
}

#[rustler::nif]
fn hist_new() -> Handle<HistResource> {
    HistResource::wrap(Hist::new())
}

#[rustler::nif]
fn hist_record(h: &HistResource, ns: i64) -> rustler::Atom {
    if let Ok(mut g) = h.0.lock() {
        g.record(ns.max(0) as u64);
    }
    atoms::ok()
}

#[rustler::nif]
fn hist_merge(into: &HistResource, from: &HistResource) -> rustler::Atom {
    let other = from.0.lock().map(|g| g.clone()).unwrap_or_default();
    if let Ok(mut g) = into.0.lock() {
        g.merge(&other);
    }
    atoms::ok()
}

#[rustler::nif]
fn hist_count(h: &HistResource) -> u64 {
    h.0.lock().map(|g| g.count()).unwrap_or(0)
}

/// How many samples are larger than `ns`.
#[rustler::nif]
fn hist_count_above(h: &HistResource, ns: u64) -> u64 {
    h.0.lock().map(|g| g.count_above(ns)).unwrap_or(0)
}

/// Returns the report as a map: count, avg, stdev, min, max, p50..p99999 and
/// `tails`: a list of `{percentile, avg, stdev, max}`.
#[rustler::nif]
fn hist_report<'a>(env: Env<'a>, h: &HistResource) -> NifResult<Term<'a>> {
    let r =
        h.0.lock()
            .map(|g| g.report())
            .map_err(|_| rustler::Error::BadArg)?;
    let tails: Vec<(f64, f64, f64, u64)> = r
        .tails
        .iter()
        .map(|t| (t.percentile, t.avg, t.stdev, t.max))
        .collect();
    map(
        env,
        &[
            ("count", r.count.encode(env)),
            ("avg", r.avg.encode(env)),
            ("stdev", r.stdev.encode(env)),
            ("min", r.min.encode(env)),
            ("max", r.max.encode(env)),
            ("p50", r.p50.encode(env)),
            ("p75", r.p75.encode(env)),
            ("p90", r.p90.encode(env)),
            ("p99", r.p99.encode(env)),
            ("p999", r.p999.encode(env)),
            ("p9999", r.p9999.encode(env)),
            ("p99999", r.p99999.encode(env)),
            ("tails", tails.encode(env)),
        ],
    )
}

// -- floors ------------------------------------------------------------------------

/// An empty NIF taking two arguments: the cost of a NIF call from Elixir,
/// printed by the benchmarks as the floor of any Elixir-side case.
#[rustler::nif]
fn bench_noop<'a>(_a: Term<'a>, _b: Term<'a>) -> rustler::Atom {
    atoms::ok()
}

/// An empty NIF that decodes a store resource: the cost of the call plus the
/// resource lookup.
#[rustler::nif]
fn bench_noop_store<'a>(_r: &StoreResource, _b: Term<'a>) -> rustler::Atom {
    atoms::ok()
}

/// The machine's hiccups (`tachyon_core::bench::hiccup`): a loop that only
/// reads the clock for `ms` milliseconds (at most 10 s), on a dirty CPU
/// scheduler because it keeps its thread busy. Returns `{histogram_of_gaps,
/// elapsed_ns}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn bench_hiccup(ms: u64) -> (Handle<HistResource>, u64) {
    let h = tachyon_core::bench::hiccup::measure(Duration::from_millis(ms.min(10_000)));
    let elapsed = h.elapsed.as_nanos() as u64;
    (HistResource::wrap(h.gaps), elapsed)
}

/// The store's native floor (`tachyon_core::bench::store::append`): appends
/// in a Rust loop, each timed, on a dirty scheduler. Returns `{:ok, hist,
/// page_faults_of_the_appending_thread}`.
#[rustler::nif(schedule = "DirtyIo")]
fn store_bench_native<'a>(
    env: Env<'a>,
    r: Handle<StoreResource>,
    count: u64,
    warmup: u64,
    size: u64,
) -> NifResult<Term<'a>> {
    Ok(
        match tachyon_core::bench::store::append(&r.store, count, warmup, size as usize) {
            Ok(r) => (atoms::ok(), HistResource::wrap(r.hist), r.page_faults).encode(env),
            Err(e) => error(env, e),
        },
    )
}

/// The async store's native producer loop
/// (`tachyon_core::bench::async_store::append`), on a dirty CPU scheduler:
/// `{:ok, hist, drains}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn async_bench_native<'a>(
    env: Env<'a>,
    r: Handle<AsyncStoreResource>,
    count: u64,
    warmup: u64,
    size: u64,
) -> Term<'a> {
    match tachyon_core::bench::async_store::append(&r.inner, count, warmup, size as usize) {
        Ok((h, drains)) => (atoms::ok(), HistResource::wrap(h), drains).encode(env),
        Err(e) => error(env, &e),
    }
}

// -- ping client -------------------------------------------------------------------

/// Runs `warmup + count` round trips against `ip:port` on a new thread
/// (pinned to `core` if set). `opts`: ip, port, count, warmup, size, wait,
/// core, timeout_ms, max_lost. Returns `{:ok, hist, info}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn udp_ping<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    let target = decode_addr(env, opts)?;
    let mut cfg = PingConfig::new(target, get(env, opts, "count")?, get(env, opts, "warmup")?);
    cfg.size = get::<u64>(env, opts, "size")? as usize;
    cfg.wait = decode_wait(env, get(env, opts, "wait")?)?;
    cfg.core = get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize);
    // Clamped (u32::MAX ms) so that a huge value cannot overflow a deadline.
    cfg.timeout = Duration::from_millis(get::<u64>(env, opts, "timeout_ms")?.min(u32::MAX as u64));
    cfg.max_lost = get(env, opts, "max_lost")?;
    let out = match spawn_ping(cfg, Arc::new(AtomicBool::new(false))) {
        Ok(out) => out,
        Err(e) => return Ok(error(env, &e)),
    };
    let mut info = vec![
        ("sent", out.sent.encode(env)),
        ("received", out.received.encode(env)),
        ("lost", out.lost.encode(env)),
        ("stale", out.stale.encode(env)),
        ("mismatched", out.mismatched.encode(env)),
        ("elapsed_ns", (out.elapsed.as_nanos() as u64).encode(env)),
        ("local", encode_addr(env, &out.local)),
    ];
    info.extend(encode_placement(env, &out.placement));
    let info = map(env, &info)?;
    Ok((atoms::ok(), HistResource::wrap(out.hist), info).encode(env))
}

/// A throughput floor of the sequencer bench
/// (`tachyon_core::bench::relay::throughput`) against the relay at
/// `ip:port`, on a dirty scheduler. `opts`: ip, port, count, size, per,
/// window, buffers. Returns `{:ok, %{messages, datagrams, lost,
/// elapsed_ns}}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn bench_relay_throughput<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    let target = decode_addr(env, opts)?;
    let n = |k: &str| get::<u64>(env, opts, k);
    let out = tachyon_core::bench::relay::throughput(
        target,
        n("count")?,
        n("size")? as usize,
        n("per")? as usize,
        n("window")?,
        n("buffers")? as usize,
    );
    Ok(match out {
        Ok(t) => (atoms::ok(), crate::terms::fields_map(env, &t)).encode(env),
        Err(e) => error(env, e),
    })
}

/// The size of a bus datagram of `per` messages of `size` bytes (what the
/// relay floors send).
#[rustler::nif]
fn bench_bus_datagram_size(size: u64, per: u64) -> u64 {
    tachyon_core::bench::relay::bus_datagram_size(
        size.min(u32::MAX as u64) as usize,
        per.min(u32::MAX as u64) as usize,
    ) as u64
}

/// The `raw.fdatasync` floors of the sequencer bench
/// (`tachyon_core::bench::fsync`), on a dirty I/O scheduler. `opts`: path
/// (the directory), kind, count, size; `:latency` also warmup and returns
/// `{:ok, hist}` (each write and its `fdatasync`); `:throughput` also per
/// (records per `fdatasync`) and returns `{:ok, %{records, syncs,
/// elapsed_ns}}`. `{:error, reason}` if the file cannot be written.
#[rustler::nif(schedule = "DirtyIo")]
fn bench_fsync_floor<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    use tachyon_core::bench::fsync;
    let dir: String = get(env, opts, "path")?;
    let dir = std::path::Path::new(&dir);
    let kind: rustler::Atom = get(env, opts, "kind")?;
    let n = |k: &str| get::<u64>(env, opts, k);
    // (Clamped: a size beyond any datagram is refused by no one here.)
    let size = n("size")?.min(1 << 20) as usize;
    let out = match kind.to_term(env).atom_to_string()?.as_str() {
        "latency" => fsync::latency(dir, n("count")?, n("warmup")?, size)
            .map(|h| (atoms::ok(), HistResource::wrap(h)).encode(env)),
        "throughput" => {
            let per = n("per")?.clamp(1, 1 << 16) as usize;
            fsync::throughput(dir, n("count")?, size, per)
                .map(|t| (atoms::ok(), crate::terms::fields_map(env, &t)).encode(env))
        }
        _ => return Err(rustler::Error::BadArg),
    };
    Ok(out.unwrap_or_else(|e| error(env, e)))
}

/// The sequencer bench's native member (`tachyon_core::bench::seq`), on a
/// dirty scheduler. `kind`: `:roundtrip` returns `{:ok, hist}`;
/// `:throughput` returns `{:ok, elapsed_ns}` for `count` messages, `per`
/// per command.
#[rustler::nif(schedule = "DirtyIo")]
fn bench_seq_native<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    use crate::terms::get;
    let (ip, port): (Term, u16) = get(env, opts, "sequencer")?;
    let addr = std::net::SocketAddr::new(crate::udp::decode_ip(ip)?, port);
    let kind: rustler::Atom = get(env, opts, "kind")?;
    let count: u64 = get(env, opts, "count")?;
    let size = get::<u64>(env, opts, "size")? as usize;
    let max_datagram = get::<u64>(env, opts, "max_datagram")? as usize;
    let loss: f64 = get(env, opts, "loss")?;
    let err = |e: tachyon_core::seq::SeqError| error(env, e);
    let auth = match crate::seq::auth::decode_auth(env, opts)? {
        Ok(a) => a,
        Err(why) => return Ok(crate::seq::auth::bad_key(env, &why)),
    };
    let m = match tachyon_core::bench::seq::member(addr, 1, max_datagram, loss, auth) {
        Ok(m) => m,
        Err(e) => return Ok(err(e)),
    };
    let out = if kind.to_term(env).atom_to_string()? == "roundtrip" {
        let warmup: u64 = get(env, opts, "warmup")?;
        tachyon_core::bench::seq::roundtrip(&m, count, warmup, size)
            .map(|h| (atoms::ok(), HistResource::wrap(h)).encode(env))
    } else {
        let per = get::<u64>(env, opts, "per")? as usize;
        tachyon_core::bench::seq::throughput(&m, count, size, per, 256)
            .map(|d| (atoms::ok(), d.as_nanos() as u64).encode(env))
    };
    m.close();
    Ok(out.unwrap_or_else(err))
}
