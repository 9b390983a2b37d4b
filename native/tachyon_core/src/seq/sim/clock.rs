//! A simulated process's clock: the simulation's time, jumped forward and
//! running fast or slow (drift) as the nemesis says.

use crate::seq::core::Nanos;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// At simulation time `sim0` the clock read `local0`...
    sim0: Nanos,
    local0: Nanos,
    /// ...and it runs at this rate since.
    rate: f64,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock {
            sim0: 0,
            local0: 0,
            rate: 1.0,
        }
    }
}

impl Clock {
    /// What the clock reads at simulation time `now` (never before `sim0`).
    pub fn local(&self, now: Nanos) -> Nanos {
        let dt = now.saturating_sub(self.sim0);
        if self.rate == 1.0 {
            self.local0 + dt
        } else {
            self.local0 + (dt as f64 * self.rate) as Nanos
        }
    }

    /// The simulation time at which the clock reads `local` (at least
    /// `sim0`).
    pub fn to_sim(self, local: Nanos) -> Nanos {
        let dl = local.saturating_sub(self.local0);
        if self.rate == 1.0 {
            self.sim0 + dl
        } else {
            self.sim0 + (dl as f64 / self.rate).ceil() as Nanos
        }
    }

    /// Jumps `d` forward at `now`.
    pub fn jump(&mut self, now: Nanos, d: Nanos) {
        self.rebase(now);
        self.local0 += d;
    }

    /// Runs at `rate` from `now` on.
    pub fn set_rate(&mut self, now: Nanos, rate: f64) {
        self.rebase(now);
        self.rate = rate;
    }

    fn rebase(&mut self, now: Nanos) {
        if now > self.sim0 {
            self.local0 = self.local(now);
            self.sim0 = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_and_drift_convert_both_ways() {
        let mut c = Clock::default();
        assert_eq!(c.local(100), 100);
        c.jump(100, 50);
        assert_eq!(c.local(100), 150);
        assert_eq!(c.local(110), 160);
        c.set_rate(110, 2.0);
        assert_eq!(c.local(120), 180);
        assert_eq!(c.to_sim(180), 120);
        // A deadline already past maps to the rebase time at the latest.
        assert_eq!(c.to_sim(100), 110);
        c.set_rate(120, 0.5);
        assert_eq!(c.local(140), 190);
        assert_eq!(c.to_sim(190), 140);
    }
}
