//! `Tachyon.Native.hist_*`: histogram resources used by the benchmark harness.

use std::sync::Mutex;

use rustler::{Encoder, Env, NifResult, ResourceArc, Term};

use crate::terms::map;
use tachyon_core::hist::Hist;

/// A histogram owned by a BEAM term. The mutex is uncontended in practice
/// (one benchmark process records into it).
pub struct HistResource(pub Mutex<Hist>);

#[rustler::resource_impl]
impl rustler::Resource for HistResource {}

impl HistResource {
    pub fn wrap(h: Hist) -> ResourceArc<HistResource> {
        ResourceArc::new(HistResource(Mutex::new(h)))
    }
}

#[rustler::nif]
fn hist_new() -> ResourceArc<HistResource> {
    HistResource::wrap(Hist::new())
}

#[rustler::nif]
fn hist_record(h: ResourceArc<HistResource>, ns: i64) -> rustler::Atom {
    if let Ok(mut g) = h.0.lock() {
        g.record(ns.max(0) as u64);
    }
    crate::atoms::ok()
}

#[rustler::nif]
fn hist_merge(into: ResourceArc<HistResource>, from: ResourceArc<HistResource>) -> rustler::Atom {
    let other = from.0.lock().map(|g| g.clone()).unwrap_or_default();
    if let Ok(mut g) = into.0.lock() {
        g.merge(&other);
    }
    crate::atoms::ok()
}

#[rustler::nif]
fn hist_count(h: ResourceArc<HistResource>) -> u64 {
    h.0.lock().map(|g| g.count()).unwrap_or(0)
}

/// How many samples are larger than `ns`.
#[rustler::nif]
fn hist_count_above(h: ResourceArc<HistResource>, ns: u64) -> u64 {
    h.0.lock().map(|g| g.count_above(ns)).unwrap_or(0)
}

/// Returns the report as a map: count, avg, stdev, min, max, p50..p99999 and
/// `tails`: a list of `{percentile, avg, stdev, max}`.
#[rustler::nif]
fn hist_report<'a>(env: Env<'a>, h: ResourceArc<HistResource>) -> NifResult<Term<'a>> {
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

/// An empty NIF taking two arguments: the cost of a NIF call from Elixir,
/// printed by the benchmarks as the floor of any Elixir-side case.
#[rustler::nif]
fn bench_noop<'a>(_a: Term<'a>, _b: Term<'a>) -> rustler::Atom {
    crate::atoms::ok()
}

/// An empty NIF that decodes a store resource: the cost of the call plus the
/// resource lookup.
#[rustler::nif]
fn bench_noop_store<'a>(_r: &crate::store::StoreResource, _b: Term<'a>) -> rustler::Atom {
    crate::atoms::ok()
}

/// The machine's hiccups (`tachyon_core::hiccup`): a loop that only reads
/// the clock for `ms` milliseconds (at most 10 s), on a dirty CPU scheduler
/// because it keeps its thread busy. Returns `{histogram_of_gaps,
/// elapsed_ns}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn bench_hiccup(ms: u64) -> (ResourceArc<HistResource>, u64) {
    let h = tachyon_core::hiccup::measure(std::time::Duration::from_millis(ms.min(10_000)));
    let elapsed = h.elapsed.as_nanos() as u64;
    (HistResource::wrap(h.gaps), elapsed)
}
