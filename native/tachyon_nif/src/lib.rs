//! Rustler glue for Tachyon. This crate only converts terms, owns resources and
//! starts/joins threads; the logic lives in `tachyon_core`.
//!
//! Every NIF is registered automatically by `rustler::init!` (no function
//! list). Modules:
//! * `async_store`: `Tachyon.AsyncStore` (ring + writer thread before a store).
//! * `defaults`: every part's `Config::default()`, read by the Elixir option checks.
//! * `hist`: HDR histogram resources for the benchmarks.
//! * `res`: resource types for the hot NIFs (store, async store, table), decoded
//!   without rustler's per-call type lookup.
//! * `store`: `Tachyon.Store` (message log).
//! * `table`: `Tachyon.Table` (persistent key-value table).
//! * `udp`: `Tachyon.Echo`, `Tachyon.UDP` and the UDP ping client.
#![deny(unsafe_op_in_unsafe_fn)]

mod async_store;
mod atoms;
mod defaults;
mod hist;
mod res;
mod store;
mod table;
mod terms;
mod udp;

rustler::init!("Elixir.Tachyon.Native", load = load);

/// Opens the resource types of `res` (rustler opens its own before this).
fn load(env: rustler::Env, _info: rustler::Term) -> bool {
    res::register::<store::StoreResource>(env)
        && res::register::<async_store::AsyncStoreResource>(env)
        && res::register::<table::TableResource>(env)
}
