//! A sliding anti-replay window over a sender's 64-bit counter (RFC 6479,
//! as WireGuard keeps one per peer): a ring of bitmap blocks; a counter
//! is new if it is above the highest seen, or within the window below it
//! and not seen yet. Counters are checked before a datagram's tag is
//! verified (cheap, and a replayed datagram costs no cryptography) and
//! marked only after (a forgery cannot move the window).

/// Bits per block.
const BLOCK_BITS: u64 = 64;
/// Blocks in the ring: one is the block being filled, so the window spans
/// `(BLOCKS - 1) * 64` counters below the highest.
const BLOCKS: usize = 64;
/// How far below the highest counter seen a counter is still taken.
pub const WINDOW: u64 = (BLOCKS as u64 - 1) * BLOCK_BITS;

#[derive(Clone)]
pub struct Window {
    /// The highest counter seen (0: none yet; counters start above 0).
    top: u64,
    bits: [u64; BLOCKS],
}

impl Default for Window {
    fn default() -> Window {
        Window {
            top: 0,
            bits: [0; BLOCKS],
        }
    }
}

impl Window {
    /// Whether `c` would be taken: never seen, and not too old.
    pub fn fresh(&self, c: u64) -> bool {
        if c == 0 {
            return false;
        }
        if c > self.top {
            return true;
        }
        if self.top - c >= WINDOW {
            return false;
        }
        let (block, bit) = Self::at(c);
        self.bits[block] & (1 << bit) == 0
    }

    /// Marks `c` seen (after its datagram verified); false if it was not
    /// fresh.
    pub fn mark(&mut self, c: u64) -> bool {
        if !self.fresh(c) {
            return false;
        }
        if c > self.top {
            // Clear the blocks the window slides over.
            let old = self.top / BLOCK_BITS;
            let new = c / BLOCK_BITS;
            let span = (new - old).min(BLOCKS as u64);
            for k in 1..=span {
                self.bits[((old + k) % BLOCKS as u64) as usize] = 0;
            }
            self.top = c;
        }
        let (block, bit) = Self::at(c);
        self.bits[block] |= 1 << bit;
        true
    }

    fn at(c: u64) -> (usize, u64) {
        (((c / BLOCK_BITS) % BLOCKS as u64) as usize, c % BLOCK_BITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_counters_pass_once_and_old_ones_never() {
        let mut w = Window::default();
        assert!(!w.mark(0), "0 is never a counter");
        let base = 1_700_000_000_000_000_000u64;
        assert!(w.mark(base));
        assert!(!w.mark(base), "a replay");
        // Out of order within the window: each once.
        for c in [base + 5, base + 2, base + 4, base + 3, base + 1] {
            assert!(w.mark(c), "{c}");
            assert!(!w.mark(c));
        }
        // A jump ahead: what is within the window below still passes once.
        let top = base + 10_000;
        assert!(w.mark(top));
        assert!(w.mark(top - WINDOW + 1));
        assert!(!w.mark(top - WINDOW + 1));
        assert!(!w.fresh(top - WINDOW), "too old");
        assert!(!w.fresh(base + 3), "seen long ago, too old now");
        // Sliding clears what the window left: a counter seen a full ring
        // ago is too old, not mistaken for seen or unseen.
        let far = top + 5 * WINDOW;
        assert!(w.mark(far));
        for c in far - WINDOW + 1..far {
            assert!(w.fresh(c), "{c}: cleared by the slide");
        }
    }

    #[test]
    fn against_a_set_over_random_orders() {
        use crate::seq::core::Rng;
        use std::collections::HashSet;
        let mut rng = Rng::new(7);
        let mut w = Window::default();
        let mut seen = HashSet::new();
        let mut top = 0u64;
        for _ in 0..200_000 {
            // Mostly near the top, sometimes far ahead or far behind.
            let c = match rng.range(0, 20) {
                0 => top + rng.range(1, 3 * WINDOW),
                1 => top.saturating_sub(rng.range(0, 3 * WINDOW)),
                _ => (top + 8).saturating_sub(rng.range(0, 80)),
            }
            .max(1);
            let want = c > top || (top - c < WINDOW && !seen.contains(&c));
            assert_eq!(w.mark(c), want, "counter {c}, top {top}");
            if want {
                seen.insert(c);
                top = top.max(c);
            }
        }
    }
}
