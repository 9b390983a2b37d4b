//! `Tachyon.Native.defaults/0`: the `Config::default()` of every part, so
//! that the defaults are defined once (in Rust) and the Elixir option
//! checks (`Tachyon.Options`) read them from here.
//!
//! Keys are the Elixir option names, values in the options' units
//! (milliseconds, microseconds, bytes); `nil` for an unset `Option`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use rustler::{Encoder, Env, NifResult, Term};
use tachyon_core::async_store::{self, OnFull};
use tachyon_core::seq::{MemberConfig, SequencerConfig, TwoNodes};
use tachyon_core::store::{self, Mode, Verify};
use tachyon_core::table;
use tachyon_core::udp::{EchoConfig, EndpointConfig, SocketOptions};

use crate::atoms;
use crate::terms::{atom, map};

fn opt<'a, T: Encoder>(env: Env<'a>, v: Option<T>) -> Term<'a> {
    match v {
        Some(v) => v.encode(env),
        None => atoms::nil().encode(env),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn store_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = store::Config::default();
    map(
        env,
        &[
            (
                "mode",
                atom(
                    env,
                    if c.mode == Mode::Read {
                        "read"
                    } else {
                        "write"
                    },
                ),
            ),
            ("segment_size", (c.segment_size as u64).encode(env)),
            (
                "initial_segment_size",
                (c.initial_segment_size as u64).encode(env),
            ),
            ("max_message_size", (c.max_message_size as u64).encode(env)),
            ("max_segments", opt(env, c.max_segments.map(|n| n as u64))),
            ("max_bytes", opt(env, c.max_bytes)),
            ("max_age_ms", opt(env, c.max_age_ms)),
            ("pretouch", c.pretouch.encode(env)),
            ("pretouch_ahead", (c.pretouch_ahead as u64).encode(env)),
            (
                "prepared_segments",
                (c.prepared_segments as u64).encode(env),
            ),
            ("repair", c.repair.encode(env)),
            (
                "verify",
                atom(
                    env,
                    if c.verify == Verify::All {
                        "all"
                    } else {
                        "active"
                    },
                ),
            ),
        ],
    )
}

fn async_store_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = async_store::Config::default();
    let (on_full, spin) = match c.on_full {
        OnFull::Error => ("error", 0),
        OnFull::Spin(d) => ("spin", us(d)),
    };
    map(
        env,
        &[
            ("ring_size", (c.ring_size as u64).encode(env)),
            ("wait", atom(env, c.wait.name())),
            ("core", opt(env, c.core.map(|n| n as u64))),
            ("on_full", atom(env, on_full)),
            ("spin_timeout", spin.encode(env)),
            ("batch_size", (c.batch_count as u64).encode(env)),
        ],
    )
}

fn table_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = table::Config::default();
    map(
        env,
        &[
            ("mode", atom(env, c.mode.name())),
            ("segment_size", (c.segment_size as u64).encode(env)),
            (
                "initial_segment_size",
                (c.initial_segment_size as u64).encode(env),
            ),
            ("max_key_size", (c.max_key_size as u64).encode(env)),
            ("max_value_size", (c.max_value_size as u64).encode(env)),
            ("sync_interval_ms", opt(env, c.sync_interval.map(ms))),
            ("compaction_threshold", c.compaction_threshold.encode(env)),
            (
                "compaction_interval_ms",
                opt(env, c.compaction_interval.map(ms)),
            ),
            ("capacity", (c.capacity as u64).encode(env)),
            ("shards", (c.shards as u64).encode(env)),
            ("pretouch", c.pretouch.encode(env)),
            (
                "prepared_segments",
                (c.prepared_segments as u64).encode(env),
            ),
        ],
    )
}

fn socket_pairs<'a>(env: Env<'a>, s: &SocketOptions) -> [(&'static str, Term<'a>); 3] {
    [
        ("recbuf", opt(env, s.recbuf.map(|n| n as u64))),
        ("sndbuf", opt(env, s.sndbuf.map(|n| n as u64))),
        ("reuseaddr", s.reuseaddr.encode(env)),
    ]
}

fn udp_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = EndpointConfig::new(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
    let mut pairs = vec![
        ("wait", atom(env, c.wait.name())),
        ("core", opt(env, c.core.map(|n| n as u64))),
        ("batch", (c.batch as u64).encode(env)),
        ("max_datagram", (c.max_datagram as u64).encode(env)),
        ("max_queue", opt(env, c.max_queue)),
    ];
    pairs.extend(socket_pairs(env, &c.socket));
    map(env, &pairs)
}

fn echo_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = EchoConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    let mut pairs = vec![
        ("wait", atom(env, c.wait.name())),
        ("core", opt(env, c.core.map(|n| n as u64))),
        ("batch", (c.batch as u64).encode(env)),
        ("max_datagram", (c.max_datagram as u64).encode(env)),
    ];
    pairs.extend(socket_pairs(env, &c.socket));
    map(env, &pairs)
}

fn sequencer_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = SequencerConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "");
    let two_nodes = match c.two_nodes {
        TwoNodes::Safe => "safe",
        TwoNodes::Available => "available",
    };
    map(
        env,
        &[
            ("batch", (c.batch as u64).encode(env)),
            ("max_datagram_size", (c.max_datagram as u64).encode(env)),
            ("batching", c.batching.encode(env)),
            ("heartbeat_ms", ms(c.heartbeat).encode(env)),
            ("heartbeat_after_us", us(c.heartbeat_after).encode(env)),
            ("replay_max", (c.replay_max as u64).encode(env)),
            ("segment_size", (c.store.segment_size as u64).encode(env)),
            ("election_timeout_ms", ms(c.election_timeout).encode(env)),
            ("two_nodes", atom(env, two_nodes)),
            ("eager", c.eager.encode(env)),
        ],
    )
}

fn bus_defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    let c = MemberConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 1)), 1);
    map(
        env,
        &[
            ("max_datagram_size", (c.max_datagram as u64).encode(env)),
            ("max_message_size", (c.max_message_size as u64).encode(env)),
            ("resend_after_ms", ms(c.resend_after).encode(env)),
            ("retransmit_after_us", us(c.retransmit_after).encode(env)),
            ("hello_after_ms", ms(c.hello_after).encode(env)),
            ("connect_timeout_ms", ms(c.connect_timeout).encode(env)),
        ],
    )
}

/// `%{store: %{...}, async_store: %{...}, table: %{...}, udp: %{...},
/// echo: %{...}, sequencer: %{...}, bus: %{...}}`: each part's defaults
/// (`sequencer` and `bus` under the options' current names).
#[rustler::nif]
fn defaults<'a>(env: Env<'a>) -> NifResult<Term<'a>> {
    map(
        env,
        &[
            ("store", store_defaults(env)?),
            ("async_store", async_store_defaults(env)?),
            ("table", table_defaults(env)?),
            ("udp", udp_defaults(env)?),
            ("echo", echo_defaults(env)?),
            ("sequencer", sequencer_defaults(env)?),
            ("bus", bus_defaults(env)?),
        ],
    )
}
