//! `bus_*` but the publishes: a member of the bus (`Tachyon.Bus`), its
//! thread in the `:messages` mode, its poll in the `:poll` mode.

use super::receivers::notify_unheard;
use super::*;
use tachyon_core::counter::Counter;
use tachyon_core::receivers::{Receivers, Unheard};

/// A member of the bus.
pub struct BusResource {
    pub(super) member: Arc<Member>,
    owner: Owner,
    /// Whether the owner gets the messages (`Tachyon.Bus.open/1`); a
    /// member started by `Tachyon.Bus.start_link/1` is owned by its
    /// process, which does not: its receivers do.
    owner_receives: bool,
    /// Where the `:messages` thread also delivers (`receivers.rs`).
    pub(super) receivers: Receivers<LocalPid>,
    /// Messages delivered to nobody (no receiver, and an owner that does
    /// not get them); one writer, the thread.
    unheard: Counter,
    /// Gets `{:tachyon_report, :bus, member_id, :unheard, %{count: n}}`
    /// (`Tachyon.Bus.Server`: the warning), at most once per
    /// [`UNHEARD_EVERY`].
    report: Option<LocalPid>,
    /// Also gets the member's events (`Tachyon.Bus.Events`: telemetry).
    relay: Option<LocalPid>,
    /// `:messages` mode: the thread that drives the member.
    worker: Slot,
    /// `:poll` mode.
    poll: Option<Poller<()>>,
    /// `:messages` mode: messages delivered and acknowledged (`bus_ack`),
    /// limited by `max_queue`: the thread stops reading at the limit.
    credits: Credits,
}

crate::hot_resource!(BusResource, c"BusResource", down = on_down, stop = on_stop);

/// At most one notice of messages delivered to nobody per this long.
const UNHEARD_EVERY: Duration = Duration::from_secs(10);

impl BusResource {
    /// A `:poll` member (no thread; its owner polls).
    pub(super) fn is_poll(&self) -> bool {
        self.poll.is_some()
    }

    fn on_down(this: &Obj<'_, Self>, env: Env<'_>, _pid: LocalPid, monitor: Monitor) {
        if this.owner.down(&monitor) {
            close_now(this, env);
        }
    }

    /// The VM let go of the member's descriptor; it is closed with the
    /// member (when the resource is collected).
    fn on_stop(&self, _fd: std::os::fd::RawFd, _direct: bool) {}
}

/// Closes without waiting: no more publishes (the goodbye is said from the
/// reaper thread if a publish holds the send lock), the thread (if any) is
/// told to stop (the reaper joins it), a process waiting in `recv` is woken.
fn close_now(res: &Obj<'_, BusResource>, env: Env<'_>) {
    if !res.member.try_close() {
        let h = res.handle();
        worker::defer(move || h.member.close());
    }
    // Dropped: stopped, and joined by the reaper.
    drop(res.worker.take());
    if let Some(p) = &res.poll {
        p.close(env, res, Some(res.member.poll_fd()), || {});
    }
}

/// Builds `{:tachyon_bus, bus, seq, member_id, data}`, or for a message
/// of a state machine's snapshot (`snap`: its SNAP flags)
/// `{:tachyon_bus_snapshot, bus, seq, member_id, as_of, chunk, last}`.
fn bus_msg<'a>(env: Env<'a>, bus: Term<'a>, seq: u64, id: u32, snap: u8, data: &[u8]) -> Term<'a> {
    let mut bin = NewBinary::new(env, data.len());
    bin.as_mut_slice().copy_from_slice(data);
    let bin: Binary = bin.into();
    if snap != 0 {
        let (as_of, chunk, last) = snapshot_part(env, bin, snap);
        let tag = seq_atoms::tachyon_bus_snapshot();
        return (tag, bus, seq, id, as_of, chunk, last).encode(env);
    }
    (seq_atoms::tachyon_bus(), bus, seq, id, bin).encode(env)
}

