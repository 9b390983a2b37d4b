//! `tachyon_mc`: exhaustive model checking of the sequencer group's real
//! cores within bounds (see the crate's doc). `--help` lists the flags.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::time::Duration;

use tachyon_core::seq::core::node::{Durability, TwoNodes};
use tachyon_core::seq::core::{MICRO, MILLI};
use tachyon_mc::config::{FaultKinds, NetKind, PowerLoss, Prologue};
use tachyon_mc::run::{check, report, RunOpts};
use tachyon_mc::{scenario, Bounds, McModel};

const HELP: &str = "tachyon_mc: model checking of the sequencer group's real cores (stateright)

  --scenario NAME        start from a named scenario's bounds and script
                         (three-hop, three-hop-fsync, two-disks); later flags override
  --nodes 2|3            nodes of the initial group (3)
  --members N            members (1)
  --messages N           messages each member publishes at most (1)
  --faults N             faults per run at most (2)
  --kinds LIST           fault kinds: crash,power,replace,false_witness | all | none
                         (all = crash,power,replace)
  --power-loss MODE      what a power loss keeps: unsynced | tail | prefixes (tail)
  --durability MODE      replicated | fsync (replicated)
  --two-nodes MODE       safe | available (safe; a group of two)
  --membership           one membership change: the primary removes a node, or a
                         spare node joins (3 nodes)
  --net KIND             dup (a set: any datagram delivered any number of times, or
                         never) | nodup (a multiset: at most once) (dup)
  --lossy                explicit drops besides never delivering
  --separate-restarts    a node that goes down restarts by a step of its own (the
                         default with 2 nodes; 3 nodes restart in the fault's step)
  --prologue KIND        joined (the group elected, members welcomed) | delivered
                         (and the first member's first message delivered) (joined)
  --horizon-ms X         how far each process's clock may run past the prologue (20)
  --election-ms X        minimum election timeout (2); --heartbeat-ms X (1);
  --retransmit-ms X      a follower's gap fill retries (1)
  --frozen LIST          actors (0,1,..: nodes, then the spare, then members) that take
                         no step in the search
  --paused LIST          actors whose timers never fire in the search
  --depth D              steps past the initial state at most (8; 0: no bound)
  --bfs | --dfs          breadth first (shortest counterexamples, memory per state)
                         or depth first (the default)
  --threads N            checker threads (1)
  --timeout-s S          stop after S seconds (then not exhaustive)
  --all-failures         go on after the first violation
  --examples             print the paths to the `sometimes` properties too
  --quiet                no progress lines
";

/// mimalloc as the binary's allocator: a check spends a third of its time
/// allocating and freeing the node states it clones (perf, glibc's
/// malloc); mimalloc's thread-local free lists halve that.
struct MiMalloc;

// SAFETY: mimalloc's aligned functions return memory aligned as asked,
// or null (GlobalAlloc's contract for failure); `mi_free` takes any
// pointer they returned; `mi_realloc_aligned` keeps the alignment.
unsafe impl GlobalAlloc for MiMalloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe { libmimalloc_sys::mi_malloc_aligned(l.size(), l.align()) as *mut u8 }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe { libmimalloc_sys::mi_zalloc_aligned(l.size(), l.align()) as *mut u8 }
    }

    unsafe fn dealloc(&self, p: *mut u8, _: Layout) {
        // SAFETY: `p` came from this allocator.
        unsafe { libmimalloc_sys::mi_free(p as *mut c_void) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with `l`'s alignment.
        unsafe { libmimalloc_sys::mi_realloc_aligned(p as *mut c_void, size, l.align()) as *mut u8 }
    }
}

#[global_allocator]
static ALLOC: MiMalloc = MiMalloc;

fn fail(msg: String) -> ! {
    eprintln!("tachyon_mc: {msg}\n\n{HELP}");
    std::process::exit(2)
}

fn ms(v: &str) -> u64 {
    match v.parse::<f64>() {
        Ok(x) if x > 0.0 => (x * MILLI as f64) as u64,
        _ => fail(format!("not a duration in ms: {v}")),
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> T {
    v.parse()
        .unwrap_or_else(|_| fail(format!("{flag}: not a number: {v}")))
}

/// Actor indices: `0,3`.
fn actor_list(v: &str) -> Vec<usize> {
    v.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| num("actor list", x))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut b = Bounds::default();
    let mut script = Vec::new();
    let mut about = None;
    let mut o = RunOpts {
        progress: Some(Duration::from_secs(10)),
        ..RunOpts::default()
    };
    let mut restarts = None;
    let mut examples = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i)
                .cloned()
                .unwrap_or_else(|| fail(format!("{flag} needs a value")))
        };
        match flag {
            "--help" | "-h" => {
                print!("{HELP}");
                return;
            }
            "--scenario" => {
                let v = value();
                let s = scenario::find(&v).unwrap_or_else(|| fail(format!("no scenario {v}")));
                b = s.bounds;
                script = s.script;
                about = Some(s.about);
            }
            "--nodes" => b.nodes = num(flag, &value()),
            "--members" => b.members = num(flag, &value()),
            "--messages" => b.messages = num(flag, &value()),
            "--faults" => b.faults = num(flag, &value()),
            "--kinds" => {
                let v = value();
                b.kinds = FaultKinds::parse(&v).unwrap_or_else(|| fail(format!("kinds: {v}")))
            }
            "--power-loss" => {
                b.power_loss = match value().as_str() {
                    "unsynced" => PowerLoss::Unsynced,
                    "tail" => PowerLoss::Tail,
                    "prefixes" => PowerLoss::Prefixes,
                    v => fail(format!("power loss: {v}")),
                }
            }
            "--durability" => {
                b.durability = match value().as_str() {
                    "replicated" => Durability::Replicated,
                    "fsync" => Durability::Fsync,
                    v => fail(format!("durability: {v}")),
                }
            }
            "--two-nodes" => {
                b.two_nodes = match value().as_str() {
                    "safe" => TwoNodes::Safe,
                    "available" => TwoNodes::Available,
                    v => fail(format!("two nodes: {v}")),
                }
            }
            "--membership" => b.membership = true,
            "--net" => {
                b.net = match value().as_str() {
                    "dup" => NetKind::Duplicating,
                    "nodup" => NetKind::NonDuplicating,
                    v => fail(format!("net: {v}")),
                }
            }
            "--lossy" => b.lossy = true,
            "--separate-restarts" => restarts = Some(false),
            "--prologue" => {
                b.prologue = match value().as_str() {
                    "joined" => Prologue::Joined,
                    "delivered" => Prologue::Delivered,
                    v => fail(format!("prologue: {v}")),
                }
            }
            "--horizon-ms" => b.horizon = ms(&value()),
            "--election-ms" => b.election_timeout = ms(&value()),
            "--heartbeat-ms" => b.heartbeat = ms(&value()),
            "--retransmit-ms" => b.retransmit = ms(&value()),
            "--frozen" => b.frozen = actor_list(&value()),
            "--paused" => b.paused = actor_list(&value()),
            "--depth" => b.depth = num(flag, &value()),
            "--bfs" => o.dfs = false,
            "--dfs" => o.dfs = true,
            "--threads" => o.threads = num(flag, &value()),
            "--timeout-s" => o.timeout = Some(Duration::from_secs(num(flag, &value()))),
            "--all-failures" => o.stop_at_failure = false,
            "--quiet" => o.progress = None,
            "--examples" => examples = true,
            _ => fail(format!("unknown flag {flag}")),
        }
        i += 1;
    }
    if !(2..=3).contains(&b.nodes) {
        fail(format!("--nodes {}: 2 or 3", b.nodes));
    }
    // Two nodes: the witness speaks while the peer is down.
    b.eager_restart = restarts.unwrap_or(b.nodes >= 3);
    if let Some(a) = about {
        println!("scenario: {a}\n");
    }
    println!(
        "bounds: nodes {} ({:?}, two nodes {:?}), members {}, messages {}, faults {} ({}), power loss {:?}, membership {}, net {:?}{}, restarts {}, prologue {:?}, horizon {} us, election {} us, heartbeat {} us, depth {}, {} with {} thread(s)",
        b.nodes,
        b.durability,
        b.two_nodes,
        b.members,
        b.messages,
        b.faults,
        b.kinds.names(),
        b.power_loss,
        b.membership,
        b.net,
        if b.lossy { " lossy" } else { "" },
        if b.eager_restart { "in the fault's step" } else { "separate" },
        b.prologue,
        b.horizon / MICRO,
        b.election_timeout / MICRO,
        b.heartbeat / MICRO,
        if b.depth == 0 { "none".to_string() } else { b.depth.to_string() },
        if o.dfs { "DFS" } else { "BFS" },
        o.threads,
    );
    let mut model = McModel::new(b).unwrap_or_else(|e| fail(e));
    println!("initial state (the prologue's end):");
    for l in &model.prologue {
        println!("  {l}");
    }
    if !script.is_empty() {
        model.run_script(&script).unwrap_or_else(|e| fail(e));
        println!("then the scenario's script:");
        for l in &model.script {
            println!("  {l}");
        }
    }
    if std::env::var_os("TACHYON_MC_ACTIONS").is_some() {
        for a in tachyon_mc::list_actions(&model) {
            println!("  action: {a}");
        }
    }
    println!();
    let out = check(model, &o);
    print!("{}", report(&out, examples));
    if out.violations().next().is_some() {
        std::process::exit(1);
    }
}
