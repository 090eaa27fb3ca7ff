//! One training setup (the planner's options) and its estimate: every term on a GPU and on
//! a node's host, and the traffic per step.

use super::activations::{self, Batch};
use super::shape::Shape;
use super::states::States;
use super::{overheads, states};
use crate::analysis::curve::Curve;
use crate::documents::memory::{
    Budget, Checkpointing, Logits, Offload, Optimizer, PlanSetup, Quantization, ShapeSummary, Term,
    Traffic, TrainPrecision, Trainable,
};
use crate::documents::simulation::Strategy;

/// Everything the plan is computed for (the engine's own options; the command builds it).
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub shape: Shape,
    pub trainable: Trainable,
    /// Frozen parameters outside the modelled decoder (a multimodal model's vision towers):
    /// their weights only, sharded and offloaded with the parameters. Their activations are
    /// not modelled (frozen towers usually run without keeping them).
    pub frozen_params: u64,
    pub world_size: usize,
    pub gpus_per_node: usize,
    pub strategy: Strategy,
    pub offload_optimizer: Offload,
    pub offload_params: Offload,
    pub precision: TrainPrecision,
    pub optimizer: Optimizer,
    /// The frozen base's decoder linears stored quantized (needs a frozen base: LoRA).
    pub quantize: Option<Quantization>,
    pub seq_len: u64,
    pub micro_batch: u64,
    pub checkpointing: Checkpointing,
    pub flash_attention: bool,
    pub logits: Logits,
    pub expandable_segments: bool,
    pub cuda_context_bytes: f64,
    /// Overrides the allocator reserve's fraction.
    pub fragmentation: Option<f64>,
    /// Bytes and where the figure came from.
    pub gpu_capacity: Option<(f64, String)>,
    pub host_capacity: Option<(f64, String)>,
    /// GPU memory an observed out-of-memory error shows beyond this accounting (what the
    /// model does not explain, other processes), carried into every estimate unchanged.
    pub observed_terms: Vec<Term>,
}

/// The budgets and traffic of one setup.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub gpu: Budget,
    pub host: Budget,
    pub traffic: Traffic,
}

impl Setup {
    /// (all parameters, trainable ones) with adapters and `frozen_params` counted.
    pub fn params(&self) -> (u64, u64) {
        let base = self.shape.params();
        let (all, trainable) = match &self.trainable {
            Trainable::Full => (base, base),
            Trainable::Lora { rank, modules } => {
                let added = self.shape.lora_params(*rank, modules);
                (base + added, added)
            }
            Trainable::Params { params } => (base, (*params).min(base)),
        };
        (all + self.frozen_params, trainable)
    }

    fn states(&self) -> States {
        let (params, trainable) = self.params();
        States {
            strategy: self.strategy,
            world_size: self.world_size,
            gpus_per_node: self.gpus_per_node,
            offload_optimizer: self.offload_optimizer,
            offload_params: self.offload_params,
            precision: self.precision,
            params: params as f64,
            trainable: trainable as f64,
            largest_module: self.shape.largest_module_params() as f64,
            largest_trains: matches!(self.trainable, Trainable::Full),
            optimizer: self.optimizer,
            quantized: self.quantized_params() as f64,
            quant_bytes: self.quantize.map_or(0.0, Quantization::bytes_per_weight),
        }
    }

    /// The frozen weights stored quantized: bitsandbytes replaces the decoder's nn.Linear
    /// layers; embeddings, norms and the output head stay 16-bit (transformers keeps lm_head
    /// out of the conversion, `get_keys_to_not_convert`).
    pub fn quantized_params(&self) -> u64 {
        if self.quantize.is_none() {
            return 0;
        }
        let linears: u64 = self.shape.linears().iter().map(|(_, i, o)| i * o).sum();
        linears * self.shape.layers
    }

    /// What PyTorch's foreach Adam/AdamW (torch.optim's default on CUDA) allocates at the
    /// step beside the states: its intermediates are tensor lists, one the size of a moment
    /// ("foreach ... uses slightly more peak memory ... since the intermediates are a
    /// tensorlist vs just one tensor", torch.optim's docs). None for the mixed precision of
    /// DeepSpeed and Megatron (fused optimizers), for bitsandbytes' fused 8-bit kernels, for
    /// SGD and Adafactor (in place, per tensor), or with the optimizer on the CPU.
    fn optimizer_temporaries(&self, b: &states::StateBytes) -> f64 {
        let foreach = matches!(self.optimizer, Optimizer::Adamw)
            && !matches!(self.precision, TrainPrecision::Mixed)
            && self.offload_optimizer == Offload::None;
        if !foreach {
            return 0.0;
        }
        // One moment is half the states.
        b.optimizer / 2.0
    }

