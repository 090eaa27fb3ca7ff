//! A PyTorch DDP step, simulated: buckets built as the Reducer builds them, all-reduced in
//! bucket order on one communication stream while backward still runs, then the optimizer.
//! Sources and the rules quoted are in `reference/ddp.md` §1 (bucketing, launch order, no_sync).

use super::curve::Curve;
use super::models::Model;
use crate::coll::Collective;
pub use crate::documents::simulation::{Compute, Hook, Outcome};
use serde::Serialize;

const MIB: f64 = 1024.0 * 1024.0;

/// σ by default: compute overlapped with collectives ran 18.9% slower on average, up to 40%,
/// across four GPU types (arXiv 2507.03114, "Characterizing Compute-Communication Overlap in
/// GPU-Accelerated Distributed Deep Learning"); NCCL's maintainers put it on memory bandwidth,
/// NCCL's traffic counting two to three times against HBM (NVIDIA/nccl#1428, where a GEMM
/// beside an all-gather went from 1.18 to 2.08 ms on A100).
pub const OVERLAP_SLOWDOWN: f64 = 0.19;

/// What stays fixed across the grid.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    pub model: &'a Model,
    pub world_size: usize,
    pub batch_size: usize,
    pub compute: Compute,
    pub curve: &'a Curve,
    /// The Reducer's first bucket limit (1 MiB unless PyTorch ≥ 2.x got an explicit bucket_cap_mb).
    pub first_bucket_bytes: u64,
    pub gradient_as_bucket_view: bool,
    pub hook: Hook,
    /// Device copy bandwidth for the bucket→grad copy-back (without gradient_as_bucket_view).
    pub copy_bytes_per_s: f64,
    /// σ, the compute slowdown while communication overlaps backward: backward stretches by
    /// σ × the communication time inside it (Calculon's constant fraction; ddp.md §3, §7.1).
    pub overlap_slowdown: f64,
}

/// One point of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Config {
    pub bucket_cap_mb: f64,
    pub accumulation: usize,
    pub no_sync: bool,
}

/// A bucket: its bytes and when its last gradient is ready (seconds into backward).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub bytes: u64,
    pub ready_s: f64,
}

/// Names of embedding tables: their backward is a cheap scatter-add that runs last (ddp.md §5.4).
fn is_embedding(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("embed")
        || n.contains("wte.")
        || n.contains("wpe.")
        || n.ends_with("wte")
        || n.ends_with("wpe")
}

