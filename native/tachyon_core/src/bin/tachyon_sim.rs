//! Runs the bus's protocol in the deterministic simulator
//! (`tachyon_core::seq::sim`) over many seeds, with faults injected, and
//! prints what was injected, what was checked and every violation (with
//! the seed that replays it bit for bit).
//!
//! ```text
//! tachyon_sim [--seeds N] [--from S] [--seed S] [--trace] [--faults crash,pause,...]
//!             [--nodes N] [--two-nodes safe|available] [--members M] [--seconds S]
//!             [--loss P] [--large P] [--slow MS] [--uplink US[:QUEUE]]
//! ```

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use tachyon_core::seq::core::node::TwoNodes;
use tachyon_core::seq::core::MILLI;
use tachyon_core::seq::sim::{self, Capacity, Fault, Group, Protocol, SimConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut from, mut trace) = (100u64, 1u64, false);
    let mut cfg = SimConfig::new(0);
    let mut group = Group::new(3);
    let mut slow_ms = f64::INFINITY;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage(&a));
        match a.as_str() {
            "--seeds" => seeds = val().parse().unwrap_or_else(|_| usage("--seeds")),
            "--from" => from = val().parse().unwrap_or_else(|_| usage("--from")),
            "--seed" => {
                from = val().parse().unwrap_or_else(|_| usage("--seed"));
                seeds = 1;
            }
            "--trace" => trace = true,
            "--members" => cfg.members = val().parse().unwrap_or_else(|_| usage("--members")),
            "--seconds" => {
                let s: f64 = val().parse().unwrap_or_else(|_| usage("--seconds"));
                cfg.fault_time = (s * 1000.0) as u64 * MILLI;
            }
            "--large" => cfg.large = val().parse().unwrap_or_else(|_| usage("--large")),
            "--loss" => cfg.base_loss = val().parse().unwrap_or_else(|_| usage("--loss")),
            "--faults" => {
                cfg.faults = val()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| Fault::parse(s).unwrap_or_else(|| usage(s)))
                    .collect()
            }
            "--uplink" => {
                let v = val();
                let (per, queue) = v.split_once(':').map_or((v.as_str(), None), |(a, b)| {
                    (a, Some(b.parse().unwrap_or_else(|_| usage("--uplink"))))
                });
                let per: u64 = per.parse().unwrap_or_else(|_| usage("--uplink"));
                cfg.uplink = Some(Capacity {
                    per_datagram: per * 1_000,
                    queue,
                });
            }
            "--slow" => slow_ms = val().parse().unwrap_or_else(|_| usage("--slow")),
            "--nodes" => group.nodes = val().parse().unwrap_or_else(|_| usage("--nodes")),
            "--two-nodes" => {
                group.two_nodes = match val().as_str() {
                    "safe" => TwoNodes::Safe,
                    "available" => TwoNodes::Available,
                    other => usage(other),
                }
            }
            _ => usage(&a),
        }
    }
    let proto: Box<dyn Protocol> = Box::new(group);
    println!(
        "tachyon_sim: {} ({} nodes, {} members), seeds {}..{}, faults {:?}, base loss {}",
        proto.name(),
        proto.nodes(),
        cfg.members,
        from,
        from + seeds - 1,
        cfg.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        cfg.base_loss
    );
    let t0 = Instant::now();
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let (mut steps, mut checks, mut delivered, mut takeovers) = (0u64, 0u64, 0u64, 0u64);
    let (mut commands, mut resent, mut queue_drops, mut max_queue) = (0u64, 0u64, 0u64, 0u64);
    let mut forks = 0u64;
    let mut failed = 0;
    let mut worst_converge = 0;
    for seed in from..from + seeds {
        cfg.seed = seed;
        cfg.trace = trace;
        let r = sim::run(&cfg, proto.as_ref());
        steps += r.steps;
        checks += r.checks;
        delivered += r.delivered;
        takeovers += r.takeovers;
        forks += r.forks_reported;
        commands += r.commands;
        resent += r.resent;
        queue_drops += r.net.queue_drops;
        max_queue = max_queue.max(r.net.max_queue_delay);
        for (k, v) in &r.faults {
            *faults.entry(k).or_default() += v;
        }
        if let Some(c) = r.converge_after_heal {
            worst_converge = worst_converge.max(c);
            if c as f64 / 1e6 > slow_ms {
                println!(
                    "\nseed {seed}: converged {:.1} ms after the heal",
                    c as f64 / 1e6
                );
            }
        }
        if !r.ok() {
            failed += 1;
            let v = &r.violations[0];
            kinds.entry(v.kind).or_default().push(seed);
            println!(
                "\nseed {seed}: {} at {:.3} ms: {}  (replay: --seed {seed} --trace)",
                v.kind,
                v.at as f64 / 1e6,
                v.detail
            );
        }
        if seeds > 1 && std::io::stdout().is_terminal() {
            print!(
                "\r  {}/{} seeds, {} failed, {:.0} s",
                seed - from + 1,
                seeds,
                failed,
                t0.elapsed().as_secs_f64()
            );
            let _ = std::io::stdout().flush();
        }
    }
    println!();
    println!("seeds run:           {seeds} ({failed} with a violation)");
    println!("steps:               {steps}");
    println!("invariant checks:    {checks}");
    println!("messages delivered:  {delivered}");
    println!("takeovers:           {takeovers}");
    println!("forks reported:      {forks}");
    println!("commands sent:       {commands} (resent {resent})");
    if cfg.uplink.is_some() {
        println!(
            "uplink queue:        {queue_drops} dropped, longest wait {:.1} ms",
            max_queue as f64 / 1e6
        );
    }
    println!("faults injected:     {faults:?}");
    println!(
        "worst convergence after the heal: {:.1} ms",
        worst_converge as f64 / 1e6
    );
    for (k, s) in &kinds {
        let shown: Vec<_> = s.iter().take(12).collect();
        println!("violation {k}: {} seeds, first {:?}", s.len(), shown);
    }
    println!("time: {:.1} s", t0.elapsed().as_secs_f64());
    if failed > 0 {
        std::process::exit(1);
    }
}

fn usage(bad: &str) -> ! {
    eprintln!(
        "tachyon_sim: bad argument {bad:?}\nusage: tachyon_sim [--seeds N] [--from S] [--seed S] [--trace] \
         [--faults crash,pause,stall,partition,lossy_link,reorder_link,clock_jump] [--nodes N] \
         [--two-nodes safe|available] [--members M] [--seconds S] [--loss P] [--large P] [--slow MS] \
         [--uplink US[:QUEUE]]"
    );
    std::process::exit(2)
}
