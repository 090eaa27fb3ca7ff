//! `--time-budget`: the whole sweep's seconds, shared among its points as they come. Every
//! size first gets what its minimum takes (the check, warm-up and `--min-samples` samples of
//! both placements); the time left over beyond the minimum of every size still to come is
//! shared in proportion to those minimums, so long calls get the seconds they need and time a
//! fast point did not use goes to the points after it.
//!
//! The decision must be the same on every rank: it is made from rank 0's clock (passed along
//! after every point) and the points' times, which every rank has.

use crate::model::Settings;
use std::collections::BTreeMap;

/// Harness time per placement beyond its calls (exchanging samples, filling and checking).
const HARNESS_S: f64 = 0.001;
/// What calls are assumed to move before the sweep has shown its bandwidth.
const PRIOR_BYTES_PER_S: f64 = 10e9;
/// Sizes from which a call's time is taken to grow with its bytes.
const BANDWIDTH_FROM: u64 = 64 << 10;
/// Warm-up batches a point of short calls usually takes (see `measure::warm_up`).
const TYPICAL_WARMUP_BATCHES: f64 = 2.0;

pub struct TimeBudget {
    total_s: f64,
    /// Rank 0's seconds since the sweep began, as of the last point.
    elapsed_s: f64,
    /// Seconds per call measured so far, by size (the latest series').
    per_call_s: BTreeMap<u64, f64>,
}

impl TimeBudget {
    pub fn new(total_s: f64) -> TimeBudget {
        TimeBudget {
            total_s,
            elapsed_s: 0.0,
            per_call_s: BTreeMap::new(),
        }
    }

    /// After a point: rank 0's clock, and the out-of-place time per call at that size.
    pub fn record(&mut self, elapsed_s: f64, size: u64, per_call_s: f64) {
        self.elapsed_s = elapsed_s;
        if per_call_s.is_finite() && per_call_s > 0.0 {
            self.per_call_s.insert(size, per_call_s);
        }
    }

    /// Seconds one call of `size` should take: measured; or the nearest smaller measured
    /// size's time plus the extra bytes at the bandwidth the sweep has shown; or the nearest
    /// larger one's (latency-bound); before any measurement, 5 µs plus the prior bandwidth.
    fn call_s(&self, size: u64) -> f64 {
        if let Some(&t) = self.per_call_s.get(&size) {
            return t;
        }
        if let Some((&s, &t)) = self.per_call_s.range(..size).next_back() {
            return t + (size - s) as f64 / self.bandwidth();
        }
        if let Some((_, &t)) = self.per_call_s.range(size..).next() {
            return t;
        }
        5e-6 + size as f64 / PRIOR_BYTES_PER_S
    }

    /// Bytes per second between the two largest sizes measured, once the larger is past the
    /// latency-bound sizes; until then, the prior.
    fn bandwidth(&self) -> f64 {
        let mut largest = self.per_call_s.iter().rev();
        match (largest.next(), largest.next()) {
            (Some((&b, &tb)), Some((&a, &ta))) if b >= BANDWIDTH_FROM && tb > ta => {
                (b - a) as f64 / (tb - ta)
            }
            _ => PRIOR_BYTES_PER_S,
        }
    }

    /// Measured seconds the fewest samples of one placement of `size` take.
    fn min_sampling_s(&self, s: &Settings, size: u64) -> f64 {
        s.min_samples as f64 * self.call_s(size).max(s.sample_target_s)
    }

    /// Wall seconds both placements of `size` take at least.
    fn min_cost_s(&self, s: &Settings, size: u64) -> f64 {
        let call = self.call_s(size);
        let warm = match call >= s.sample_target_s {
            true => 0.0,
            false => TYPICAL_WARMUP_BATCHES * s.sample_target_s,
        };
        2.0 * (call * s.check_iters.max(1) as f64 + warm + self.min_sampling_s(s, size) + HARNESS_S)
    }

    /// Seconds of the budget not yet spent (rank 0's clock as of the last point).
    pub fn left_s(&self) -> f64 {
        (self.total_s - self.elapsed_s).max(0.0)
    }

    /// The least wall time measuring `sizes` again takes (`--retries` spends from the same
    /// budget as the first pass, and does not start what it cannot finish).
    pub fn least_s(&self, s: &Settings, sizes: &[u64]) -> f64 {
        sizes.iter().map(|&size| self.min_cost_s(s, size)).sum()
    }

