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
pub use crate::documents::arrivals::Arrivals;
use crate::documents::stragglers::median;
pub use crate::documents::stragglers::{describe, straggler, Straggler};
use crate::exit::Failure;
use crate::fault_injection::Injected;

/// Single calls timed per point.
pub const CALLS: usize = 25;
/// Barrier-then-read rounds for the clock offsets.
const CLOCK_ROUNDS: usize = 7;

fn now() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(f64::NAN)
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

/// What names this rank's CLOCK_MONOTONIC: the kernel's boot (one per host, shared by its
/// containers) and the time namespace, which may shift the clock. Empty when unknown.
fn clock_identity() -> Vec<u8> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    if boot.trim().is_empty() {
        return Vec::new();
    }
    let namespace = std::fs::read_link("/proc/self/ns/time")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{}|{namespace}", boot.trim()).into_bytes()
}

/// Every rank's clock offset to rank 0 (seconds to subtract), and how much it varied.
fn clock_offsets(
    comm: &mut dyn Communicator,
    fail: &dyn Fn(crate::backend::BackendError) -> Failure,
) -> Result<(Vec<f64>, f64), Failure> {
    let clocks = comm.allgather_bytes(&clock_identity()).map_err(fail)?;
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
    Ok(offsets_from(&clocks, &rounds))
}

/// Offsets from what each rank read right after a barrier (`rounds[r]`: its reading minus
/// rank 0's, per round). A rank that reads rank 0's very clock is at offset 0 exactly: what it
/// read there is only the barrier's exit skew, which on a busy host is milliseconds. Ranks
/// that share another clock share one offset, the median of theirs. The uncertainty is the
/// widest spread of one rank's readings among the ranks not on rank 0's clock.
fn offsets_from(clocks: &[Vec<u8>], rounds: &[Vec<f64>]) -> (Vec<f64>, f64) {
    let same_clock = |a: usize, b: usize| !clocks[a].is_empty() && clocks[a] == clocks[b];
    let own: Vec<f64> = rounds.iter().map(|v| median(v.clone())).collect();
    // One pass to gather each named clock's ranks (thousands of ranks: no pairwise compare).
    let mut by_clock: std::collections::BTreeMap<&[u8], Vec<f64>> = Default::default();
    for (clock, &offset) in clocks.iter().zip(&own).filter(|(c, _)| !c.is_empty()) {
        by_clock.entry(clock).or_default().push(offset);
    }
    let shared: std::collections::BTreeMap<&[u8], f64> = by_clock
        .into_iter()
        .map(|(clock, offsets)| (clock, median(offsets)))
        .collect();
    let offsets = (0..rounds.len())
        .map(|r| {
            if r == 0 || same_clock(r, 0) {
                0.0
            } else {
                shared.get(clocks[r].as_slice()).copied().unwrap_or(own[r])
            }
        })
        .collect();
    let spread = (1..rounds.len())
        .filter(|&r| !same_clock(r, 0))
        .map(|r| {
            let lo = rounds[r].iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rounds[r].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            hi - lo
        })
        .fold(0.0, f64::max);
    (offsets, spread)
}

/// Time `CALLS` single calls of the prepared point on every rank; every rank returns the
/// same `Arrivals`.
pub fn measure(
    comm: &mut dyn Communicator,
    placement: Placement,
    injected: &Injected,
    what: &str,
) -> Result<Arrivals, Failure> {
    let fail = |e| crate::backend::failure(&format!("{what} (arrivals)"), e);
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
    fn ranks_on_rank_0_s_clock_are_at_offset_0_and_the_others_share_their_host_s() {
        let host = |h: &str| h.as_bytes().to_vec();
        let clocks = [host("a"), host("a"), host("b"), host("b"), Vec::new()];
        // Readings after a barrier: exit skew of up to 2 ms on host a, host b 1 s ahead.
        let rounds = [
            vec![0.0; 3],
            vec![2e-3, -1e-3, 0.5e-3],
            vec![1.0, 1.0001, 1.0002],
            vec![1.0003, 1.0004, 1.0005],
            vec![-3.0, -3.0, -2.999],
        ];
        let (offsets, spread) = offsets_from(&clocks, &rounds);
        assert_eq!(offsets[..2], [0.0, 0.0]);
        // Host b: the median of its ranks' own medians (1.0001 and 1.0004).
        assert!((offsets[2] - 1.00025).abs() < 1e-9, "{offsets:?}");
        assert_eq!(offsets[2], offsets[3]);
        // A rank whose clock is unknown keeps its own estimate.
        assert!((offsets[4] + 3.0).abs() < 1e-9, "{offsets:?}");
        // Rank 1's 3 ms of skew is not clock uncertainty; rank 4's 1 ms and b's 0.2 ms are.
        assert!((spread - 1e-3).abs() < 1e-9, "{spread}");

        // One host: the common clock is exact, whatever the barrier's skew.
        let (offsets, spread) = offsets_from(&clocks[..2], &rounds[..2]);
        assert_eq!((offsets, spread), (vec![0.0, 0.0], 0.0));
        // Unknown clocks are never taken as shared.
        let (offsets, spread) = offsets_from(&[Vec::new(), Vec::new()], &rounds[..2]);
        assert_eq!(offsets[1], 0.5e-3);
        assert!((spread - 3e-3).abs() < 1e-12);
    }

    #[test]
    fn this_host_s_clock_has_a_name() {
        // Linux names its boot; the tests run on Linux.
        assert!(!clock_identity().is_empty());
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
