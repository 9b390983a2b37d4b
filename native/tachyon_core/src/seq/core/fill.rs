//! Filling a gap by replay requests, for members and following nodes
//! alike: the first request goes out at once; while its answer arrives
//! (the receiver's contiguous end moves) nothing is asked again; the next
//! chunk is asked for when half of the current one is in, so a rewind
//! streams; a request with no progress is repeated after a delay that
//! doubles each time (with jitter), from where the answer stopped. A rewind
//! of N entries costs N entries plus what is lost on the way.

use super::{Nanos, Rng};

/// Longest wait before a request with no progress is repeated.
const MAX_BACKOFF: Nanos = 100_000_000;

#[derive(Debug, Default, Clone)]
pub struct Fill {
    /// Everything below `to` has been asked for.
    to: u64,
    /// The receiver's end when the last progress was seen, and when.
    progress: u64,
    at: Nanos,
    attempt: u32,
    pub requests: u64,
}

/// Every field but `requests` (a statistic; see
/// [`fingerprint`](super::fingerprint)).
impl std::hash::Hash for Fill {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let Fill {
            to,
            progress,
            at,
            attempt,
            requests: _,
        } = self;
        (to, progress, at, attempt).hash(h);
    }
}

impl Fill {
    /// What to ask for now, if anything: `have` is the receiver's
    /// contiguous end, `gap_end` where the gap ends (the first entry held
    /// beyond it, or the end the sender announced).
    pub fn want(
        &mut self,
        now: Nanos,
        have: u64,
        gap_end: u64,
        chunk: u64,
        base: Nanos,
        rng: &mut Rng,
    ) -> Option<(u64, u64)> {
        if have >= gap_end {
            self.to = self.to.max(have);
            self.attempt = 0;
            return None;
        }
        let chunk = chunk.max(1);
        if self.to <= have {
            // Nothing outstanding: ask at once.
            return Some(self.ask(now, have, gap_end.min(have + chunk)));
        }
        if have > self.progress {
            // The answer is arriving.
            self.progress = have;
            self.at = now;
            self.attempt = 0;
            if self.to < gap_end && self.to.saturating_sub(have) <= chunk / 2 {
                let from = self.to;
                return Some(self.ask(now, from, gap_end.min(from + chunk)));
            }
            return None;
        }
        let wait = base
            .saturating_mul(1 << self.attempt.min(16))
            .min(MAX_BACKOFF);
        // +-25% jitter: members that lost the same datagram do not ask in step.
        let jitter = rng.range(0, wait / 2 + 1);
        if now.saturating_sub(self.at) < wait - wait / 4 + jitter {
            return None;
        }
        self.attempt += 1;
        let to = self.to.min(have + chunk);
        let attempt = self.attempt;
        let r = self.ask(now, have, to);
        self.attempt = attempt;
        Some(r)
    }

    fn ask(&mut self, now: Nanos, from: u64, to: u64) -> (u64, u64) {
        self.to = self.to.max(to);
        self.progress = from;
        self.at = now;
        self.attempt = 0;
        self.requests += 1;
        (from, to)
    }

    /// When to look again at the latest while a gap is open.
    pub fn due(&self, base: Nanos) -> Nanos {
        self.at
            + base
                .saturating_mul(1 << self.attempt.min(16))
                .min(MAX_BACKOFF)
    }

    /// Forgets what was asked (a new primary: ask it again).
    pub fn reset(&mut self) {
        *self = Fill {
            requests: self.requests,
            ..Fill::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_once_streams_then_backs_off() {
        let mut f = Fill::default();
        let mut rng = Rng::new(1);
        let ms = 1_000_000;
        assert_eq!(f.want(0, 10, 5000, 1000, ms, &mut rng), Some((10, 1010)));
        // Arriving: nothing more until half is in.
        assert_eq!(f.want(10, 200, 5000, 1000, ms, &mut rng), None);
        assert_eq!(
            f.want(20, 600, 5000, 1000, ms, &mut rng),
            Some((1010, 2010))
        );
        // Stalled at 700: repeated after about `base`, from 700.
        assert_eq!(f.want(30, 700, 5000, 1000, ms, &mut rng), None);
        assert_eq!(f.want(30 + ms / 2, 700, 5000, 1000, ms, &mut rng), None);
        let r = f.want(30 + 2 * ms, 700, 5000, 1000, ms, &mut rng);
        assert_eq!(r, Some((700, 1700)));
        // Again no progress: the wait doubles.
        assert_eq!(f.want(30 + 3 * ms, 700, 5000, 1000, ms, &mut rng), None);
        assert!(f.want(30 + 5 * ms, 700, 5000, 1000, ms, &mut rng).is_some());
        // Done.
        assert_eq!(f.want(40 * ms, 5000, 5000, 1000, ms, &mut rng), None);
        assert_eq!(
            f.want(41 * ms, 5000, 6000, 1000, ms, &mut rng),
            Some((5000, 6000))
        );
    }
}