/// A snapshot message's data (`bin`: its position `as_of`, a u64 little
/// endian, then a chunk of the state) as `(as_of, chunk, last)`, the chunk
/// a sub-binary; data too short for a position is a chunk of position 0.
fn snapshot_part<'a>(env: Env<'a>, bin: Binary<'a>, snap: u8) -> (u64, Term<'a>, bool) {
    let last = snap & tachyon_core::seq::wire::SNAP_END != 0;
    let whole = bin.to_term(env);
    let Some(b) = bin.as_slice().get(..8) else {
        return (0, whole, last);
    };
    let as_of = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let chunk = bin
        .make_subbinary(8, bin.len() - 8)
        .map_or(whole, |c| c.to_term(env));
    (as_of, chunk, last)
}

/// A member's event as `{:tachyon_bus_event, bus, kind, fields}` (the
/// fields with `:member_id`).
fn bus_event<'a>(env: Env<'a>, bus: Term<'a>, id: u32, e: &MemberEvent) -> Term<'a> {
    let (kind, fields): (&str, Vec<(&str, Term<'a>)>) = match *e {
        MemberEvent::Fork {
            next,
            epoch,
            term,
            resume,
        } => (
            "fork",
            vec![
                ("next_seq", next.encode(env)),
                ("last_epoch", epoch.encode(env)),
                ("epoch", term.encode(env)),
                ("resume_seq", resume.encode(env)),
            ],
        ),
        MemberEvent::Renumbered { lost } => ("renumbered", vec![("lost", lost.encode(env))]),
        MemberEvent::Taken => ("member_id_taken", vec![]),
        MemberEvent::NoSpace { member_seq } => {
            ("enospc", vec![("member_seq", member_seq.encode(env))])
        }
        MemberEvent::Term { term } => ("epoch", vec![("epoch", term.encode(env))]),
        MemberEvent::Trimmed { from, first } => (
            "trimmed",
            vec![
                ("from_seq", from.encode(env)),
                ("first_seq", first.encode(env)),
            ],
        ),
    };
    let mut fields = fields;
    fields.push(("member_id", id.encode(env)));
    let fields = map(env, &fields).unwrap_or_else(|_| atoms::nil().encode(env));
    (seq_atoms::tachyon_bus_event(), bus, atom(env, kind), fields).encode(env)
}

/// Where a member's events go: its owner (if it gets the messages), its
/// receivers, and the relay if any.
fn event_pids(res: &BusResource) -> impl Iterator<Item = LocalPid> {
    let owner = res.owner_receives.then(|| res.owner.pid());
    owner
        .into_iter()
        .chain(res.receivers.to_vec())
        .chain(res.relay)
}

/// Sends the member's events (if any), from a thread of ours.
fn send_events<B>(bus: B, res: &BusResource, out: &mut ProcessSender)
where
    B: for<'b> Fn(Env<'b>) -> Term<'b>,
{
    let events = res.member.take_events();
    if events.is_empty() {
        return;
    }
    let id = res.member.member_id();
    for pid in event_pids(res) {
        for e in &events {
            out.send(&pid, |env| {
                let b = bus(env);
                bus_event(env, b, id, e)
            });
        }
    }
    out.end_batch();
}

