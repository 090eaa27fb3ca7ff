//! The DDP step rebuilt from one rank's trace, then asked what-ifs. Each step is split where
//! the trace shows it: the time before backward starts on the GPU (forward, the DataLoader,
//! launch gaps), backward's compute, and the time after the later of backward's end and the
//! last gradient all-reduce (the optimizer, the rest). The all-reduces launched from
//! autograd's thread are DDP's buckets; each becomes ready when the last compute kernel
//! launched before it ends, and they run one after another on NCCL's stream. The rebuilt step
//! is checked against the traced one (the self-check error), and the same model answers:
//! faster communication, a bucket size (the traced gradient bytes re-cut, their times from a
//! latency + bandwidth fit of the traced calls or the curve given), gradient accumulation
//! with `no_sync()`, the DataLoader's wait removed, twice the ranks.

use super::steps::median;
use crate::analysis::curve::Curve;
use crate::coll::Collective;
use crate::documents::trace::{StepBreakdown, WhatIf, WhatIfRow};
use crate::import::trace::{KernelKind, Phase, RankTrace};

const MIB: f64 = 1024.0 * 1024.0;

/// One bucket's all-reduce: when its gradients were ready, its bytes, its traced time (µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub ready_us: f64,
    pub bytes: u64,
    pub dur_us: f64,
}

/// One traced step in the model's terms (µs).
#[derive(Debug, Clone, PartialEq)]
pub struct StepTerms {
    pub wall: f64,
    pub before: f64,
    pub backward_start: f64,
    pub backward: f64,
    pub after: f64,
    pub loader: f64,
    pub buckets: Vec<Bucket>,
    pub nranks: usize,
}

/// When the last all-reduce ends, run one after another from their ready times.
pub fn comm_end(buckets: &[Bucket], dur: impl Fn(&Bucket) -> f64) -> f64 {
    let mut end = f64::MIN;
    for b in buckets {
        end = end.max(b.ready_us) + dur(b);
    }
    end
}

impl StepTerms {
    /// The step with these buckets and times.
    pub fn step(&self, buckets: &[Bucket], dur: impl Fn(&Bucket) -> f64, k: usize) -> f64 {
        let backward_end = self.backward_start + self.backward;
        let tail = if buckets.is_empty() {
            0.0
        } else {
            (comm_end(buckets, dur) - backward_end).max(0.0)
        };
        let k = k.max(1) as f64;
        k * (self.before + self.backward) + tail + self.after
    }
}

/// The terms of every step of a rank that ran backward (kernels sorted by start).
pub fn terms(trace: &RankTrace, rows: &[StepBreakdown]) -> Vec<StepTerms> {
    let mut out = Vec::new();
    // Each step's kernels (by the step that launched them), gathered once.
    let mut by_step: Vec<Vec<&crate::import::trace::Kernel>> = vec![Vec::new(); trace.steps.len()];
    for k in &trace.kernels {
        if let Some(list) = k.step.and_then(|s| by_step.get_mut(s as usize)) {
            list.push(k);
        }
    }
    for (i, span) in trace.steps.iter().enumerate() {
        if span.dur_us <= 0.0 {
            continue;
        }
        let mine = by_step[i].iter().copied();
        let backward: Vec<_> = mine
            .clone()
            .filter(|k| k.phase == Phase::Backward && !matches!(k.kind, KernelKind::Comm(_)))
            .collect();
        let (Some(b0), Some(b1)) = (
            backward.iter().map(|k| k.start_us).min_by(f64::total_cmp),
            backward.iter().map(|k| k.end_us()).max_by(f64::total_cmp),
        ) else {
            continue;
        };
        let mut nranks = 0;
        let mut buckets: Vec<Bucket> = mine
            .filter(|k| k.phase == Phase::Backward)
            .filter_map(|k| {
                let KernelKind::Comm(c) = k.kind else {
                    return None;
                };
                let comm = &trace.comms[c as usize];
                if comm.coll != Collective::AllReduce {
                    return None;
                }
                nranks = comm.group_size.or(trace.world_size).unwrap_or(0);
                let ready = backward
                    .iter()
                    .filter(|b| b.launch_us <= k.launch_us)
                    .map(|b| b.end_us())
                    .fold(b0, f64::max);
                Some(Bucket {
                    ready_us: ready.min(k.start_us),
                    bytes: comm.bytes.unwrap_or(0),
                    dur_us: k.dur_us,
                })
            })
            .collect();
        buckets.sort_by(|a, b| a.ready_us.total_cmp(&b.ready_us));
        let last = by_step[i]
            .iter()
            .filter(|k| k.phase == Phase::Backward && matches!(k.kind, KernelKind::Comm(_)))
            .map(|k| k.end_us())
            .fold(b1, f64::max);
        let loader = rows
            .iter()
            .find(|r| Some(r.step) == span.number || r.step == i as u64)
            .map_or(0.0, |r| r.loader_wait_ms * 1e3);
        out.push(StepTerms {
            wall: span.dur_us,
            before: (b0 - span.start_us).max(0.0),
            backward_start: b0,
            backward: b1 - b0,
            // Negative when the GPU finished this step's work after the host began the next
            // (the usual lag of an asynchronous GPU): the period is still the host's step.
            after: span.end_us() - last,
            loader: loader.min((b0 - span.start_us).max(0.0)),
            buckets,
            nranks,
        });
    }
    out
}

