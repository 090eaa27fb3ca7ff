//! Sample statistics: order statistics, a distribution-free confidence interval for the median,
//! and Tukey outlier counts. Pure computation, no I/O.

use serde::{Deserialize, Serialize};

/// Summary of one point's samples (seconds per call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub samples: usize,
    pub median_s: f64,
    pub mean_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub p5_s: f64,
    pub p95_s: f64,
    /// Confidence interval for the median.
    pub ci_low_s: f64,
    pub ci_high_s: f64,
    /// Coverage the interval actually has (order statistics give discrete levels; ≥ 0.95 from 6 samples).
    pub ci_level: f64,
    /// Half the interval's width relative to the median.
    pub ci_rel_half_width: f64,
    /// Samples outside Tukey's fences (1.5 IQR): counted, never dropped.
    pub outliers: usize,
}

/// Linear-interpolated quantile of sorted data (`q` in [0, 1]).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

/// Binomial(n, 1/2) cumulative probabilities P(X ≤ k) for k = 0..=n.
fn binomial_half_cdf(n: usize) -> Vec<f64> {
    // Work in log space so large n does not overflow.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0f64;
    let mut cdf = Vec::with_capacity(n + 1);
    let mut acc = 0.0;
    for k in 0..=n {
        if k > 0 {
            ln_choose += ((n - k + 1) as f64).ln() - (k as f64).ln();
        }
        acc += (ln_choose + ln_half_n).exp();
        cdf.push(acc.min(1.0));
    }
    cdf
}

/// Order-statistic interval for the median: the widest-inward pair (x_(j), x_(n+1-j)) whose
/// coverage is still ≥ `level`; returns (low index, high index, coverage). With too few
/// samples for `level`, the full range and its (lower) coverage.
pub fn median_ci_indices(n: usize, level: f64) -> (usize, usize, f64) {
    if n == 0 {
        return (0, 0, 0.0);
    }
    let cdf = binomial_half_cdf(n);
    let mut best = (0, n - 1, 1.0 - 2.0 * cdf[0]);
    // j is the 1-based rank of the lower bound; coverage = 1 - 2 P(X ≤ j-1).
    for j in 1..=n.div_ceil(2) {
        let coverage = 1.0 - 2.0 * cdf[j - 1];
        if coverage >= level {
            best = (j - 1, n - j, coverage);
        } else {
            break;
        }
    }
    best
}

pub fn summarize(samples: &[f64]) -> Summary {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return Summary {
            samples: 0,
            median_s: f64::NAN,
            mean_s: f64::NAN,
            min_s: f64::NAN,
            max_s: f64::NAN,
            p5_s: f64::NAN,
            p95_s: f64::NAN,
            ci_low_s: f64::NAN,
            ci_high_s: f64::NAN,
            ci_level: 0.0,
            ci_rel_half_width: f64::INFINITY,
            outliers: 0,
        };
    }
    let median = quantile_sorted(&sorted, 0.5);
    let (lo, hi, level) = median_ci_indices(n, 0.95);
    let q1 = quantile_sorted(&sorted, 0.25);
    let q3 = quantile_sorted(&sorted, 0.75);
    let iqr = q3 - q1;
    let outliers = sorted
        .iter()
        .filter(|&&v| v < q1 - 1.5 * iqr || v > q3 + 1.5 * iqr)
        .count();
    let (ci_low, ci_high) = (sorted[lo], sorted[hi]);
    Summary {
        samples: n,
        median_s: median,
        mean_s: sorted.iter().sum::<f64>() / n as f64,
        min_s: sorted[0],
        max_s: sorted[n - 1],
        p5_s: quantile_sorted(&sorted, 0.05),
        p95_s: quantile_sorted(&sorted, 0.95),
        ci_low_s: ci_low,
        ci_high_s: ci_high,
        ci_level: level,
        ci_rel_half_width: if median > 0.0 {
            (ci_high - ci_low) / 2.0 / median
        } else {
            f64::INFINITY
        },
        outliers,
    }
}

