//! Sample statistics: order statistics, a 95% confidence interval for the median, and Tukey
//! outlier counts. Pure computation, no I/O.
//!
//! The interval for the median depends on how many samples there are:
//! - from [`ORDER_STATISTICS_FROM`] samples on, order statistics interpolated as Hettmansperger
//!   and Sheather (1986) do: distribution-free, and close to 95% at every sample count (the
//!   plain order-statistic interval can only take the binomial's discrete levels, 96.9% at 6
//!   samples, 98.4% at 7, 93.0% at 8);
//! - below that, a parametric interval: times are taken as log-normal (positive, skewed to the
//!   right), whose median is exp(mean of the logs), and Student's t gives the interval of that
//!   mean. It is exact under the model at any count from 2, and much sharper than the full
//!   range, the best order statistics can do with 6 samples. One slow sample widens it a lot,
//!   so a disturbed point samples on until the distribution-free interval takes over.
//!
//! `tests::coverage_*` check both on synthetic data with a known median: the nominal 95%
//! must cover it 93-97% of the time.

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
    /// Nominal coverage of the interval (0.95; 0 when there are too few samples for one).
    pub ci_level: f64,
    /// How the interval was made (see the module's documentation); `none` below 2 samples.
    #[serde(default)]
    pub ci_method: CiMethod,
    /// Half the interval's width relative to the median.
    pub ci_rel_half_width: f64,
    /// Samples outside Tukey's fences (1.5 IQR): counted, never dropped.
    pub outliers: usize,
}

/// How a median's interval was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CiMethod {
    /// Too few samples for an interval.
    #[default]
    None,
    /// Student's t on the logs of the samples (log-normal model).
    LogNormalT,
    /// Order statistics interpolated to 95% (Hettmansperger-Sheather).
    OrderStatistics,
}

/// From this many samples on, the interval is distribution-free (order statistics).
pub const ORDER_STATISTICS_FROM: usize = 10;

/// Student's t, 97.5% quantile, for 1..=8 degrees of freedom (any table of the t distribution).
const T_975: [f64; 8] = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306];

/// The significance level of the rank tests (run against run, a node against its peers): a
/// p-value at or above it is "not significant".
pub const SIGNIFICANCE: f64 = 0.05;

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
    indices_from_cdf(&binomial_half_cdf(n), level)
}

