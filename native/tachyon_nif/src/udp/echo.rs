//! `Tachyon.Echo`: an echo server thread per resource.

use rustler::types::atom::Atom;
use rustler::{Encoder, Env, NifResult, Term};
use tachyon_core::udp::{EchoConfig, EchoServer};

use super::{decode_addr, decode_socket_opts, decode_wait, encode_addr, encode_placement};
use crate::atoms;
use crate::res::Handle;
use crate::terms::{error, get, map};

/// An echo server (`echo_stats` never waits behind `echo_stop`).
/// Collected, it stops its thread without waiting (`EchoServer`'s drop).
pub struct EchoResource {
    server: EchoServer,
}

crate::hot_resource!(EchoResource, c"EchoResource");

/// Starts an echo server. `opts`: ip, port, wait, core, batch, max_datagram,
/// recbuf, sndbuf, reuseaddr. Returns `{:ok, ref, info}` or `{:error, errno}`.
#[rustler::nif(schedule = "DirtyIo")]
fn echo_start<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    let cfg = EchoConfig {
        bind: decode_addr(env, opts)?,
        wait: decode_wait(env, get(env, opts, "wait")?)?,
        core: get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize),
        batch: get::<u64>(env, opts, "batch")? as usize,
        max_datagram: get::<u64>(env, opts, "max_datagram")? as usize,
        socket: decode_socket_opts(env, opts)?,
    };
    match EchoServer::start(cfg) {
        Ok(server) => {
            let (recbuf, sndbuf) = server.buffer_sizes();
            let mut info = vec![
                ("address", encode_addr(env, &server.local_addr())),
                ("recbuf", recbuf.encode(env)),
                ("sndbuf", sndbuf.encode(env)),
            ];
            info.extend(encode_placement(env, &server.placement()));
            let info = map(env, &info)?;
            let res = Handle::new(EchoResource { server });
            Ok((atoms::ok(), res, info).encode(env))
        }
        Err(e) => Ok(error(env, &e)),
    }
}

/// Stops the server and joins its thread: the port is free on return.
#[rustler::nif(schedule = "DirtyIo")]
fn echo_stop(res: &EchoResource) -> Atom {
    res.server.stop();
    atoms::ok()
}

#[rustler::nif]
fn echo_stats<'a>(env: Env<'a>, res: &EchoResource) -> NifResult<Term<'a>> {
    let s = res.server.stats();
    Ok(crate::terms::fields_map(env, &s))
}
