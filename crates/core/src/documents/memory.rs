//! `ncclprobe simulate memory --format json`: the memory plan of one training setup (every
//! term on the GPU and on the host, against their capacities) and the changes that make it
//! fit, ranked by what they cost. The planner (`analysis::memory`) fills it and re-exports
//! the setup types.

use super::kind::Kind;
use super::simulation::Strategy;
use crate::model::ToolInfo;
use serde::{Deserialize, Serialize};

/// Where DeepSpeed-style offload puts a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    None,
    Cpu,
    Nvme,
}

/// How the weights, gradients and optimizer are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainPrecision {
    /// bf16/fp16 weights, gradients and activations; fp32 master weights and Adam moments
    /// (DeepSpeed's and Megatron's mixed precision, FSDP with a 16-bit param_dtype).
    Mixed,
    /// Everything in fp32 (Adam moments included).
    Fp32,
    /// torch.autocast (Hugging Face Trainer's fp16/bf16=True, Lightning's 16-mixed): fp32
    /// weights, gradients and optimizer; 16-bit activations, and a 16-bit copy of each weight
    /// a matmul casts, which autograd keeps for backward.
    Amp,
    /// Weights, gradients and optimizer states all 16-bit, no fp32 master copy (torchtune's
    /// dtype bf16, Lightning's bf16-true).
    PureBf16,
}

/// The optimizer, for the states it keeps per trainable parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Adam/AdamW: two moments in the parameters' precision (fp32 under mixed precision);
    /// torch.optim's foreach implementation, its default on CUDA.
    #[default]
    Adamw,
    /// Adam/AdamW stepping fused or one tensor at a time (fused=True, apex's and DeepSpeed's
    /// FusedAdam, transformers' own adamw_hf): the same states, no tensor-list temporaries.
    AdamwFused,
    /// bitsandbytes' 8-bit Adam/AdamW (and its paged form): two 1-byte block-quantized moments.
    #[serde(rename = "adamw-8bit")]
    Adamw8bit,
    /// Adafactor without momentum (Hugging Face's default beta1=None): a factored second
    /// moment, one row and one column vector per matrix.
    Adafactor,
    /// SGD without momentum: no state.
    Sgd,
    /// SGD with momentum: one buffer.
    SgdMomentum,
}

impl Optimizer {
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::AdamwFused => "adamw-fused",
            Optimizer::Adamw8bit => "adamw-8bit",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
        }
    }

    /// Bytes of state per trainable parameter with moments `moment` bytes wide. The 8-bit
    /// states are one byte each whatever the precision (bitsandbytes' block-wise quantization,
    /// Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization"; its fp32 absmax per
    /// 2048-value block is 0.2% more and left out); Adafactor's factored second moment is
    /// rows + columns per matrix (Shazeer & Stern 2018), nothing per parameter.
    pub fn state_bytes(self, moment: f64) -> f64 {
        match self {
            Optimizer::Adamw | Optimizer::AdamwFused => 2.0 * moment,
            Optimizer::Adamw8bit => 2.0,
            Optimizer::Adafactor | Optimizer::Sgd => 0.0,
            Optimizer::SgdMomentum => moment,
        }
    }
}

/// Frozen base weights stored quantized (QLoRA and its 8-bit sibling, bitsandbytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// 4-bit NormalFloat with double-quantized constants (Dettmers et al. 2023, QLoRA §3:
    /// 0.5 bytes per weight plus 0.127 bits of constants).
    Nf4,
    /// LLM.int8(): one byte per weight and an fp32 scale per row (Dettmers et al. 2022).
    Int8,
}

impl Quantization {
    pub fn name(self) -> &'static str {
        match self {
            Quantization::Nf4 => "nf4",
            Quantization::Int8 => "int8",
        }
    }

    /// Bytes per quantized weight, constants included.
    pub fn bytes_per_weight(self) -> f64 {
        match self {
            Quantization::Nf4 => 0.5 + 0.127 / 8.0,
            Quantization::Int8 => 1.0,
        }
    }
}

/// Activation checkpointing (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpointing {
    /// Every activation kept for backward.
    None,
    /// The attention core (softmax, its dropout, attention over values) recomputed.
    Selective,
    /// Only each layer's input kept; the layer recomputed in backward.
    Full,
}

/// How the loss keeps the logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Logits {
    /// The paper's output layer: fp32 logits for the cross entropy (4sbv bytes).
    Fp32,
    /// What a Hugging Face causal LM's loss holds: 16-bit logits, their fp32 upcast, the
    /// shifted copy, the log-softmax and its gradient (about 18sbv bytes at the peak).
    HfUpcast,
    /// A fused or chunked cross entropy that never holds the full logits.
    Fused,
}

