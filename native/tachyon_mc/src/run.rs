//! Running a check and reporting it: states explored, depth, time, each
//! property's result, and a counterexample as a readable list of steps.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use crate::model::{Action, McModel};
use crate::props::{self, State};

/// How to explore (the depth bound is the model's: [`crate::Bounds`]).
#[derive(Debug, Clone)]
pub struct RunOpts {
    /// Depth first (memory: the path only) or breadth first (shortest
    /// counterexamples; memory: every state of the frontier).
    pub dfs: bool,
    pub threads: usize,
    /// Stop after this long (the check is then not exhaustive).
    pub timeout: Option<Duration>,
    /// Stop at the first property violated.
    pub stop_at_failure: bool,
    /// Print progress to stderr every this long.
    pub progress: Option<Duration>,
}

impl Default for RunOpts {
    fn default() -> RunOpts {
        RunOpts {
            dfs: true,
            threads: 1,
            timeout: None,
            stop_at_failure: true,
            progress: None,
        }
    }
}

/// One property's result.
pub struct PropResult {
    pub name: &'static str,
    /// `always` (a discovery is a violation) or `sometimes` (a discovery
    /// is an example).
    pub always: bool,
    pub discovery: Option<Path<State, Action>>,
    /// The discovery as a readable trace.
    pub trace: Option<String>,
}

impl PropResult {
    pub fn failed(&self) -> bool {
        self.always == self.discovery.is_some()
    }
}

/// What a check found.
pub struct Outcome {
    /// The depth bound (0: none).
    pub depth: usize,
    pub generated: usize,
    pub unique: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Stopped by the time limit or at a violation: not exhaustive.
    pub cut_short: bool,
    pub props: Vec<PropResult>,
}

impl Outcome {
    pub fn violations(&self) -> impl Iterator<Item = &PropResult> {
        self.props
            .iter()
            .filter(|p| p.always && p.discovery.is_some())
    }

    pub fn prop(&self, name: &str) -> Option<&PropResult> {
        self.props.iter().find(|p| p.name == name)
    }
}

/// Runs the check of `model`.
pub fn check(model: McModel, o: &RunOpts) -> Outcome {
    model.set_time_limit(o.timeout);
    let names: Vec<(&'static str, bool)> = model
        .properties()
        .iter()
        .map(|p| (p.name, p.expectation == Expectation::Always))
        .collect();
    let depth = model.ctx.bounds.depth;
    let mut b = model.checker().threads(o.threads.max(1));
    if o.stop_at_failure {
        b = b.finish_when(HasDiscoveries::AnyFailures);
    }
    let start = Instant::now();
    if o.dfs {
        finish(b.spawn_dfs(), &names, o, depth, start)
    } else {
        finish(b.spawn_bfs(), &names, o, depth, start)
    }
}

/// Waits for the checker (printing progress if asked), then collects.
fn finish<C: Checker<McModel>>(
    c: C,
    names: &[(&'static str, bool)],
    o: &RunOpts,
    depth: usize,
    start: Instant,
) -> Outcome {
    if let Some(every) = o.progress {
        let mut last = Instant::now();
        while !c.is_done() {
            std::thread::sleep(Duration::from_millis(200));
            if last.elapsed() >= every {
                last = Instant::now();
                eprintln!(
                    "  ... {:.0}s: {} states ({} unique), depth {}",
                    start.elapsed().as_secs_f64(),
                    c.state_count(),
                    c.unique_state_count(),
                    c.max_depth().saturating_sub(1)
                );
            }
        }
    }
    let c = c.join();
    let elapsed = start.elapsed();
    // Counterexamples are rebuilt by replaying the model: no limit then.
    c.model().set_time_limit(None);
    let props: Vec<PropResult> = names
        .iter()
        .map(|&(name, always)| {
            let discovery = c.discovery(name);
            let trace = discovery.as_ref().map(|p| trace(c.model(), name, p));
            PropResult {
                name,
                always,
                discovery,
                trace,
            }
        })
        .collect();
    let failed = props.iter().any(|p| p.always && p.discovery.is_some());
    let timed_out = c.model().timed_out.load(Ordering::Relaxed);
    Outcome {
        depth,
        generated: c.state_count(),
        unique: c.unique_state_count(),
        // stateright counts the initial state as depth 1.
        max_depth: c.max_depth().saturating_sub(1),
        elapsed,
        cut_short: timed_out || (failed && o.stop_at_failure),
        props,
    }
}

/// A counterexample (or example): every step with what happened, then
/// the last state and what is wrong in it.
pub fn trace(model: &McModel, name: &str, path: &Path<State, Action>) -> String {
    let mut s = String::new();
    let steps = path.clone().into_vec();
    let _ = writeln!(
        s,
        "  from the initial state (the prologue's end{}):",
        if model.script.is_empty() {
            ""
        } else {
            ", then the scenario's script"
        }
    );
    for (i, (state, action)) in steps.iter().enumerate() {
        if let Some(a) = action {
            for (k, line) in model.explain(state, a).into_iter().enumerate() {
                if k == 0 {
                    let _ = writeln!(s, "  {:>3}. {line}", i + 1);
                } else {
                    let _ = writeln!(s, "       {line}");
                }
            }
        }
    }
    let last = path.last_state();
    let _ = writeln!(s, "  last state:");
    for (i, a) in last.actor_states.iter().enumerate() {
        let _ = writeln!(s, "    {}: {a:?}", model.ctx.layout.name(i));
    }
    for v in props::explain(name, last) {
        let _ = writeln!(s, "  => {v}");
    }
    s
}

/// The whole report (with `examples`, the paths to the `sometimes`
/// properties too).
pub fn report(out: &Outcome, examples: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "explored: {} states generated, {} unique, max depth {} (bound {}), {:.1}s{}",
        out.generated,
        out.unique,
        out.max_depth,
        if out.depth == 0 {
            "none".to_string()
        } else {
            out.depth.to_string()
        },
        out.elapsed.as_secs_f64(),
        if out.cut_short {
            " -- stopped early, not exhaustive"
        } else {
            " -- exhaustive within the bounds"
        }
    );
    for p in &out.props {
        let verdict = match (p.always, &p.discovery) {
            (true, None) => "holds".to_string(),
            (true, Some(path)) => {
                format!("VIOLATED in {} steps", path.clone().into_actions().len())
            }
            (false, Some(path)) => {
                format!("reached in {} steps", path.clone().into_actions().len())
            }
            (false, None) => "NEVER REACHED (vacuous within the bounds?)".to_string(),
        };
        let kind = if p.always { "always" } else { "sometimes" };
        let _ = writeln!(s, "  {kind:9} {:22} {verdict}", p.name);
    }
    for p in &out.props {
        let Some(t) = &p.trace else { continue };
        if p.always {
            let _ = writeln!(s, "\ncounterexample for {}:", p.name);
        } else if examples {
            let _ = writeln!(s, "\nexample for {}:", p.name);
        } else {
            continue;
        }
        s.push_str(t);
    }
    s
}