/// Tensors in gradient-ready order (reverse registration) with their ready times: backward time
/// is shared in proportion to size, embeddings take none and finish backward.
pub fn ready_times(model: &Model, backward_s: f64) -> Vec<(usize, f64)> {
    let weight = |i: usize| {
        if is_embedding(&model.tensors[i].name) {
            0.0
        } else {
            model.tensors[i].numel as f64
        }
    };
    let total: f64 = (0..model.tensors.len()).map(weight).sum();
    let mut t = 0.0;
    let mut out = Vec::with_capacity(model.tensors.len());
    for i in (0..model.tensors.len()).rev() {
        t += if total > 0.0 {
            backward_s * weight(i) / total
        } else {
            0.0
        };
        out.push((i, t));
    }
    // Embeddings (zero weight) are ready at the very end.
    for entry in out.iter_mut() {
        if is_embedding(&model.tensors[entry.0].name) {
            entry.1 = backward_s;
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

/// `compute_bucket_assignment_by_size` (reducer.cpp): per element size, add tensors in ready
/// order; a bucket closes once its size reaches the current limit (first limit, then the cap);
/// tensors are never split. Buckets come out in the order they close, leftovers last.
pub fn assign_buckets(
    model: &Model,
    order: &[(usize, f64)],
    first_cap: u64,
    cap: u64,
) -> Vec<Bucket> {
    struct Open {
        elem_bytes: u64,
        bytes: u64,
        ready_s: f64,
        limit: u64,
    }
    let mut open: Vec<Open> = Vec::new();
    let mut out = Vec::new();
    for &(i, ready_s) in order {
        let t = &model.tensors[i];
        let pos = match open.iter().position(|o| o.elem_bytes == t.elem_bytes) {
            Some(p) => p,
            None => {
                open.push(Open {
                    elem_bytes: t.elem_bytes,
                    bytes: 0,
                    ready_s: 0.0,
                    limit: first_cap,
                });
                open.len() - 1
            }
        };
        let o = &mut open[pos];
        o.bytes += t.numel * t.elem_bytes;
        o.ready_s = o.ready_s.max(ready_s);
        if o.bytes >= o.limit {
            out.push(Bucket {
                bytes: o.bytes,
                ready_s: o.ready_s,
            });
            o.bytes = 0;
            o.ready_s = 0.0;
            o.limit = cap;
        }
    }
    out.extend(open.into_iter().filter(|o| o.bytes > 0).map(|o| Bucket {
        bytes: o.bytes,
        ready_s: o.ready_s,
    }));
    // Launch order is bucket order; a bucket cannot start before the ones before it (mark_bucket_ready).
    out
}

/// Bytes on the wire for a bucket under the hook: 16-bit hooks halve 32-bit gradients.
fn wire_bytes(bytes: u64, elem_bytes_hint: u64, hook: Hook) -> f64 {
    match hook {
        Hook::Fp16 | Hook::Bf16 if elem_bytes_hint >= 4 => {
            bytes as f64 * 2.0 / elem_bytes_hint as f64
        }
        _ => bytes as f64,
    }
}

/// One synchronised micro-step's timeline: when the last all-reduce ends and how long the
/// stream was busy. Bucket k starts after it is ready, after bucket k-1 was launched, and after
/// the stream finished bucket k-1.
pub fn comm_timeline(buckets: &[Bucket], setup: &Setup) -> (f64, f64) {
    let (end, busy, _) = comm_timeline_within(buckets, setup, 1.0, 0.0);
    (end, busy)
}

/// The same, with ready times stretched by `stretch`; also the communication time that falls
/// before `until` (overlapping backward when `until` is its end).
fn comm_timeline_within(
    buckets: &[Bucket],
    setup: &Setup,
    stretch: f64,
    until: f64,
) -> (f64, f64, f64) {
    let elem = setup
        .model
        .tensors
        .first()
        .map(|t| t.elem_bytes)
        .unwrap_or(4);
    let mut launch: f64 = 0.0;
    let mut end: f64 = 0.0;
    let mut busy = 0.0;
    let mut inside = 0.0;
    for b in buckets {
        launch = launch.max(b.ready_s * stretch);
        let start = launch.max(end);
        let t = setup.curve.time_s(
            Collective::AllReduce,
            wire_bytes(b.bytes, elem, setup.hook),
            setup.world_size,
        );
        end = start + t;
        busy += t;
        inside += (end.min(until) - start).max(0.0);
    }
    (end, busy, inside)
}

impl Setup<'_> {
    fn copy_back_s(&self) -> f64 {
        if self.gradient_as_bucket_view || self.world_size < 2 {
            0.0
        } else {
            self.model.grad_bytes() as f64 * 2.0 / self.copy_bytes_per_s
        }
    }

    /// Buckets for a cap (the steady state, after the Reducer rebuilt them in ready order).
    pub fn buckets(&self, bucket_cap_mb: f64) -> Vec<Bucket> {
        let order = ready_times(self.model, self.compute.backward_s);
        let cap = (bucket_cap_mb * MIB) as u64;
        assign_buckets(
            self.model,
            &order,
            self.first_bucket_bytes.min(cap.max(1)),
            cap.max(1),
        )
    }

    /// Time of one synchronised micro-step (forward, backward overlapped with the all-reduces,
    /// copy-back), without the optimizer; and the communication busy time.
    fn synced_micro_step(&self, buckets: &[Bucket]) -> (f64, f64) {
        if self.world_size < 2 {
            return (self.compute.forward_s + self.compute.backward_s, 0.0);
        }
        let backward = self.compute.backward_s;
        let (mut end, busy, inside) = comm_timeline_within(buckets, self, 1.0, backward);
        let mut stretched = backward;
        if self.overlap_slowdown > 0.0 && backward > 0.0 {
            // Backward slows while all-reduces run beside it; gradients become ready
            // correspondingly later. One iteration, as Calculon does.
            stretched = backward + self.overlap_slowdown * inside;
            end = comm_timeline_within(buckets, self, stretched / backward, 0.0).0;
        }
        (
            self.compute.forward_s + stretched.max(end) + self.copy_back_s(),
            busy,
        )
    }

    /// The first iteration: one bucket with everything, after backward (no overlap yet).
    pub fn first_iteration_s(&self) -> f64 {
        let all = [Bucket {
            bytes: self.model.grad_bytes(),
            ready_s: self.compute.backward_s,
        }];
        let (t, _) = self.synced_micro_step(&all);
        t + self.compute.optimizer_s
    }

    /// One GPU doing `k` micro-steps and one optimizer step.
    pub fn one_gpu_step_s(&self, k: usize) -> f64 {
        k as f64 * (self.compute.forward_s + self.compute.backward_s) + self.compute.optimizer_s
    }

    /// Evaluate one configuration from buckets already built for its cap.
    pub fn evaluate_with(&self, config: Config, buckets: &[Bucket]) -> Outcome {
        let k = config.accumulation.max(1);
        let plain = self.compute.forward_s + self.compute.backward_s;
        let (synced, busy) = self.synced_micro_step(buckets);
        // no_sync(): only the last micro-step all-reduces; otherwise every one does.
        let (step, comm) = if config.no_sync {
            (
                (k - 1) as f64 * plain + synced + self.compute.optimizer_s,
                busy,
            )
        } else {
            (
                k as f64 * synced + self.compute.optimizer_s,
                k as f64 * busy,
            )
        };
        let one_gpu = self.one_gpu_step_s(k);
        let samples = (k * self.batch_size * self.world_size) as f64;
        let samples_per_s = samples / step;
        let one_gpu_samples_per_s = (k * self.batch_size) as f64 / one_gpu;
        Outcome {
            bucket_cap_mb: config.bucket_cap_mb,
            accumulation: k,
            no_sync: config.no_sync,
            step_time_s: step,
            exposed_comm_s: (step - one_gpu).max(0.0),
            comm_s: comm,
            iters_per_s: k as f64 / step,
            samples_per_s,
            scaling_efficiency: samples_per_s / (self.world_size as f64 * one_gpu_samples_per_s),
            bucket_bytes: buckets.iter().map(|b| b.bytes).collect(),
            loader: None,
        }
    }

    /// σ fitted to one measured step of this job at `config` (a DDP step timed on its own
    /// GPUs and link): the slowdown that makes the simulated step take that long. An error
    /// says why none does: the step is faster than free overlap allows (the compute or the
    /// link given is slower than the job's), or slower than σ = 4 explains (the step waits on
    /// something besides communication: the input pipeline, host work).
    pub fn fit_overlap_slowdown(
        &self,
        config: Config,
        measured_step_s: f64,
    ) -> Result<f64, String> {
        const MOST: f64 = 4.0;
        let at = |sigma: f64| {
            Setup {
                overlap_slowdown: sigma,
                ..self.clone()
            }
            .evaluate(config)
            .step_time_s
        };
        let (free, most) = (at(0.0), at(MOST));
        if measured_step_s < free * 0.999 {
            return Err(format!(
                "the measured step ({:.1} ms) is faster than this model allows even with free overlap ({:.1} ms): the compute or the link given is slower than the job's",
                measured_step_s * 1e3,
                free * 1e3
            ));
        }
        if measured_step_s > most {
            return Err(format!(
                "the measured step ({:.1} ms) is longer than communication can explain ({:.1} ms at slowdown {MOST}): it waits on something else (the input pipeline, host work)",
                measured_step_s * 1e3,
                most * 1e3
            ));
        }
        let (mut lo, mut hi) = (0.0, MOST);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if at(mid) < measured_step_s {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(0.5 * (lo + hi))
    }

    pub fn evaluate(&self, config: Config) -> Outcome {
        self.evaluate_with(config, &self.buckets(config.bucket_cap_mb))
    }

    /// Every cap × accumulation, with and without no_sync (buckets built once per cap).
    pub fn grid(&self, caps_mb: &[f64], accumulations: &[usize]) -> Vec<Outcome> {
        let mut out = Vec::with_capacity(caps_mb.len() * accumulations.len() * 2);
        for &cap in caps_mb {
            let buckets = self.buckets(cap);
            for &k in accumulations {
                for no_sync in [true, false] {
                    if k == 1 && !no_sync {
                        continue; // identical to k = 1 with no_sync
                    }
                    out.push(self.evaluate_with(
                        Config {
                            bucket_cap_mb: cap,
                            accumulation: k,
                            no_sync,
                        },
                        &buckets,
                    ));
                }
            }
        }
        out
    }
}

/// The plain-language conclusions for a grid.
pub fn advice(setup: &Setup, grid: &[Outcome], default_cap_mb: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let n = setup.world_size;
    let one_gpu_it = 1.0 / setup.one_gpu_step_s(1);
    let default = setup.evaluate(Config {
        bucket_cap_mb: default_cap_mb,
        accumulation: 1,
        no_sync: true,
    });
    let gpus = format!("{n} {}", if n == 1 { "GPU" } else { "GPUs" });
    if n == 1 {
        // One rank all-reduces nothing: bucket caps, no_sync() and the link change nothing,
        // and a "best" among identical settings would be noise.
        lines.push(format!(
            "world size 1: no gradient all-reduce, so bucket_cap_mb, no_sync() and the link change nothing ({:.0} samples/s at every setting); accumulation changes only the effective batch and how often the optimizer steps",
            default.samples_per_s
        ));
        return lines;
    }
    if default.samples_per_s < (setup.batch_size as f64) * one_gpu_it {
        lines.push(format!(
            "{gpus} over this link are slower than 1 ({:.1} vs {:.1} it/s, {:.0} vs {:.0} samples/s at bucket_cap_mb={default_cap_mb}): each step waits {:.0} ms for gradients",
            default.iters_per_s,
            one_gpu_it,
            default.samples_per_s,
            setup.batch_size as f64 * one_gpu_it,
            default.exposed_comm_s * 1e3
        ));
        let rescue = grid
            .iter()
            // A recommendation needs a clear margin, not a tie within the model's error.
            .filter(|o| {
                o.no_sync
                    && o.samples_per_s
                        > 1.05 * (o.accumulation * setup.batch_size) as f64
                            / setup.one_gpu_step_s(o.accumulation)
            })
            .min_by_key(|o| o.accumulation);
        match rescue {
            Some(o) => lines.push(format!(
                "use accumulation >= {} with no_sync() wrapping forward and backward ({:.0} samples/s on {gpus} vs {:.0} on one GPU), or train on one GPU",
                o.accumulation,
                o.samples_per_s,
                (o.accumulation * setup.batch_size) as f64 / setup.one_gpu_step_s(o.accumulation)
            )),
            None => lines.push(format!(
                "no setting tried beats one GPU: train on one GPU, or fix the link (the all-reduce of {:.0} MiB of gradients takes {:.0} ms)",
                setup.model.grad_bytes() as f64 / MIB,
                default.comm_s * 1e3
            )),
        }
    } else {
        lines.push(format!(
            "{gpus} at bucket_cap_mb={default_cap_mb}: {:.0} samples/s, scaling efficiency {:.0}% (one GPU: {:.0} samples/s)",
            default.samples_per_s,
            default.scaling_efficiency * 100.0,
            setup.batch_size as f64 * one_gpu_it
        ));
    }
    if let Some(best) = grid
        .iter()
        .max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s))
    {
        lines.push(format!(
            "best tried: bucket_cap_mb={}, accumulation={}{}: {:.0} samples/s, {:.2} it/s, efficiency {:.0}%",
            best.bucket_cap_mb,
            best.accumulation,
            if best.accumulation > 1 { if best.no_sync { " with no_sync()" } else { " without no_sync()" } } else { "" },
            best.samples_per_s,
            best.iters_per_s,
            best.scaling_efficiency * 100.0
        ));
    }
    if let Some(best_k1) = grid
        .iter()
        .filter(|o| o.accumulation == 1)
        .max_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s))
    {
        let gain = best_k1.samples_per_s / default.samples_per_s - 1.0;
        if gain > 0.02 && best_k1.bucket_cap_mb != default_cap_mb {
            lines.push(format!(
                "bucket_cap_mb={} is {:.0}% faster than {default_cap_mb} without accumulation",
                best_k1.bucket_cap_mb,
                gain * 100.0
            ));
        }
    }
    let worst_gap = grid
        .iter()
        .filter(|o| o.accumulation > 1 && !o.no_sync)
        .filter_map(|w| {
            grid.iter()
                .find(|s| {
                    s.no_sync
                        && s.accumulation == w.accumulation
                        && s.bucket_cap_mb == w.bucket_cap_mb
                })
                .map(|s| (w, s))
        })
        .max_by(|a, b| {
            (a.0.step_time_s - a.1.step_time_s).total_cmp(&(b.0.step_time_s - b.1.step_time_s))
        });
    if let Some((without, with)) = worst_gap {
        if without.step_time_s > with.step_time_s * 1.02 {
            lines.push(format!(
                "accumulating without no_sync() all-reduces every micro-step: at accumulation {} a step takes {:.0} ms instead of {:.0} ms with no_sync()",
                without.accumulation,
                without.step_time_s * 1e3,
                with.step_time_s * 1e3
            ));
        }
    }
    let elem = setup
        .model
        .tensors
        .first()
        .map(|t| t.elem_bytes)
        .unwrap_or(4);
    if setup.hook == Hook::None && elem >= 4 && n > 1 {
        let hooked = Setup {
            hook: Hook::Bf16,
            ..setup.clone()
        };
        let o = hooked.evaluate(Config {
            bucket_cap_mb: default_cap_mb,
            accumulation: 1,
            no_sync: true,
        });
        if o.samples_per_s > default.samples_per_s * 1.02 {
            lines.push(format!(
                "a bf16/fp16 compression hook (register_comm_hook) halves the gradient bytes: {:.0} instead of {:.0} samples/s at bucket_cap_mb={default_cap_mb}",
                o.samples_per_s, default.samples_per_s
            ));
        }
    }
    if !setup.gradient_as_bucket_view && n > 1 && setup.copy_back_s() > 0.001 {
        lines.push(format!(
            "gradient_as_bucket_view=True saves the {:.1} ms copy of gradients out of the buckets each step",
            setup.copy_back_s() * 1e3
        ));
    }
    lines
}

#[cfg(test)]
#[path = "ddp_tests.rs"]
mod tests;
