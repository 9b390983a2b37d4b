use stateright::{Checker, Model};
use tachyon_mc::{Bounds, McModel};

fn main() {
    let m = McModel::new(Bounds::default()).unwrap();
    for l in &m.prologue {
        println!("{l}");
    }
    // A random walk: actions per state along it.
    let mut s = m.init_states().remove(0);
    for step in 0..12 {
        let mut acts = Vec::new();
        m.actions(&s, &mut acts);
        let nexts: Vec<_> = acts.iter().cloned().filter_map(|a| m.next_state(&s, a.clone()).map(|n| (a, n))).collect();
        println!("step {step}: {} actions, {} effective", acts.len(), nexts.len());
        for (a, _) in &nexts { println!("   {}", m.describe(a)); }
        let k = (step * 7 + 3) % nexts.len();
        println!(" -> {}", m.describe(&nexts[k].0));
        s = nexts[k].1.clone();
    }
    let d = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    if d > 0 {
        let c = m.checker().threads(1).target_max_depth(d).spawn_dfs().join();
        println!("{} {} {}", c.state_count(), c.unique_state_count(), c.max_depth());
    }
}