/// Latency and bandwidth (µs, bytes/µs) fitted to traced calls by least squares, latency ≥ 0.
pub fn fit(calls: &[Bucket]) -> (f64, f64) {
    let n = calls.len() as f64;
    let (sx, sy) = calls
        .iter()
        .fold((0.0, 0.0), |a, c| (a.0 + c.bytes as f64, a.1 + c.dur_us));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = calls.iter().map(|c| (c.bytes as f64 - mx).powi(2)).sum();
    let sxy: f64 = calls
        .iter()
        .map(|c| (c.bytes as f64 - mx) * (c.dur_us - my))
        .sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let latency = my - slope * mx;
    if slope > 0.0 && latency >= 0.0 {
        (latency, 1.0 / slope)
    } else {
        (0.0, if sy > 0.0 { sx / sy } else { f64::INFINITY })
    }
}

/// The traced gradient bytes re-cut into buckets of `cap_mb` (the first of 1 MiB, as the
/// Reducer does), each ready when its last byte was in the traced layout.
pub fn recut(buckets: &[Bucket], start_us: f64, cap_mb: f64) -> Vec<Bucket> {
    let total: u64 = buckets.iter().map(|b| b.bytes).sum();
    // Cumulative bytes over time: (time, bytes ready by then), from backward's start.
    let mut points = vec![(start_us, 0.0)];
    let mut sum = 0.0;
    for b in buckets {
        sum += b.bytes as f64;
        points.push((b.ready_us.max(points.last().map_or(start_us, |p| p.0)), sum));
    }
    let at = |bytes: f64| -> f64 {
        let i = points
            .partition_point(|p| p.1 < bytes)
            .min(points.len() - 1);
        if i == 0 {
            return points[0].0;
        }
        let (a, b) = (points[i - 1], points[i]);
        if b.1 <= a.1 {
            b.0
        } else {
            a.0 + (b.0 - a.0) * (bytes - a.1) / (b.1 - a.1)
        }
    };
    let mut out = Vec::new();
    let mut cut = 0.0;
    let mut size = MIB.min(cap_mb * MIB);
    while cut < total as f64 {
        let next = (cut + size).min(total as f64);
        out.push(Bucket {
            ready_us: at(next),
            bytes: (next - cut) as u64,
            dur_us: 0.0,
        });
        cut = next;
        size = cap_mb * MIB;
    }
    out
}

/// Each step predicted from the others' rebuilt median: the median absolute error, in percent.
fn holdout(steps: &[StepTerms], rebuilt: &[f64]) -> Option<f64> {
    (steps.len() >= 3).then(|| {
        let errors = (0..steps.len())
            .map(|i| {
                let others = rebuilt
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, v)| *v)
                    .collect();
                100.0 * (median(others) / steps[i].wall - 1.0).abs()
            })
            .collect();
        median(errors)
    })
}

/// The steps' exposed communication that hiding the gradient all-reduces does not touch, said.
fn outside(rows: &[StepBreakdown], traced: f64, hidden_gain: f64) -> Option<String> {
    let exposed = median(rows.iter().map(|r| r.exposed_comm_ms * 1e3).collect());
    (exposed > 0.1 * traced && hidden_gain < 0.5 * exposed).then(|| {
        format!(
            "the steps show {:.1} ms of exposed communication, but hiding the gradient all-reduces saves {:.1} ms: the rest is other collectives (all-to-all, all-gather, broadcasts) or all-reduces in backward's own gaps, which this what-if leaves as they are",
            exposed / 1e3,
            hidden_gain.max(0.0) / 1e3
        )
    })
}

