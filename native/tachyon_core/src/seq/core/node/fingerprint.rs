//! A node's deep copy and fingerprint, for a model checker
//! (`native/tachyon_mc`; what is hashed and what is left out:
//! [`crate::seq::core::fingerprint`]).

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::{Log, Node};

/// A deep copy, counters included (a clone counts on its own): a model
/// checker's states share nothing that changes.
impl<L: Log + Clone> Clone for Node<L> {
    fn clone(&self) -> Node<L> {
        // Every field by name: a field added must be cloned here too.
        let Node {
            cfg,
            log,
            ls,
            term,
            vote,
            role,
            leader,
            commit,
            rng,
            last_tick,
            silent,
            timeout,
            since_leader,
            el,
            ld,
            fl,
            meta,
            lr,
            dur,
            bindings,
            departed,
            targets,
            unicast_members,
            ack_to,
            scratch,
            started_as,
            initial,
            memb_at,
            joined,
            learned,
            join_at,
            rt,
            c,
        } = self;
        Node {
            cfg: cfg.clone(),
            log: log.clone(),
            ls: ls.clone(),
            term: *term,
            vote: *vote,
            role: *role,
            leader: *leader,
            commit: *commit,
            rng: rng.clone(),
            last_tick: *last_tick,
            silent: *silent,
            timeout: *timeout,
            since_leader: *since_leader,
            el: el.clone(),
            ld: ld.clone(),
            fl: fl.clone(),
            meta: *meta,
            lr: lr.clone(),
            dur: dur.clone(),
            bindings: bindings.clone(),
            departed: departed.clone(),
            targets: targets.clone(),
            unicast_members: *unicast_members,
            ack_to: ack_to.clone(),
            scratch: scratch.clone(),
            started_as: *started_as,
            initial: initial.clone(),
            memb_at: *memb_at,
            joined: *joined,
            learned: learned.clone(),
            join_at: *join_at,
            rt: rt.clone(),
            c: Arc::new(CachePadded::clone(c)),
        }
    }
}

impl<L: Log + std::hash::Hash> Node<L> {
    /// Hashes everything that decides what this node does next, its log
    /// included; not its counters nor its scratch buffer (see
    /// [`crate::seq::core::fingerprint`]). A model checker takes two nodes
    /// with the same fingerprint for the same state.
    pub fn fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use crate::seq::core::fingerprint::hash_sorted;
        use std::hash::Hash;
        let Node {
            cfg,
            log,
            ls,
            term,
            vote,
            role,
            leader,
            commit,
            rng,
            last_tick,
            silent,
            timeout,
            since_leader,
            el,
            ld,
            fl,
            meta,
            lr,
            dur,
            bindings,
            departed,
            targets,
            unicast_members,
            ack_to,
            scratch: _,
            started_as,
            initial,
            memb_at,
            joined,
            learned,
            join_at,
            rt,
            c: _,
        } = self;
        cfg.hash(h);
        log.hash(h);
        ls.fingerprint(h);
        (term, vote, role, leader, commit, rng).hash(h);
        (last_tick, silent, timeout, since_leader).hash(h);
        el.hash(h);
        ld.fingerprint(h);
        (fl, meta, lr, dur).hash(h);
        hash_sorted(bindings.iter(), h);
        hash_sorted(departed.iter(), h);
        (targets, unicast_members, ack_to, started_as, initial).hash(h);
        (memb_at, joined, learned, join_at, rt).hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testnet::Net;
    use std::hash::Hasher;

    fn fp(n: &super::Node<crate::seq::core::MemLog>) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        n.fingerprint(&mut h);
        h.finish()
    }

    #[test]
    fn a_clone_fingerprints_the_same_and_goes_its_own_way() {
        let mut net = Net::new(3, &[]);
        assert!(net.run_until(500, |n| n.nodes[0].is_leader() && n.nodes[0].commit() > 1));
        let a = net.nodes[1].clone();
        assert_eq!(fp(&a), fp(&net.nodes[1]));
        assert_eq!(
            a.counters().copied.get(),
            net.nodes[1].counters().copied.get()
        );
        // The original goes on; the clone keeps its state and its counters.
        let copied = a.counters().copied.get();
        net.run_until(20, |_| false);
        assert_ne!(fp(&a), fp(&net.nodes[1]), "time went on");
        assert_eq!(a.counters().copied.get(), copied);
        assert!(!std::sync::Arc::ptr_eq(
            a.counters(),
            net.nodes[1].counters()
        ));
    }
}
