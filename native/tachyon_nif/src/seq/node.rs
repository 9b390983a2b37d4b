//! `seq_*`: a sequencer node (`Tachyon.Sequencer`).

use super::*;

/// A sequencer node (a group of one, or one node of a group).
pub struct SeqResource {
    /// Its stop holds no lock its readers take.
    node: Sequencer,
    /// Where the node's events go (`seq_report_to`); kept until then.
    events: Arc<Mutex<Events>>,
}

/// The node's events: kept until a process listens (a bounded few: the
/// first role change can come before the server's `init` runs).
struct Events {
    id: u64,
    to: Option<(LocalPid, Reporter)>,
    early: Vec<Report>,
}

impl Events {
    fn send(&mut self, r: Report) {
        match self.to.as_mut() {
            Some((_, rep)) => rep(r),
            None if self.early.len() < 64 => self.early.push(r),
            None => {}
        }
    }

    /// From now on to `pid`, the kept ones first, sent from `env`: the
    /// calling process's (a NIF's thread is a scheduler, where a message
    /// built in an environment of our own cannot be sent: kept reports
    /// were lost that way). Called under the lock the node's thread sends
    /// through, so no new report overtakes a kept one.
    fn listen(&mut self, env: Env, pid: LocalPid) {
        for r in self.early.drain(..) {
            let msg = (
                atom(env, "tachyon_report"),
                atom(env, "sequencer"),
                self.id,
                atom(env, r.kind),
                crate::deliver::report_map(env, &r.fields),
            );
            let _ = env.send(&pid, msg);
        }
        let rep = crate::deliver::reporter(pid, "sequencer", self.id);
        self.to = Some((pid, rep));
    }
}

crate::hot_resource!(SeqResource, c"SeqResource");

fn seq_reporter(events: Arc<Mutex<Events>>) -> Reporter {
    Box::new(move |r: Report| events.lock().unwrap_or_else(|e| e.into_inner()).send(r))
}

/// Starts a sequencer node. `opts`: ip, port, path, bus, wait, core, batch,
/// max_datagram, batching, heartbeat_us, heartbeat_after_us, replay_max,
/// segment_size, max_bytes and max_age_ms (retention), recbuf, sndbuf,
/// reuseaddr, group (a list of `{ip, port}`, empty for a group of one),
/// join (a list of `{ip, port}`: nodes of a running group to join; empty
/// otherwise), election_timeout_us, two_nodes (`:safe` or
/// `:available`), durability (`:replicated` or `:fsync`), eager,
/// report_id. Returns `{:ok, ref, info}` or `{:error, reason}`.
#[rustler::nif(schedule = "DirtyIo")]
fn seq_start<'a>(env: Env<'a>, opts: Term<'a>) -> NifResult<Term<'a>> {
    let path: String = get(env, opts, "path")?;
    let mut cfg = SequencerConfig::new(decode_addr(env, opts)?, path);
    cfg.bus = decode_bus(get(env, opts, "bus")?)?;
    cfg.wait = decode_wait(env, get(env, opts, "wait")?)?;
    cfg.core = get::<Option<u64>>(env, opts, "core")?.map(|c| c as usize);
    cfg.batch = get::<u64>(env, opts, "batch")? as usize;
    cfg.max_datagram = get::<u64>(env, opts, "max_datagram")? as usize;
    cfg.batching = get(env, opts, "batching")?;
    cfg.heartbeat = micros(env, opts, "heartbeat_us")?;
    cfg.heartbeat_after = micros(env, opts, "heartbeat_after_us")?;
    cfg.replay_max = get::<u64>(env, opts, "replay_max")? as usize;
    cfg.store.segment_size = get::<u64>(env, opts, "segment_size")? as usize;
    cfg.store.max_message_size = cfg.max_datagram;
    cfg.store.prepared_segments = 1;
    cfg.store.max_bytes = get(env, opts, "max_bytes")?;
    cfg.store.max_age_ms = get(env, opts, "max_age_ms")?;
    cfg.socket = decode_socket_opts(env, opts)?;
    for (ip, port) in get::<Vec<(Term, u16)>>(env, opts, "group")? {
        cfg.group.push(SocketAddr::new(decode_ip(ip)?, port));
    }
    for (ip, port) in get::<Vec<(Term, u16)>>(env, opts, "join")? {
        cfg.join.push(SocketAddr::new(decode_ip(ip)?, port));
    }
    cfg.election_timeout = micros(env, opts, "election_timeout_us")?;
    let two: Atom = get(env, opts, "two_nodes")?;
    cfg.two_nodes = match two.to_term(env).atom_to_string()?.as_str() {
        "safe" => TwoNodes::Safe,
        "available" => TwoNodes::Available,
        _ => return Err(rustler::Error::BadArg),
    };
    let durability: Atom = get(env, opts, "durability")?;
    cfg.durability = match durability.to_term(env).atom_to_string()?.as_str() {
        "replicated" => Durability::Replicated,
        "fsync" => Durability::Fsync,
        _ => return Err(rustler::Error::BadArg),
    };
    cfg.eager = get(env, opts, "eager")?;
    cfg.auth = match super::auth::decode_auth(env, opts)? {
        Ok(a) => a,
        Err(why) => return Ok(super::auth::bad_key(env, &why)),
    };
    cfg.acl = super::auth::decode_acl(env, opts)?;
    let events = Arc::new(Mutex::new(Events {
        id: get(env, opts, "report_id")?,
        to: None,
        early: Vec::new(),
    }));
    let rep = seq_reporter(events.clone());
    let s = match Sequencer::start_reporting(cfg, Some(rep)) {
        Ok(s) => s,
        Err(e) => return Ok(error(env, e)),
    };
    let p = s.placement();
    let st = s.stats();
    let info = map(
        env,
        &[
            ("address", encode_addr(env, &s.local_addr())),
            ("session", s.session().encode(env)),
            ("recovered_members", s.recovered_members().encode(env)),
            ("next_seq", s.first_next().encode(env)),
            ("epoch", st.epoch.encode(env)),
            ("node_id", (s.id() != u8::MAX).then_some(s.id()).encode(env)),
            ("learner", st.learner.encode(env)),
            ("core", p.core.encode(env)),
            ("pinned", p.pinned.encode(env)),
            ("wait", atom(env, p.wait.name())),
        ],
    )?;
    let res = Handle::new(SeqResource { node: s, events });
    Ok((atoms::ok(), res, info).encode(env))
}