/// Joins the bus (blocks until the sequencer's welcome, or
/// `connect_timeout`). `opts`: sequencer ({ip, port}), bus, ip (own
/// address), member_id, from (nil or a sequence number), mode (`:messages`
/// or `:poll`), wait, core, spin_us, max_datagram, max_message_size,
/// from_snapshot (start from the latest snapshot: `info.snapshot` is its
/// position, nil if none), resend_after_us, retransmit_after_us,
/// hello_after_us, connect_timeout_us,
/// loss, events (a pid or nil: gets the events too), owner_receives (the
/// owner gets the messages), receivers (more pids that get them, `:messages`
/// mode), report (a pid or nil: told of messages delivered to nobody).
/// Returns `{:ok, bus, info}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn bus_open<'a>(env: Env<'a>, opts: Term<'a>, owner: LocalPid) -> NifResult<Term<'a>> {
    let (sip, sport): (Term, u16) = get(env, opts, "sequencer")?;
    let sequencer = SocketAddr::new(decode_ip(sip)?, sport);
    let mut cfg = MemberConfig::new(sequencer, get(env, opts, "member_id")?);
    cfg.bus = decode_bus(get(env, opts, "bus")?)?;
    let ip: Term = get(env, opts, "ip")?;
    if ip.decode::<Atom>().is_err() {
        cfg.bind = SocketAddr::new(decode_ip(ip)?, 0);
    }
    cfg.from = get(env, opts, "from")?;
    cfg.from_snapshot = get(env, opts, "from_snapshot")?;
    cfg.max_datagram = get::<u64>(env, opts, "max_datagram")? as usize;
    cfg.max_message_size = get::<u64>(env, opts, "max_message_size")? as usize;
    cfg.resend_after = micros(env, opts, "resend_after_us")?;
    cfg.retransmit_after = micros(env, opts, "retransmit_after_us")?;
    cfg.hello_after = micros(env, opts, "hello_after_us")?;
    cfg.connect_timeout = micros(env, opts, "connect_timeout_us")?;
    cfg.loss = get::<f64>(env, opts, "loss")?.clamp(0.0, 1.0);
    for (ip, port) in get::<Vec<(Term, u16)>>(env, opts, "alternates")? {
        cfg.alternates.push(SocketAddr::new(decode_ip(ip)?, port));
    }
    cfg.auth = match super::auth::decode_auth(env, opts)? {
        Ok(a) => a,
        Err(why) => return Ok(super::auth::bad_key(env, &why)),
    };
    let wait = decode_wait(env, get(env, opts, "wait")?)?;
    let core = get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize);
    let spin = micros(env, opts, "spin_us")?.min(Duration::from_secs(1));
    let mode: Atom = get(env, opts, "mode")?;
    let poll = match mode.to_term(env).atom_to_string()?.as_str() {
        "messages" => false,
        "poll" => true,
        _ => return Err(rustler::Error::BadArg),
    };
    let member = match Member::open(cfg) {
        Ok(m) => Arc::new(m),
        Err(e) => return Ok(error(env, e)),
    };
    let res = Handle::new(BusResource {
        member: member.clone(),
        owner: Owner::new(owner),
        owner_receives: get(env, opts, "owner_receives")?,
        receivers: Receivers::new(get::<Vec<LocalPid>>(env, opts, "receivers")?),
        unheard: Counter::default(),
        report: get(env, opts, "report")?,
        relay: get(env, opts, "events")?,
        worker: Slot::default(),
        poll: poll.then(|| Poller::new(wait, spin, (), seq_atoms::tachyon_bus_ready())),
        credits: Credits::new(get(env, opts, "max_queue")?),
    });
    if !res.owner.watch(&res, env) {
        member.close();
        return Ok((atoms::error(), atoms::badarg()).encode(env));
    }
    if !poll {
        let handle = res.clone();
        let spawned = Worker::spawn("tachyon-bus", core, move |ctx| {
            let mut out = ProcessSender::new();
            let mut waiter = Waiter::with_socket(wait, ctx.wake().clone(), member.poll_fd());
            let m = &handle.member;
            let mut view = handle.receivers.view();
            let mut unheard = Unheard::new(UNHEARD_EVERY);
            while !ctx.stopped() {
                // `max_queue` reached: the owner has not acknowledged what
                // it got. The member stops reading (datagrams wait in the
                // socket, or are asked for again later) but keeps its
                // timers.
                let room = handle.credits.room();
                if room == Some(0) {
                    m.tick();
                    ctx.sleep(Duration::from_micros(200));
                    continue;
                }
                // Who gets this batch: the owner if it reads the messages,
                // and the receivers (one atomic load when they did not change).
                let owner = handle.owner_receives.then(|| handle.owner.pid());
                handle.receivers.refresh(&mut view);
                let nobody = owner.is_none() && view.is_empty();
                let mut dropped = 0;
                // Under a bound, one datagram per read: the bound is
                // overshot by at most one datagram's messages (a datagram
                // is delivered whole, in order).
                let max = if room.is_some() { 1 } else { 64 };
                let got = m.poll(max, &mut |seq, id, snap, data| {
                    if nobody {
                        dropped += 1;
                        return;
                    }
                    handle.credits.count();
                    out.send_all(owner.iter().chain(view.pids()), |env| {
                        let bus = handle.encode(env);
                        bus_msg(env, bus, seq, id, snap, data)
                    });
                });
                out.end_batch();
                if dropped > 0 {
                    handle.unheard.bump(dropped);
                    if let (Some(n), Some(to)) =
                        (unheard.count(dropped, Instant::now()), &handle.report)
                    {
                        notify_unheard(&mut out, to, m.member_id(), n);
                    }
                }
                match got {
                    Ok(n) if n > 0 => {
                        send_events(|env| handle.encode(env), &handle, &mut out);
                        waiter.reset()
                    }
                    Ok(_) => {
                        let due = m.tick();
                        waiter.idle_at_most(Some(due), || false);
                    }
                    Err(_) => ctx.sleep(Duration::from_millis(1)),
                }
            }
        });
        match spawned {
            Ok(w) => res.worker.set(w),
            Err(e) => {
                res.member.close();
                return Ok(crate::terms::error(env, e));
            }
        }
    }
    let addr = res.member.local_addr().ok();
    let info = map(
        env,
        &[
            (
                "address",
                addr.map_or(atoms::nil().encode(env), |a| encode_addr(env, &a)),
            ),
            ("session", res.member.session().encode(env)),
            ("member_id", res.member.member_id().encode(env)),
            ("fragment_size", res.member.fragment_size().encode(env)),
            ("mode", atom(env, if poll { "poll" } else { "messages" })),
            ("snapshot", res.member.snapshot_as_of().encode(env)),
            ("joined_seq", res.member.joined_seq().encode(env)),
        ],
    )?;
    Ok((atoms::ok(), res, info).encode(env))
}

