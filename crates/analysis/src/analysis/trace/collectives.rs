//! Each traced collective against the fabric: its bytes (elements × dtype), its group, the
//! time the fabric took, busbw by nccl-tests' formula, how much of it ran with no compute
//! beside it, and what a curve for this machine says it should take.
//!
//! A kernel's time on one rank includes waiting for peers that arrive later, so one rank's
//! trace cannot tell a slow fabric from a late peer. With several ranks' traces the k-th call
//! of each (same collective and size) is matched across them: the rank that arrived last
//! waited least, and its kernel time is the fabric's; the others' extra time is the wait it
//! caused, which names the straggler.

use super::steps::{covered, median, union, Intervals};
use crate::analysis::curve::Curve;
use crate::coll::Collective;
use crate::documents::trace::{TraceStraggler, TracedCollective};
use crate::import::trace::{KernelKind, RankTrace};
use std::collections::BTreeMap;

/// A call is "slow" when the fabric took this much longer than the curve says.
pub const SLOW_RATIO: f64 = 1.5;

/// One NCCL kernel, as the tables need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Call {
    pub coll: Collective,
    pub bytes: u64,
    pub nranks: usize,
    pub dur_us: f64,
    pub exposed_us: f64,
}

/// Every sized NCCL kernel of a rank, in start order, with its exposed time (kernels sorted).
pub fn calls(trace: &RankTrace) -> Vec<Call> {
    let compute: Intervals = union(
        trace
            .kernels
            .iter()
            .filter(|k| !matches!(k.kind, KernelKind::Comm(_)))
            .map(|k| (k.start_us, k.end_us()))
            .collect(),
        f64::MIN,
        f64::MAX,
    );
    trace
        .kernels
        .iter()
        .filter_map(|k| {
            let KernelKind::Comm(c) = k.kind else {
                return None;
            };
            let comm = &trace.comms[c as usize];
            let nranks = comm.group_size.or(trace.world_size).unwrap_or(0);
            Some(Call {
                coll: comm.coll,
                bytes: comm.bytes?,
                nranks,
                dur_us: k.dur_us,
                exposed_us: k.dur_us - covered(&compute, k.start_us, k.end_us()),
            })
        })
        .collect()
}

/// Calls matched across ranks: the i-th call of every rank, where all agree on collective and
/// size; `None` when the ranks' sequences disagree (sampled or cut traces).
pub fn matched(per_rank: &[Vec<Call>]) -> Option<Vec<Vec<Call>>> {
    let n = per_rank.iter().map(Vec::len).min()?;
    if per_rank.len() < 2 || n == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let first = per_rank[0][i];
        if per_rank
            .iter()
            .any(|r| r[i].coll != first.coll || r[i].bytes != first.bytes)
        {
            return None;
        }
        out.push(per_rank.iter().map(|r| r[i]).collect());
    }
    Some(out)
}

/// The rank the others waited for, when one arrived last in at least half the matched calls
/// and made the others wait a median of 10% of the call or more.
pub fn straggler(matched: &[Vec<Call>], ranks: &[usize]) -> Option<TraceStraggler> {
    let mut last: BTreeMap<usize, usize> = BTreeMap::new();
    let mut late: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for call in matched {
        let longest = call.iter().map(|c| c.dur_us).fold(0.0, f64::max);
        let (i, _) = call
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.dur_us.total_cmp(&b.1.dur_us))?;
        *last.entry(ranks[i]).or_default() += 1;
        for (j, c) in call.iter().enumerate() {
            late.entry(ranks[j]).or_default().push(longest - c.dur_us);
        }
    }
    let (&rank, &count) = last.iter().max_by_key(|(_, c)| **c)?;
    let late_ms = median(late.remove(&rank)?) / 1e3;
    let typical = median(
        matched
            .iter()
            .flat_map(|c| c.iter().map(|x| x.dur_us))
            .collect(),
    ) / 1e3;
    (count * 2 >= matched.len() && late_ms >= 0.1 * typical && late_ms > 0.0).then_some(
        TraceStraggler {
            rank,
            last_in: count,
            of: matched.len(),
            late_ms,
        },
    )
}

