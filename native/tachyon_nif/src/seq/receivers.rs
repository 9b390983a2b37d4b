//! `bus_subscribe`, `bus_unsubscribe`: the processes a `:messages` member's
//! thread delivers to besides its owner (`tachyon_core::receivers`; who
//! watches them is `Tachyon.Bus.Subscribers`), and the notice of messages
//! delivered to nobody.

use super::*;
use crate::deliver::report_map;
use tachyon_core::report::Value;

mod receiver_atoms {
    rustler::atoms! {
        not_messages,
        tachyon_report,
        bus,
        unheard,
    }
}

/// Makes `pid` a receiver of the member's messages and events: `:ok` (also
/// if it already was), `{:error, :not_messages}` for a `:poll` member (its
/// owner polls: nobody else can be given its messages) or
/// `{:error, :closed}`.
#[rustler::nif]
fn bus_subscribe<'a>(env: Env<'a>, res: Obj<'a, BusResource>, pid: LocalPid) -> Term<'a> {
    if res.is_poll() {
        return (atoms::error(), receiver_atoms::not_messages()).encode(env);
    }
    if res.member.is_closed() {
        return (atoms::error(), atoms::closed()).encode(env);
    }
    res.receivers.add(pid);
    atoms::ok().encode(env)
}

/// `pid` no longer gets the member's messages (`:ok` also if it did not).
#[rustler::nif]
fn bus_unsubscribe(res: Obj<'_, BusResource>, pid: LocalPid) -> Atom {
    res.receivers.remove(&pid);
    atoms::ok()
}

/// Tells `to` that `count` messages went to nobody since the last notice:
/// `{:tachyon_report, :bus, member_id, :unheard, %{count: count}}` (the
/// report channel's shape; `Tachyon.Bus.Server` logs the warning).
pub(super) fn notify_unheard(out: &mut ProcessSender, to: &LocalPid, member_id: u32, count: u64) {
    out.send_one(to, |env| {
        let fields = report_map(env, &[("count", Value::U64(count))]);
        (
            receiver_atoms::tachyon_report(),
            receiver_atoms::bus(),
            member_id,
            receiver_atoms::unheard(),
            fields,
        )
            .encode(env)
    });
}
