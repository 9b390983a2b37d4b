//! `Tachyon.Native.echo_*`, `udp_*`: `Tachyon.Echo`, `Tachyon.UDP` and the
//! benchmark's ping client, over `tachyon_core::udp`.
//!
//! * `EchoResource`: an echo server thread; dropping the resource (or
//!   `echo_stop`) stops and joins it and frees the port.
//! * `UdpResource`: a `Tachyon.UDP` socket. Its receive thread sends
//!   `{:tachyon_udp, socket, {ip, port}, data}` to the owner from an
//!   `OwnedEnv`. The resource monitors the owner; `down` asks the thread to
//!   stop, and the thread closes the socket as it exits. The thread holds a
//!   reference to the resource (it puts the socket in every message), so a
//!   socket lives until `udp_close` or its owner's death, like a gen_udp port.
//! * `udp_ping`: runs the ping client on its own (optionally pinned) thread
//!   and waits for it on a dirty I/O scheduler; returns a histogram resource.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustler::types::atom::Atom;
use rustler::{
    Binary, Encoder, Env, Error, LocalPid, Monitor, NewBinary, NifResult, OwnedEnv, ResourceArc,
    Term,
};
use tachyon_core::udp::{
    spawn_ping, EchoConfig, EchoServer, EchoStats, Endpoint, EndpointConfig, EndpointStats,
    PingConfig, Placement, SendError, Sink, SocketOptions,
};
use tachyon_core::wait::WaitStrategy;

use crate::atoms;
use crate::hist::HistResource;
use crate::terms::{atom, errno_atom, get, map};

mod udp_atoms {
    rustler::atoms! {
        tachyon_udp,
        not_owner,
    }
}

// -- term helpers ----------------------------------------------------------------

fn error_term<'a>(env: Env<'a>, e: &std::io::Error) -> Term<'a> {
    (atoms::error(), errno_atom(env, e)).encode(env)
}

/// `{a, b, c, d}` or `{a, b, c, d, e, f, g, h}` to an address.
fn decode_ip(term: Term) -> NifResult<IpAddr> {
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

fn encode_addr<'a>(env: Env<'a>, addr: &SocketAddr) -> Term<'a> {
    (encode_ip(env, &addr.ip()), addr.port()).encode(env)
}

fn decode_wait(env: Env, term: Term) -> NifResult<WaitStrategy> {
    let a: Atom = term.decode()?;
    let name = a.to_term(env).atom_to_string()?;
    WaitStrategy::parse(&name).ok_or(Error::BadArg)
}

fn decode_port(term: Term) -> NifResult<u16> {
    u16::try_from(term.decode::<u64>()?).map_err(|_| Error::BadArg)
}

fn decode_addr<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<SocketAddr> {
    let ip = decode_ip(get::<Term>(env, opts, "ip")?)?;
    let port = decode_port(get::<Term>(env, opts, "port")?)?;
    Ok(SocketAddr::new(ip, port))
}

fn decode_socket_opts<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<SocketOptions> {
    Ok(SocketOptions {
        recbuf: get::<Option<u64>>(env, opts, "recbuf")?.map(|n| n as usize),
        sndbuf: get::<Option<u64>>(env, opts, "sndbuf")?.map(|n| n as usize),
        reuseaddr: get(env, opts, "reuseaddr")?,
    })
}

fn encode_placement<'a>(env: Env<'a>, p: &Placement) -> Vec<(&'static str, Term<'a>)> {
    vec![
        ("core", p.core.encode(env)),
        ("pinned", p.pinned.encode(env)),
        ("wait", atom(env, p.wait.name())),
    ]
}

// -- Tachyon.Echo ----------------------------------------------------------------

/// An echo server; the `Mutex` is only taken by `echo_stop` and `echo_stats`.
pub struct EchoResource {
    server: Mutex<EchoServer>,
}

#[rustler::resource_impl]
impl rustler::Resource for EchoResource {}