/// Polls a `:poll` member: `{:ok, [{seq, member_id, data}]}` (never
/// empty), `:empty` (poll again), `:sleep` (select, then wait) or
/// `{:error, :closed | :not_poll | errno}`.
#[rustler::nif]
fn bus_recv<'a>(
    env: Env<'a>,
    res: Obj<'a, BusResource>,
    max: u64,
    polled_ns: u64,
) -> NifResult<Term<'a>> {
    let Some(p) = &res.poll else {
        return Ok((atoms::error(), seq_atoms::not_poll()).encode(env));
    };
    if max == 0 {
        return Err(rustler::Error::BadArg);
    }
    if res.member.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    // One binary for the batch; each entry a sub-binary of it.
    let mut bytes: Vec<u8> = Vec::new();
    let mut items: Vec<(u64, u32, u8, usize, usize)> = Vec::new();
    let polled = p.recv(env, Duration::from_nanos(polled_ns), |_| {
        let n = res.member.poll(max as usize, &mut |seq, id, snap, d| {
            items.push((seq, id, snap, bytes.len(), d.len()));
            bytes.extend_from_slice(d);
        })?;
        if n == 0 {
            res.member.tick();
        }
        Ok(if items.is_empty() { 0 } else { n })
    });
    // On a scheduler thread: sent from the calling process's env.
    let events = res.member.take_events();
    if !events.is_empty() {
        let id = res.member.member_id();
        for pid in event_pids(&res) {
            for e in &events {
                let _ = env.send(&pid, bus_event(env, res.to_term(env), id, e));
            }
        }
    }
    polled.into_term(env, || {
        let mut bin = NewBinary::new(env, bytes.len());
        bin.as_mut_slice().copy_from_slice(&bytes);
        let bin: Binary = bin.into();
        let mut out = Vec::with_capacity(items.len());
        for (seq, id, snap, off, len) in items {
            let data = bin.make_subbinary(off, len)?;
            out.push(if snap == 0 {
                (seq, id, data).encode(env)
            } else {
                let (as_of, chunk, last) = snapshot_part(env, data, snap);
                let item = (seq_atoms::snapshot(), as_of, chunk, last);
                (seq, id, item).encode(env)
            });
        }
        Ok(Some(out.encode(env)))
    })
}