/// `median_ci_indices` from Binomial(n, 1/2)'s cumulative probabilities (n + 1 of them).
fn indices_from_cdf(cdf: &[f64], level: f64) -> (usize, usize, f64) {
    let n = cdf.len() - 1;
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

/// The log-normal model's 95% interval for the median of 2..ORDER_STATISTICS_FROM positive
/// samples: exp(mean ± t · sd / √n) over the logs. `None` if a sample is not positive.
fn log_normal_interval(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    if !(2..=T_975.len() + 1).contains(&n) || sorted[0] <= 0.0 {
        return None;
    }
    let logs: Vec<f64> = sorted.iter().map(|v| v.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n as f64;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = T_975[n - 2] * (var / n as f64).sqrt();
    Some(((mean - half).exp(), (mean + half).exp()))
}

/// Order statistics interpolated to 95% (Hettmansperger and Sheather 1986): between the
/// narrowest pair of order statistics that still covers 95% and the next pair inward, at the
/// weight that brings the coverage to 95% for a symmetric distribution.
fn order_statistics_interval(sorted: &[f64]) -> (f64, f64) {
    let n = sorted.len();
    let cdf = binomial_half_cdf(n);
    let (lo, hi, covered) = indices_from_cdf(&cdf, 0.95);
    if hi <= lo + 1 || covered < 0.95 {
        return (sorted[lo], sorted[hi]);
    }
    // The next pair inward and its coverage, 1 - 2 P(X <= lo + 1 - 1) for Binomial(n, 1/2).
    let k = lo + 1; // 1-based rank of the lower bound
    let inner = 1.0 - 2.0 * cdf[k];
    let i = (covered - 0.95) / (covered - inner);
    let lambda = (n - k) as f64 * i / (k as f64 + (n as f64 - 2.0 * k as f64) * i);
    let low = (1.0 - lambda) * sorted[lo] + lambda * sorted[lo + 1];
    let high = (1.0 - lambda) * sorted[hi] + lambda * sorted[hi - 1];
    (low, high)
}

/// The 95% interval for the median of sorted samples and how it was made.
pub fn median_interval(sorted: &[f64]) -> (f64, f64, CiMethod) {
    let n = sorted.len();
    if n >= ORDER_STATISTICS_FROM {
        let (lo, hi) = order_statistics_interval(sorted);
        return (lo, hi, CiMethod::OrderStatistics);
    }
    match log_normal_interval(sorted) {
        Some((lo, hi)) => (lo, hi, CiMethod::LogNormalT),
        None => (f64::NAN, f64::NAN, CiMethod::None),
    }
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
            ci_method: CiMethod::None,
            ci_rel_half_width: f64::INFINITY,
            outliers: 0,
        };
    }
    let median = quantile_sorted(&sorted, 0.5);
    let (ci_low, ci_high, ci_method) = median_interval(&sorted);
    // The interval always holds the median it is quoted with (the log-normal one is centred on
    // the geometric mean, which a skewed sample can put just beside it).
    let (ci_low, ci_high) = match ci_method {
        CiMethod::None => (sorted[0], sorted[n - 1]),
        _ => (ci_low.min(median), ci_high.max(median)),
    };
    let q1 = quantile_sorted(&sorted, 0.25);
    let q3 = quantile_sorted(&sorted, 0.75);
    let iqr = q3 - q1;
    let outliers = sorted
        .iter()
        .filter(|&&v| v < q1 - 1.5 * iqr || v > q3 + 1.5 * iqr)
        .count();
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
        ci_level: if ci_method == CiMethod::None {
            0.0
        } else {
            0.95
        },
        ci_method,
        // With no interval (one sample), the range's (0): JSON has no infinity, and `ci_level`
        // 0 says there is no interval.
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

impl StopReason {
    /// The name the record uses.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Converged => "converged",
            StopReason::Budget => "budget",
            StopReason::MaxSamples => "max-samples",
            StopReason::Fixed => "fixed",
        }
    }
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
        if summary.ci_method != CiMethod::None && summary.ci_rel_half_width <= target {
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
        // Six samples: the log-normal interval, exp(mean of logs ± 2.571 sd / sqrt 6).
        assert_eq!(s.ci_method, CiMethod::LogNormalT);
        let logs: Vec<f64> = [1.0f64, 2.0, 3.0, 4.0, 5.0, 100.0]
            .iter()
            .map(|v| v.ln())
            .collect();
        let m = logs.iter().sum::<f64>() / 6.0;
        let sd = (logs.iter().map(|l| (l - m).powi(2)).sum::<f64>() / 5.0).sqrt();
        assert!((s.ci_low_s - (m - 2.571 * sd / 6f64.sqrt()).exp()).abs() < 1e-9);
        assert!((s.ci_high_s - (m + 2.571 * sd / 6f64.sqrt()).exp()).abs() < 1e-9);
        assert_eq!(s.ci_level, 0.95);
        // One sample: no interval, and never "converged".
        let one = summarize(&[2.0]);
        assert_eq!((one.ci_method, one.ci_level), (CiMethod::None, 0.0));
        let rule = StopRule {
            min_samples: 1,
            max_samples: 10,
            target_rel_ci: Some(0.03),
            budget_s: 1.0,
        };
        assert_eq!(rule.decide(&[2.0], 0.0), None);
    }

    #[test]
    fn interpolated_order_statistics_lie_between_the_two_pairs() {
        // n = 20: x(6)..x(15) covers 95.86%, x(7)..x(14) 88.47%; the interval is between.
        let sorted: Vec<f64> = (1..=20).map(f64::from).collect();
        let (lo, hi, method) = median_interval(&sorted);
        assert_eq!(method, CiMethod::OrderStatistics);
        assert!(lo > 6.0 && lo < 7.0, "{lo}");
        assert!(hi > 14.0 && hi < 15.0, "{hi}");
        assert!((lo + hi - 21.0).abs() < 1e-12, "symmetric: {lo} {hi}");
    }

    /// A small deterministic generator (xorshift64*), so the coverage figures are the same on
    /// every run.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
            ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        /// Standard normal (Box-Muller).
        fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }

    /// How often the interval of `n` samples drawn by `draw` holds `median`, over `trials`.
    fn coverage(n: usize, trials: usize, median: f64, mut draw: impl FnMut() -> f64) -> f64 {
        let mut hits = 0;
        for _ in 0..trials {
            let v: Vec<f64> = (0..n).map(|_| draw()).collect();
            let s = summarize(&v);
            hits += (s.ci_low_s <= median && median <= s.ci_high_s) as usize;
        }
        hits as f64 / trials as f64
    }

    #[test]
    fn coverage_of_the_nominal_95_percent_is_93_to_97_percent() {
        // Log-normal times around 10 µs (a spread like a busy machine's, 5%), and a shifted
        // exponential (a floor plus waiting): medians 10e-6 and 8e-6 + 2e-6 ln 2.
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut report = Vec::new();
        for n in [2, 3, 4, 6, 9, 10, 12, 15, 20, 30, 50, 100] {
            let log_normal = coverage(n, 4000, 10e-6, || 10e-6 * (0.05 * rng.normal()).exp());
            report.push(format!("log-normal n={n}: {log_normal:.3}"));
            assert!(
                (0.93..=0.97).contains(&log_normal),
                "log-normal, {n} samples: {log_normal}"
            );
            if n >= ORDER_STATISTICS_FROM {
                let median = 8e-6 + 2e-6 * std::f64::consts::LN_2;
                let exponential = coverage(n, 4000, median, || 8e-6 - 2e-6 * rng.uniform().ln());
                report.push(format!("exponential n={n}: {exponential:.3}"));
                assert!(
                    (0.93..=0.97).contains(&exponential),
                    "shifted exponential, {n} samples: {exponential}"
                );
            }
        }
        println!("{}", report.join("\n"));
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
        // Three samples within a fraction of a percent converge once three are allowed.
        let three = StopRule {
            min_samples: 3,
            ..rule
        };
        assert_eq!(
            three.decide(&[1.0, 1.002, 0.999], 0.0),
            Some(StopReason::Converged)
        );
        assert_eq!(three.decide(&[1.0, 1.1, 0.9], 0.0), None);
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

    #[test]
    fn stop_reason_names_are_the_records() {
        for r in [
            StopReason::Converged,
            StopReason::Budget,
            StopReason::MaxSamples,
            StopReason::Fixed,
        ] {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
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
