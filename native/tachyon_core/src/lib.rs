//! Tachyon core: the pure-Rust half of Tachyon (no BEAM, no rustler).
//!
//! * [`async_store`]: the writer thread that drains a [`ring`] into a store.
//! * [`bench`]: the benchmark loops (store and async store floors, machine
//!   hiccups, the UDP ping client); no engine holds benchmark code.
//! * [`crc`]: CRC32C with a fast path for small records.
//! * [`hist`]: HDR latency histograms and the CoralBits-style percentile report
//!   used by every benchmark.
//! * [`owner`]: the owner of a resource (who owns it, transfers, which
//!   monitor's DOWN closes it), for the NIF's owned resources.
//! * [`poll`]: the decisions of a poll mode (spin window, when to sleep,
//!   select and close), for the NIF's poll-mode receives.
//! * [`prefetch`]: write prefetches for the next record of a hot path.
//! * [`receivers`]: the processes a thread delivers to besides the owner (a
//!   bus member's subscribers), read once per batch without a lock.
//! * [`report`]: the report channel (stats and events) from a part's threads.
//! * [`ring`]: the SPSC byte ring.
//! * [`segment`]: segment files shared by the store and the table (names,
//!   creation, maps, populating, the prepared-segment queue).
//! * [`seq`]: the sequencer and the members of its total-order bus.
//! * [`spin`]: the hot paths' mutex (release-store unlock).
//! * [`store`]: the append-only message log on memory-mapped segment files.
//! * [`table`]: the persistent key-value table (hash index over an
//!   append-only log).
//! * [`udp`]: UDP loops (echo server, endpoint for BEAM processes).
//! * [`wait`]: wait strategies and wake-ups for every loop that polls.
//! * [`worker`]: the one thread type (name, pinning, stop, wake, join).
//! * [`counter`]: single-writer statistics counters.
//! * [`credit`]: credits between a delivering thread and its consumer.
//!
//! Every module is usable from plain Rust and tested with `cargo test`; the
//! `tachyon_nif` crate only converts terms and owns resources and threads.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod async_store;
pub mod bench;
pub mod counter;
pub mod crc;
pub mod credit;
pub mod errno;
pub mod error;
pub mod hist;
pub mod owner;
pub mod poll;
pub mod prefetch;
pub mod receivers;
pub mod report;
pub mod ring;
pub mod segment;
pub mod seq;
pub mod spin;
pub mod store;
mod sys;
pub mod table;
pub mod udp;
pub mod wait;
pub mod worker;
