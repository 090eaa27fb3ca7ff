//! The flags of `simulate memory`.

use super::groups::OutputFormat;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// A model by name (the shapes are copied from each published config.json; the list
    /// `simulate ddp` and `fsdp` take too), or a Hugging Face config.json file (as
    /// --model-config).
    #[arg(long, long_help = super::examples::model_help("A model by name, its shape copied from its published config.json, or a Hugging Face config.json file (as --model-config)."), conflicts_with = "model_config", required_unless_present_any = ["model_config", "layers"])]
    pub model: Option<String>,
    /// A Hugging Face config.json (hidden_size, num_hidden_layers, num_attention_heads,
    /// num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings, model_type;
    /// GPT-2's n_embd, n_layer, n_head too).
    #[arg(long, value_name = "CONFIG_JSON")]
    pub model_config: Option<PathBuf>,
    /// The shape by flags (a Llama-style decoder): layers.
    #[arg(long, requires_all = ["hidden", "heads", "vocab"], conflicts_with_all = ["model", "model_config"])]
    pub layers: Option<u64>,
    /// The shape by flags: the hidden size (the model's width, `hidden_size`).
    #[arg(long)]
    pub hidden: Option<u64>,
    /// The shape by flags: attention heads per layer (`num_attention_heads`).
    #[arg(long)]
    pub heads: Option<u64>,
    /// Key/value heads (grouped-query attention; default: --heads).
    #[arg(long)]
    pub kv_heads: Option<u64>,
    /// The shape by flags: the vocabulary (`vocab_size`): the embedding's and the logits' size.
    #[arg(long)]
    pub vocab: Option<u64>,
    /// The MLP's inner width (default: 4 × --hidden).
    #[arg(long)]
    pub ffn: Option<u64>,
    /// Ranks in all (data parallel).
    #[arg(long, default_value_t = 1)]
    pub world_size: usize,
    /// GPUs per node (default: --world-size, at most 8): whose offloaded states share a host.
    #[arg(long)]
    pub gpus_per_node: Option<usize>,
    /// Sharding: no-shard (DDP), zero1, shard-grad-op (zero2), full-shard (zero3, FSDP).
    #[arg(long, value_parser = ["no-shard", "ddp", "zero1", "shard-grad-op", "zero2", "full-shard", "zero3", "fsdp"], default_value = "no-shard")]
    pub strategy: String,
    /// What to offload to the CPU, in short: optimizer, params, or both (optimizer,params);
    /// --offload-optimizer and --offload-params say where (cpu or nvme) one at a time.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "WHAT[,WHAT]", conflicts_with_all = ["offload_optimizer", "offload_params"])]
    pub offload: Vec<OffloadWhat>,
    /// Where the optimizer states live (DeepSpeed offload_optimizer).
    #[arg(long, value_enum, default_value_t = OffloadArg::None)]
    pub offload_optimizer: OffloadArg,
    /// Where the parameters live (DeepSpeed offload_param; ZeRO-3 only).
    #[arg(long, value_enum, default_value_t = OffloadArg::None)]
    pub offload_params: OffloadArg,
    /// mixed (bf16, fp16 the same): 16-bit weights, gradients and activations with fp32
    /// master weights and moments (DeepSpeed, Megatron, FSDP with a 16-bit param_dtype); amp:
    /// torch.autocast, fp32 weights and states, 16-bit activations and weight copies (Hugging
    /// Face Trainer's fp16/bf16=True); pure-bf16: everything 16-bit, no master copy
    /// (torchtune, Lightning's bf16-true); fp32: everything fp32.
    #[arg(long, value_parser = ["mixed", "bf16", "fp16", "amp", "pure-bf16", "fp32"], default_value = "mixed")]
    pub precision: String,
    /// The optimizer whose states are counted: adamw (Adam too; torch.optim's foreach, whose
    /// step makes a moment-sized temporary), adamw-fused (fused=True, apex, DeepSpeed, or
    /// transformers' adamw_hf: no temporary), adamw-8bit (bitsandbytes, paged too), adafactor
    /// (no momentum), sgd, sgd-momentum.
    #[arg(long, value_enum, default_value_t = OptimizerArg::Adamw)]
    pub optimizer: OptimizerArg,
    /// The frozen base's decoder linears stored quantized (QLoRA: nf4; LLM.int8: int8); needs
    /// a frozen base (--lora-rank or --trainable-params).
    #[arg(long, value_enum)]
    pub quantize: Option<QuantizeArg>,
    /// LoRA adapters of this rank (the base model frozen).
    #[arg(long, conflicts_with = "trainable_params")]
    pub lora_rank: Option<u64>,
    /// The linears LoRA adapts, comma-separated: q, k, v, o, gate, up, down, or all.
    #[arg(long, default_value = "q,v", requires = "lora_rank")]
    pub lora_modules: String,
    /// Trainable parameters (the rest frozen), instead of all of them.
    #[arg(long)]
    pub trainable_params: Option<f64>,
    /// Frozen parameters beside the model's shape, e.g. a multimodal model's vision towers
    /// (MGM-2B: about 5e8 for CLIP ViT-L and ConvNeXt-L): 16-bit weights on the GPU, sharded
    /// and offloaded with the parameters; their activations are not counted.
    #[arg(long)]
    pub frozen_params: Option<f64>,
    /// Tokens per sample [default: 2048, or the model's max_position_embeddings when
    /// shorter].
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Samples per GPU per micro-step.
    #[arg(long, default_value_t = 1)]
    pub micro_batch: u64,
    /// Activation checkpointing.
    #[arg(long, value_enum, default_value_t = CheckpointArg::None)]
    pub checkpointing: CheckpointArg,
    /// FlashAttention (or another attention that never stores the s×s scores).
    #[arg(long)]
    pub flash_attention: bool,
    /// How the loss holds the logits: hf-upcast (a Hugging Face causal LM: fp32 upcast,
    /// shifted copy, log-softmax), fp32 (fp32 logits only), fused (a chunked loss).
    #[arg(long, value_enum, default_value_t = LogitsArg::HfUpcast)]
    pub logits: LogitsArg,
    /// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (read from the environment too).
    #[arg(long)]
    pub expandable_segments: bool,
    /// The allocator's fragmentation reserve as a fraction of tensors (default 0.10, 0.03
    /// with expandable segments).
    #[arg(long)]
    pub fragmentation: Option<f64>,
    /// The CUDA context in MiB.
    #[arg(long, default_value_t = 512.0)]
    pub cuda_context_mb: f64,
    /// GPU memory in GB (1e9 bytes) instead of NVML's total (GPU 0's).
    #[arg(long)]
    pub gpu_memory_gb: Option<f64>,
    /// GPU memory in GiB, as PyTorch's out-of-memory message states the total capacity.
    #[arg(long, conflicts_with = "gpu_memory_gb")]
    pub gpu_memory_gib: Option<f64>,
    /// Host RAM per node in GB for offload, instead of /proc/meminfo's MemAvailable.
    #[arg(long)]
    pub host_memory_gb: Option<f64>,
    /// A log or paste holding PyTorch's CUDA out-of-memory error of this setup: the plan is
    /// held against what the process had in use, and carries what the model does not explain
    /// into every figure (the GPU's capacity is the error's, unless a flag gives one).
    #[arg(long, value_name = "FILE")]
    pub oom: Option<PathBuf>,
    /// Search the largest micro-batch that fits the GPU (its capacity from NVML or the flags),
    /// and say which term stops the next one.
    #[arg(long)]
    pub max_batch: bool,
    #[command(flatten)]
    pub link: OptionalLink,
    /// table for people; csv: one row per term; json: the typed document.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = "Output")]
    pub format: OutputFormat,
}

