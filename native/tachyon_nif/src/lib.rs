//! Rustler glue for Tachyon. This crate only converts terms, owns resources and
//! starts/joins threads; the logic lives in `tachyon_core`.
//!
//! Every NIF is registered automatically by `rustler::init!` (no function
//! list). Modules:
//! * `async_store`: `Tachyon.AsyncStore` (ring + writer thread before a store).
//! * `bench`: every benchmark-only NIF (histogram resources, empty NIFs, the
//!   machine hiccup loop, the native store floors, the UDP ping client).
//! * `defaults`: every part's `Config::default()`, read by the Elixir option checks.
//! * `dirty`: moving a call to a dirty scheduler from inside a NIF.
//! * `deliver`: messages from Rust threads to processes, and the report
//!   channel (`{:tachyon_report, part, id, kind, fields}`).
//! * `owner`: the owner process of a resource (monitored; its death closes it).
//! * `res`: resource types for the hot NIFs (store, async store, table), decoded
//!   without rustler's per-call type lookup.
//! * `runtime`: the shared runtime's own NIFs (worker counters).
//! * `segment`: what the shared segment layer knows of a directory (the
//!   last segment it could not get, for `{:error, :enospc}` messages).
//! * `seq`: `Tachyon.Sequencer` and `Tachyon.Bus` (total-order bus).
//! * `store`: `Tachyon.Store` (message log).
//! * `table`: `Tachyon.Table` (persistent key-value table).
//! * `udp`: `Tachyon.Echo` and `Tachyon.UDP`.
#![deny(unsafe_op_in_unsafe_fn)]

mod async_store;
mod atoms;
mod bench;
mod defaults;
mod deliver;
mod dirty;
mod owner;
mod res;
mod runtime;
mod segment;
mod seq;
mod store;
mod table;
mod terms;
mod udp;

rustler::init!("Elixir.Tachyon.Native", load = load);

/// Opens the resource types of `res` (rustler opens its own before this)
/// and starts the worker reaper (see `tachyon_core::worker`).
fn load(env: rustler::Env, _info: rustler::Term) -> bool {
    tachyon_core::worker::set_blocking_check(runtime::may_block);
    tachyon_core::worker::start_reaper()
        && res::register::<store::StoreResource>(env)
        && res::register::<async_store::AsyncStoreResource>(env)
        && res::register::<table::TableResource>(env)
        && res::register::<bench::HistResource>(env)
        && res::register::<udp::EchoResource>(env)
        && res::register::<udp::UdpResource>(env)
        && res::register::<seq::SeqResource>(env)
        && res::register::<seq::BusResource>(env)
}
