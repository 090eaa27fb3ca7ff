//! Model states (weights, gradients, optimizer) per GPU and per node's host RAM, by sharding
//! strategy and DeepSpeed-style offload; and DeepSpeed's own estimators
//! (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`, as its
//! docs/code-docs/source/memory.rst states them) to hold the accounting against.

pub use crate::documents::memory::{Offload, TrainPrecision};
pub use crate::documents::simulation::Strategy;

/// Bytes per parameter: 16-bit (or fp32) weights and gradients, and optimizer states (fp32
/// master weights and Adam's two moments in mixed precision; the moments alone in fp32).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Widths {
    pub weight: f64,
    pub grad: f64,
    pub optimizer: f64,
}

impl TrainPrecision {
    pub fn widths(self) -> Widths {
        match self {
            TrainPrecision::Mixed => Widths {
                weight: 2.0,
                grad: 2.0,
                optimizer: 12.0,
            },
            TrainPrecision::Fp32 => Widths {
                weight: 4.0,
                grad: 4.0,
                optimizer: 8.0,
            },
        }
    }
}

/// Bytes per trainable parameter an offloaded optimizer keeps on the host: fp32 weights,
/// fp32 gradients, Adam's two moments (DeepSpeed's "16").
pub const OFFLOADED_OPTIMIZER_BYTES: f64 = 16.0;

/// What the states are computed for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct States {
    pub strategy: Strategy,
    pub world_size: usize,
    pub gpus_per_node: usize,
    pub offload_optimizer: Offload,
    pub offload_params: Offload,
    pub precision: TrainPrecision,
    pub params: f64,
    pub trainable: f64,
    pub largest_module: f64,
    pub largest_trains: bool,
}

/// Model states per GPU, and what offload puts on each node.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StateBytes {
    /// Resident weights (their shard under ZeRO-3).
    pub weights: f64,
    /// ZeRO-3: the largest module gathered, weights and gradient (DeepSpeed's 4 × largest).
    pub gathered: f64,
    pub grads: f64,
    pub optimizer: f64,
    /// One node's host RAM for offloaded optimizer states (all its GPUs).
    pub host_optimizer_per_node: f64,
    /// One node's host RAM for offloaded weights (all its GPUs).
    pub host_weights_per_node: f64,
    /// One node's NVMe for states offloaded there.
    pub nvme_per_node: f64,
    /// Host<->GPU bytes per GPU per step that offload adds.
    pub host_device_bytes: f64,
}

impl States {
    /// Offload a strategy cannot do, in words.
    pub fn invalid(&self) -> Option<&'static str> {
        if self.offload_params != Offload::None && self.strategy != Strategy::FullShard {
            return Some("parameter offload needs ZeRO-3 (--strategy full-shard)");
        }
        if self.offload_optimizer != Offload::None && self.strategy == Strategy::NoShard {
            return Some("optimizer offload needs ZeRO-1/2/3 (--strategy zero1, shard-grad-op or full-shard)");
        }
        None
    }

    pub fn bytes(&self) -> StateBytes {
        let w = self.precision.widths();
        let n = self.world_size.max(1) as f64;
        let (w_share, g_share, o_share) = match self.strategy {
            Strategy::NoShard => (1.0, 1.0, 1.0),
            Strategy::Zero1 => (1.0, 1.0, 1.0 / n),
            Strategy::ShardGradOp => (1.0, 1.0 / n, 1.0 / n),
            Strategy::FullShard => (1.0 / n, 1.0 / n, 1.0 / n),
        };
        let mut s = StateBytes {
            weights: self.params * w.weight * w_share,
            // A frozen largest module (an embedding under LoRA) is gathered without a gradient.
            gathered: if self.strategy == Strategy::FullShard {
                self.largest_module * (w.weight + if self.largest_trains { w.grad } else { 0.0 })
            } else {
                0.0
            },
            grads: self.trainable * w.grad * g_share,
            optimizer: self.trainable * w.optimizer * o_share,
            ..StateBytes::default()
        };
        let per_node = self.gpus_per_node.max(1) as f64;
        if self.offload_optimizer != Offload::None {
            // The gradients stream to the host bucket by bucket; the update runs there and
            // the new 16-bit weights come back.
            let bytes = self.trainable * OFFLOADED_OPTIMIZER_BYTES * o_share * per_node;
            match self.offload_optimizer {
                Offload::Nvme => s.nvme_per_node += bytes,
                _ => s.host_optimizer_per_node += bytes,
            }
            s.host_device_bytes += self.trainable * (w.grad + w.weight) * o_share;
            s.grads = 0.0;
            s.optimizer = 0.0;
        }
        if self.offload_params != Offload::None {
            // Each GPU fetches its shard for the forward and again for the backward.
            match self.offload_params {
                Offload::Nvme => s.nvme_per_node += s.weights * per_node,
                _ => s.host_weights_per_node += s.weights * per_node,
            }
            s.host_device_bytes += 2.0 * s.weights;
            s.weights = 0.0;
        }
        s
    }

    pub fn host_total(&self) -> f64 {
        let s = self.bytes();
        s.host_optimizer_per_node + s.host_weights_per_node
    }

    pub fn gpu_total(&self) -> f64 {
        let s = self.bytes();
        s.weights + s.gathered + s.grads + s.optimizer
    }
}