impl Offload {
    /// As the flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Offload::None => "none",
            Offload::Cpu => "cpu",
            Offload::Nvme => "nvme",
        }
    }
}

impl TrainPrecision {
    pub fn name(self) -> &'static str {
        match self {
            TrainPrecision::Mixed => "mixed",
            TrainPrecision::Fp32 => "fp32",
            TrainPrecision::Amp => "amp",
            TrainPrecision::PureBf16 => "pure-bf16",
        }
    }
}

impl Checkpointing {
    pub fn name(self) -> &'static str {
        match self {
            Checkpointing::None => "none",
            Checkpointing::Selective => "selective",
            Checkpointing::Full => "full",
        }
    }
}

impl Logits {
    pub fn name(self) -> &'static str {
        match self {
            Logits::Fp32 => "fp32",
            Logits::HfUpcast => "hf-upcast",
            Logits::Fused => "fused",
        }
    }
}

/// Which parameters train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", tag = "mode")]
pub enum Trainable {
    /// Every parameter.
    Full,
    /// LoRA adapters of `rank` on `modules` of every layer; the base model frozen.
    Lora { rank: u64, modules: Vec<String> },
    /// A stated number of trainable parameters; the rest frozen.
    Params { params: u64 },
}

/// The model's shape as the planner used it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSummary {
    pub name: String,
    /// Preset (with its published source), config.json or flags.
    pub source: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub params: u64,
    pub trainable_params: u64,
    /// The largest single module (an embedding, usually): what ZeRO-3 gathers at once.
    pub largest_module_params: u64,
}

/// Everything the plan was computed for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSetup {
    pub world_size: usize,
    pub gpus_per_node: usize,
    pub strategy: Strategy,
    pub offload_optimizer: Offload,
    pub offload_params: Offload,
    pub precision: TrainPrecision,
    pub trainable: Trainable,
    /// Frozen parameters beside the model's shape (`--frozen-params`), weights only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frozen_params: u64,
    pub seq_len: u64,
    pub micro_batch: u64,
    pub checkpointing: Checkpointing,
    pub flash_attention: bool,
    pub logits: Logits,
    pub expandable_segments: bool,
    /// The optimizer whose states are counted (absent in plans before it was a choice: AdamW).
    #[serde(default)]
    pub optimizer: Optimizer,
    /// The frozen base's linears stored quantized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantize: Option<Quantization>,
}

/// One named part of a budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Term {
    pub name: String,
    pub bytes: f64,
    /// How it was counted.
    pub basis: String,
}

/// One device's (a GPU's, or a node's host RAM) demand against its capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Largest first.
    pub terms: Vec<Term>,
    pub total_bytes: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<f64>,
    /// Where the capacity came from (NVML, /proc/meminfo, a flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<String>,
    /// capacity - total: negative when it does not fit. None without a capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom_bytes: Option<f64>,
}

impl Budget {
    /// Whether the total fits the capacity (None when the capacity is unknown).
    pub fn fits(&self) -> Option<bool> {
        self.headroom_bytes.map(|h| h >= 0.0)
    }
}

/// What a setup moves per optimizer step, per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    /// NCCL bytes on the bus (busbw-normalised, the FSDP/ZeRO model of `simulate fsdp`).
    pub bus_bytes_per_gpu: f64,
    /// The collectives' time on the link, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_s: Option<f64>,
    /// Bytes over PCIe between host and GPU for offloaded states.
    pub host_device_bytes_per_gpu: f64,
}

/// One change to the setup and what it gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// The change, as flags would say it.
    pub change: String,
    /// What it costs besides memory.
    pub cost: String,
    pub gpu_total_bytes: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_headroom_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_headroom_bytes: Option<f64>,
    /// One node's host RAM the changed setup needs.
    #[serde(default)]
    pub host_total_bytes: f64,
    /// Fits both the GPU and the host (where their capacities are known).
    pub fits: bool,
    /// Change in NCCL bus bytes per GPU per step (negative: fewer).
    pub added_bus_bytes_per_gpu: f64,
    /// Change in host<->GPU bytes per GPU per step.
    pub added_host_device_bytes_per_gpu: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_comm_s: Option<f64>,
}

