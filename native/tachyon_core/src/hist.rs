//! Latency histograms (HDR, 3 significant digits) and the report format of the
//! seeds' benchmarker: for each percentile P, the average and the maximum of the
//! fastest P% of the samples, plus their standard deviation.

use hdrhistogram::Histogram;

/// Percentiles printed in the report, as in CoralBits' Benchmarker.
pub const REPORT_PERCENTILES: [f64; 6] = [75.0, 90.0, 99.0, 99.9, 99.99, 99.999];

/// A latency histogram in nanoseconds (1 ns .. 1 hour, 3 significant digits).
#[derive(Clone)]
pub struct Hist {
    h: Histogram<u64>,
}

/// Summary of the fastest `percentile`% of the samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tail {
    pub percentile: f64,
    pub avg: f64,
    pub stdev: f64,
    pub max: u64,
}

/// The whole report of one histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub count: u64,
    pub avg: f64,
    pub stdev: f64,
    pub min: u64,
    pub max: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub p99999: u64,
    pub tails: Vec<Tail>,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    /// Largest value tracked: one hour in nanoseconds. Larger values saturate.
    pub const HIGHEST: u64 = 3_600_000_000_000;

    pub fn new() -> Self {
        let h = Histogram::new_with_bounds(1, Self::HIGHEST, 3).expect("static bounds are valid");
        Hist { h }
    }

    /// Records one sample in nanoseconds (0 is recorded as 1, huge values saturate).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns.max(1));
    }

    /// Records `count` samples of the same value.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        let _ = self.h.record_n(ns.clamp(1, Self::HIGHEST), count);
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    pub fn reset(&mut self) {
        self.h.reset();
    }

    /// Adds every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &Hist) {
        let _ = self.h.add(&other.h);
    }

    /// How many samples are larger than `ns` (to the histogram's precision).
    pub fn count_above(&self, ns: u64) -> u64 {
        if ns >= Self::HIGHEST {
            return 0;
        }
        let below = self.h.count_between(0, self.h.highest_equivalent(ns));
        self.h.len().saturating_sub(below)
    }

    /// The value at percentile `p` (0..100).
    pub fn value_at(&self, p: f64) -> u64 {
        self.h.value_at_percentile(p)
    }

    /// Computes the full report. Values are in nanoseconds; an empty histogram
    /// gives an all-zero report.
    pub fn report(&self) -> Report {
        let count = self.h.len();
        let mut tails = Vec::with_capacity(REPORT_PERCENTILES.len());
        if count == 0 {
            for p in REPORT_PERCENTILES {
                tails.push(Tail {
                    percentile: p,
                    avg: 0.0,
                    stdev: 0.0,
                    max: 0,
                });
            }
            return Report {
                count: 0,
                avg: 0.0,
                stdev: 0.0,
                min: 0,
                max: 0,
                p50: 0,
                p75: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                p9999: 0,
                p99999: 0,
                tails,
            };
        }
        // Walk the recorded buckets from the fastest up, accumulating sum and
        // sum of squares, and cut at each percentile's sample count.
        let targets: Vec<u64> = REPORT_PERCENTILES
            .iter()
            .map(|p| (((count as f64) * p / 100.0).ceil() as u64).clamp(1, count))
            .collect();
        let mut next = 0usize;
        let mut seen: u64 = 0;
        let mut sum: f64 = 0.0;
        let mut sumsq: f64 = 0.0;
        for v in self.h.iter_recorded() {
            let value = self
                .h
                .highest_equivalent(v.value_iterated_to())
                .min(self.h.max());
            let value = value.max(self.h.min());
            let mut left = v.count_at_value();
            while left > 0 {
                let take = if next < targets.len() {
                    left.min(targets[next] - seen)
                } else {
                    left
                };
                seen += take;
                sum += value as f64 * take as f64;
                sumsq += (value as f64) * (value as f64) * take as f64;
                left -= take;
                while next < targets.len() && seen == targets[next] {
                    let n = seen as f64;
                    let avg = sum / n;
                    let var = (sumsq / n - avg * avg).max(0.0);
                    tails.push(Tail {
                        percentile: REPORT_PERCENTILES[next],
                        avg,
                        stdev: var.sqrt(),
                        max: value,
                    });
                    next += 1;
                }
            }
        }
        let avg = self.h.mean();
        let stdev = self.h.stdev();
        Report {
            count,
            avg,
            stdev,
            min: self.h.min(),
            max: self.h.max(),
            p50: self.h.value_at_quantile(0.5),
            p75: self.h.value_at_quantile(0.75),
            p90: self.h.value_at_quantile(0.90),
            p99: self.h.value_at_quantile(0.99),
            p999: self.h.value_at_quantile(0.999),
            p9999: self.h.value_at_quantile(0.9999),
            p99999: self.h.value_at_quantile(0.99999),
            tails,
        }
    }
}

