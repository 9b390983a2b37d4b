//! The sequencer bench's native member: the floor of the bus round trip
//! (publish, then poll until the own message comes back, in a Rust loop)
//! and of its throughput (publish while draining the bus).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::hist::Hist;
use crate::seq::member::PublishError;
use crate::seq::{Member, MemberConfig, SeqError};

/// Opens a member for a bench loop (with keys: `auth`).
pub fn member(
    sequencer: SocketAddr,
    member_id: u32,
    max_datagram: usize,
    loss: f64,
    auth: Option<crate::seq::guard::Auth>,
) -> Result<Member, SeqError> {
    let mut cfg = MemberConfig::new(sequencer, member_id);
    cfg.max_datagram = max_datagram;
    cfg.loss = loss;
    cfg.auth = auth;
    Member::open(cfg)
}

/// `warmup + count` round trips of `size` bytes; the histogram of the last
/// `count`. Waits by polling (busy); a round trip over 5 s fails.
pub fn roundtrip(m: &Member, count: u64, warmup: u64, size: usize) -> Result<Hist, SeqError> {
    let msg = vec![0x5Au8; size];
    let mut h = Hist::new();
    for i in 0..warmup + count {
        let t0 = Instant::now();
        let ms = loop {
            match m.publish(&msg) {
                Ok(ms) => break ms,
                Err(PublishError::Busy) => {
                    m.poll(64, &mut |_, _, _, _| {})?;
                }
                Err(_) => return Err(SeqError::BadConfig),
            }
        };
        let mut seen = false;
        let me = m.member_id();
        while !seen {
            let n = m.poll(64, &mut |_, id, _, _| seen |= id == me)?;
            if n == 0 {
                m.tick();
                if t0.elapsed() > Duration::from_secs(5) {
                    return Err(SeqError::Timeout);
                }
            }
        }
        let _ = ms;
        if i >= warmup {
            h.record(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(h)
}

/// Publishes `count` messages of `size` bytes, `per` per command, at most
/// `window` commands ahead of what came back, and receives them all.
/// Returns the elapsed time.
pub fn throughput(
    m: &Member,
    count: u64,
    size: usize,
    per: usize,
    window: u64,
) -> Result<Duration, SeqError> {
    let msg = vec![0x33u8; size];
    let batch: Vec<&[u8]> = (0..per.max(1)).map(|_| msg.as_slice()).collect();
    let per = batch.len() as u64;
    let cmds = count / per;
    let total = cmds * per;
    let (mut sent, mut got) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while got < total {
        // Up to 32 commands between two polls, within the window.
        for _ in 0..32 {
            if sent >= cmds || sent * per - got.min(sent * per) >= window * per {
                break;
            }
            match m.publish_many(batch.iter().copied()) {
                Ok(_) => sent += 1,
                Err(PublishError::Busy) => break,
                Err(_) => return Err(SeqError::BadConfig),
            }
        }
        let n = m.poll(64, &mut |_, _, _, _| got += 1)?;
        if n == 0 {
            m.tick();
            if last_progress.elapsed() > Duration::from_secs(10) {
                return Err(SeqError::Timeout);
            }
        } else {
            last_progress = Instant::now();
        }
    }
    Ok(t0.elapsed())
}