    /// The measured seconds one placement of `remaining[0]` may sample for, given the sizes
    /// still to measure (this one first, each once per series it appears in).
    pub fn point_budget_s(&self, s: &Settings, remaining: &[u64]) -> f64 {
        let Some(&size) = remaining.first() else {
            return 0.0;
        };
        let minimums: Vec<f64> = remaining.iter().map(|&r| self.min_cost_s(s, r)).collect();
        let all: f64 = minimums.iter().sum();
        let slack = (self.total_s - self.elapsed_s - all).max(0.0);
        self.min_sampling_s(s, size) + slack * minimums[0] / all.max(f64::MIN_POSITIVE) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let sweep = crate::sweep::options::Options::default();
        crate::plan::Plan::from_options(&sweep, None)
            .unwrap()
            .settings
    }

    #[test]
    fn slack_goes_to_long_calls_and_shrinks_as_time_passes() {
        let s = settings();
        let mut b = TimeBudget::new(10.0);
        b.record(0.4, 1 << 19, 60e-6);
        b.record(0.5, 1 << 20, 100e-6);
        let sizes = [1u64 << 20, 1 << 24, 1 << 28];
        let small = b.point_budget_s(&s, &sizes);
        let large = b.point_budget_s(&s, &sizes[2..]);
        assert!(small > b.min_sampling_s(&s, 1 << 20));
        // 512 KiB more took 40 µs more: 256 MiB is 100 µs + (256 MiB - 1 MiB) at that rate.
        let expected = 100e-6 + ((1u64 << 28) - (1 << 20)) as f64 * 40e-6 / (1u64 << 19) as f64;
        assert!((b.call_s(1 << 28) - expected).abs() < 1e-9);
        // Below 64 KiB, times do not tell a bandwidth: the prior stands.
        let mut latency = TimeBudget::new(10.0);
        latency.record(0.1, 8, 1e-6);
        latency.record(0.2, 16, 1.1e-6);
        assert!(
            (latency.call_s(1 << 30) - (1.1e-6 + ((1u64 << 30) - 16) as f64 / 10e9)).abs() < 1e-12
        );
        assert!(large > small, "{large} vs {small}");
        // Out of time: only the minimum.
        b.record(20.0, 1 << 24, 2e-3);
        assert_eq!(
            b.point_budget_s(&s, &sizes[1..]),
            b.min_sampling_s(&s, 1 << 24)
        );
    }

    #[test]
    fn retries_see_what_is_left_of_the_budget() {
        let s = settings();
        let mut b = TimeBudget::new(0.5);
        b.record(0.2, 1 << 20, 1e-3);
        assert!((b.left_s() - 0.3).abs() < 1e-12);
        let one = b.least_s(&s, &[1 << 20]);
        assert!(one > 2.0 * s.min_samples as f64 * 1e-3, "{one}");
        assert!((b.least_s(&s, &[1 << 20, 1 << 20]) - 2.0 * one).abs() < 1e-12);
        b.record(3.9, 1 << 20, 1e-3);
        assert_eq!(b.left_s(), 0.0, "spent, never negative");
    }

    #[test]
    fn every_size_gets_its_minimum_and_no_size_more_than_the_time_left() {
        let s = settings();
        let mut b = TimeBudget::new(5.0);
        b.record(1.0, 8, 1e-6);
        let sizes: Vec<u64> = (3..=28).map(|p| 1u64 << p).collect();
        let mins: f64 = sizes.iter().map(|&x| b.min_cost_s(&s, x)).sum();
        assert!(mins < 4.0, "{mins}");
        for i in 0..sizes.len() {
            let budget = b.point_budget_s(&s, &sizes[i..]);
            let min = b.min_sampling_s(&s, sizes[i]);
            assert!(budget >= min);
            // Both placements' time beyond their minimum is at most what the others leave.
            let others: f64 = sizes[i..].iter().map(|&x| b.min_cost_s(&s, x)).sum();
            assert!(2.0 * (budget - min) <= 4.0 - others + 1e-9);
        }
        // The largest size, measured last, gets all that is left beyond its minimum.
        let last = b.point_budget_s(&s, &sizes[sizes.len() - 1..]);
        let min_cost = b.min_cost_s(&s, 1 << 28);
        assert!((2.0 * (last - b.min_sampling_s(&s, 1 << 28)) - (4.0 - min_cost)).abs() < 1e-9);
    }
}
