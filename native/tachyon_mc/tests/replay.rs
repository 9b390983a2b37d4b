//! Known paths replayed step by step (a debugging aid and a check that
//! the model reaches them).

use tachyon_core::seq::core::MILLI;
use tachyon_mc::config::FaultKinds;
use tachyon_mc::model::Action;
use tachyon_mc::scenario::{find, Pick};
use tachyon_mc::McModel;

#[test]
fn three_hop_by_hand() {
    let mut s = find("three-hop").expect("scenario");
    s.bounds.kinds = FaultKinds::ALL;
    s.bounds.horizon = 50 * MILLI;
    let mut m = McModel::new(s.bounds).expect("model");
    let mut script = s.script.clone();
    script.extend([
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
        Pick::Tick(1),
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
    ]);
    let r = m.run_script(&script);
    for l in &m.script {
        println!("{l}");
    }
    r.expect("script");
    for (i, a) in m.init_state().actor_states.iter().enumerate() {
        println!("{i}: {a:?}");
    }
    println!("{:?}", tachyon_mc::props::lost_deliveries(m.init_state()));
}
