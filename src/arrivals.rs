//! `sweep --stragglers`: after a point is timed, single calls with each rank's entry and exit
//! on a common clock, so a rank that arrives late (and makes the others wait inside the
//! collective) is told apart from a slow link (which makes every rank slow alike).
//!
//! The clock is CLOCK_MONOTONIC (what MPI_Wtime reads on Linux), one per host; the ranks'
//! offsets to rank 0 are taken right after a barrier (the median of several), so ranks on
//! other hosts are on rank 0's clock within the barrier's exit skew. nccl: host timestamps
//! around each call and its stream wait (a rank whose host thread is late arrives late).

use crate::backend::Communicator;
use crate::coll::Placement;
use crate::exit::Failure;
use crate::fault_injection::Injected;
use serde::{Deserialize, Serialize};

/// Single calls timed per point.
pub const CALLS: usize = 25;
/// Barrier-then-read rounds for the clock offsets.
const CLOCK_ROUNDS: usize = 7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrivals {
    pub calls: usize,
    /// Per rank: in how many calls it entered last.
    pub last: Vec<usize>,
    /// Per rank: median seconds it entered after the median rank (negative: before).
    pub late_s: Vec<f64>,
    /// Per rank: median seconds from entering a call to leaving it.
    pub inside_s: Vec<f64>,
    /// Largest spread of the clock offsets between rounds (what the common clock is worth).
    pub clock_uncertainty_s: f64,
}

impl Arrivals {
    /// The rank that holds the collective up: last in most calls (60% or more), and entering
    /// later than half of its own time inside the call (what the call costs it without
    /// waiting) and at least 5 µs after the median rank.
    pub fn straggler(&self) -> Option<usize> {
        let n = self.last.len();
        if n < 2 || self.calls == 0 {
            return None;
        }
        let (rank, &count) = self.last.iter().enumerate().max_by_key(|(_, c)| **c)?;
        let late = self.late_s[rank];
        (count * 10 >= self.calls * 6
            && late >= 5e-6
            && late >= 0.5 * self.inside_s[rank]
            && late > self.clock_uncertainty_s)
            .then_some(rank)
    }
}

fn now() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(f64::NAN)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn to_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// Every rank's clock offset to rank 0 (seconds to subtract), and how much it varied.
fn clock_offsets(
    comm: &mut dyn Communicator,
    fail: &dyn Fn(crate::backend::BackendError) -> Failure,
) -> Result<(Vec<f64>, f64), Failure> {
    let n = comm.nranks();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); n];
    for _ in 0..CLOCK_ROUNDS {
        comm.allgather_bytes(&[]).map_err(fail)?;
        let t = now();
        let all = comm.allgather_f64(t).map_err(fail)?;
        for (r, v) in all.iter().enumerate() {
            rounds[r].push(v - all[0]);
        }
    }
    let spread = rounds
        .iter()
        .map(|v| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            hi - lo
        })
        .fold(0.0, f64::max);
    Ok((rounds.into_iter().map(median).collect(), spread))
}

/// Time `CALLS` single calls of the prepared point on every rank; every rank returns the
/// same `Arrivals`.
pub fn measure(
    comm: &mut dyn Communicator,
    placement: Placement,
    injected: &Injected,
    what: &str,
) -> Result<Arrivals, Failure> {
    let fail = |e| Failure::from_backend(&format!("{what} (arrivals)"), e);
    let (offsets, uncertainty) = clock_offsets(comm, &fail)?;
    let me = comm.rank();
    let late = injected.late.filter(|(r, _)| *r == me).map(|(_, s)| s);
    let mut times = Vec::with_capacity(2 * CALLS);
    for _ in 0..CALLS {
        if let Some(s) = late {
            Injected::hold(s);
        }
        let enter = now();
        comm.run(placement, 1).map_err(fail)?;
        let exit = now();
        times.push(enter - offsets[me]);
        times.push(exit - offsets[me]);
    }
    let all: Vec<Vec<f64>> = comm
        .allgather_bytes(&to_bytes(&times))
        .map_err(fail)?
        .iter()
        .map(|b| from_bytes(b))
        .collect();
    Ok(judge(&all, uncertainty))
}

/// From every rank's (enter, exit) pairs, in call order.
fn judge(all: &[Vec<f64>], uncertainty: f64) -> Arrivals {
    let n = all.len();
    let calls = all.iter().map(|t| t.len() / 2).min().unwrap_or(0);
    let mut last = vec![0usize; n];
    let mut late: Vec<Vec<f64>> = vec![Vec::new(); n];
    for c in 0..calls {
        let enters: Vec<f64> = all.iter().map(|t| t[2 * c]).collect();
        let mid = median(enters.clone());
        let latest = enters
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(r, _)| r);
        last[latest] += 1;
        for (r, e) in enters.iter().enumerate() {
            late[r].push(e - mid);
        }
    }
    let inside = all
        .iter()
        .map(|t| median(t.chunks_exact(2).map(|p| p[1] - p[0]).collect()))
        .collect();
    Arrivals {
        calls,
        last,
        late_s: late.into_iter().map(median).collect(),
        inside_s: inside,
        clock_uncertainty_s: uncertainty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank `late` enters `lag` seconds after the others in every call of `calls`.
    fn calls(n: usize, late: usize, lag: f64, calls: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|r| {
                (0..calls)
                    .flat_map(|c| {
                        let start = c as f64 * 1e-3 + if r == late { lag } else { r as f64 * 1e-7 };
                        [start, c as f64 * 1e-3 + lag + 2e-6]
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_rank_late_in_every_call_is_named() {
        let a = judge(&calls(4, 2, 200e-6, 25), 1e-6);
        assert_eq!(a.last, vec![0, 0, 25, 0]);
        assert!((a.late_s[2] - 200e-6).abs() < 1e-6, "{:?}", a.late_s);
        assert_eq!(a.straggler(), Some(2));
    }

    #[test]
    fn arrivals_within_the_call_time_or_the_clock_are_nobody_s_fault() {
        // Last every time, but only 1 µs late: noise, not a straggler.
        assert_eq!(judge(&calls(4, 1, 1e-6, 25), 0.0).straggler(), None);
        // Late enough, but the clocks disagree by more than that.
        assert_eq!(judge(&calls(4, 1, 50e-6, 25), 1e-3).straggler(), None);
        // A different rank last in turn: nobody in most calls.
        let mut all = calls(3, 0, 0.0, 24);
        for (c, r) in (0..24).zip((0..3).cycle()) {
            all[r][2 * c] += 100e-6;
        }
        assert_eq!(judge(&all, 0.0).straggler(), None);
    }
}

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
