//! The poll mode of `Tachyon.UDP`: the process that wants the datagrams
//! reads the socket on its own scheduler. No receive thread, no wake-up of
//! a thread nor of a sleeping scheduler between the datagram and the code
//! that handles it (the CoralReactor way: the consumer polls).
//!
//! * `udp_recv` (a normal NIF, well under a millisecond): `recvmmsg` with
//!   `MSG_DONTWAIT` for up to `max` datagrams; if none is waiting it polls
//!   again for at most `spin_ns` (capped at [`MAX_SPIN`]), then returns
//!   `:empty` and the Elixir side decides (poll again, or sleep). The time
//!   it spun is reported to the VM (`enif_consume_timeslice`), so a polling
//!   process is scheduled out on time and the others on its scheduler run.
//! * `udp_select`: asks the VM to send `{:tachyon_udp_ready, socket}` once
//!   the socket is readable (`enif_select`, one shot): the process sleeps in
//!   `receive`, costing no CPU, as a gen_udp or `:socket` user does.
//!
//! A batch becomes one list with one allocation and one copy: the
//! datagrams land in the endpoint's preallocated buffers (`recvmmsg`), then
//! are copied once into a single binary of the batch's size, and each list
//! element is a sub-binary of it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustler::{Binary, Encoder, Env, NewBinary, NifResult, Term};
use tachyon_core::udp::Sink;
use tachyon_core::wait::WaitStrategy;

use super::socket::UdpResource;
use super::{encode_addr, error_term, udp_atoms};
use crate::atoms;
use crate::res::Obj;

/// The longest a single `udp_recv` polls: a NIF call on a normal scheduler
/// stays far below a millisecond, and a process that wants to poll longer
/// calls again (and is preempted in between when its reductions run out).
const MAX_SPIN: Duration = Duration::from_micros(100);

/// Collects one batch into one binary: the bytes of every delivered
/// datagram, copied once, and where each one is.
struct ListSink<'a> {
    env: Env<'a>,
    bin: Option<NewBinary<'a>>,
    used: usize,
    /// (address term, offset, length) of each datagram, in order.
    items: Vec<(Term<'a>, usize, usize)>,
}

impl<'a> Sink for ListSink<'a> {
    fn begin_batch(&mut self, bytes: usize) {
        self.bin = Some(NewBinary::new(self.env, bytes));
        self.used = 0;
    }

    fn deliver(&mut self, from: SocketAddr, data: &[u8]) -> bool {
        let Some(bin) = self.bin.as_mut() else {
            return false;
        };
        let end = self.used + data.len();
        bin.as_mut_slice()[self.used..end].copy_from_slice(data);
        self.items
            .push((encode_addr(self.env, &from), self.used, data.len()));
        self.used = end;
        true
    }
}

impl<'a> ListSink<'a> {
    /// `[{{ip, port}, data}]` in arrival order.
    fn into_list(self) -> NifResult<Term<'a>> {
        let env = self.env;
        let Some(bin) = self.bin else {
            return Ok(Vec::<Term<'a>>::new().encode(env));
        };
        let bin: Binary<'a> = bin.into();
        let mut out = Vec::with_capacity(self.items.len());
        for (addr, off, len) in self.items {
            let data = bin.make_subbinary(off, len)?;
            out.push((addr, data).encode(env));
        }
        Ok(out.encode(env))
    }
}

/// Receives up to `max` datagrams waiting on a poll-mode socket. `polled_ns`
/// is how long the caller has been polling for this `recv` so far; by the
/// socket's wait strategy, if nothing is waiting the call polls for at most
/// [`MAX_SPIN`] and returns `:empty` (poll again: `:busy_spin`, or
/// `:backoff` / `:yield` within their `:spin` window) or returns `:sleep`
/// (wait for readiness with `udp_select`: `:park`, or a window used up).
/// Returns `{:ok, [{from, data}]}` (never an empty list), `:empty`,
/// `:sleep`, or `{:error, :closed | :not_poll | errno}`.
#[rustler::nif]
fn udp_recv<'a>(
    env: Env<'a>,
    res: Obj<'a, UdpResource>,
    max: u64,
    polled_ns: u64,
) -> NifResult<Term<'a>> {
    let Some(p) = &res.poll else {
        return Ok((atoms::error(), udp_atoms::not_poll()).encode(env));
    };
    if max == 0 {
        return Err(rustler::Error::BadArg);
    }
    let left = p.spin.saturating_sub(Duration::from_nanos(polled_ns));
    let (budget, then) = match p.wait {
        WaitStrategy::BusySpin => (MAX_SPIN, udp_atoms::empty()),
        WaitStrategy::Park => (Duration::ZERO, udp_atoms::sleep()),
        // One poll per call: the Elixir side yields between calls.
        WaitStrategy::Yield if !left.is_zero() => (Duration::ZERO, udp_atoms::empty()),
        WaitStrategy::Backoff if !left.is_zero() => (left.min(MAX_SPIN), udp_atoms::empty()),
        WaitStrategy::Yield | WaitStrategy::Backoff => (Duration::ZERO, udp_atoms::sleep()),
    };
    let mut batch = p.batch.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let result = loop {
        let mut sink = ListSink {
            env,
            bin: None,
            used: 0,
            items: Vec::new(),
        };
        match res.ep.poll(&mut batch, max as usize, &mut sink) {
            Ok(_) if !sink.items.is_empty() => break (atoms::ok(), sink.into_list()?).encode(env),
            // Only oversized (dropped and counted) datagrams: poll again.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                break (atoms::error(), atoms::closed()).encode(env)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => break error_term(env, &e),
        }
        if t0.elapsed() >= budget {
            break then.encode(env);
        }
        std::hint::spin_loop();
    };
    drop(batch);
    // Tell the VM how much of a time slice (about 1 ms) the call used.
    let pct = (t0.elapsed().as_micros() / 10).min(100) as i32;
    if pct > 0 {
        rustler::schedule::consume_timeslice(env, pct);
    }
    Ok(result)
}

/// Asks the VM to send `{:tachyon_udp_ready, socket}` to the calling
/// process once the socket is readable (once). Returns `:ok` or
/// `{:error, :closed | :not_poll}`.
#[rustler::nif]
fn udp_select<'a>(env: Env<'a>, sock: Term<'a>) -> NifResult<Term<'a>> {
    let res: Obj<'a, UdpResource> = sock.decode()?;
    let Some(p) = &res.poll else {
        return Ok((atoms::error(), udp_atoms::not_poll()).encode(env));
    };
    let mut sel = p.sel.lock().unwrap_or_else(|e| e.into_inner());
    let fd = match res.ep.raw_fd() {
        Some(fd) if !sel.closed => fd,
        _ => return Ok((atoms::error(), atoms::closed()).encode(env)),
    };
    let me = env.pid();
    let msg = (udp_atoms::tachyon_udp_ready(), sock).encode(env);
    if !res.select_read(env, fd, &me, msg) {
        return Ok((atoms::error(), atoms::eio()).encode(env));
    }
    sel.selected = true;
    sel.waiting = Some(me);
    Ok(atoms::ok().encode(env))
}