/// Why sampling of a point stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The 95% interval reached `--target-ci`.
    Converged,
    /// The point's time budget ran out first.
    Budget,
    /// The sample cap was reached.
    MaxSamples,
    /// A fixed sample count was asked for (no `--target-ci`).
    Fixed,
}

/// Adaptive sampling rule: decides from the samples alone (and a deterministic budget), so
/// every rank given the same samples makes the same decision without talking.
#[derive(Debug, Clone, Copy)]
pub struct StopRule {
    pub min_samples: usize,
    pub max_samples: usize,
    /// Relative half-width of the 95% median interval to reach; `None` = take `max_samples`.
    pub target_rel_ci: Option<f64>,
    /// Seconds of measured time a point may use.
    pub budget_s: f64,
}

impl StopRule {
    pub fn decide(&self, samples: &[f64], measured_s: f64) -> Option<StopReason> {
        let n = samples.len();
        if n < self.min_samples {
            return None;
        }
        if n >= self.max_samples {
            return Some(match self.target_rel_ci {
                Some(_) => StopReason::MaxSamples,
                None => StopReason::Fixed,
            });
        }
        let target = self.target_rel_ci?;
        let summary = summarize(samples);
        if summary.ci_level >= 0.95 && summary.ci_rel_half_width <= target {
            return Some(StopReason::Converged);
        }
        if measured_s >= self.budget_s {
            return Some(StopReason::Budget);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn median_interval_levels_match_binomial_tables() {
        // n = 6: [x(1), x(6)] covers 1 - 2/64 = 0.96875.
        let (lo, hi, lvl) = median_ci_indices(6, 0.95);
        assert_eq!((lo, hi), (0, 5));
        assert!((lvl - 0.96875).abs() < 1e-12);
        // n = 5 cannot reach 95%: full range, 0.9375.
        let (_, _, lvl5) = median_ci_indices(5, 0.95);
        assert!((lvl5 - 0.9375).abs() < 1e-12);
        // n = 20: textbook interval is x(6)..x(15) (coverage 0.9586).
        let (lo, hi, lvl) = median_ci_indices(20, 0.95);
        assert_eq!((lo + 1, hi + 1), (6, 15));
        assert!((lvl - 0.9586).abs() < 1e-3);
    }

    #[test]
    fn summary_of_known_samples() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0, 100.0]);
        assert_eq!(s.samples, 6);
        assert_eq!(s.median_s, 3.5);
        assert_eq!(s.min_s, 1.0);
        assert_eq!(s.max_s, 100.0);
        assert_eq!(s.outliers, 1);
        assert_eq!((s.ci_low_s, s.ci_high_s), (1.0, 100.0));
    }

    #[test]
    fn stop_rule_converges_on_tight_samples_and_respects_budget() {
        let rule = StopRule {
            min_samples: 6,
            max_samples: 100,
            target_rel_ci: Some(0.05),
            budget_s: 1.0,
        };
        assert_eq!(rule.decide(&[1.0; 5], 0.0), None);
        assert_eq!(rule.decide(&[1.0; 6], 0.0), Some(StopReason::Converged));
        let noisy = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0];
        assert_eq!(rule.decide(&noisy, 0.5), None);
        assert_eq!(rule.decide(&noisy, 1.5), Some(StopReason::Budget));
        let fixed = StopRule {
            target_rel_ci: None,
            max_samples: 6,
            ..rule
        };
        assert_eq!(fixed.decide(&noisy, 0.0), Some(StopReason::Fixed));
    }

    proptest! {
        #[test]
        fn order_statistics_are_ordered(v in proptest::collection::vec(0.0f64..1e3, 1..200)) {
            let s = summarize(&v);
            prop_assert!(s.min_s <= s.p5_s && s.p5_s <= s.median_s && s.median_s <= s.p95_s && s.p95_s <= s.max_s);
            prop_assert!(s.ci_low_s <= s.median_s && s.median_s <= s.ci_high_s);
            prop_assert!(s.min_s <= s.mean_s && s.mean_s <= s.max_s);
        }
    }
}
