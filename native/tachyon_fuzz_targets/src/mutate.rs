//! A tiny deterministic mutator for the stable replay test: xorshift64*
//! picks one to four of bit flips, byte sets, truncations, length-field
//! overwrites (u16, u32, u64 of edge values at any offset), inserted or
//! removed ranges, and splices with another input.

/// xorshift64* (Vigna): small, fast, and the same on every machine.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, n)` (0 if `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Values that break lengths and counts.
const EDGES: [u64; 12] = [
    0,
    1,
    2,
    7,
    8,
    0x7f,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
];

/// A mutation of `input` (`other`: another input to splice with).
pub fn mutate(rng: &mut XorShift, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(8) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = match rng.below(3) {
                    0 => 0,
                    1 => 0xff,
                    _ => rng.next_u64() as u8,
                };
            }
            2 => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
            3 | 4 => {
                let width = [2, 4, 8][rng.below(3)];
                if b.len() >= width {
                    let at = rng.below(b.len() - width + 1);
                    let v = match rng.below(4) {
                        0 => rng.next_u64(),
                        1 => EDGES[rng.below(EDGES.len())].wrapping_sub(rng.below(2) as u64),
                        2 => b.len() as u64 + rng.below(3) as u64,
                        _ => EDGES[rng.below(EDGES.len())],
                    };
                    b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
                }
            }
            5 => {
                let at = rng.below(b.len() + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                b.splice(at..at, bytes);
            }
            6 if !b.is_empty() => {
                let at = rng.below(b.len());
                let n = 1 + rng.below((b.len() - at).min(64));
                b.drain(at..at + n);
            }
            _ if !other.is_empty() => {
                let at = rng.below(b.len() + 1);
                let from = rng.below(other.len());
                let n = 1 + rng.below((other.len() - from).min(256));
                b.splice(at.., other[from..from + n].iter().copied());
            }
            _ => {}
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mutations_are_deterministic() {
        let run = || {
            let mut r = XorShift::new(7);
            (0..100)
                .map(|_| mutate(&mut r, b"0123456789abcdef", b"xyz"))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