/// The link is optional here: without one, the plan gives bytes and no times.
#[derive(Debug, Args)]
pub struct OptionalLink {
    /// Time the communication each change adds on a measured curve (a run record or sweep
    /// CSV) or `--busbw` GB/s.
    #[arg(long = "curve", conflicts_with = "busbw")]
    pub curve: Option<PathBuf>,
    /// Bus bandwidth in GB/s (nccl-tests' busbw) for an alpha-beta link instead of a curve.
    #[arg(long)]
    pub busbw: Option<f64>,
    /// Per-call latency in microseconds for the alpha-beta link.
    #[arg(long, default_value_t = 20.0, requires = "busbw")]
    pub latency_us: f64,
    /// Use a --curve that is incomplete or of another rank count (as `simulate ddp` takes it).
    #[arg(long, requires = "curve")]
    pub allow_partial: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OffloadArg {
    None,
    Cpu,
    Nvme,
}

/// `--offload`: the states moved to the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OffloadWhat {
    /// The optimizer states (DeepSpeed offload_optimizer: cpu).
    #[value(alias = "optim", alias = "opt")]
    Optimizer,
    /// The parameters (DeepSpeed offload_param: cpu; ZeRO-3 only).
    #[value(alias = "param", alias = "parameters")]
    Params,
}

impl MemoryArgs {
    /// Where the optimizer states and the parameters live, from --offload or the two flags.
    pub fn offloads(&self) -> (OffloadArg, OffloadArg) {
        if self.offload.is_empty() {
            return (self.offload_optimizer, self.offload_params);
        }
        let on = |w: OffloadWhat| match self.offload.contains(&w) {
            true => OffloadArg::Cpu,
            false => OffloadArg::None,
        };
        (on(OffloadWhat::Optimizer), on(OffloadWhat::Params))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    #[value(alias = "adam")]
    Adamw,
    #[value(alias = "adamw-hf", alias = "adamw-apex-fused")]
    AdamwFused,
    #[value(name = "adamw-8bit", alias = "adam8bit", alias = "paged-adamw-8bit")]
    Adamw8bit,
    Adafactor,
    Sgd,
    SgdMomentum,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuantizeArg {
    Nf4,
    Int8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckpointArg {
    None,
    Selective,
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogitsArg {
    HfUpcast,
    Fp32,
    Fused,
}
