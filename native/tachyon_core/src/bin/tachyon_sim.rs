//! Runs the bus's protocol in the deterministic simulator
//! (`tachyon_core::seq::sim`) over many seeds, with faults injected, and
//! prints what was injected, what was checked and every violation (with
//! the seed that replays it bit for bit).
//!
//! ```text
//! tachyon_sim [--seeds N] [--from S] [--seed S] [--trace] [--faults crash,pause,...]
//!             [--no-swarm] [--nodes N] [--two-nodes safe|available]
//!             [--durability replicated|fsync] [--members M] [--late-members M]
//!             [--seconds S] [--loss P] [--large P] [--slow MS] [--uplink US[:QUEUE]] [--cost US] [--latency] [--ack-fanout N]
//!             [--scenario NAME|all] [--auth mac|aead]
//! ```

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use tachyon_core::seq::core::node::TwoNodes;
use tachyon_core::seq::core::MILLI;
use tachyon_core::seq::sim::{
    self, Capacity, Durability, Fault, Group, Protocol, Scenario, SimConfig,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut from, mut trace) = (100u64, 1u64, false);
    let mut cfg = SimConfig::new(0);
    let mut group = Group::new(3);
    let mut slow_ms = f64::INFINITY;
    let mut scenarios: Vec<Scenario> = Vec::new();
    let mut latency = false;
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
            "--late-members" => {
                cfg.late_members = val().parse().unwrap_or_else(|_| usage("--late-members"))
            }
            "--no-swarm" => cfg.swarm = false,
            "--durability" => {
                group.durability = match val().as_str() {
                    "replicated" => Durability::Replicated,
                    "fsync" => Durability::Fsync,
                    other => usage(other),
                }
            }
            "--scenario" => {
                let v = val();
                scenarios = if v == "all" {
                    Scenario::all()
                } else {
                    vec![Scenario::by_name(&v).unwrap_or_else(|| usage(&v))]
                };
            }
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
            "--cost" => {
                let us: f64 = val().parse().unwrap_or_else(|_| usage("--cost"));
                cfg.cost = (us * 1000.0) as u64;
            }
            "--latency" => latency = true,
            "--auth" => {
                cfg.auth = match val().as_str() {
                    "mac" => Some(false),
                    "aead" => Some(true),
                    other => usage(other),
                }
            }
            "--forge-without-keys" => cfg.forge_without_keys = true,
            "--ack-fanout" => {
                group.ack_fanout = val().parse().unwrap_or_else(|_| usage("--ack-fanout"))
            }
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
    if !scenarios.is_empty() {
        run_scenarios(&scenarios, &group, from, seeds, trace, cfg.auth);
        return;
    }
    if latency {
        run_latency(cfg, &group, from, seeds);
        return;
    }
    let proto: Box<dyn Protocol> = Box::new(group);
    println!(
        "tachyon_sim: {} ({} nodes, {:?}, {} + {} late members), seeds {}..{}, faults {:?}{}, base loss {}",
        proto.name(),
        proto.nodes(),
        proto.durability(),
        cfg.members,
        cfg.late_members,
        from,
        from + seeds - 1,
        cfg.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        if cfg.swarm { " (a subset per seed)" } else { "" },
        cfg.base_loss
    );
    let t0 = Instant::now();
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let (mut steps, mut checks, mut delivered, mut takeovers) = (0u64, 0u64, 0u64, 0u64);
    let mut joins = 0u64;
    let (mut commands, mut resent, mut queue_drops, mut max_queue) = (0u64, 0u64, 0u64, 0u64);
    let (mut rejected, mut forged) = (0u64, 0u64);
    let mut forks = 0u64;
    let mut retention: BTreeMap<&str, u64> = BTreeMap::new();
    let mut retention_runs = 0u64;
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
        joins += r.joins;
        forks += r.forks_reported;
        commands += r.commands;
        resent += r.resent;
        rejected += r.rejected;
        forged += r.forged;
        queue_drops += r.net.queue_drops;
        max_queue = max_queue.max(r.net.max_queue_delay);
        for (k, v) in &r.faults {
            *faults.entry(k).or_default() += v;
        }
        retention_runs += !r.retention.is_empty() as u64;
        for (k, v) in &r.retention {
            *retention.entry(k).or_default() += v;
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
                "\nseed {seed}: {} at {:.3} ms (step {}): {}  (mix {:?}; replay: --seed {seed} --trace)",
                v.kind,
                v.at as f64 / 1e6,
                r.steps,
                v.detail,
                r.mix
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
    println!("member opens:        {joins}");
    println!("forks reported:      {forks}");
    println!("commands sent:       {commands} (resent {resent})");
    if let Some(encrypt) = cfg.auth {
        let mode = if encrypt { "aead" } else { "mac" };
        println!(
            "keys ({mode}):          {rejected} datagrams rejected, {forged} sent by a stranger"
        );
    }
    if cfg.uplink.is_some() {
        println!(
            "uplink queue:        {queue_drops} dropped, longest wait {:.1} ms",
            max_queue as f64 / 1e6
        );
    }
    println!("faults injected:     {faults:?}");
    println!("retention:           {retention_runs} seeds, {retention:?}");
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

/// The latency model: the same seeds, no fault, with one node and with
/// `base`'s group; publish-to-delivery percentiles (the median over the
/// seeds of each seed's) and the group's against one node's.
fn run_latency(mut cfg: SimConfig, base: &Group, from: u64, seeds: u64) {
    cfg.faults = Vec::new();
    cfg.swarm = false;
    if cfg.cost == 0 {
        cfg.cost = 5_000;
    }
    println!(
        "tachyon_sim --latency: no faults, {} us per datagram read or sent by any process, \
         links 20-50 us each way, seeds {from}..{}",
        cfg.cost as f64 / 1e3,
        from + seeds - 1
    );
    let mut rows = Vec::new();
    for nodes in [1, base.nodes.max(2)] {
        let mut g = Group::new(nodes);
        g.durability = base.durability;
        g.two_nodes = base.two_nodes;
        g.ack_fanout = base.ack_fanout;
        g.retention = false;
        let mut per: [Vec<u64>; 4] = Default::default();
        for seed in from..from + seeds {
            cfg.seed = seed;
            let r = sim::run(&cfg, &g);
            if !r.ok() {
                println!(
                    "seed {seed}: {} ({})",
                    r.violations[0].kind, r.violations[0].detail
                );
            }
            if let Some(l) = r.latency {
                for (v, x) in per.iter_mut().zip(l) {
                    v.push(x);
                }
            }
        }
        let med: Vec<u64> = per
            .iter_mut()
            .map(|v| {
                v.sort_unstable();
                v.get(v.len() / 2).copied().unwrap_or(0)
            })
            .collect();
        println!(
            "{nodes} node(s): publish to delivery p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
            med[0] as f64 / 1e3,
            med[1] as f64 / 1e3,
            med[2] as f64 / 1e3,
            med[3] as f64 / 1e3
        );
        rows.push(med);
    }
    let r = |k: usize| rows[1][k] as f64 / rows[0][k].max(1) as f64;
    println!(
        "group of {} / one node: p50 {:.2}x, p99 {:.2}x, p99.9 {:.2}x",
        base.nodes.max(2),
        r(0),
        r(1),
        r(2)
    );
}

/// Runs each scenario over `seeds` seeds; prints each violating seed.
fn run_scenarios(
    list: &[Scenario],
    base: &Group,
    from: u64,
    seeds: u64,
    trace: bool,
    auth: Option<bool>,
) {
    let mut failed = 0;
    for s in list {
        let mut g = Group::new(s.nodes);
        g.durability = s.durability.unwrap_or(base.durability);
        g.two_nodes = base.two_nodes;
        g.ack_fanout = base.ack_fanout;
        g.retention = false;
        g.fixed_retention = s.retention;
        let mut bad = Vec::new();
        let mut checks = 0;
        for seed in from..from + seeds {
            let mut cfg = s.config(seed);
            cfg.trace = trace;
            cfg.auth = auth;
            let r = sim::run(&cfg, &g);
            checks += r.checks;
            if let Some(v) = r.violations.first() {
                bad.push(seed);
                if bad.len() <= 3 {
                    println!(
                        "{}: seed {seed}: {} at {:.3} ms (step {}): {}",
                        s.name,
                        v.kind,
                        v.at as f64 / 1e6,
                        r.steps,
                        v.detail
                    );
                }
            }
        }
        println!(
            "scenario {} ({} nodes, {:?}): {} of {seeds} seeds violating, {checks} checks",
            s.name,
            s.nodes,
            g.durability,
            bad.len()
        );
        if !bad.is_empty() {
            failed += 1;
        }
    }
    if failed > 0 {
        std::process::exit(1);
    }
}

fn usage(bad: &str) -> ! {
    eprintln!(
        "tachyon_sim: bad argument {bad:?}\nusage: tachyon_sim [--seeds N] [--from S] [--seed S] [--trace] \
         [--faults KIND,...] [--no-swarm] [--nodes N] [--two-nodes safe|available] \
         [--durability replicated|fsync] [--members M] [--late-members M] [--seconds S] [--loss P] \
         [--large P] [--slow MS] [--uplink US[:QUEUE]] [--cost US] [--latency] [--ack-fanout N] [--scenario NAME|all] [--auth mac|aead] [--forge-without-keys]\nfault kinds: {}",
        Fault::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(",")
    );
    std::process::exit(2)
}
