//! `Tachyon.UDP` sockets: the resource (both receive modes), the thread
//! mode's sink, and the calls that do not receive.

use std::net::SocketAddr;
use std::time::Duration;

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, LocalPid, Monitor, NewBinary, NifResult, Term};
use tachyon_core::udp::{Batch, Endpoint, EndpointConfig, SendError, Sink};

use super::poll::Poller;
use super::{
    decode_addr, decode_ip, decode_port, decode_socket_opts, decode_wait, encode_addr,
    encode_placement, udp_atoms,
};
use crate::atoms;
use crate::deliver::ProcessSender;
use crate::owner::{Owner, Transfer};
use crate::res::{Handle, Obj};
use crate::terms::{atom, error, get, map};

/// A `Tachyon.UDP` socket.
pub struct UdpResource {
    pub(super) ep: Endpoint,
    owner: Owner,
    /// `Some` in the poll mode (no receive thread).
    pub(super) poll: Option<Poller>,
}

crate::hot_resource!(UdpResource, c"UdpResource", down = on_down, stop = on_stop);

impl UdpResource {
    fn on_down(this: &Obj<'_, Self>, env: Env<'_>, _pid: LocalPid, monitor: Monitor) {
        if this.owner.down(&monitor) {
            // Never block a scheduler here: the receive thread closes the
            // socket itself as it exits, microseconds from now; a polled
            // socket is closed by the stop callback.
            close_now(this, env);
        }
    }

    /// The VM's poll set let go of the descriptor: close it now.
    fn on_stop(&self, _fd: std::os::fd::RawFd, _direct: bool) {
        self.ep.close();
    }
}

/// Closes without waiting: marks the endpoint closed (sends and polls fail
/// from now on) and stops the receive thread (which closes the socket as it
/// ends) or, in the poll mode, lets the [`Poller`] close it.
fn close_now(res: &Obj<'_, UdpResource>, env: Env<'_>) {
    res.ep.request_stop();
    if let Some(p) = &res.poll {
        p.close(env, res, res.ep.raw_fd(), || res.ep.close());
    }
}

/// Sends each datagram to the owner as `{:tachyon_udp, socket, {ip, port}, data}`.
/// Runs on the receive thread only (never a scheduler thread).
struct BeamSink {
    res: Handle<UdpResource>,
    out: ProcessSender,
    pid: LocalPid,
}

impl Sink for BeamSink {
    fn begin_batch(&mut self, _bytes: usize) {
        // One lock per batch: controlling_process may have changed the owner.
        self.pid = self.res.owner.pid();
    }

    fn deliver(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        let BeamSink { res, out, pid } = self;
        out.send(pid, |env| {
            let mut bin = NewBinary::new(env, data.len());
            bin.as_mut_slice().copy_from_slice(data);
            let bin: Binary = bin.into();
            (
                udp_atoms::tachyon_udp(),
                &*res,
                encode_addr(env, &from),
                bin,
            )
                .encode(env)
        })
    }

    fn end_batch(&mut self) {
        // Frees the terms built for this batch (already copied to the owner).
        self.out.end_batch();
    }
}

/// Opens a socket owned by `owner`. `opts`: ip, port, mode (`:thread` or
/// `:poll`), wait, spin (µs, poll mode), core, batch, max_datagram,
/// max_queue, recbuf, sndbuf, reuseaddr. Returns `{:ok, socket, info}` or `{:error, errno}`.
#[rustler::nif(schedule = "DirtyIo")]
fn udp_open<'a>(env: Env<'a>, opts: Term<'a>, owner: LocalPid) -> NifResult<Term<'a>> {
    let mode: Atom = get(env, opts, "mode")?;
    let poll = match mode.to_term(env).atom_to_string()?.as_str() {
        "thread" => false,
        "poll" => true,
        _ => return Err(rustler::Error::BadArg),
    };
    // Clamped to a second: longer spins make no sense, and no overflow.
    let spin = Duration::from_micros(get::<u64>(env, opts, "spin")?.min(1_000_000));
    let cfg = EndpointConfig {
        bind: decode_addr(env, opts)?,
        wait: decode_wait(env, get(env, opts, "wait")?)?,
        core: get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize),
        batch: get::<u64>(env, opts, "batch")? as usize,
        max_datagram: get::<u64>(env, opts, "max_datagram")? as usize,
        // The poll mode pulls: no credits to wait for.
        max_queue: if poll {
            None
        } else {
            get(env, opts, "max_queue")?
        },
        socket: decode_socket_opts(env, opts)?,
    };
    let ep = match Endpoint::bind(cfg) {
        Ok(ep) => ep,
        Err(e) => return Ok(error(env, &e)),
    };
    let res = Handle::new(UdpResource {
        ep,
        owner: Owner::new(owner),
        poll: poll.then(|| {
            Poller::new(
                cfg.wait,
                spin,
                Batch::new(cfg.batch, cfg.max_datagram),
                udp_atoms::tachyon_udp_ready(),
            )
        }),
    });
    // Monitor before the thread starts: an owner that is already dead (or
    // dies now) closes the socket through `down` like any other.
    if !res.owner.watch(&res, env) {
        res.ep.close();
        return Ok((atoms::error(), atoms::badarg()).encode(env));
    }
    if !poll {
        let sink = BeamSink {
            res: res.clone(),
            out: ProcessSender::new(),
            pid: owner,
        };
        if let Err(e) = res.ep.start(sink) {
            res.ep.close();
            return Ok(error(env, &e));
        }
    }
    let (recbuf, sndbuf) = res.ep.buffer_sizes().unwrap_or((0, 0));
    let mut info = vec![
        ("address", encode_addr(env, &res.ep.local_addr())),
        ("recbuf", recbuf.encode(env)),
        ("sndbuf", sndbuf.encode(env)),
        ("mode", atom(env, if poll { "poll" } else { "thread" })),
    ];
    info.extend(encode_placement(env, &res.ep.placement()));
    let info = map(env, &info)?;
    Ok((atoms::ok(), res, info).encode(env))
}

