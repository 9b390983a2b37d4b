//! `raw.rust`: the UDP round-trip floor on this machine, with no BEAM in the
//! process. The same echo server and ping client as `Tachyon.Echo` and the
//! `tachyon.echo` benchmark case, each on its own (pinned) thread, over
//! 127.0.0.1.
//!
//! ```text
//! cargo run --release -p tachyon_core --bin tachyon_udp_floor -- \
//!     --messages 1000000 --warmup 500000 --size 256 --ping-core 0 --pong-core 1 --wait busy_spin
//! ```
//!
//! Prints the seeds' report, then one machine-readable line for
//! `mix tachyon.bench echo`:
//!
//! ```text
//! tachyon_udp_floor count=... avg=... stdev=... min=... max=... p50=... ... tails=75/avg/stdev/max,... ping=core_0_busy_spin pong=core_1_busy_spin
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tachyon_core::bench::ping::{spawn_ping, PingConfig};
use tachyon_core::hist::format_ns;
use tachyon_core::udp::{EchoConfig, EchoServer};
use tachyon_core::wait::WaitStrategy;

struct Args {
    messages: u64,
    warmup: u64,
    size: usize,
    ping_core: Option<usize>,
    pong_core: Option<usize>,
    ping_wait: WaitStrategy,
    pong_wait: WaitStrategy,
}

const USAGE: &str = "usage: tachyon_udp_floor [--messages N] [--warmup N] [--size BYTES] \
[--ping-core N|none] [--pong-core N|none] [--wait STRATEGY] [--ping-wait STRATEGY] [--pong-wait STRATEGY]
strategies: busy_spin, yield, backoff, park";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        messages: 1_000_000,
        warmup: 500_000,
        size: 256,
        ping_core: Some(0),
        pong_core: Some(1),
        ping_wait: WaitStrategy::BusySpin,
        pong_wait: WaitStrategy::BusySpin,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let key = argv[i].as_str();
        if key == "--help" || key == "-h" {
            return Err(USAGE.to_string());
        }
        let val = argv
            .get(i + 1)
            .ok_or_else(|| format!("{key} needs a value\n{USAGE}"))?;
        let num = || {
            val.parse::<u64>()
                .map_err(|_| format!("{key}: not a number: {val}"))
        };
        let core = || -> Result<Option<usize>, String> {
            if val == "none" {
                Ok(None)
            } else {
                val.parse::<usize>()
                    .map(Some)
                    .map_err(|_| format!("{key}: not a core: {val}"))
            }
        };
        let wait =
            || WaitStrategy::parse(val).ok_or_else(|| format!("{key}: unknown strategy {val}"));
        match key {
            "--messages" => a.messages = num()?,
            "--warmup" => a.warmup = num()?,
            "--size" => a.size = num()? as usize,
            "--ping-core" => a.ping_core = core()?,
            "--pong-core" => a.pong_core = core()?,
            "--wait" => {
                a.ping_wait = wait()?;
                a.pong_wait = a.ping_wait;
            }
            "--ping-wait" => a.ping_wait = wait()?,
            "--pong-wait" => a.pong_wait = wait()?,
            _ => return Err(format!("unknown option {key}\n{USAGE}")),
        }
        i += 2;
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let bind: SocketAddr = "127.0.0.1:0".parse().expect("static address");
    let mut cfg = EchoConfig::new(bind);
    cfg.wait = args.pong_wait;
    cfg.core = args.pong_core;
    let server = match EchoServer::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tachyon_udp_floor: cannot start the echo server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ping = PingConfig::new(server.local_addr(), args.messages, args.warmup);
    ping.size = args.size;
    ping.wait = args.ping_wait;
    ping.core = args.ping_core;
    let outcome = spawn_ping(ping, Arc::new(AtomicBool::new(false))).map_err(|e| e.to_string());
    let pong = server.placement();
    server.stop();
    let out = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tachyon_udp_floor: ping failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = out.hist.report();

    println!(
        "raw.rust: ping {} / pong {}",
        out.placement.describe(),
        pong.describe()
    );
    println!("Messages: {} ({} bytes)", r.count, args.size);
    println!("Avg Time: {}", format_ns(r.avg));
    println!("StDev: {}", format_ns(r.stdev));
    println!("Min Time: {}", format_ns(r.min as f64));
    println!("Max Time: {}", format_ns(r.max as f64));
    for t in &r.tails {
        println!(
            "{}% = [avg: {}, stdev: {}, max: {}]",
            t.percentile,
            format_ns(t.avg),
            format_ns(t.stdev),
            format_ns(t.max as f64)
        );
    }
    if out.lost + out.stale + out.mismatched > 0 {
        println!(
            "lost: {}, stale: {}, mismatched: {}",
            out.lost, out.stale, out.mismatched
        );
    }

    let tails: Vec<String> = r
        .tails
        .iter()
        .map(|t| format!("{}/{}/{}/{}", t.percentile, t.avg, t.stdev, t.max))
        .collect();
    println!(
        "tachyon_udp_floor count={} avg={} stdev={} min={} max={} p50={} p75={} p90={} p99={} \
         p999={} p9999={} p99999={} tails={} lost={} mismatched={} elapsed_ns={} ping={} pong={}",
        r.count,
        r.avg,
        r.stdev,
        r.min,
        r.max,
        r.p50,
        r.p75,
        r.p90,
        r.p99,
        r.p999,
        r.p9999,
        r.p99999,
        tails.join(","),
        out.lost,
        out.mismatched,
        out.elapsed.as_nanos(),
        out.placement.describe().replace(' ', "_"),
        pong.describe().replace(' ', "_"),
    );
    ExitCode::SUCCESS
}
