//! Each profiler step's wall time, split so the parts add up to it: the GPU computing, NCCL
//! running beside compute (overlapped) or alone (exposed), and the GPU idle — while the host
//! waited on the DataLoader, or for anything else. Time is counted on the GPU's timeline
//! within the step's host span (`ProfilerStep#N`), as Holistic Trace Analysis counts it: the
//! union of kernel intervals, so concurrent streams are not counted twice.

use crate::documents::trace::StepBreakdown;
use crate::import::trace::{Kernel, KernelKind, Phase, RankTrace, Span};

/// Sorted, disjoint intervals.
pub type Intervals = Vec<(f64, f64)>;

/// The union of `spans`, clipped to `[lo, hi]`.
pub fn union(mut spans: Vec<(f64, f64)>, lo: f64, hi: f64) -> Intervals {
    spans.retain(|(a, b)| *b > lo && *a < hi && b > a);
    spans.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut out: Intervals = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        let (a, b) = (a.max(lo), b.min(hi));
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

pub fn length(x: &Intervals) -> f64 {
    // A fold from +0: an empty sum of floats is -0.
    x.iter().fold(0.0, |t, (a, b)| t + (b - a))
}

/// The intersection of two unions.
pub fn intersect(x: &Intervals, y: &Intervals) -> Intervals {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < x.len() && j < y.len() {
        let (a, b) = (x[i].0.max(y[j].0), x[i].1.min(y[j].1));
        if a < b {
            out.push((a, b));
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// How much of `[a, b]` a union covers (binary search: for one kernel against all compute).
pub fn covered(x: &Intervals, a: f64, b: f64) -> f64 {
    let mut i = x.partition_point(|s| s.1 <= a);
    let mut total = 0.0;
    while i < x.len() && x[i].0 < b {
        total += x[i].1.min(b) - x[i].0.max(a);
        i += 1;
    }
    total.max(0.0)
}

/// Kernels that overlap `[lo, hi]`, of kernels sorted by start.
fn within(kernels: &[Kernel], longest: f64, lo: f64, hi: f64) -> &[Kernel] {
    let from = kernels.partition_point(|k| k.start_us < lo - longest);
    let to = kernels.partition_point(|k| k.start_us < hi);
    &kernels[from..to.max(from)]
}

fn intervals<'a>(ks: impl Iterator<Item = &'a Kernel>) -> Vec<(f64, f64)> {
    ks.map(|k| (k.start_us, k.end_us())).collect()
}

/// Every step of one rank. Kernels must be sorted by start ([`sort`]).
pub fn breakdown(trace: &RankTrace, rank: usize) -> Vec<StepBreakdown> {
    let longest = trace.kernels.iter().map(|k| k.dur_us).fold(0.0, f64::max);
    // The DataLoader's waits as one union, clipped to each step below.
    let waits = union(
        trace
            .loader
            .iter()
            .map(|s: &Span| (s.start_us, s.end_us()))
            .collect(),
        f64::MIN,
        f64::MAX,
    );
    let mut out = Vec::new();
    // A step with no duration has nothing to split (the caller says how many there were).
    for (i, step) in trace
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.dur_us > 0.0)
    {
        let (lo, hi) = (step.start_us, step.end_us());
        let ks = within(&trace.kernels, longest, lo, hi);
        let is_comm = |k: &&Kernel| matches!(k.kind, KernelKind::Comm(_));
        let compute = union(intervals(ks.iter().filter(|k| !is_comm(k))), lo, hi);
        let comm = union(intervals(ks.iter().filter(is_comm)), lo, hi);
        let overlapped = length(&intersect(&compute, &comm));
        let exposed = length(&comm) - overlapped;
        let busy = union(compute.iter().chain(comm.iter()).copied().collect(), lo, hi);
        let idle = complement(&busy, lo, hi);
        let loader_wait = length(&intersect(&idle, &clip(&waits, lo, hi)));
        let wall = hi - lo;
        let phase = |p: Phase| {
            length(&union(
                intervals(ks.iter().filter(|k| !is_comm(k) && k.phase == p)),
                lo,
                hi,
            ))
        };
        out.push(StepBreakdown {
            rank,
            step: step.number.unwrap_or(i as u64),
            wall_ms: wall / 1e3,
            compute_ms: length(&compute) / 1e3,
            overlapped_comm_ms: overlapped.max(0.0) / 1e3,
            exposed_comm_ms: exposed.max(0.0) / 1e3,
            loader_wait_ms: loader_wait.max(0.0) / 1e3,
            other_idle_ms: (length(&idle) - loader_wait).max(0.0) / 1e3,
            forward_ms: phase(Phase::Forward) / 1e3,
            backward_ms: phase(Phase::Backward) / 1e3,
            optimizer_ms: phase(Phase::Optimizer) / 1e3,
            critical_collective: critical(trace, ks, &compute, lo, hi),
        });
    }
    out
}

/// The part of a union within `[lo, hi]` (binary search: for one step against the whole trace).
pub fn clip(x: &Intervals, lo: f64, hi: f64) -> Intervals {
    let from = x.partition_point(|s| s.1 <= lo);
    x[from..]
        .iter()
        .take_while(|s| s.0 < hi)
        .map(|&(a, b)| (a.max(lo), b.min(hi)))
        .collect()
}

/// `[lo, hi]` less a union.
pub fn complement(x: &Intervals, lo: f64, hi: f64) -> Intervals {
    let mut out = Vec::new();
    let mut at = lo;
    for &(a, b) in x {
        if a > at {
            out.push((at, a));
        }
        at = at.max(b);
    }
    if hi > at {
        out.push((at, hi));
    }
    out
}

/// The NCCL kernel of the step with the most time alone on the GPU, named with its size.
fn critical(
    trace: &RankTrace,
    ks: &[Kernel],
    compute: &Intervals,
    lo: f64,
    hi: f64,
) -> Option<String> {
    let mut best: Option<(f64, &Kernel)> = None;
    for k in ks {
        if let KernelKind::Comm(_) = k.kind {
            let (a, b) = (k.start_us.max(lo), k.end_us().min(hi));
            if b <= a {
                continue;
            }
            let alone = (b - a) - covered(compute, a, b);
            if alone > best.map_or(0.0, |(t, _)| t) {
                best = Some((alone, k));
            }
        }
    }
    let (alone, k) = best?;
    let KernelKind::Comm(c) = k.kind else {
        return None;
    };
    let comm = &trace.comms[c as usize];
    let size = comm
        .bytes
        .map(|b| format!(" of {}", crate::units::format_size(b)))
        .unwrap_or_default();
    Some(format!(
        "{}{size}, {:.2} ms exposed",
        comm.coll,
        alone / 1e3
    ))
}

/// Kernels in start order, as [`breakdown`] needs them.
pub fn sort(trace: &mut RankTrace) {
    trace
        .kernels
        .sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
}

/// The median of values (0 for none, where the shared one gives NaN).
pub fn median(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        crate::documents::stragglers::median(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::trace::CommKernel;

    fn kernel(start: f64, dur: f64, kind: KernelKind) -> Kernel {
        Kernel {
            start_us: start,
            dur_us: dur,
            stream: 7,
            correlation: 0,
            launch_us: start,
            kind,
            phase: Phase::Unknown,
            step: None,
        }
    }

    /// A step of 100 µs: compute 0–40 and 30–50 (two streams, 50 µs of union), NCCL 45–70
    /// (5 overlapped, 20 exposed), the loader 75–90, nothing else: 15 µs of loader wait and
    /// 15 of other idle.
    #[test]
    fn the_parts_of_a_step_add_up_to_its_wall_time() {
        let mut t = RankTrace {
            steps: vec![Span {
                start_us: 0.0,
                dur_us: 100.0,
                tid: 1,
                number: Some(3),
            }],
            loader: vec![Span {
                start_us: 75.0,
                dur_us: 15.0,
                tid: 1,
                number: None,
            }],
            comms: vec![CommKernel {
                coll: crate::coll::Collective::AllReduce,
                bytes: Some(1 << 20),
                in_bytes: None,
                out_bytes: None,
                group_size: Some(2),
                group: None,
                from_annotation: false,
            }],
            kernels: vec![
                kernel(0.0, 40.0, KernelKind::Compute),
                kernel(30.0, 20.0, KernelKind::Memory),
                kernel(45.0, 25.0, KernelKind::Comm(0)),
            ],
            ..Default::default()
        };
        sort(&mut t);
        let b = &breakdown(&t, 0)[0];
        assert_eq!(b.step, 3);
        assert!((b.compute_ms - 0.050).abs() < 1e-9, "{b:?}");
        assert!((b.overlapped_comm_ms - 0.005).abs() < 1e-9, "{b:?}");
        assert!((b.exposed_comm_ms - 0.020).abs() < 1e-9, "{b:?}");
        assert!((b.loader_wait_ms - 0.015).abs() < 1e-9, "{b:?}");
        assert!((b.other_idle_ms - 0.015).abs() < 1e-9, "{b:?}");
        let sum = b.compute_ms + b.exposed_comm_ms + b.loader_wait_ms + b.other_idle_ms;
        assert!((sum - b.wall_ms).abs() < 1e-9);
        assert_eq!(
            b.critical_collective.as_deref(),
            Some("all_reduce of 1 MiB, 0.02 ms exposed")
        );
    }
}