/// DeepSpeed's `estimate_zero2_model_states_mem_needs`: (CPU bytes, GPU bytes) per node/GPU.
pub fn deepspeed_zero2(
    total_params: f64,
    gpus_per_node: usize,
    nodes: usize,
    cpu_offload: bool,
    buffer_factor: f64,
) -> (u64, u64) {
    let total_gpus = (nodes * gpus_per_node) as f64;
    let (cpu, gpu) = if cpu_offload {
        (
            total_params * (4.0 * total_gpus).max(16.0) * buffer_factor,
            2.0 * total_params,
        )
    } else {
        (
            total_params * 4.0 * gpus_per_node as f64 * buffer_factor,
            4.0 * total_params + (16.0 * total_params / total_gpus).trunc(),
        )
    };
    (cpu as u64, gpu as u64)
}

/// DeepSpeed's `estimate_zero3_model_states_mem_needs`: (CPU bytes, GPU bytes, largest layer
/// memory).
#[allow(clippy::too_many_arguments)]
pub fn deepspeed_zero3(
    total_params: f64,
    largest_layer_params: f64,
    gpus_per_node: usize,
    nodes: usize,
    cpu_offload: bool,
    cpu_offload_params: bool,
    zero_init: bool,
    buffer_factor: f64,
) -> (u64, u64, u64) {
    let total_gpus = (nodes * gpus_per_node) as f64;
    let gpus_factor = 1.0 / nodes as f64;
    let largest = 4.0 * largest_layer_params;
    let per_node = 4.0 * gpus_per_node as f64;
    let (cpu, gpu) = match (cpu_offload, cpu_offload_params) {
        (true, true) => (
            total_params
                * if zero_init {
                    18.0 * gpus_factor
                } else {
                    per_node.max(18.0 * gpus_factor)
                }
                * buffer_factor,
            largest,
        ),
        (true, false) => (
            total_params
                * if zero_init {
                    16.0 * gpus_factor
                } else {
                    per_node.max(16.0 * gpus_factor)
                }
                * buffer_factor,
            largest + (2.0 * total_params / total_gpus).trunc(),
        ),
        (false, _) => (
            if zero_init {
                largest_layer_params * per_node * buffer_factor
            } else {
                total_params * per_node * buffer_factor
            },
            largest + (18.0 * total_params / total_gpus).trunc(),
        ),
    };
    (cpu as u64, gpu as u64, largest as u64)
}

#[cfg(test)]
#[path = "states_tests.rs"]
mod tests;