fn echo_stats_map<'a>(env: Env<'a>, s: &EchoStats) -> NifResult<Term<'a>> {
    map(
        env,
        &[
            ("packets_in", s.packets_in.encode(env)),
            ("bytes_in", s.bytes_in.encode(env)),
            ("packets_out", s.packets_out.encode(env)),
            ("bytes_out", s.bytes_out.encode(env)),
            ("batches", s.batches.encode(env)),
            ("truncated", s.truncated.encode(env)),
            ("recv_errors", s.recv_errors.encode(env)),
            ("send_errors", s.send_errors.encode(env)),
            ("kernel_drops", s.kernel_drops.encode(env)),
            ("errors", s.errors().encode(env)),
        ],
    )
}

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
            let res = ResourceArc::new(EchoResource {
                server: Mutex::new(server),
            });
            Ok((atoms::ok(), res, info).encode(env))
        }
        Err(e) => Ok(error_term(env, &e)),
    }
}

/// Stops the server and joins its thread: the port is free on return.
#[rustler::nif(schedule = "DirtyIo")]
fn echo_stop(res: ResourceArc<EchoResource>) -> Atom {
    let mut g = res.server.lock().unwrap_or_else(|e| e.into_inner());
    g.stop();
    atoms::ok()
}

#[rustler::nif]
fn echo_stats<'a>(env: Env<'a>, res: &EchoResource) -> NifResult<Term<'a>> {
    let s = res.server.lock().unwrap_or_else(|e| e.into_inner()).stats();
    echo_stats_map(env, &s)
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
    let handle = match spawn_ping(cfg, Arc::new(AtomicBool::new(false))) {
        Ok(h) => h,
        Err(e) => return Ok(error_term(env, &e)),
    };
    let out = match handle.join() {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Ok(error_term(env, &e)),
        Err(_) => return Ok((atoms::error(), atom(env, "panic")).encode(env)),
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

// -- Tachyon.UDP -------------------------------------------------------------------

struct Owner {
    pid: LocalPid,
    monitor: Option<Monitor>,
}

/// A `Tachyon.UDP` socket.
pub struct UdpResource {
    ep: Endpoint,
    owner: Mutex<Owner>,
}

#[rustler::resource_impl]
impl rustler::Resource for UdpResource {
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, monitor: Monitor) {
        let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if owner.monitor == Some(monitor) {
            // Never block a scheduler here: the receive thread closes the
            // socket itself as it exits, microseconds from now.
            self.ep.request_stop();
        }
    }
}

/// Sends each datagram to the owner as `{:tachyon_udp, socket, {ip, port}, data}`.
/// Runs on the receive thread only (never a scheduler thread).
struct BeamSink {
    res: ResourceArc<UdpResource>,
    env: OwnedEnv,
    pid: LocalPid,
}

impl Sink for BeamSink {
    fn begin_batch(&mut self) {
        // One lock per batch: controlling_process may have changed the owner.
        self.pid = self.res.owner.lock().unwrap_or_else(|e| e.into_inner()).pid;
    }

    fn deliver(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        let BeamSink { res, env, pid } = self;
        // Built in our env and *copied* into the owner's heap (`msg_env`
        // NULL): a tight heap fragment of a few words per message. Handing
        // the env itself over (`send_and_clear`) would give the owner this
        // env's whole heap block per message and make it collect garbage
        // hundreds of times more often while it reads them.
        env.run(|env| {
            let mut bin = NewBinary::new(env, data.len());
            bin.as_mut_slice().copy_from_slice(data);
            let bin: Binary = bin.into();
            // The socket by reference: no refcount round trip for a clone.
            let msg = (
                udp_atoms::tachyon_udp(),
                &*res,
                encode_addr(env, &from),
                bin,
            );
            env.send(pid, msg).is_ok()
        })
    }

    fn end_batch(&mut self) {
        // Frees the terms built for this batch (already copied to the owner).
        self.env.clear();
    }
}

fn udp_stats_map<'a>(env: Env<'a>, s: &EndpointStats) -> NifResult<Term<'a>> {
    map(
        env,
        &[
            ("received", s.received.encode(env)),
            ("received_bytes", s.received_bytes.encode(env)),
            ("delivered", s.delivered.encode(env)),
            ("acked", s.acked.encode(env)),
            ("in_flight", s.in_flight.encode(env)),
            ("dropped", s.dropped.encode(env)),
            ("undelivered", s.undelivered.encode(env)),
            ("truncated", s.truncated.encode(env)),
            ("recv_errors", s.recv_errors.encode(env)),
            ("kernel_drops", s.kernel_drops.encode(env)),
            ("batches", s.batches.encode(env)),
            ("sent", s.sent.encode(env)),
            ("sent_bytes", s.sent_bytes.encode(env)),
            ("send_errors", s.send_errors.encode(env)),
        ],
    )
}

