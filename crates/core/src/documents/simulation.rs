//! What a simulation document holds of the simulators' own types: the compute split, the DDP
//! hook and each configuration's outcome, the FSDP strategies, precision and estimates. The
//! simulators (`analysis::ddp`, `analysis::fsdp`) compute them and re-export them.

use crate::coll::Collective;
use serde::Serialize;

/// Single-GPU compute of one micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Compute {
    pub forward_s: f64,
    pub backward_s: f64,
    pub optimizer_s: f64,
}

impl Compute {
    /// Split a measured single-GPU step: optimizer as given, the rest 1:2 forward:backward
    /// (backward computes both activation and weight gradients, ddp.md §5.4).
    pub fn from_step(step_s: f64, optimizer_s: f64) -> Compute {
        let fb = (step_s - optimizer_s).max(0.0);
        Compute {
            forward_s: fb / 3.0,
            backward_s: fb * 2.0 / 3.0,
            optimizer_s,
        }
    }
    pub fn step_s(&self) -> f64 {
        self.forward_s + self.backward_s + self.optimizer_s
    }
}

/// DDP communication hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    None,
    Fp16,
    Bf16,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Outcome {
    pub bucket_cap_mb: f64,
    pub accumulation: usize,
    pub no_sync: bool,
    /// Time of one optimizer step (all `accumulation` micro-steps).
    pub step_time_s: f64,
    /// Step time beyond what one GPU needs for the same micro-steps.
    pub exposed_comm_s: f64,
    /// Communication-stream busy time per optimizer step.
    pub comm_s: f64,
    /// Micro-batches per second per GPU (what a training loop's it/s shows).
    pub iters_per_s: f64,
    pub samples_per_s: f64,
    /// samples/s over world_size × one GPU's samples/s for the same accumulation.
    pub scaling_efficiency: f64,
    pub bucket_bytes: Vec<u64>,
    /// The step with the input pipeline (when the loader was modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader: Option<LoaderStep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Plain data parallel: gradients all-reduced (DDP, FSDP NO_SHARD).
    NoShard,
    /// ZeRO-1: optimizer states sharded.
    Zero1,
    /// ZeRO-2 / FSDP SHARD_GRAD_OP: optimizer states and gradients sharded.
    ShardGradOp,
    /// ZeRO-3 / FSDP FULL_SHARD: parameters too.
    FullShard,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::NoShard,
        Strategy::Zero1,
        Strategy::ShardGradOp,
        Strategy::FullShard,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoShard => "no-shard (DDP)",
            Strategy::Zero1 => "zero-1",
            Strategy::ShardGradOp => "shard-grad-op (zero-2)",
            Strategy::FullShard => "full-shard (zero-3)",
        }
    }
}

/// Training precision setup for the memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Precision {
    /// Bytes per parameter of the working weights (2 for bf16/fp16 mixed precision).
    pub param_bytes: f64,
    /// Bytes per gradient element communicated and kept.
    pub grad_bytes: f64,
    /// Optimizer-state bytes per parameter (Adam with fp32 master weights: 12; plain fp32 Adam: 8).
    pub optimizer_bytes: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Estimate {
    pub strategy: Strategy,
    /// Collective calls per step over the whole model: (collective, bytes).
    pub collectives: Vec<(Collective, f64)>,
    /// Bytes each GPU puts on the bus per step (sum of busbw-normalised volumes).
    pub bus_bytes_per_gpu: f64,
    /// Communication time per step from the curve.
    pub comm_s: f64,
    /// First-order exposed communication: what the compute phases cannot hide.
    pub exposed_comm_s: f64,
    pub step_time_s: f64,
    pub weights_bytes_per_gpu: f64,
    pub grads_bytes_per_gpu: f64,
    pub optimizer_bytes_per_gpu: f64,
    pub activations_bytes_per_gpu: f64,
    pub total_bytes_per_gpu: f64,
}

/// What paces a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The GPU's own forward, backward and optimizer.
    Compute,
    /// All-reduces that backward does not hide.
    Comm,
    /// The input pipeline: the loader cannot deliver batches as fast as the GPU takes them.
    Data,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Compute => "compute",
            Bound::Comm => "comm",
            Bound::Data => "data",
        }
    }
}

/// One configuration's optimizer step with the input pipeline in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderStep {
    /// Time between batches the loader hands one rank (one worker's batch time over the
    /// workers it runs in parallel; with no workers, the whole load in the training process).
    pub data_interval_s: f64,
    /// What the input adds to the step: waiting for batches and copies not hidden.
    pub data_wait_s: f64,
    /// The whole optimizer step, loading included.
    pub step_time_s: f64,
    pub samples_per_s: f64,
    pub bound_by: Bound,
}

/// A per-GPU batch with its accumulation, as `--batch-sizes` asked.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchOption {
    pub batch_size: usize,
    pub accumulation: usize,
    /// batch × accumulation × world size.
    pub effective_batch: usize,
    /// With the loader as configured.
    pub step: LoaderStep,
    /// The smallest num_workers that hides loading at this batch with pin_memory and fits in
    /// host memory (when the dataset is given), when one does.
    #[serde(default)]
    pub advised_workers: Option<usize>,
    /// With `advised_workers` and pin_memory.
    pub advised: Option<LoaderStep>,
}

/// Host memory the loader's processes hold.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderMemory {
    /// Training processes and their workers on the node, each with its own dataset copy.
    pub processes: usize,
    pub dataset_bytes: f64,
    /// Batches in flight (prefetch_factor × workers per rank) in shared memory.
    pub prefetch_bytes: f64,
    pub total_bytes: f64,
    pub host_memory_bytes: Option<f64>,
    /// `--host-memory-gb`, `/proc/meminfo MemTotal`, or why it is unknown.
    pub host_memory_from: String,
}

/// The input pipeline of a DDP simulation: how it was configured, what it costs, and advice.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderSummary {
    pub num_workers: usize,
    /// One worker's time per sample (the batch time over the batch).
    pub sample_s: f64,
    pub cpu_cores: usize,
    pub cpu_cores_from: String,
    pub ranks_per_node: usize,
    pub ranks_per_node_from: String,
    pub pin_memory: bool,
    pub prefetch_factor: usize,
    pub persistent_workers: bool,
    pub h2d_pinned_bytes_per_s: f64,
    pub h2d_pageable_bytes_per_s: f64,
    pub h2d_from: String,
    /// Bytes of one batch of `batch_size` copied to the GPU (0 when not given).
    pub batch_bytes: f64,
    /// How much slower each worker runs than alone on a core (1 when not oversubscribed).
    pub worker_slowdown: f64,
    /// PyTorch's own warning, as its DataLoader would print it, when its rule fires.
    pub pytorch_warning: Option<String>,
    pub memory: Option<LoaderMemory>,
    /// The smallest num_workers that hides loading at the configuration trained with (host
    /// memory aside: the advice says when it does not fit).
    pub hiding_workers_pinned: Option<usize>,
    pub hiding_workers_pageable: Option<usize>,
    pub batch_options: Vec<BatchOption>,
    /// The configuration trained with (default cap, first accumulation, no_sync()).
    pub current: LoaderStep,
    pub verdict: String,
    pub advice: Vec<String>,
}
