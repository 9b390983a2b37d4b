//! What a sequencer finds in its log at start: the session (entry 0,
//! written if the log is new), every member's last `member_seq`, the last
//! epoch, and the next sequence number.

use std::collections::HashMap;

use super::Log;
use crate::seq::wire::{self, Msg, CONTROL, EPOCH};
use crate::seq::SeqError;

/// The session (entry 0, written now if the log is new), every member's
/// last `member_seq` (and under member 0, the last epoch), and the next
/// sequence number.
pub(crate) fn recover<L: Log>(log: &mut L) -> Result<(u64, HashMap<u32, u64>, u64), SeqError> {
    let next = log.next_index();
    if next == 0 {
        let session = new_session();
        let mut e = Vec::new();
        wire::write_msg(&mut e, 0, session, CONTROL, &[]);
        log.append(&e).map_err(|_| SeqError::BadLog)?;
        return Ok((session, HashMap::new(), 1));
    }
    let mut session = None;
    let mut last = HashMap::new();
    let mut at = 0;
    let mut bad = false;
    while at < next {
        let n = log
            .read_range(at, 4096, &mut |i, e| match Msg::from_entry(e) {
                Ok(m) if i == 0 => {
                    if m.member_id == 0 && m.flags & CONTROL != 0 {
                        session = Some(m.member_seq);
                    } else {
                        bad = true;
                    }
                }
                // Member 0 holds the last epoch record's epoch (taken out by
                // the caller).
                Ok(m) if m.member_id == 0 && m.flags & EPOCH == 0 => {}
                Ok(m) => {
                    last.insert(m.member_id, m.member_seq);
                }
                Err(_) => bad = true,
            })
            .map_err(|_| SeqError::BadLog)?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    match session {
        Some(s) if !bad => Ok((s, last, at)),
        _ => Err(SeqError::BadLog),
    }
}

/// A session id: the clock, the pid and an address, mixed.
pub(crate) fn new_session() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = t ^ ((std::process::id() as u64) << 32) ^ (&t as *const u64 as u64).rotate_left(17);
    super::Rng::new(x).next_u64().max(1)
}
