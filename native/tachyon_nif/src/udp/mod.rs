//! `Tachyon.Native.echo_*`, `udp_*`: `Tachyon.Echo` and `Tachyon.UDP`, over
//! `tachyon_core::udp` (the benchmark's ping client is in `bench`).
//!
//! * [`echo`]: `EchoResource`, an echo server thread; `echo_stop` stops and
//!   joins it (the port is free on return); a collected resource stops it
//!   without waiting.
//! * [`socket`]: `UdpResource`, a `Tachyon.UDP` socket, in one of two
//!   receive modes. `:thread`: a receive thread sends
//!   `{:tachyon_udp, socket, {ip, port}, data}` to the owner (through
//!   `deliver::ProcessSender`, with credits for `:max_queue`). `:poll`: no
//!   thread; the process that calls `udp_recv` reads the socket on its own
//!   scheduler ([`poll`]).

mod echo;
pub(crate) mod poll;
mod socket;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rustler::types::atom::Atom;
use rustler::{Encoder, Env, Error, NifResult, Term};
use tachyon_core::udp::{Placement, SocketOptions};
use tachyon_core::wait::WaitStrategy;

use crate::terms::{atom, get};

pub use echo::EchoResource;
pub(crate) use poll::Poller;
pub use socket::UdpResource;

mod udp_atoms {
    rustler::atoms! {
        tachyon_udp,
        tachyon_udp_ready,
        not_owner,
        not_poll,
        empty,
        sleep,
    }
}

// -- term helpers ----------------------------------------------------------------

/// `{a, b, c, d}` or `{a, b, c, d, e, f, g, h}` to an address.
pub(crate) fn decode_ip(term: Term) -> NifResult<IpAddr> {
    let parts = rustler::types::tuple::get_tuple(term)?;
    match parts.len() {
        4 => {
            let mut o = [0u8; 4];
            for (i, p) in parts.iter().enumerate() {
                // Decode wide and check: a narrow decode would wrap 300 to 44.
                o[i] = u8::try_from(p.decode::<u64>()?).map_err(|_| Error::BadArg)?;
            }
            Ok(IpAddr::V4(Ipv4Addr::from(o)))
        }
        8 => {
            let mut s = [0u16; 8];
            for (i, p) in parts.iter().enumerate() {
                s[i] = u16::try_from(p.decode::<u64>()?).map_err(|_| Error::BadArg)?;
            }
            Ok(IpAddr::V6(Ipv6Addr::from(s)))
        }
        _ => Err(Error::BadArg),
    }
}

fn encode_ip<'a>(env: Env<'a>, ip: &IpAddr) -> Term<'a> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            (a, b, c, d).encode(env)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let terms: Vec<Term<'a>> = s.iter().map(|x| x.encode(env)).collect();
            rustler::types::tuple::make_tuple(env, &terms)
        }
    }
}

pub(crate) fn encode_addr<'a>(env: Env<'a>, addr: &SocketAddr) -> Term<'a> {
    (encode_ip(env, &addr.ip()), addr.port()).encode(env)
}

pub(crate) fn decode_wait(env: Env, term: Term) -> NifResult<WaitStrategy> {
    let a: Atom = term.decode()?;
    let name = a.to_term(env).atom_to_string()?;
    WaitStrategy::parse(&name).ok_or(Error::BadArg)
}

pub(crate) fn decode_port(term: Term) -> NifResult<u16> {
    u16::try_from(term.decode::<u64>()?).map_err(|_| Error::BadArg)
}

pub(crate) fn decode_addr<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<SocketAddr> {
    let ip = decode_ip(get::<Term>(env, opts, "ip")?)?;
    let port = decode_port(get::<Term>(env, opts, "port")?)?;
    Ok(SocketAddr::new(ip, port))
}

pub(crate) fn decode_socket_opts<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<SocketOptions> {
    Ok(SocketOptions {
        recbuf: get::<Option<u64>>(env, opts, "recbuf")?.map(|n| n as usize),
        sndbuf: get::<Option<u64>>(env, opts, "sndbuf")?.map(|n| n as usize),
        reuseaddr: get(env, opts, "reuseaddr")?,
        reuseport: false,
    })
}

pub(crate) fn encode_placement<'a>(env: Env<'a>, p: &Placement) -> Vec<(&'static str, Term<'a>)> {
    vec![
        ("core", p.core.encode(env)),
        ("pinned", p.pinned.encode(env)),
        ("wait", atom(env, p.wait.name())),
    ]
}