fn bucket_note(curve: bool, lat: f64, bw: f64) -> String {
    let from = if curve {
        "the curve given".to_string()
    } else {
        format!(
            "a fit of the traced all-reduces: {lat:.1} us + bytes at {:.2} GB/s",
            bw * 1e6 / 1e9
        )
    };
    format!("bucket sizes re-cut from the traced gradient bytes; their times from {from}")
}

/// The what-if for the first rank with steps that ran backward.
pub fn what_if(
    trace: &RankTrace,
    rank: usize,
    rows: &[StepBreakdown],
    curve: Option<&Curve>,
) -> Option<WhatIf> {
    let steps = terms(trace, rows);
    if steps.is_empty() {
        return None;
    }
    let med = |f: &dyn Fn(&StepTerms) -> f64| median(steps.iter().map(f).collect());
    let traced = med(&|s| s.wall);
    let all: Vec<Bucket> = steps
        .iter()
        .flat_map(|s| s.buckets.iter().copied())
        .collect();
    let mut notes = Vec::new();
    // The rebuild is a prediction where communication is modelled (the curve given, or one
    // latency + bandwidth fitted to all the traced calls) rather than each call's own time.
    let nranks = steps[0].nranks;
    let (lat, bw) = if all.is_empty() {
        (0.0, f64::INFINITY)
    } else {
        fit(&all)
    };
    let fastest = all.iter().map(|b| b.dur_us).fold(f64::INFINITY, f64::min);
    let fitted = !all.is_empty() && lat < 0.5 * fastest && bw.is_finite();
    let modelled = |b: &Bucket| match curve {
        Some(c) if nranks > 1 => c.time_s(Collective::AllReduce, b.bytes as f64, nranks) * 1e6,
        _ if fitted => lat + b.bytes as f64 / bw,
        _ => b.dur_us,
    };
    let predicted = med(&|s| s.step(&s.buckets, modelled, 1));
    let rebuilt: Vec<f64> = steps
        .iter()
        .map(|s| s.step(&s.buckets, modelled, 1))
        .collect();
    let holdout_error_pct = holdout(&steps, &rebuilt);
    if all.is_empty() {
        notes.push("no communication to predict: the rebuild is the traced step's own terms, exact by construction".into());
    } else if !fitted && curve.is_none() {
        notes.push("the rebuild uses each all-reduce's traced time (no model of them fits): its error only checks the order the buckets ran in".into());
    }
    let mut rows_out = Vec::new();
    let mut row = |q: String, ms: f64| {
        rows_out.push(WhatIfRow {
            question: q,
            step_ms: ms / 1e3,
            speedup: if ms > 0.0 { predicted / ms } else { 0.0 },
        })
    };
    row("as traced (the model's rebuild)".into(), predicted);
    let loader = med(&|s| s.loader);
    if loader > 0.0 {
        let hidden = med(&|s| s.step(&s.buckets, modelled, 1) - s.loader);
        // Workers each take one batch's host time to make a batch; enough of them keep up
        // with the step once it no longer waits.
        let batch = median(trace.loader.iter().map(|s| s.dur_us).collect());
        let workers = (batch / hidden.max(1.0)).ceil().max(1.0);
        row(
            format!(
                "DataLoader wait removed ({:.1} ms a step; a batch takes {:.1} ms on the host, so num_workers >= {workers:.0} keeps up)",
                loader / 1e3,
                batch / 1e3
            ),
            hidden,
        );
    }
    if !all.is_empty() {
        let time = modelled;
        row(
            "gradient all-reduces 2x faster".into(),
            med(&|s| s.step(&s.buckets, |b| modelled(b) / 2.0, 1)),
        );
        row(
            "gradient all-reduces fully hidden".into(),
            med(&|s| s.step(&[], |b| b.dur_us, 1)),
        );
        if fitted || (curve.is_some() && nranks > 1) {
            row(
                "each all-reduce at its traced time".into(),
                med(&|s| s.step(&s.buckets, |b| b.dur_us, 1)),
            );
        }
        // Traced times that do not grow with size (a latency above half the fastest call) wait
        // on something else, peers most likely: no bucket size is asked of them.
        if fitted || (curve.is_some() && nranks > 1) {
            for cap in [1.0, 5.0, 25.0, 50.0, 100.0] {
                row(
                    format!("bucket_cap_mb={cap}"),
                    med(&|s| s.step(&recut(&s.buckets, s.backward_start, cap), time, 1)),
                );
            }
        } else {
            notes.push(format!("bucket sizes not asked: the traced all-reduces' times do not grow with their size (a fit puts {:.0} us on every call, the fastest took {:.0} us), so they wait on something besides the link (late peers, most likely); give --curve", lat, fastest));
        }
        for k in [2usize, 4] {
            row(
                format!("gradient accumulation {k} with no_sync() (per micro-batch)"),
                med(&|s| s.step(&s.buckets, modelled, k) / k as f64),
            );
        }
        if nranks > 1 {
            let f = Collective::AllReduce.busbw_factor(2 * nranks)
                / Collective::AllReduce.busbw_factor(nranks);
            row(
                format!("{} ranks (same busbw)", 2 * nranks),
                med(&|s| s.step(&s.buckets, |b| modelled(b) * f, 1)),
            );
        }
        if fitted || curve.is_some() {
            notes.push(bucket_note(curve.is_some() && nranks > 1, lat, bw));
        }
    } else {
        notes.push("no gradient all-reduce in the steps (one GPU, or not DDP): only the input pipeline is asked about".into());
    }
    let hidden_gain = predicted - med(&|s| s.step(&[], |b| b.dur_us, 1));
    notes.extend(outside(rows, traced, hidden_gain));
    let buckets = median(steps.iter().map(|s| s.buckets.len() as f64).collect()) as usize;
    let gradient_bytes = steps
        .first()
        .map_or(0, |s| s.buckets.iter().map(|b| b.bytes).sum());
    Some(WhatIf {
        rank,
        steps: steps.len(),
        traced_ms: traced / 1e3,
        predicted_ms: predicted / 1e3,
        holdout_error_pct,
        error_pct: if traced > 0.0 {
            100.0 * (predicted / traced - 1.0)
        } else {
            0.0
        },
        before_backward_ms: med(&|s| s.before) / 1e3,
        backward_ms: med(&|s| s.backward) / 1e3,
        after_backward_ms: med(&|s| s.after) / 1e3,
        loader_wait_ms: loader / 1e3,
        buckets,
        gradient_bytes,
        rows: rows_out,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recut_keeps_the_bytes_and_readies_buckets_in_order() {
        let traced = [
            Bucket {
                ready_us: 10.0,
                bytes: 25 << 20,
                dur_us: 5.0,
            },
            Bucket {
                ready_us: 20.0,
                bytes: 25 << 20,
                dur_us: 5.0,
            },
        ];
        let cut = recut(&traced, 0.0, 10.0);
        assert_eq!(cut.iter().map(|b| b.bytes).sum::<u64>(), 50 << 20);
        assert_eq!(cut[0].bytes, 1 << 20);
        assert!(cut.windows(2).all(|w| w[0].ready_us <= w[1].ready_us));
        assert!((cut.last().unwrap().ready_us - 20.0).abs() < 1e-9);
        // Serial: ready 10 → 15, ready 20 → 25; backward ends at 20, so 5 us exposed.
        let s = StepTerms {
            wall: 40.0,
            before: 5.0,
            backward_start: 0.0,
            backward: 20.0,
            after: 10.0,
            loader: 0.0,
            buckets: traced.to_vec(),
            nranks: 2,
        };
        assert!((s.step(&traced, |b| b.dur_us, 1) - 40.0).abs() < 1e-9);
        assert!((s.step(&traced, |b| b.dur_us, 2) - 65.0).abs() < 1e-9);
        let (lat, bw) = fit(&[
            Bucket {
                ready_us: 0.0,
                bytes: 100,
                dur_us: 11.0,
            },
            Bucket {
                ready_us: 0.0,
                bytes: 200,
                dur_us: 21.0,
            },
        ]);
        assert!(
            (lat - 1.0).abs() < 1e-9 && (bw - 10.0).abs() < 1e-9,
            "{lat} {bw}"
        );
    }
}
