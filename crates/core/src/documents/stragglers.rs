//! The run's straggler, read from the arrival times its points carry (`sweep --stragglers`):
//! one rank that held the collectives up at most points.

use super::arrivals::Arrivals;

/// A rank that held the run's collectives up: named at most points that took arrivals.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub rank: usize,
    /// Points at which it was the straggler, of those with arrival times.
    pub points: usize,
    pub of: usize,
    /// Median over those points of how much later than the median rank it entered.
    pub late_s: f64,
    /// Calls it entered last, of all calls timed at those points.
    pub last_calls: usize,
    pub calls: usize,
}

/// The run's straggler, if one rank is the straggler at half the points or more.
pub fn straggler(points: &[crate::model::Point]) -> Option<Straggler> {
    let timed: Vec<&Arrivals> = points.iter().filter_map(|p| p.arrivals.as_ref()).collect();
    let named: Vec<(usize, &Arrivals)> = timed
        .iter()
        .filter_map(|a| Some((a.straggler()?, *a)))
        .collect();
    let mut counts = std::collections::BTreeMap::<usize, usize>::new();
    for (r, _) in &named {
        *counts.entry(*r).or_default() += 1;
    }
    let (&rank, &count) = counts.iter().max_by_key(|(_, c)| **c)?;
    if count * 2 < timed.len() {
        return None;
    }
    let mine: Vec<&Arrivals> = named
        .iter()
        .filter(|(r, _)| *r == rank)
        .map(|(_, a)| *a)
        .collect();
    Some(Straggler {
        rank,
        points: count,
        of: timed.len(),
        late_s: median(mine.iter().map(|a| a.late_s[rank]).collect()),
        last_calls: mine.iter().map(|a| a.last[rank]).sum(),
        calls: mine.iter().map(|a| a.calls).sum(),
    })
}

/// "rank 2 (host node7, GPU 2 NVIDIA H100) entered last in 25 of 25 calls at 14 of 16 points,
/// 0.50 ms after the median rank"
pub fn describe(s: &Straggler, ranks: &[crate::model::RankInfo]) -> String {
    let whereabouts = ranks
        .iter()
        .find(|r| r.rank == s.rank)
        .map(|r| {
            let device = r
                .device
                .as_deref()
                .map(|d| format!(", GPU {}", d.trim()))
                .unwrap_or_default();
            format!(" (host {}{device})", r.host)
        })
        .unwrap_or_default();
    format!(
        "rank {}{whereabouts} entered last in {} of {} calls at {} of {} points, {:.1} µs after the median rank",
        s.rank,
        s.last_calls,
        s.calls,
        s.points,
        s.of,
        s.late_s * 1e6
    )
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
