//! The protocol as it was before the simulator: a primary and one standby
//! (`SequencerCore`, `StandbyCore`); a restarted node follows the other.

use std::net::SocketAddr;

use super::actors::{Actor, Disk, LegacyNode};
use super::{session_log, Protocol};
use crate::seq::core::member::MemberConfig;
use crate::seq::core::{Nanos, MILLI};

pub struct Today {
    pub takeover_after: Nanos,
}

impl Default for Today {
    fn default() -> Today {
        Today {
            takeover_after: 50 * MILLI,
        }
    }
}

impl Protocol for Today {
    fn name(&self) -> &'static str {
        "primary-standby (before the simulator)"
    }

    fn nodes(&self) -> usize {
        2
    }

    fn initial_disk(&self, i: usize, session: u64) -> Disk {
        Disk {
            log: if i == 0 {
                session_log(session)
            } else {
                Default::default()
            },
            meta: Vec::new(),
        }
    }

    fn start_node(
        &self,
        i: usize,
        addrs: &[SocketAddr],
        disk: Disk,
        restart: bool,
        primary: usize,
        now: Nanos,
    ) -> Box<dyn Actor> {
        // As an operator would: a restarted node follows the primary, or is
        // the primary again if nothing took over from it.
        if (!restart && i == 0) || (restart && primary == i) {
            Box::new(LegacyNode::primary(disk, now))
        } else {
            let p = if restart { addrs[primary] } else { addrs[0] };
            Box::new(LegacyNode::standby(disk, p, self.takeover_after, now))
        }
    }

    fn member_config(&self, id: u32, addrs: &[SocketAddr]) -> MemberConfig {
        let mut c = MemberConfig::new(addrs[0], id);
        c.alternates = addrs[1..].to_vec();
        c
    }

    fn takeover_window(&self) -> Nanos {
        self.takeover_after
    }
}
