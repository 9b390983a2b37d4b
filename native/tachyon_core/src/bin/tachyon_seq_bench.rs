//! The batched throughput of `mix tachyon.bench sequencer` with no BEAM in
//! the process, for profiling (`perf record`, `perf stat`, `strace -c`):
//! `raw.relay.throughput.batched` (the floor: a relay thread,
//! `Tachyon.Echo`'s) and `tachyon.sequencer.throughput.batched.native` (a
//! sequencer node of its own and the bench's Rust member loop), the same
//! drivers (`tachyon_core::bench::{relay, seq}`) with the same windows and
//! socket buffers, run
//! one after the other in this process, then the member's and the node's
//! counters.
//!
//! ```text
//! cargo run --release -p tachyon_core --bin tachyon_seq_bench -- \
//!     --messages 5000000 --per 64 --wait backoff [--only seq|relay] [--rounds 3]
//! ```
//!
//! The sequencer logs into a fresh directory under `--dir` (the system's
//! tmp dir by default), removed at the end.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tachyon_core::bench::{relay, seq};
use tachyon_core::seq::{Member, MemberConfig, Sequencer, SequencerConfig};
use tachyon_core::udp::{EchoConfig, EchoServer};
use tachyon_core::wait::WaitStrategy;

struct Args {
    messages: u64,
    per: usize,
    size: usize,
    wait: WaitStrategy,
    only: Option<String>,
    rounds: u32,
    dir: PathBuf,
    /// Datagrams in flight of the relay floor (batched: 32 by default, a
    /// member's initial window, as `mix tachyon.bench sequencer`'s floor).
    window: Option<u64>,
    /// Socket buffers of the relay floor, both ends (0: the kernel's; by
    /// default a member's and a node's, `seq::SOCKET_BUFFER`).
    floor_buffers: usize,
    /// The member's `SO_RCVBUF` (None: its default; 0: the kernel's).
    member_recbuf: Option<usize>,
}

const USAGE: &str = "tachyon_seq_bench [--messages N] [--per N] [--size BYTES] \
[--wait STRATEGY] [--only seq|relay] [--rounds N] [--dir DIR] [--member-recbuf BYTES] [--window N] [--floor-buffers BYTES]";

fn args() -> Result<Args, String> {
    let mut a = Args {
        messages: 5_000_000,
        per: 64,
        size: 256,
        wait: WaitStrategy::Backoff,
        only: None,
        rounds: 1,
        dir: std::env::temp_dir(),
        member_recbuf: None,
        window: None,
        floor_buffers: tachyon_core::seq::SOCKET_BUFFER,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|_| format!("bad number {s}"));
        match k.as_str() {
            "--messages" => a.messages = num(v()?)?,
            "--per" => a.per = num(v()?)?.max(1) as usize,
            "--size" => a.size = num(v()?)? as usize,
            "--rounds" => a.rounds = num(v()?)?.max(1) as u32,
            "--wait" => {
                let s = v()?;
                a.wait = WaitStrategy::parse(&s).ok_or(format!("bad wait {s}"))?;
            }
            "--only" => a.only = Some(v()?),
            "--dir" => a.dir = PathBuf::from(v()?),
            "--window" => a.window = Some(num(v()?)?),
            "--floor-buffers" => a.floor_buffers = num(v()?)? as usize,
            "--member-recbuf" => a.member_recbuf = Some(num(v()?)? as usize),
            _ => return Err(USAGE.to_string()),
        }
    }
    Ok(a)
}

/// The floor: the bench's relay driver against an echo thread, the
/// window of `raw.relay.throughput.batched` (8 datagrams).
fn relay_case(a: &Args) -> Result<f64, String> {
    let mut cfg = EchoConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.wait = a.wait;
    if a.floor_buffers > 0 {
        cfg.socket.recbuf = Some(a.floor_buffers);
        cfg.socket.sndbuf = Some(a.floor_buffers);
    }
    let echo = EchoServer::start(cfg).map_err(|e| e.to_string())?;
    let window = a.window.unwrap_or(if a.per > 1 { 32 } else { 64 });
    let run = |n| relay::throughput(echo.local_addr(), n, a.size, a.per, window, a.floor_buffers);
    run(a.messages / 10).map_err(|e| e.to_string())?;
    let t = run(a.messages).map_err(|e| e.to_string())?;
    echo.stop();
    let rate = t.messages as f64 * 1e9 / t.elapsed_ns as f64;
    println!(
        "raw.relay.throughput{} (window {window}, buffers {}): {:.0} msg/s ({} datagrams, {} lost)",
        if a.per > 1 { ".batched" } else { "" },
        a.floor_buffers,
        rate,
        t.datagrams,
        t.lost
    );
    Ok(rate)
}

/// The case: a sequencer node (the OS process's defaults, batching up to
/// 65,000-byte datagrams when `per > 1`) and the bench's member loop.
fn seq_case(a: &Args, round: u32) -> Result<f64, String> {
    let dir = a
        .dir
        .join(format!("tachyon_seq_bench.{}.{round}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = SequencerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), &dir);
    cfg.wait = a.wait;
    let max_dg = if a.per > 1 { 65_000 } else { 1472 };
    if a.per > 1 {
        cfg.max_datagram = max_dg;
    } else {
        cfg.batching = false;
    }
    let s = Sequencer::start(cfg).map_err(|e| format!("{e:?}"))?;
    let mut mc = MemberConfig::new(s.local_addr(), 1);
    mc.max_datagram = max_dg;
    if let Some(n) = a.member_recbuf {
        // 0: the kernel's default.
        mc.socket.recbuf = (n > 0).then_some(n);
    }
    let m = Member::open(mc).map_err(|e| format!("{e:?}"))?;
    let n = a.messages - a.messages % a.per as u64;
    let dt = seq::throughput(&m, n, a.size, a.per, 256).map_err(|e| format!("{e:?}"))?;
    let rate = n as f64 / dt.as_secs_f64();
    println!(
        "tachyon.sequencer.throughput{}.native: {:.0} msg/s",
        if a.per > 1 { ".batched" } else { "" },
        rate
    );
    println!("  member: {:?}", m.stats());
    println!("  node: {:?}", s.stats());
    m.close();
    s.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rate)
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    for round in 0..a.rounds {
        let relay = match a.only.as_deref() {
            Some("seq") => None,
            _ => Some(relay_case(&a)),
        };
        let seq = match a.only.as_deref() {
            Some("relay") => None,
            _ => Some(seq_case(&a, round)),
        };
        match (relay, seq) {
            (Some(Err(e)), _) | (_, Some(Err(e))) => {
                eprintln!("tachyon_seq_bench: {e}");
                return ExitCode::FAILURE;
            }
            (Some(Ok(r)), Some(Ok(s))) => println!("ratio: {:.3}x", s / r),
            _ => {}
        }
    }
    ExitCode::SUCCESS
}
