//! The benchmark loops: everything `mix tachyon.bench` and the standalone
//! bench binaries run that is not part of an engine. The engines (`store`,
//! `async_store`, `table`, `udp`) hold no benchmark code; this module drives
//! them through their public API and records into [`crate::hist::Hist`]
//! (which stays at the crate root: the report format is shared by every
//! benchmark, `bench_rocksdb` included).
//!
//! * [`store`]: the native floor of the store bench ([`store::append`]) and
//!   the calling thread's page faults.
//! * [`async_store`]: the native producer loop of the async store bench
//!   ([`async_store::append`]).
//! * [`hiccup`]: the machine's own hiccups (a loop that only reads the clock).
//! * [`ping`]: the ping client of the UDP round-trip benchmark (against
//!   [`crate::udp::EchoServer`] or any echo peer).
//! * [`relay`]: the floors of the sequencer bench's throughput cases (a
//!   client pipelining bus-sized datagrams through a relay thread).
//! * [`fsync`]: the floors of its `durability: :fsync` cases (a bus
//!   entry's worth written and `fdatasync`ed, one or a batch per sync).
//! * [`seq`]: the native member of the sequencer bench (round trip and
//!   throughput floors).

pub mod async_store;
pub mod fsync;
pub mod hiccup;
pub mod ping;
pub mod relay;
pub mod seq;
pub mod store;

#[cfg(test)]
mod tests;