/// Opens a socket owned by `owner`. `opts`: ip, port, wait, core, batch,
/// max_datagram, max_queue, recbuf, sndbuf, reuseaddr. Returns
/// `{:ok, socket, info}` or `{:error, errno}`.
#[rustler::nif(schedule = "DirtyIo")]
fn udp_open<'a>(env: Env<'a>, opts: Term<'a>, owner: LocalPid) -> NifResult<Term<'a>> {
    let cfg = EndpointConfig {
        bind: decode_addr(env, opts)?,
        wait: decode_wait(env, get(env, opts, "wait")?)?,
        core: get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize),
        batch: get::<u64>(env, opts, "batch")? as usize,
        max_datagram: get::<u64>(env, opts, "max_datagram")? as usize,
        max_queue: get(env, opts, "max_queue")?,
        socket: decode_socket_opts(env, opts)?,
    };
    let ep = match Endpoint::bind(cfg) {
        Ok(ep) => ep,
        Err(e) => return Ok(error_term(env, &e)),
    };
    let res = ResourceArc::new(UdpResource {
        ep,
        owner: Mutex::new(Owner {
            pid: owner,
            monitor: None,
        }),
    });
    // Monitor before the thread starts: an owner that is already dead (or
    // dies now) closes the socket through `down` like any other.
    match env.monitor(&res, &owner) {
        Some(m) => res.owner.lock().unwrap_or_else(|e| e.into_inner()).monitor = Some(m),
        None => {
            res.ep.close();
            return Ok((atoms::error(), atoms::badarg()).encode(env));
        }
    }
    let sink = BeamSink {
        res: res.clone(),
        env: OwnedEnv::new(),
        pid: owner,
    };
    if let Err(e) = res.ep.start(sink) {
        res.ep.close();
        return Ok(error_term(env, &e));
    }
    let (recbuf, sndbuf) = res.ep.buffer_sizes().unwrap_or((0, 0));
    let mut info = vec![
        ("address", encode_addr(env, &res.ep.local_addr())),
        ("recbuf", recbuf.encode(env)),
        ("sndbuf", sndbuf.encode(env)),
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
    let bin = match Binary::from_term(data) {
        Ok(b) => b,
        Err(_) => Binary::from_iolist(data)?,
    };
    Ok(match res.ep.send_to(bin.as_slice(), &to) {
        Ok(_) => atoms::ok().encode(env),
        Err(SendError::Closed) => (atoms::error(), atoms::closed()).encode(env),
        Err(SendError::Io(e)) => error_term(env, &e),
    })
}

/// Makes `pid` the owner. Only the current owner may call it.
#[rustler::nif]
fn udp_controlling_process<'a>(
    env: Env<'a>,
    res: ResourceArc<UdpResource>,
    pid: LocalPid,
) -> NifResult<Term<'a>> {
    if res.ep.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let mut owner = res.owner.lock().unwrap_or_else(|e| e.into_inner());
    if owner.pid != env.pid() {
        return Ok((atoms::error(), udp_atoms::not_owner()).encode(env));
    }
    if owner.pid == pid {
        return Ok(atoms::ok().encode(env));
    }
    let Some(m) = env.monitor(&res, &pid) else {
        // The new owner is not alive: ownership is unchanged.
        return Ok((atoms::error(), atoms::badarg()).encode(env));
    };
    if let Some(old) = owner.monitor.take() {
        env.demonitor(&res, &old);
    }
    owner.pid = pid;
    owner.monitor = Some(m);
    Ok(atoms::ok().encode(env))
}

/// Closes the socket: stops and joins the receive thread; the port is free
/// on return. Idempotent.
#[rustler::nif(schedule = "DirtyIo")]
fn udp_close(env: Env, res: ResourceArc<UdpResource>) -> Atom {
    let monitor = res
        .owner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .monitor
        .take();
    if let Some(m) = monitor {
        env.demonitor(&res, &m);
    }
    res.ep.close();
    atoms::ok()
}

#[rustler::nif]
fn udp_stats<'a>(env: Env<'a>, res: &UdpResource) -> NifResult<Term<'a>> {
    if res.ep.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let stats = udp_stats_map(env, &res.ep.stats())?;
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
    res.owner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pid
        .encode(env)
}
