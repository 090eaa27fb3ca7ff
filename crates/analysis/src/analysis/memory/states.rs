//! Model states (weights, gradients, optimizer) per GPU and per node's host RAM, by sharding
//! strategy and DeepSpeed-style offload; and DeepSpeed's own estimators
//! (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`, as its
//! docs/code-docs/source/memory.rst states them) to hold the accounting against.

pub use crate::documents::memory::{Offload, Optimizer, TrainPrecision, Widths};
pub use crate::documents::simulation::Strategy;

/// Bytes per trainable parameter an offloaded optimizer keeps on the host: fp32 weights,
/// fp32 gradients, Adam's two moments (DeepSpeed's "16").
pub const OFFLOADED_OPTIMIZER_BYTES: f64 = 16.0;

/// Bytes per parameter each process holds on the host while it loads the model (fp32
/// weights), as DeepSpeed's estimators count it.
pub const LOADING_BYTES: f64 = 4.0;

/// DeepSpeed's `additional_buffer_factor`: the margin its estimators put on host RAM.
pub const HOST_BUFFER_FACTOR: f64 = 1.5;

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
    pub optimizer: Optimizer,
    /// Frozen parameters stored quantized, and their bytes each.
    pub quantized: f64,
    pub quant_bytes: f64,
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
    /// One node's host RAM while its processes load the model: fp32 weights each (only the
    /// largest module under ZeRO-3, whose `zero.Init` builds the model sharded; Hugging Face's
    /// `from_pretrained` uses it when ZeRO-3 is on).
    pub host_loading_per_node: f64,
    /// Host<->GPU bytes per GPU per step that offload adds.
    pub host_device_bytes: f64,
}

impl StateBytes {
    /// The offloaded states on one node's host.
    pub fn host_states(&self) -> f64 {
        self.host_optimizer_per_node + self.host_weights_per_node
    }

    /// The larger of the offloaded states and the loading peak (DeepSpeed counts the larger).
    pub fn host_peak(&self) -> f64 {
        self.host_states().max(self.host_loading_per_node)
    }
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
        let w = self.precision.widths_with(self.optimizer);
        let n = self.world_size.max(1) as f64;
        // DeepSpeed's accounting (stage_1_and_2.py, stage3.py and their estimators): under
        // ZeRO-1/2 every GPU keeps the full 16-bit gradients (reduced bucket by bucket, then
        // copied into its fp32 partition); under ZeRO-3 the gradients are reduce-scattered
        // into the fp32 partition. The 16-bit gradients alone without mixed precision.
        let (w_share, o_share) = match self.strategy {
            Strategy::NoShard => (1.0, 1.0),
            Strategy::Zero1 | Strategy::ShardGradOp => (1.0, 1.0 / n),
            Strategy::FullShard => (1.0 / n, 1.0 / n),
        };
        let grad_bytes = match self.strategy {
            Strategy::NoShard => w.grad,
            Strategy::Zero1 | Strategy::ShardGradOp => w.grad + w.grad_partition / n,
            Strategy::FullShard if w.grad_partition > 0.0 => w.grad_partition / n,
            Strategy::FullShard => w.grad / n,
        };
        let loaded = if self.strategy == Strategy::FullShard {
            self.largest_module
        } else {
            self.params
        };
        let mut s = StateBytes {
            weights: ((self.params - self.quantized) * w.weight
                + self.quantized * self.quant_bytes)
                * w_share,
            // A frozen largest module (an embedding under LoRA) is gathered without a gradient.
            gathered: if self.strategy == Strategy::FullShard {
                self.largest_module * (w.weight + if self.largest_trains { w.grad } else { 0.0 })
            } else {
                0.0
            },
            grads: self.trainable * grad_bytes,
            optimizer: self.trainable * w.optimizer * o_share,
            ..StateBytes::default()
        };
        let per_node = self.gpus_per_node.max(1) as f64;
        s.host_loading_per_node = loaded * LOADING_BYTES * per_node;
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

    /// One node's host RAM as DeepSpeed's estimators count it: the larger of the offloaded
    /// states and the loading peak, with its 1.5 margin.
    pub fn host_total(&self) -> f64 {
        let s = self.bytes();
        s.host_peak() * HOST_BUFFER_FACTOR
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