    /// The 16-bit copies autocast makes, per GPU: of the whole model unsharded, of a shard's
    /// worth under ZeRO-3/FSDP full sharding (each unit's copies die with its gathered weights).
    fn cast_copy_bytes(&self) -> f64 {
        let w = self.precision.widths();
        let share = match self.strategy {
            Strategy::FullShard => 1.0 / self.world_size.max(1) as f64,
            _ => 1.0,
        };
        w.cast_copy * self.cast_params() * share
    }

    /// Weights a matmul casts to 16 bits under autocast, whose copies autograd keeps for the
    /// backward: the decoder's linears and an untied output head (embedding lookups are not
    /// cast), less what is stored quantized (dequantized one layer at a time).
    fn cast_params(&self) -> f64 {
        let linears: u64 = self.shape.linears().iter().map(|(_, i, o)| i * o).sum();
        let head = if self.shape.tied_embeddings {
            0
        } else {
            self.shape.vocab * self.shape.hidden
        };
        (linears * self.shape.layers + head).saturating_sub(self.quantized_params()) as f64
    }

    /// What cannot be, in words (offload a strategy does not do).
    pub fn invalid(&self) -> Option<&'static str> {
        if self.quantize.is_some() && matches!(self.trainable, Trainable::Full) {
            return Some("--quantize needs a frozen base (--lora-rank or --trainable-params): quantized weights do not train");
        }
        self.states().invalid()
    }

    pub(super) fn batch(&self) -> Batch {
        Batch {
            seq_len: self.seq_len,
            micro_batch: self.micro_batch,
            bytes_per_value: self.precision.widths().activation,
            flash_attention: self.flash_attention,
        }
    }

    pub fn summary(&self) -> ShapeSummary {
        let (params, trainable) = self.params();
        let s = &self.shape;
        ShapeSummary {
            name: s.name.clone(),
            source: s.source.clone(),
            layers: s.layers,
            hidden: s.hidden,
            heads: s.heads,
            kv_heads: s.kv_heads,
            ffn: s.ffn,
            vocab: s.vocab,
            params,
            trainable_params: trainable,
            largest_module_params: s.largest_module_params(),
        }
    }

    pub fn described(&self) -> PlanSetup {
        PlanSetup {
            world_size: self.world_size,
            gpus_per_node: self.gpus_per_node,
            strategy: self.strategy,
            offload_optimizer: self.offload_optimizer,
            offload_params: self.offload_params,
            precision: self.precision,
            optimizer: self.optimizer,
            quantize: self.quantize,
            trainable: self.trainable.clone(),
            frozen_params: self.frozen_params,
            seq_len: self.seq_len,
            micro_batch: self.micro_batch,
            checkpointing: self.checkpointing,
            flash_attention: self.flash_attention,
            logits: self.logits,
            expandable_segments: self.expandable_segments,
        }
    }

    /// Every term on one GPU and on one node's host, and the traffic per step.
    pub fn estimate(&self, curve: Option<&Curve>) -> Estimate {
        let b = self.states().bytes();
        let host_terms = self.host_terms(&b);
        Estimate {
            gpu: budget(self.gpu_terms(None), &self.gpu_capacity),
            host: budget(host_terms, &self.host_capacity),
            traffic: self.traffic(curve, b.host_device_bytes),
        }
    }

    /// The GPU's total at a point of the step: the loss's tensors allocated so far (`None`:
    /// all of them, the peak), with what an observation added.
    pub fn gpu_total_at(&self, loss_bytes_held: Option<f64>) -> f64 {
        self.gpu_terms(loss_bytes_held)
            .iter()
            .map(|t| t.bytes)
            .sum()
    }

    /// The loss's tensors in the order the step allocates them.
    pub fn loss_allocations(&self) -> Vec<activations::Allocation> {
        activations::loss_allocations(&self.shape, self.batch(), self.logits)
    }

    fn gpu_terms(&self, loss_bytes_held: Option<f64>) -> Vec<Term> {
        let st = self.states();
        let b = st.bytes();
        let w = self.precision.widths_with(self.optimizer);
        let batch = self.batch();
        let layers = activations::layers_bytes(&self.shape, batch, self.checkpointing);
        let (edges, logits) = activations::outside_layers_bytes(&self.shape, batch, self.logits);
        let logits = loss_bytes_held.unwrap_or(logits);
        let n = self.world_size;
        let over_n = |what: String| {
            if n > 1 {
                format!("{what} / {n} GPUs")
            } else {
                what
            }
        };
        let weights_basis = match self.quantize {
            Some(q) => format!(
                "{} B x {:.2e} parameters + {:.3} B x {:.2e} decoder linears in {}",
                w.weight,
                self.params().0 as f64 - st.quantized,
                q.bytes_per_weight(),
                st.quantized,
                q.name()
            ),
            None => format!("{} B x all parameters", w.weight),
        };
        let grads_basis = match self.strategy {
            Strategy::NoShard => format!("{} B x trainable parameters", w.grad),
            Strategy::Zero1 | Strategy::ShardGradOp if w.grad_partition > 0.0 => format!(
                "{} B x trainable parameters (16-bit, every GPU) + {}",
                w.grad,
                over_n(format!(
                    "{} B x trainable parameters (fp32 partition)",
                    w.grad_partition
                ))
            ),
            Strategy::Zero1 | Strategy::ShardGradOp => {
                format!("{} B x trainable parameters (every GPU)", w.grad)
            }
            Strategy::FullShard if w.grad_partition > 0.0 => over_n(format!(
                "{} B x trainable parameters (fp32 partition, the 16-bit gradients reduce-scattered into it)",
                w.grad_partition
            )),
            Strategy::FullShard => over_n(format!("{} B x trainable parameters", w.grad)),
        };
        let optimizer_basis = format!(
            "{} B x trainable parameters ({}: {})",
            w.optimizer,
            self.optimizer.name(),
            match (w.grad_partition > 0.0, self.optimizer) {
                (true, _) => "fp32 weights and its states",
                (false, crate::documents::memory::Optimizer::Adafactor) => {
                    "a factored second moment, rows and columns only"
                }
                (false, crate::documents::memory::Optimizer::Sgd) => "no state",
                (false, _) => "its states",
            }
        );
        let mut terms = vec![
            term(
                "weights",
                b.weights,
                match self.strategy {
                    Strategy::FullShard => over_n(weights_basis),
                    _ => weights_basis,
                },
            ),
            term(
                "gathered module (ZeRO-3)",
                b.gathered,
                "largest module's weights and gradient".into(),
            ),
            term("gradients", b.grads, grads_basis),
            term(
                "16-bit weight copies (autocast)",
                self.cast_copy_bytes(),
                "2 B x matmul weights: autocast casts each, autograd keeps the copy for backward"
                    .into(),
            ),
            term(
                "optimizer states",
                b.optimizer,
                match self.strategy {
                    Strategy::NoShard => optimizer_basis,
                    _ => over_n(optimizer_basis),
                },
            ),
            term(
                "activations",
                layers + edges,
                format!(
                    "Korthikanti et al. 2022, checkpointing {}, {}",
                    self.checkpointing.name(),
                    if self.flash_attention {
                        "FlashAttention"
                    } else {
                        "attention scores stored"
                    }
                ),
            ),
            term(
                "logits and loss",
                logits,
                format!("--logits {}", self.logits.name()),
            ),
        ];
        let temporaries = self.optimizer_temporaries(&b);
        if temporaries > 0.0 {
            let freed = layers + edges + logits;
            terms.push(term(
                "optimizer step temporaries",
                (temporaries - freed).max(0.0),
                format!(
                    "foreach {}: a tensor list as large as one moment ({:.2} GB), made at the step, when the activations are freed; the part beyond them",
                    self.optimizer.name(),
                    temporaries / 1e9
                ),
            ));
        }
        let tensors: f64 = terms.iter().map(|t| t.bytes).sum();
        let fraction = self
            .fragmentation
            .unwrap_or_else(|| overheads::fragmentation_fraction(self.expandable_segments));
        terms.push(term(
            "allocator reserve",
            tensors * fraction,
            format!(
                "{:.0}% of tensors{}",
                fraction * 100.0,
                if self.expandable_segments {
                    " (expandable_segments)"
                } else {
                    ""
                }
            ),
        ));
        terms.push(term(
            "CUDA context",
            self.cuda_context_bytes,
            "lazy module loading".into(),
        ));
        terms.push(term(
            "NCCL buffers",
            overheads::nccl_bytes(self.world_size),
            "2 peers x 2 x NCCL_BUFFSIZE x 16 channels".into(),
        ));
        terms.extend(self.observed_terms.iter().cloned());
        terms
    }

    /// One node's host RAM as DeepSpeed's estimators count it: the offloaded states, the
    /// loading peak where it is larger, and the estimators' 1.5 margin.
    fn host_terms(&self, b: &states::StateBytes) -> Vec<Term> {
        let (n, g) = (self.world_size, self.gpus_per_node);
        let node_share = |what: String| {
            if n > g {
                format!("{what} / {n} GPUs x {g} GPUs on the node")
            } else {
                what
            }
        };
        let loaded = if self.strategy == Strategy::FullShard {
            "the largest module (zero.Init builds the model sharded)"
        } else {
            "all parameters"
        };
        vec![
            term(
                "offloaded optimizer states",
                b.host_optimizer_per_node,
                node_share(format!(
                    "{} B x trainable parameters (fp32 weights, gradients, Adam moments)",
                    states::OFFLOADED_OPTIMIZER_BYTES
                )),
            ),
            term(
                "offloaded weights",
                b.host_weights_per_node,
                node_share(format!(
                    "{} B x all parameters",
                    self.precision.widths().weight
                )),
            ),
            term(
                "loading the model",
                (b.host_loading_per_node - b.host_states()).max(0.0),
                format!(
                    "{} B x {loaded} x {g} process{} on the node, beyond the states (DeepSpeed counts the larger)",
                    states::LOADING_BYTES,
                    if g == 1 { "" } else { "es" }
                ),
            ),
            term(
                "margin",
                b.host_peak() * (states::HOST_BUFFER_FACTOR - 1.0),
                format!(
                    "DeepSpeed's additional_buffer_factor {}",
                    states::HOST_BUFFER_FACTOR
                ),
            ),
        ]
    }

    /// NCCL traffic per step from the FSDP/ZeRO model: weights gathered are every parameter
    /// (16-bit), gradients reduced the trainable ones. `fsdp::estimate` takes one count and
    /// per-parameter widths; a count of 1 with the total bytes as widths gives exactly them.
    fn traffic(&self, curve: Option<&Curve>, host_device_bytes: f64) -> Traffic {
        let (params, trainable) = self.params();
        let w = self.precision.widths();
        let bytes_only = Curve::AlphaBeta {
            latency_s: 0.0,
            busbw_bytes_per_s: 1.0,
        };
        let volumes = crate::analysis::fsdp::Precision {
            param_bytes: params as f64 * w.weight,
            grad_bytes: trainable as f64 * w.grad,
            optimizer_bytes: 0.0,
        };
        let e = crate::analysis::fsdp::estimate(
            self.strategy,
            1.0,
            self.world_size,
            volumes,
            0.0,
            curve.unwrap_or(&bytes_only),
            0.0,
            0.0,
            0.0,
        );
        Traffic {
            bus_bytes_per_gpu: e.bus_bytes_per_gpu,
            comm_s: curve.map(|_| e.comm_s),
            host_device_bytes_per_gpu: host_device_bytes,
        }
    }
}

fn term(name: &str, bytes: f64, basis: String) -> Term {
    Term {
        name: name.into(),
        bytes,
        basis,
    }
}

/// Terms largest first (empty ones dropped), their total, and the headroom to a capacity.
pub(super) fn budget(mut terms: Vec<Term>, capacity: &Option<(f64, String)>) -> Budget {
    terms.retain(|t| t.bytes > 0.0);
    terms.sort_by(|a, b| b.bytes.total_cmp(&a.bytes));
    // `0.0 +`: an empty sum of f64 is -0.0, which would print as "-0.00".
    let total_bytes = 0.0 + terms.iter().map(|t| t.bytes).sum::<f64>();
    Budget {
        terms,
        total_bytes,
        capacity_bytes: capacity.as_ref().map(|c| c.0),
        capacity_source: capacity.as_ref().map(|c| c.1.clone()),
        headroom_bytes: capacity.as_ref().map(|c| c.0 - total_bytes),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(super) mod tests;
