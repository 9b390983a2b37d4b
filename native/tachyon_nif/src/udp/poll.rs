//! The poll mode of `Tachyon.UDP`: the process that wants the datagrams
//! reads the socket on its own scheduler. No receive thread, no wake-up of
//! a thread nor of a sleeping scheduler between the datagram and the code
//! that handles it (the CoralReactor way: the consumer polls).
//!
//! * `udp_recv` (a normal NIF, well under a millisecond): `recvmmsg` with
//!   `MSG_DONTWAIT` for up to `max` datagrams; if none is waiting it polls
//!   again for at most `spin_ns` (capped at `tachyon_core::poll::MAX_SPIN`), then returns
//!   `:empty` and the Elixir side decides (poll again, or sleep). The time
//!   it spun is reported to the VM (`enif_consume_timeslice`), so a polling
//!   process is scheduled out on time and the others on its scheduler run.
//! * `udp_select`: asks the VM to send `{:tachyon_udp_ready, socket}` once
//!   the socket is readable (`enif_select`, one shot): the process sleeps in
//!   `receive`, costing no CPU, as a gen_udp or `:socket` user does.
//!
//! The decisions (spin window, when to sleep, select and close, once) are
//! `tachyon_core::poll`'s, tested there; this shell makes the VM calls.
//!
//! A batch becomes one list with one allocation and one copy: the
//! datagrams land in the endpoint's preallocated buffers (`recvmmsg`), then
//! are copied once into a single binary of the batch's size, and each list
//! element is a sub-binary of it.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, LocalPid, NewBinary, NifResult, Term};
use tachyon_core::poll::{timeslice_percent, PollState, Polled, SelectError};
use tachyon_core::udp::{Batch, Sink};
use tachyon_core::wait::WaitStrategy;

use super::socket::UdpResource;
use super::{encode_addr, udp_atoms};
use crate::atoms;
use crate::res::{HotResource, Obj};
use crate::terms::error;

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

/// The poll mode of an endpoint, for any resource that owns one
/// (`Tachyon.UDP` sockets now; the sequencer's members read the bus the same
/// way): the decisions ([`PollState`]: the receive buffers, the wait
/// strategy and spin window, what the VM's poll set knows of the socket)
/// and the VM calls they ask for.
pub struct Poller<B = Batch> {
    state: PollState<B, LocalPid>,
    /// The tag of the readiness message (`:tachyon_udp_ready`,
    /// `:tachyon_bus_ready`), also sent by a close to wake a waiter.
    ready: Atom,
}

/// What one [`Poller::recv`] found, to answer the NIF call with.
pub struct Received(pub Polled);

impl Received {
    /// The NIF's answer for a poll: `{:ok, list}` from `got` (`None`:
    /// nothing deliverable after all, so `:empty`), `:empty`, `:sleep`, or
    /// `{:error, :closed | errno}`.
    pub fn into_term<'a>(
        self,
        env: Env<'a>,
        got: impl FnOnce() -> NifResult<Option<Term<'a>>>,
    ) -> NifResult<Term<'a>> {
        Ok(match self.0 {
            Polled::Got => match got()? {
                Some(list) => (atoms::ok(), list).encode(env),
                None => udp_atoms::empty().encode(env),
            },
            Polled::Empty => udp_atoms::empty().encode(env),
            Polled::Sleep => udp_atoms::sleep().encode(env),
            Polled::Closed => (atoms::error(), atoms::closed()).encode(env),
            Polled::Failed(e) => error(env, &e),
        })
    }
}

impl<B> Poller<B> {
    pub fn new(wait: WaitStrategy, spin: Duration, batch: B, ready: Atom) -> Poller<B> {
        Poller {
            state: PollState::new(wait, spin, batch),
            ready,
        }
    }

    /// Receives what `once` takes from the source into its buffers
    /// (`tachyon_core::poll::Plan`): `polled` is how long the caller has
    /// been polling for this receive so far; by the wait strategy, if
    /// nothing is waiting the call polls for at most
    /// [`MAX_SPIN`](tachyon_core::poll::MAX_SPIN) and says
    /// [`Polled::Empty`] (`:busy_spin`, or `:backoff` / `:yield` within
    /// their spin window) or [`Polled::Sleep`] (`:park`, or a window used
    /// up). The time it spent is reported to the VM
    /// (`enif_consume_timeslice`).
    pub fn recv(
        &self,
        env: Env<'_>,
        polled: Duration,
        once: impl FnMut(&mut B) -> std::io::Result<usize>,
    ) -> Received {
        let (result, used) = self.state.recv(polled, once);
        // Tell the VM how much of a time slice (about 1 ms) the call used.
        let pct = timeslice_percent(used);
        if pct > 0 {
            rustler::schedule::consume_timeslice(env, pct);
        }
        Received(result)
    }

    /// The readiness message's tag.
    pub fn ready(&self) -> Atom {
        self.ready
    }

    /// Asks the VM to send `msg` to the calling process once `fd` (the
    /// source's descriptor, `None` once closed) is readable (once), for the
    /// resource `res` (whose type has a `stop` callback that closes it).
    /// `Err(Closed)` once closed, `Err(Refused)` if the VM refused (`:eio`).
    pub fn select<T: HotResource>(
        &self,
        env: Env<'_>,
        res: &Obj<'_, T>,
        fd: Option<RawFd>,
        msg: Term<'_>,
    ) -> Result<(), SelectError> {
        self.state.select(fd, |fd| {
            let me = env.pid();
            res.select_read(env, fd, &me, msg).then_some(me)
        })
    }

    /// Closes without waiting (call after the source stopped, e.g.
    /// `ep.request_stop()`; `close_fd` closes its descriptor): a socket
    /// the VM's poll set knows is taken out of it (the resource's `stop`
    /// callback then closes `ep`), any other is closed now; the process
    /// waiting for readiness gets `{ready, res}` so that its
    /// receive returns `:closed`. Idempotent.
    pub fn close<T: HotResource>(
        &self,
        env: Env<'_>,
        res: &Obj<'_, T>,
        fd: Option<RawFd>,
        close_fd: impl FnOnce(),
    ) {
        let waiting = self
            .state
            .close(fd, |fd| res.select_stop(env, fd), close_fd);
        if let Some(pid) = waiting {
            let _ = env.send(&pid, (self.ready, res.to_term(env)).encode(env));
        }
    }
}

/// Receives up to `max` datagrams waiting on a poll-mode socket (see
/// [`Poller::recv`]; `polled_ns` is how long the caller has polled for this
/// `recv` so far). Returns `{:ok, [{from, data}]}` (never an empty list),
/// `:empty` (poll again), `:sleep` (select, then wait), or
/// `{:error, :closed | :not_poll | errno}`.
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
    let mut sink = ListSink {
        env,
        bin: None,
        used: 0,
        items: Vec::new(),
    };
    p.recv(env, Duration::from_nanos(polled_ns), |b| {
        res.ep.poll(b, max as usize, &mut sink)
    })
    // Only oversized (dropped and counted) datagrams: poll again.
    .into_term(env, || {
        if sink.items.is_empty() {
            Ok(None)
        } else {
            sink.into_list().map(Some)
        }
    })
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
    let msg = (p.ready(), sock).encode(env);
    Ok(match p.select(env, &res, res.ep.raw_fd(), msg) {
        Ok(()) => atoms::ok().encode(env),
        Err(e) => crate::terms::error(env, e),
    })
}