/// Asks the VM to send `{:tachyon_bus_ready, bus}` once a datagram waits.
#[rustler::nif]
fn bus_select<'a>(env: Env<'a>, bus: Term<'a>) -> NifResult<Term<'a>> {
    let res: Obj<'a, BusResource> = bus.decode()?;
    let Some(p) = &res.poll else {
        return Ok((atoms::error(), seq_atoms::not_poll()).encode(env));
    };
    if res.member.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let msg = (p.ready(), bus).encode(env);
    Ok(match p.select(env, &res, Some(res.member.poll_fd()), msg) {
        Ok(()) => atoms::ok().encode(env),
        Err(e) => crate::terms::error(env, e),
    })
}

/// Leaves the bus without waiting (the thread, if any, is joined by the
/// reaper).
#[rustler::nif]
fn bus_close<'a>(env: Env<'a>, res: Obj<'a, BusResource>) -> Atom {
    res.owner.unwatch(&res, env);
    close_now(&res, env);
    atoms::ok()
}

/// Leaves the bus once every message it published is delivered (to this
/// member: in the bus's order), waiting at most `timeout_ms`: no more
/// publishes from the start, what is pending is still resent (a `:poll`
/// member is driven here meanwhile: what it delivers then is dropped).
/// `:ok`, or `{:error, {:undelivered, n}}` with the messages that were
/// not. Blocks: on a dirty scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn bus_drain_close<'a>(env: Env<'a>, res: Obj<'a, BusResource>, timeout_ms: u64) -> Term<'a> {
    let timeout = Duration::from_millis(timeout_ms.min(3_600_000));
    let drive = res.poll.is_some();
    let n = if res.member.is_closed() {
        0
    } else {
        res.member.drain(timeout, drive, &mut |_, _, _, _| {})
    };
    res.owner.unwatch(&res, env);
    close_now(&res, env);
    if n == 0 {
        atoms::ok().encode(env)
    } else {
        (atoms::error(), (seq_atoms::undelivered(), n)).encode(env)
    }
}

/// Acknowledges `n` delivered messages (room under `:max_queue`).
/// Replaces the member's credential (a rotation). `:ok`,
/// `{:error, {:bad_key, why}}`, or `{:error, :no_keys}` for a member opened
/// without keys.
#[rustler::nif]
fn bus_set_keys<'a>(env: Env<'a>, res: &BusResource, text: Binary<'a>) -> Term<'a> {
    let text = std::str::from_utf8(text.as_slice()).unwrap_or("");
    match tachyon_core::seq::guard::Keys::parse(text).map(|k| res.member.set_keys(k)) {
        Ok(Ok(())) => atoms::ok().encode(env),
        Ok(Err(None)) => (atoms::error(), atom(env, "no_keys")).encode(env),
        Ok(Err(Some(e))) | Err(e) => super::auth::bad_key(env, &e.to_string()),
    }
}

#[rustler::nif]
fn bus_ack(res: &BusResource, n: u64) -> Atom {
    res.credits.ack(n);
    atoms::ok()
}

#[rustler::nif]
fn bus_stats<'a>(env: Env<'a>, res: &BusResource) -> NifResult<Term<'a>> {
    if res.member.is_closed() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let m = crate::terms::fields_map(env, &res.member.stats())
        .map_put(atom(env, "acked"), res.credits.acked().encode(env))?
        .map_put(atom(env, "in_flight"), res.credits.in_flight().encode(env))?
        .map_put(atom(env, "unheard"), res.unheard.get().encode(env))?
        .map_put(
            atom(env, "subscribers"),
            (res.receivers.len() as u64).encode(env),
        )?;
    Ok((atoms::ok(), m).encode(env))
}