/// `ncclprobe simulate memory --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryPlan {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub model: ShapeSummary,
    pub setup: PlanSetup,
    pub gpu: Budget,
    /// One node's host RAM.
    pub host: Budget,
    pub traffic: Traffic,
    /// The link the communication was timed on, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Changes that make it fit first (cheapest first), then the others.
    pub changes: Vec<Change>,
    pub notes: Vec<String>,
    /// The out-of-memory error this setup ended with (`--oom`), and what the plan learnt
    /// from it: every figure above carries its unexplained memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Observed>,
    /// `--max-batch`: the largest micro-batch that fits the GPU, searched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_micro_batch: Option<MaxBatch>,
}

/// The largest micro-batch that fits, and what stops the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxBatch {
    /// 0 when not even one sample fits.
    pub micro_batch: u64,
    /// The GPU total at it (at one sample when none fits).
    pub total_bytes: f64,
    /// The GPU total one sample more.
    pub next_total_bytes: f64,
    pub capacity_bytes: f64,
    /// The term that grows most from it to one sample more.
    pub limiting_term: String,
    pub limiting_growth_bytes: f64,
}

/// A CUDA out-of-memory error the plan was held against: what the process had in use when
/// one allocation failed, against what the model counts at that point of the step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// The file and line of the error.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The allocation that failed.
    pub requested_bytes: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<f64>,
    /// What the process held (PyTorch's "this process has X memory in use", or total minus
    /// free where the message does not say).
    pub in_use_bytes: f64,
    /// Where `in_use_bytes` came from, in words.
    pub in_use_basis: String,
    /// Other processes on that GPU, as the message lists them.
    #[serde(default)]
    pub other_processes_bytes: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_unallocated_bytes: Option<f64>,
    /// The model's tensor of the failed allocation's size, in words, where one matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    /// What the model counts on the GPU just before the failed allocation.
    pub modelled_before_bytes: f64,
    /// `in_use_bytes - modelled_before_bytes`, never below zero: memory the model does not
    /// account for, carried unchanged into the plan and into every change.
    pub unexplained_bytes: f64,
    /// `requested - free`: what the failed allocation lacked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_at_failure_bytes: Option<f64>,
}

impl super::read::Document for MemoryPlan {
    const NAME: &'static str = "memory plan";
    fn accepts(head: &super::read::Head) -> bool {
        head.kind == Kind::MemoryPlan
    }
    fn check(&self) -> Result<(), String> {
        if self.setup.world_size == 0 || self.setup.micro_batch == 0 || self.setup.seq_len == 0 {
            return Err("world_size, micro_batch and seq_len must be at least 1".into());
        }
        if self.gpu.total_bytes < 0.0 || self.host.total_bytes < 0.0 {
            return Err("a budget's total is negative".into());
        }
        Ok(())
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Bytes per parameter: 16-bit (or fp32) weights and gradients, and optimizer states (fp32
/// master weights and the optimizer's moments in mixed precision; the moments alone
/// otherwise).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Widths {
    pub weight: f64,
    pub grad: f64,
    pub optimizer: f64,
    /// Bytes per activation value.
    pub activation: f64,
    /// autocast's 16-bit copy of each weight a matmul casts, held for backward (AMP only).
    pub cast_copy: f64,
    /// The fp32 gradient partition DeepSpeed's ZeRO optimizers keep beside the master weights
    /// in mixed precision (the "16" of `estimate_zero2_model_states_mem_needs` is it plus 12);
    /// none in fp32, where the gradients already are fp32.
    pub grad_partition: f64,
}

impl TrainPrecision {
    /// With AdamW.
    pub fn widths(self) -> Widths {
        self.widths_with(Optimizer::Adamw)
    }

    pub fn widths_with(self, optimizer: Optimizer) -> Widths {
        let (weight, grad, master, moment, activation, cast_copy, grad_partition) = match self {
            TrainPrecision::Mixed => (2.0, 2.0, 4.0, 4.0, 2.0, 0.0, 4.0),
            TrainPrecision::Fp32 => (4.0, 4.0, 0.0, 4.0, 4.0, 0.0, 0.0),
            // The fp32 weights are the master copy; HF's perf guide: "the model is present on
            // the GPU in both 16-bit and 32-bit precision".
            TrainPrecision::Amp => (4.0, 4.0, 0.0, 4.0, 2.0, 2.0, 0.0),
            // torchtune and Lightning's bf16-true keep the moments in the parameters' dtype.
            TrainPrecision::PureBf16 => (2.0, 2.0, 0.0, 2.0, 2.0, 0.0, 0.0),
        };
        Widths {
            weight,
            grad,
            optimizer: master + optimizer.state_bytes(moment),
            activation,
            cast_copy,
            grad_partition,
        }
    }
}
