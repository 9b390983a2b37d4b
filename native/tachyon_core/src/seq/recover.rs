//! What a sequencer finds in its log at start: the session (entry 0,
//! written if the log is new), every member's last `member_seq`, the last
//! epoch, and the next sequence number.

use std::collections::HashMap;

use super::wire::{self, Msg, CONTROL, EPOCH};
use super::SeqError;
use crate::store::Store;

/// The session (entry 0, written now if the log is new), every member's
/// last `member_seq` (and under member 0, the last epoch), and the next
/// sequence number.
pub(super) fn recover(store: &Store) -> Result<(u64, HashMap<u32, u64>, u64), SeqError> {
    let mut next = store.next_index()?;
    if next == 0 {
        let session = new_session();
        let mut e = Vec::new();
        wire::write_msg(&mut e, 0, session, CONTROL, &[]);
        store.append(&e)?;
        return Ok((session, HashMap::new(), 1));
    }
    if store.first_index()? != 0 {
        return Err(SeqError::BadLog);
    }
    let session = store.read_with(0, |e| match Msg::from_entry(e) {
        Ok(m) if m.member_id == 0 && m.flags & CONTROL != 0 => Ok(m.member_seq),
        _ => Err(SeqError::BadLog),
    })??;
    let mut last = HashMap::new();
    let mut at = 1;
    let mut bad = false;
    while at < next {
        let n = store.read_range(at, 4096, 16 << 20, |_, e| match Msg::from_entry(e) {
            // Member 0 holds the last epoch record's epoch (taken out by
            // the caller).
            Ok(m) if m.member_id == 0 && m.flags & EPOCH == 0 => {}
            Ok(m) => {
                last.insert(m.member_id, m.member_seq);
            }
            Err(_) => bad = true,
        })?;
        if n == 0 {
            next = at;
            break;
        }
        at += n as u64;
    }
    if bad {
        return Err(SeqError::BadLog);
    }
    Ok((session, last, next))
}

/// A session id: the clock, the pid and an address, mixed.
fn new_session() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = t ^ ((std::process::id() as u64) << 32) ^ (&t as *const u64 as u64).rotate_left(17);
    // splitmix64
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}
