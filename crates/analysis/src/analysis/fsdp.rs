//! FSDP / ZeRO: communication per step and memory per GPU by sharding strategy — the arithmetic
//! of the ZeRO paper (Rajbhandari et al., SC'20, §7; reference/ddp.md §4.4) on a measured curve.

use super::curve::Curve;
use crate::coll::Collective;
pub use crate::documents::simulation::{Estimate, Precision, Strategy};

/// How a step is run: micro-batches per optimizer step, and how much compute slows while
/// communication runs beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Micro-batches per optimizer step. FULL_SHARD/ZeRO-3 gathers the weights again for
    /// every micro-batch's forward and backward (each unit reshards after use), and every
    /// strategy reduces gradients each micro-batch (as Composer and DeepSpeed accumulate; FSDP's
    /// no_sync() would keep unsharded gradients, a DDP-sized copy).
    pub accumulation: usize,
    /// σ: overlapped compute stretches by σ × the communication beside it (ddp.rs's term).
    pub overlap_slowdown: f64,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            accumulation: 1,
            overlap_slowdown: 0.0,
        }
    }
}

/// A compute phase with `comm` running beside it from its start: the phase stretches by σ ×
/// the communication inside it, and ends when both are done.
fn overlapped(phase: f64, comm: f64, sigma: f64) -> f64 {
    let stretched = phase + sigma * comm.min(phase);
    stretched.max(comm)
}

/// Per-step estimate for `params` parameters on `world` GPUs with forward/backward/optimizer
/// compute times, one micro-batch per step and no compute slowdown.
#[allow(clippy::too_many_arguments)]
pub fn estimate(
    strategy: Strategy,
    params: f64,
    world: usize,
    precision: Precision,
    activations_bytes: f64,
    curve: &Curve,
    forward_s: f64,
    backward_s: f64,
    optimizer_s: f64,
) -> Estimate {
    estimate_scheduled(
        strategy,
        params,
        world,
        precision,
        activations_bytes,
        curve,
        (forward_s, backward_s, optimizer_s),
        Schedule::default(),
    )
}

