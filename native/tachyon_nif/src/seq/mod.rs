//! `Tachyon.Native.seq_*`, `bus_*`: `Tachyon.Sequencer` and `Tachyon.Bus`
//! over `tachyon_core::seq`.
//!
//! * `SeqResource`: a sequencer thread; `seq_stop` joins it (dirty).
//! * `BusResource`: a member of the bus, in one of two modes (as
//!   `Tachyon.UDP`): `:messages`, a thread drives the member and sends
//!   `{:tachyon_bus, bus, seq, member_id, data}` to the owner; `:poll`, the
//!   process that calls `bus_recv` drives it on its own scheduler (through
//!   the shared [`Poller`]).
//!
//! No call here holds a normal scheduler for long: a publish that sends
//! more than [`INLINE_DATAGRAMS`] datagrams, or finds another publish
//! holding the member's send lock, moves itself to a dirty I/O scheduler
//! (`crate::dirty`); stats read atomics; a close that would wait behind a
//! publish says its goodbye from the reaper thread; `seq_stop` and
//! `seq_stats` never wait for each other.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustler::types::atom::Atom;
use rustler::{Binary, Encoder, Env, LocalPid, Monitor, NewBinary, NifResult, Term};
use tachyon_core::credit::Credits;
use tachyon_core::report::{Report, Reporter};
use tachyon_core::seq::core::node::Durability;
use tachyon_core::seq::member::PublishError;
use tachyon_core::seq::{
    BusMode, Change, Member, MemberConfig, MemberEvent, Sequencer, SequencerConfig, TwoNodes,
};
use tachyon_core::wait::Waiter;
use tachyon_core::worker::{self, Slot, Worker};

use crate::atoms;
use crate::deliver::ProcessSender;
use crate::dirty::{charge, reschedule};
use crate::owner::Owner;
use crate::res::{Handle, Obj};
use crate::terms::{atom, error, get, map};
use crate::udp::Poller;
use crate::udp::{decode_addr, decode_ip, decode_socket_opts, decode_wait, encode_addr};

pub(crate) mod auth;
mod bus;
mod node;
mod publish;
mod receivers;

pub use bus::BusResource;
pub use node::SeqResource;

mod seq_atoms {
    rustler::atoms! {
        tachyon_bus,
        tachyon_bus_ready,
        tachyon_bus_event,
        tachyon_bus_snapshot,
        snapshot,
        not_poll,
        undelivered,
        unicast,
        multicast,
    }
}

fn micros<'a>(env: Env<'a>, opts: Term<'a>, key: &str) -> NifResult<Duration> {
    Ok(Duration::from_micros(
        get::<u64>(env, opts, key)?.min(3_600_000_000),
    ))
}

/// `:unicast` or `{:multicast, {group_ip, port}, iface_ip, ttl, loop}`.
fn decode_bus<'a>(term: Term<'a>) -> NifResult<BusMode> {
    if let Ok(a) = term.decode::<Atom>() {
        return if a == seq_atoms::unicast() {
            Ok(BusMode::Unicast)
        } else {
            Err(rustler::Error::BadArg)
        };
    }
    let (tag, group, iface, ttl, looped): (Atom, Term, Term, u8, bool) = term.decode()?;
    if tag != seq_atoms::multicast() {
        return Err(rustler::Error::BadArg);
    }
    let (gip, gport): (Term, u16) = group.decode()?;
    let (IpAddr::V4(g), IpAddr::V4(i)) = (decode_ip(gip)?, decode_ip(iface)?) else {
        return Err(rustler::Error::BadArg);
    };
    if !g.is_multicast() {
        return Err(rustler::Error::BadArg);
    }
    Ok(BusMode::Multicast {
        group: SocketAddr::new(IpAddr::V4(g), gport),
        iface: i,
        ttl,
        looped,
    })
}