/// The table: calls grouped by collective, size and group, against the curve when given.
pub fn table(
    per_rank: &[Vec<Call>],
    matched: Option<&[Vec<Call>]>,
    curve: Option<&Curve>,
) -> Vec<TracedCollective> {
    type Key = (Collective, u64, usize);
    let mut times: BTreeMap<Key, (Vec<f64>, f64, f64)> = BTreeMap::new();
    // Calls per rank: the most any rank made of each.
    let mut counts: BTreeMap<Key, usize> = BTreeMap::new();
    for calls in per_rank {
        let mut mine: BTreeMap<Key, usize> = BTreeMap::new();
        for c in calls {
            *mine.entry((c.coll, c.bytes, c.nranks)).or_default() += 1;
        }
        for (k, n) in mine {
            let e = counts.entry(k).or_default();
            *e = (*e).max(n);
        }
    }
    for c in per_rank.iter().flatten() {
        let e = times.entry((c.coll, c.bytes, c.nranks)).or_default();
        e.0.push(c.dur_us);
        e.1 += c.exposed_us;
        e.2 += c.dur_us;
    }
    let mut fabric: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for call in matched.unwrap_or(&[]) {
        let shortest = call.iter().map(|c| c.dur_us).fold(f64::INFINITY, f64::min);
        fabric
            .entry((call[0].coll, call[0].bytes, call[0].nranks))
            .or_default()
            .push(shortest);
    }
    times
        .into_iter()
        .map(|((coll, bytes, nranks), (durs, exposed, total))| {
            let median_ms = median(durs.clone()) / 1e3;
            let fabric_ms = fabric
                .get(&(coll, bytes, nranks))
                .map_or(median_ms, |f| median(f.clone()) / 1e3);
            let busbw_gbs = if fabric_ms > 0.0 && nranks > 1 {
                bytes as f64 * coll.busbw_factor(nranks) / (fabric_ms / 1e3) / 1e9
            } else {
                0.0
            };
            let expected_ms = curve
                .filter(|_| nranks > 1 && coll != Collective::Unknown)
                .map(|c| c.time_s(coll, bytes as f64, nranks) * 1e3);
            let slowdown = expected_ms.filter(|e| *e > 0.0).map(|e| fabric_ms / e);
            // One rank's kernel time includes its wait for later peers: slow, or waiting.
            let verdict = match slowdown {
                Some(s) if s > SLOW_RATIO && fabric.contains_key(&(coll, bytes, nranks)) => "slow",
                Some(s) if s > SLOW_RATIO => "slow or waiting",
                Some(_) => "at speed",
                None => "not judged",
            };
            TracedCollective {
                collective: coll,
                size_bytes: bytes,
                nranks,
                count: counts.get(&(coll, bytes, nranks)).copied().unwrap_or(0),
                median_ms,
                fabric_ms,
                busbw_gbs,
                exposed_fraction: if total > 0.0 { exposed / total } else { 0.0 },
                expected_ms,
                slowdown,
                verdict: verdict.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(dur: f64) -> Call {
        Call {
            coll: Collective::AllReduce,
            bytes: 100 << 20,
            nranks: 2,
            dur_us: dur,
            exposed_us: dur / 2.0,
        }
    }

    /// Rank 1 arrives last in every call: its kernels are short (the fabric's 1 ms), rank 0's
    /// long (it waits 2 ms for rank 1). The table's fabric time is rank 1's, and a curve that
    /// says 0.5 ms makes it slow.
    #[test]
    fn the_last_rank_to_arrive_is_the_straggler_and_its_time_the_fabrics() {
        let per_rank = vec![vec![call(3000.0); 4], vec![call(1000.0); 4]];
        let m = matched(&per_rank).unwrap();
        let s = straggler(&m, &[0, 1]).unwrap();
        assert_eq!((s.rank, s.last_in, s.of), (1, 4, 4));
        assert!((s.late_ms - 2.0).abs() < 1e-9);
        let curve = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: (100 << 20) as f64 / 0.5e-3,
        };
        let t = table(&per_rank, Some(&m), Some(&curve));
        assert_eq!(t.len(), 1);
        assert!((t[0].fabric_ms - 1.0).abs() < 1e-9, "{:?}", t[0]);
        assert_eq!(t[0].count, 4);
        assert!((t[0].expected_ms.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(t[0].verdict, "slow");
        assert!((t[0].exposed_fraction - 0.5).abs() < 1e-9);
        // Equal ranks: nobody held the others up.
        let even = vec![vec![call(1000.0); 4], vec![call(1000.0); 4]];
        assert_eq!(straggler(&matched(&even).unwrap(), &[0, 1]), None);
    }
}