/// Sends `data` (a binary or iodata) to `{ip, port}` from the calling process.
#[rustler::nif]
fn udp_send<'a>(
    env: Env<'a>,
    res: &UdpResource,
    ip: Term<'a>,
    port: Term<'a>,
    data: Term<'a>,
) -> NifResult<Term<'a>> {
    let to = SocketAddr::new(decode_ip(ip)?, decode_port(port)?);
    sending(env, data, |d| res.ep.send_to(d, &to))
}

/// Sends `data` (a binary or iodata) to the peer of `udp_connect`.
#[rustler::nif]
fn udp_send_connected<'a>(env: Env<'a>, res: &UdpResource, data: Term<'a>) -> NifResult<Term<'a>> {
    sending(env, data, |d| res.ep.send(d))
}

/// One send of `data` (a binary or iodata) through `send`, its time
/// charged to the caller's time slice.
fn sending<'a>(
    env: Env<'a>,
    data: Term<'a>,
    send: impl FnOnce(&[u8]) -> Result<usize, SendError>,
) -> NifResult<Term<'a>> {
    let bin = match Binary::from_term(data) {
        Ok(b) => b,
        Err(_) => Binary::from_iolist(data)?,
    };
    let t0 = std::time::Instant::now();
    let sent = send(bin.as_slice());
    crate::dirty::charge(env, t0);
    Ok(sent_term(env, sent.map(|_| ())))
}

/// Connects the socket to `{ip, port}`: `udp_send_connected` sends there
/// and the kernel drops datagrams from anyone else.
#[rustler::nif]
fn udp_connect<'a>(
    env: Env<'a>,
    res: &UdpResource,
    ip: Term<'a>,
    port: Term<'a>,
) -> NifResult<Term<'a>> {
    let to = SocketAddr::new(decode_ip(ip)?, decode_port(port)?);
    Ok(sent_term(env, res.ep.connect(&to)))
}

fn sent_term(env: Env<'_>, r: Result<(), SendError>) -> Term<'_> {
    match r {
        Ok(()) => atoms::ok().encode(env),
        Err(e) => error(env, e),
    }
}

/// Makes `pid` the owner. Only the current owner may call it.
#[rustler::nif]
fn udp_controlling_process<'a>(
    env: Env<'a>,
    res: Obj<'a, UdpResource>,
    pid: LocalPid,
) -> NifResult<Term<'a>> {
    if res.ep.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    match res.owner.transfer(&res, env, pid) {
        Ok(()) => Ok(atoms::ok().encode(env)),
        Err(Transfer::NotOwner) => Ok((atoms::error(), udp_atoms::not_owner()).encode(env)),
        // The new owner is not alive: ownership is unchanged.
        Err(Transfer::Dead) => Ok((atoms::error(), atoms::badarg()).encode(env)),
    }
}

/// Closes the socket. Thread mode: stops and joins the receive thread; the
/// port is free on return. Poll mode: takes the socket out of the VM's poll
/// set (its `stop` callback closes it, at once or as soon as the VM's poll
/// thread lets go of it) and wakes a process waiting in `recv`.
/// Idempotent.
#[rustler::nif(schedule = "DirtyIo")]
fn udp_close<'a>(env: Env<'a>, res: Obj<'a, UdpResource>) -> Atom {
    res.owner.unwatch(&res, env);
    close_now(&res, env);
    if res.poll.is_none() {
        res.ep.close();
    }
    atoms::ok()
}

#[rustler::nif]
fn udp_stats<'a>(env: Env<'a>, res: &UdpResource) -> NifResult<Term<'a>> {
    if res.ep.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let stats = crate::terms::fields_map(env, &res.ep.stats());
    Ok((atoms::ok(), stats).encode(env))
}

#[rustler::nif]
fn udp_sockname<'a>(env: Env<'a>, res: &UdpResource) -> Term<'a> {
    if res.ep.is_closed() {
        return (atoms::error(), atoms::closed()).encode(env);
    }
    (atoms::ok(), encode_addr(env, &res.ep.local_addr())).encode(env)
}

/// Acknowledges `n` delivered datagrams (room under `:max_queue`).
#[rustler::nif]
fn udp_ack(res: &UdpResource, n: u64) -> Atom {
    res.ep.ack(n);
    atoms::ok()
}

/// The owner pid, or `nil` once closed.
#[rustler::nif]
fn udp_owner<'a>(env: Env<'a>, res: &UdpResource) -> Term<'a> {
    if res.ep.is_closed() {
        return atoms::nil().encode(env);
    }
    res.owner.pid().encode(env)
}
