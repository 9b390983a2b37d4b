//! `bus_publish`, `bus_publish_many`: on the caller's scheduler up to
//! [`INLINE_DATAGRAMS`] datagrams, from a dirty I/O scheduler above (or
//! when another publish holds the member's send lock).

use super::*;

fn publish_result<'a>(env: Env<'a>, r: Result<u64, PublishError>) -> Term<'a> {
    match r {
        Ok(n) => (atoms::ok(), n).encode(env),
        Err(e) => crate::terms::error(env, e),
    }
}

/// Datagrams a publish sends from a normal scheduler at most (a few
/// microseconds each): a larger publish moves to a dirty I/O scheduler.
pub(crate) const INLINE_DATAGRAMS: usize = 16;
/// Messages `bus_publish_many` decodes on a normal scheduler at most.
const INLINE_LIST: usize = 256;

/// Publishes a binary: `{:ok, member_seq}` or `{:error, :too_large | :busy
/// | :closed | :member_id_taken}`. A message of more than
/// [`INLINE_DATAGRAMS`] fragments (or one that finds another publish
/// sending) is published from a dirty I/O scheduler.
#[rustler::nif]
fn bus_publish<'a>(env: Env<'a>, bus: Term<'a>, data: Term<'a>) -> NifResult<Term<'a>> {
    let res: &BusResource = bus.decode()?;
    let bin: Binary = data.decode()?;
    let msg = [bin.as_slice()];
    if res.member.datagrams_for(msg) <= INLINE_DATAGRAMS {
        let t0 = Instant::now();
        if let Some(r) = res.member.try_publish_many(msg) {
            charge(env, t0);
            return Ok(publish_result(env, r));
        }
    }
    Ok(reschedule(
        env,
        c"bus_publish_dirty",
        bus_publish_dirty,
        &[bus, data],
    ))
}

fn publish_dirty<'a>(env: Env<'a>, args: &[Term<'a>]) -> NifResult<Term<'a>> {
    let [bus, data] = args else {
        return Err(rustler::Error::BadArg);
    };
    let res: &BusResource = bus.decode()?;
    let bin: Binary = data.decode()?;
    Ok(publish_result(env, res.member.publish(bin.as_slice())))
}

crate::dirty_nif!(bus_publish_dirty, publish_dirty);

/// Publishes a list of binaries, packed into as few commands as fit (from
/// a dirty I/O scheduler above [`INLINE_LIST`] messages or
/// [`INLINE_DATAGRAMS`] datagrams).
#[rustler::nif]
fn bus_publish_many<'a>(env: Env<'a>, bus: Term<'a>, list: Term<'a>) -> NifResult<Term<'a>> {
    let res: &BusResource = bus.decode()?;
    if list.list_length()? <= INLINE_LIST {
        let bins: Vec<Binary> = list.decode()?;
        let msgs = bins.iter().map(|b| b.as_slice());
        if res.member.datagrams_for(msgs.clone()) <= INLINE_DATAGRAMS {
            let t0 = Instant::now();
            if let Some(r) = res.member.try_publish_many(msgs) {
                charge(env, t0);
                return Ok(publish_result(env, r));
            }
        }
    }
    Ok(reschedule(
        env,
        c"bus_publish_many_dirty",
        bus_publish_many_dirty,
        &[bus, list],
    ))
}

fn publish_many_dirty<'a>(env: Env<'a>, args: &[Term<'a>]) -> NifResult<Term<'a>> {
    let [bus, list] = args else {
        return Err(rustler::Error::BadArg);
    };
    let res: &BusResource = bus.decode()?;
    let bins: Vec<Binary> = list.decode()?;
    Ok(publish_result(
        env,
        res.member.publish_many(bins.iter().map(|b| b.as_slice())),
    ))
}

crate::dirty_nif!(bus_publish_many_dirty, publish_many_dirty);

/// Publishes a state machine's snapshot as of `as_of` (`state`, a binary
/// of any size): `{:ok, member_seq}` of its last message, or `{:error,
/// reason}`. Cut in messages by `Member::publish_snapshot_all`; a
/// `:messages` member (its thread drives it) waits while too many
/// commands are pending, at most `timeout_ms` without room; a `:poll`
/// member returns `{:error, :busy}` then. Blocks: on a dirty I/O scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn bus_publish_snapshot<'a>(
    env: Env<'a>,
    res: Obj<'a, BusResource>,
    as_of: u64,
    state: Binary<'a>,
    timeout_ms: u64,
) -> Term<'a> {
    let wait = (!res.is_poll()).then(|| Duration::from_millis(timeout_ms.min(3_600_000)));
    let r = res
        .member
        .publish_snapshot_all(as_of, state.as_slice(), wait);
    publish_result(env, r)
}
