//! FSDP / ZeRO: communication per step and memory per GPU by sharding strategy — the arithmetic
//! of the ZeRO paper (Rajbhandari et al., SC'20, §7; reference/ddp.md §4.4) on a measured curve.

use super::curve::Curve;
use crate::coll::Collective;
pub use crate::documents::simulation::{Estimate, Precision, Strategy};

/// Per-step estimate for `params` parameters on `world` GPUs with forward/backward/optimizer
/// compute times. Communication overlaps the phase it belongs to and only the excess shows.
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
    let n = world as f64;
    let grads = params * precision.grad_bytes;
    let weights = params * precision.param_bytes;
    let t = |c: Collective, bytes: f64| curve.time_s(c, bytes, world);
    let (collectives, exposed) = match strategy {
        Strategy::NoShard => {
            let ar = t(Collective::AllReduce, grads);
            (
                vec![(Collective::AllReduce, grads)],
                (ar - backward_s).max(0.0),
            )
        }
        Strategy::Zero1 | Strategy::ShardGradOp => {
            // Reduce-scatter of gradients during backward; all-gather of updated weights after
            // the optimizer (ZeRO) or before the next forward (FSDP), only hidden by prefetch.
            let rs = t(Collective::ReduceScatter, grads);
            let ag = t(Collective::AllGather, weights);
            (
                vec![
                    (Collective::ReduceScatter, grads),
                    (Collective::AllGather, weights),
                ],
                (rs - backward_s).max(0.0) + ag,
            )
        }
        Strategy::FullShard => {
            // Weights gathered before forward and again before backward; gradients reduce-scattered.
            let ag = t(Collective::AllGather, weights);
            let rs = t(Collective::ReduceScatter, grads);
            (
                vec![
                    (Collective::AllGather, weights),
                    (Collective::AllGather, weights),
                    (Collective::ReduceScatter, grads),
                ],
                (ag - forward_s).max(0.0) + (ag + rs - backward_s).max(0.0),
            )
        }
    };
    let comm_s = collectives.iter().map(|&(c, b)| t(c, b)).sum();
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
        step_time_s: forward_s + backward_s + optimizer_s + exposed,
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
}