/// Formats nanoseconds the way the seeds do: `159.06 nanos`, `25.571 micros`,
/// `2.118 millis`.
pub fn format_ns(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{} nanos", trim3(ns))
    } else if ns < 1_000_000.0 {
        format!("{} micros", trim3(ns / 1_000.0))
    } else if ns < 1_000_000_000.0 {
        format!("{} millis", trim3(ns / 1_000_000.0))
    } else {
        format!("{} secs", trim3(ns / 1_000_000_000.0))
    }
}

fn trim3(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_above_counts_the_larger_samples() {
        let mut h = Hist::new();
        for v in [100, 200, 2_000, 50_000, 50_000] {
            h.record(v);
        }
        assert_eq!(h.count_above(0), 5);
        assert_eq!(h.count_above(150), 4);
        assert_eq!(h.count_above(2_000), 2);
        assert_eq!(h.count_above(50_000), 0);
        assert_eq!(h.count_above(Hist::HIGHEST), 0);
    }

    #[test]
    fn empty_report_is_zero() {
        let r = Hist::new().report();
        assert_eq!(r.count, 0);
        assert_eq!(r.tails.len(), 6);
    }

    #[test]
    fn tails_of_uniform_samples() {
        let mut h = Hist::new();
        for v in 1..=1000u64 {
            h.record(v);
        }
        let r = h.report();
        assert_eq!(r.count, 1000);
        assert_eq!(r.min, 1);
        assert_eq!(r.max, 1000);
        let t75 = r.tails[0];
        assert_eq!(t75.percentile, 75.0);
        // fastest 750 samples: 1..=750, avg 375.5 (within HDR precision)
        assert!((t75.avg - 375.5).abs() < 1.0, "{t75:?}");
        assert!((749..=751).contains(&t75.max), "{t75:?}");
        let t99 = r.tails[2];
        assert!((989..=991).contains(&t99.max), "{t99:?}");
        assert!((r.avg - 500.5).abs() < 1.0);
    }

    #[test]
    fn outlier_only_in_the_top_tail() {
        let mut h = Hist::new();
        h.record_n(100, 9_999);
        h.record(1_000_000);
        let r = h.report();
        assert_eq!(r.tails[4].max, 100); // 99.99% of 10k excludes the single outlier
        assert!(r.tails[5].max >= 999_000); // 99.999% of 10k rounds up to all
        assert!(r.max >= 999_000);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Hist::new();
        let mut b = Hist::new();
        a.record(10);
        b.record(20);
        a.merge(&b);
        assert_eq!(a.count(), 2);
    }

    #[test]
    fn formats_like_the_seeds() {
        assert_eq!(format_ns(159.06), "159.06 nanos");
        assert_eq!(format_ns(47.0), "47.0 nanos");
        assert_eq!(format_ns(98_944.0), "98.944 micros");
        assert_eq!(format_ns(2_118_000.0), "2.118 millis");
    }
}