/// The same with a schedule; `compute` is one micro-batch's forward and backward and the
/// step's optimizer. Communication overlaps the phase it belongs to (FULL_SHARD prefetches the
/// next unit's gather in forward and backward, FSDP's BACKWARD_PRE and its forward
/// prefetch) and only the excess shows; ZeRO-1/2's gather of the updated weights follows the
/// optimizer, with nothing to hide behind.
#[allow(clippy::too_many_arguments)]
pub fn estimate_scheduled(
    strategy: Strategy,
    params: f64,
    world: usize,
    precision: Precision,
    activations_bytes: f64,
    curve: &Curve,
    compute: (f64, f64, f64),
    schedule: Schedule,
) -> Estimate {
    let (forward_s, backward_s, optimizer_s) = compute;
    let n = world as f64;
    let k = schedule.accumulation.max(1) as f64;
    let sigma = schedule.overlap_slowdown;
    let grads = params * precision.grad_bytes;
    let weights = params * precision.param_bytes;
    let t = |c: Collective, bytes: f64| curve.time_s(c, bytes, world);
    // (each collective's bytes per call and calls per step, one micro-batch's time, the step's
    // time after the micro-batches)
    let (calls, micro, after) = match strategy {
        Strategy::NoShard => {
            let ar = t(Collective::AllReduce, grads);
            (
                vec![(Collective::AllReduce, grads, k)],
                forward_s + overlapped(backward_s, ar, sigma),
                0.0,
            )
        }
        Strategy::Zero1 | Strategy::ShardGradOp => {
            // Reduce-scatter of gradients during backward; all-gather of updated weights after
            // the optimizer (ZeRO) or before the next forward (FSDP), only hidden by prefetch.
            let rs = t(Collective::ReduceScatter, grads);
            let ag = t(Collective::AllGather, weights);
            (
                vec![
                    (Collective::ReduceScatter, grads, k),
                    (Collective::AllGather, weights, 1.0),
                ],
                forward_s + overlapped(backward_s, rs, sigma),
                ag,
            )
        }
        Strategy::FullShard => {
            // Weights gathered before forward and again before backward; gradients reduce-scattered.
            let ag = t(Collective::AllGather, weights);
            let rs = t(Collective::ReduceScatter, grads);
            (
                vec![
                    (Collective::AllGather, weights, k),
                    (Collective::AllGather, weights, k),
                    (Collective::ReduceScatter, grads, k),
                ],
                overlapped(forward_s, ag, sigma) + overlapped(backward_s, ag + rs, sigma),
                0.0,
            )
        }
    };
    let step = k * micro + optimizer_s + after;
    let exposed = (step - k * (forward_s + backward_s) - optimizer_s).max(0.0);
    let comm_s = calls.iter().map(|&(c, b, m)| m * t(c, b)).sum();
    // The document lists each collective with its bytes per step.
    let collectives: Vec<(Collective, f64)> = calls.iter().map(|&(c, b, m)| (c, b * m)).collect();
    let bus_bytes_per_gpu = collectives
        .iter()
        .map(|&(c, b)| b * c.busbw_factor(world))
        .sum();
    let (w_share, g_share, o_share) = match strategy {
        Strategy::NoShard => (1.0, 1.0, 1.0),
        Strategy::Zero1 => (1.0, 1.0, 1.0 / n),
        Strategy::ShardGradOp => (1.0, 1.0 / n, 1.0 / n),
        Strategy::FullShard => (1.0 / n, 1.0 / n, 1.0 / n),
    };
    let weights_pg = weights * w_share;
    let grads_pg = grads * g_share;
    let optimizer_pg = params * precision.optimizer_bytes * o_share;
    Estimate {
        strategy,
        collectives,
        bus_bytes_per_gpu,
        comm_s,
        exposed_comm_s: exposed,
        step_time_s: step,
        weights_bytes_per_gpu: weights_pg,
        grads_bytes_per_gpu: grads_pg,
        optimizer_bytes_per_gpu: optimizer_pg,
        activations_bytes_per_gpu: activations_bytes,
        total_bytes_per_gpu: weights_pg + grads_pg + optimizer_pg + activations_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXED: Precision = Precision {
        param_bytes: 2.0,
        grad_bytes: 2.0,
        optimizer_bytes: 12.0,
    };

    #[test]
    fn volumes_follow_the_zero_paper() {
        // ZeRO §7: DDP and ZeRO-1/2 move 2Ψ per step, ZeRO-3 3Ψ (1.5x).
        let curve = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 1e9,
        };
        let psi = 1e9;
        let n = 8;
        let bytes = |s| estimate(s, psi, n, MIXED, 0.0, &curve, 0.0, 0.0, 0.0).bus_bytes_per_gpu;
        let ddp = bytes(Strategy::NoShard);
        assert!((bytes(Strategy::Zero1) / ddp - 1.0).abs() < 1e-9);
        assert!((bytes(Strategy::ShardGradOp) / ddp - 1.0).abs() < 1e-9);
        assert!((bytes(Strategy::FullShard) / ddp - 1.5).abs() < 1e-9);
    }

    #[test]
    fn memory_per_gpu_follows_the_zero_paper() {
        // ZeRO Figure 1: 7.5B parameters, 64 GPUs, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
        let curve = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 1e9,
        };
        let gb =
            |s| estimate(s, 7.5e9, 64, MIXED, 0.0, &curve, 0.0, 0.0, 0.0).total_bytes_per_gpu / 1e9;
        assert!((gb(Strategy::NoShard) - 120.0).abs() < 0.1);
        assert!((gb(Strategy::Zero1) - 31.4).abs() < 0.1);
        assert!((gb(Strategy::ShardGradOp) - 16.6).abs() < 0.1);
        assert!((gb(Strategy::FullShard) - 1.9).abs() < 0.1);
    }

    #[test]
    fn accumulation_gathers_again_per_micro_batch_and_slowdown_stretches_overlap() {
        let curve = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 1e9,
        };
        let run = |s, k, sigma| {
            estimate_scheduled(
                s,
                1e9,
                8,
                MIXED,
                0.0,
                &curve,
                (1.0, 2.0, 0.5),
                Schedule {
                    accumulation: k,
                    overlap_slowdown: sigma,
                },
            )
        };
        // FULL_SHARD: two gathers and a reduce-scatter per micro-batch.
        let one = run(Strategy::FullShard, 1, 0.0);
        let four = run(Strategy::FullShard, 4, 0.0);
        assert!((four.comm_s / one.comm_s - 4.0).abs() < 1e-9);
        // ZeRO-2: the gather of updated weights once per step, the reduce-scatter per micro-batch.
        let z2 = run(Strategy::ShardGradOp, 4, 0.0);
        let ag = curve.time_s(Collective::AllGather, 2e9, 8);
        let rs = curve.time_s(Collective::ReduceScatter, 2e9, 8);
        assert!((z2.comm_s - (ag + 4.0 * rs)).abs() < 1e-9);
        // Hidden communication still costs σ of itself in compute.
        let fast = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 1e10,
        };
        let hidden = |sigma| {
            estimate_scheduled(
                Strategy::FullShard,
                1e9,
                8,
                MIXED,
                0.0,
                &fast,
                (1.0, 2.0, 0.5),
                Schedule {
                    accumulation: 1,
                    overlap_slowdown: sigma,
                },
            )
            .step_time_s
        };
        let ag1 = fast.time_s(Collective::AllGather, 2e9, 8);
        let rs1 = fast.time_s(Collective::ReduceScatter, 2e9, 8);
        assert!((hidden(0.0) - 3.5).abs() < 1e-9);
        let expected = (1.0 + 0.2 * ag1) + (2.0 + 0.2 * (ag1 + rs1)) + 0.5;
        assert!((hidden(0.2) - expected).abs() < 1e-9);
    }
}