/// Replaces the node's keys (a rotation: the first key of `text` seals
/// from now on, every one opens). `:ok`, `{:error, {:bad_key, why}}`, or
/// `{:error, :no_keys}` for a node started without keys.
#[rustler::nif]
fn seq_set_keys<'a>(env: Env<'a>, res: &SeqResource, text: Binary<'a>) -> Term<'a> {
    let text = std::str::from_utf8(text.as_slice()).unwrap_or("");
    match tachyon_core::seq::guard::Keys::parse(text).map(|k| res.node.set_keys(k)) {
        Ok(Ok(())) => atoms::ok().encode(env),
        Ok(Err(None)) => (atoms::error(), atom(env, "no_keys")).encode(env),
        Ok(Err(Some(e))) | Err(e) => super::auth::bad_key(env, &e.to_string()),
    }
}

/// Sends the node's events, from now on (and those it kept until now), to
/// `pid` as `{:tachyon_report, :sequencer, id, kind, fields}`.
#[rustler::nif]
fn seq_report_to(env: Env, res: &SeqResource, pid: LocalPid) -> Atom {
    res.events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .listen(env, pid);
    atoms::ok()
}

/// Stops the node and joins its threads: the port is free and the log
/// closed on return.
#[rustler::nif(schedule = "DirtyIo")]
fn seq_stop(res: &SeqResource) -> Atom {
    res.node.stop();
    atoms::ok()
}

/// Holds an election now (the primary's BEAM node went down); in a group of
/// two the witness's vote too.
#[rustler::nif]
fn seq_takeover(res: &SeqResource) -> Atom {
    res.node.take_over();
    atoms::ok()
}

/// The witness (this BEAM node) saw node `id`'s BEAM node go down.
#[rustler::nif]
fn seq_witness_down(res: &SeqResource, id: u8) -> Atom {
    res.node.witness_down(id);
    atoms::ok()
}

/// A membership change: `{:add, {ip, port}}`, `{:remove, id}` or
/// `{:remove, {ip, port}}`; answers once it is committed (`{:ok, id}`) or
/// failed (`{:error, reason}`), or after `timeout_ms` (`{:error,
/// :timeout}`). Waits: on a dirty scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn seq_change<'a>(
    env: Env<'a>,
    res: &SeqResource,
    change: Term<'a>,
    timeout_ms: u64,
) -> NifResult<Term<'a>> {
    let (op, what): (Atom, Term) = change.decode()?;
    let addr = |t: Term| -> NifResult<SocketAddr> {
        let (ip, port): (Term, u16) = t.decode()?;
        Ok(SocketAddr::new(decode_ip(ip)?, port))
    };
    let timeout = Duration::from_millis(timeout_ms.min(3_600_000));
    let r = match op.to_term(env).atom_to_string()?.as_str() {
        "add" => res.node.add_node(addr(what)?, timeout),
        "remove" => {
            let which = match what.decode::<u8>() {
                Ok(id) => Change::Remove(id),
                Err(_) => Change::RemoveAt(addr(what)?),
            };
            res.node.remove_node(which, timeout)
        }
        _ => return Err(rustler::Error::BadArg),
    };
    Ok(match r {
        Ok(id) => (atoms::ok(), id).encode(env),
        Err(e) => error(env, e),
    })
}

/// The membership as of the node's last step: `%{node_id: id | nil,
/// nodes: [%{id: id, address: {ip, port}, voter: bool}]}`.
#[rustler::nif]
fn seq_membership<'a>(env: Env<'a>, res: &SeqResource) -> NifResult<Term<'a>> {
    let m = res.node.membership();
    let nodes = m
        .nodes
        .iter()
        .map(|n| {
            map(
                env,
                &[
                    ("id", n.id.encode(env)),
                    ("address", encode_addr(env, &n.addr)),
                    ("voter", n.voter.encode(env)),
                ],
            )
        })
        .collect::<NifResult<Vec<Term>>>()?;
    map(
        env,
        &[
            ("node_id", m.node_id.encode(env)),
            ("nodes", nodes.encode(env)),
        ],
    )
}

/// `{:ok, stats}` (with `:role`, `:epoch`, `:leader`, `:commit`), or
/// `{:error, :closed}` once stopped.
#[rustler::nif]
fn seq_stats<'a>(env: Env<'a>, res: &SeqResource) -> NifResult<Term<'a>> {
    if !res.node.is_running() {
        return Ok((atoms::error(), atoms::closed()).encode(env));
    }
    let m = crate::terms::fields_map(env, &res.node.stats());
    Ok((atoms::ok(), m).encode(env))
}
