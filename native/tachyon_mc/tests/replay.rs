//! Known counterexamples replayed step by step, through the same model:
//! a debugging aid, and a check that a fix closes the path. Each asserts
//! that the property holds after the path (each failed on the code before
//! its fix).

use tachyon_core::seq::core::MILLI;
use tachyon_mc::config::FaultKinds;
use tachyon_mc::model::Action;
use tachyon_mc::scenario::{find, Pick};
use tachyon_mc::{props, McModel};

/// Runs `extra` after the scenario's script; `Err` if a step was not
/// possible (a fix may close the path earlier).
fn replay(name: &str, extra: Vec<Pick>) -> Result<McModel, String> {
    let mut s = find(name).expect("scenario");
    s.bounds.kinds = FaultKinds::ALL;
    s.bounds.horizon = 50 * MILLI;
    s.bounds.depth = 0;
    let mut m = McModel::new(s.bounds)?;
    let mut script = s.script.clone();
    script.extend(extra);
    let r = m.run_script(&script);
    for l in &m.script {
        println!("{l}");
    }
    r.map(|_| m)
}

#[test]
fn known_bug_three_hop_path() {
    let m = replay(
        "three-hop",
        vec![
            Pick::Extra(Action::PowerLoss { node: 1, keep: 4 }),
            Pick::Deliver {
                src: 0,
                dst: 1,
                what: "HEARTBEAT",
            },
            Pick::Deliver {
                src: 1,
                dst: 0,
                what: "Sync",
            },
            Pick::Deliver {
                src: 0,
                dst: 1,
                what: "SyncReply",
            },
            Pick::Tick(2),
            Pick::Tick(1),
            Pick::Deliver {
                src: 1,
                dst: 2,
                what: "PreVote",
            },
            Pick::Deliver {
                src: 2,
                dst: 1,
                what: "PreVoteReply",
            },
            Pick::Deliver {
                src: 1,
                dst: 2,
                what: "Vote",
            },
            Pick::Deliver {
                src: 2,
                dst: 1,
                what: "VoteReply",
            },
        ],
    );
    // A fix may close the path before its end: then nothing was lost.
    if let Ok(m) = m {
        let lost = props::lost_deliveries(m.init_state());
        assert!(lost.is_empty(), "{lost:?}");
    }
}
