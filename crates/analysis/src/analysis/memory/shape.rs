//! A transformer's shape (layers, widths, heads, vocabulary and the small choices that change
//! its parameter count) and what follows from it alone: parameters, the largest module, and
//! the parameters LoRA adds.

/// What the planner needs to know of a transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub name: String,
    /// Preset (with the published config it copies), config.json or flags.
    pub source: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    /// Key/value heads (grouped-query attention); `heads` without it.
    pub kv_heads: u64,
    /// Width of one head; `hidden / heads` unless the config says otherwise (Gemma).
    pub head_dim: u64,
    /// The MLP's inner width.
    pub ffn: u64,
    pub vocab: u64,
    /// Gated MLP (SwiGLU/GeGLU: gate, up and down projections) instead of two linears.
    pub gated_mlp: bool,
    pub tied_embeddings: bool,
    /// Learned position embeddings (GPT-2, BERT); 0 for rotary.
    pub learned_positions: u64,
    /// BERT's token-type embeddings.
    pub token_types: u64,
    /// LayerNorm (weight and bias) rather than RMSNorm (weight).
    pub norm_bias: bool,
    /// Norms per layer: 2, or 1 for a parallel block (Phi-2).
    pub norms_per_layer: u64,
    pub qkv_bias: bool,
    pub out_bias: bool,
    pub mlp_bias: bool,
    pub lm_head_bias: bool,
    /// A norm after the embeddings (BERT) and none at the end.
    pub post_norm_encoder: bool,
    /// BERT's pooler (a dense layer on the first token).
    pub pooler: bool,
    /// The longest sequence the model was trained for (`max_position_embeddings`), if known.
    pub max_positions: Option<u64>,
}

/// The logical linear projections of a layer, as LoRA names them.
pub const LORA_MODULES: [&str; 7] = ["q", "k", "v", "o", "gate", "up", "down"];

impl Shape {
    /// A Llama-style decoder: rotary, RMSNorm, gated MLP, no biases.
    pub fn decoder(
        name: &str,
        layers: u64,
        hidden: u64,
        heads: u64,
        ffn: u64,
        vocab: u64,
    ) -> Shape {
        Shape {
            name: name.into(),
            source: "flags".into(),
            layers,
            hidden,
            heads,
            kv_heads: heads,
            head_dim: hidden / heads.max(1),
            ffn,
            vocab,
            gated_mlp: true,
            tied_embeddings: false,
            learned_positions: 0,
            token_types: 0,
            norm_bias: false,
            norms_per_layer: 2,
            qkv_bias: false,
            out_bias: false,
            mlp_bias: false,
            lm_head_bias: false,
            post_norm_encoder: false,
            pooler: false,
            max_positions: None,
        }
    }

    fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }
    fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }
    fn norm_params(&self) -> u64 {
        if self.norm_bias {
            2 * self.hidden
        } else {
            self.hidden
        }
    }

    /// (name, in, out) of each linear of one layer.
    pub fn linears(&self) -> Vec<(&'static str, u64, u64)> {
        let h = self.hidden;
        let mut l = vec![
            ("q", h, self.q_dim()),
            ("k", h, self.kv_dim()),
            ("v", h, self.kv_dim()),
            ("o", self.q_dim(), h),
            ("up", h, self.ffn),
            ("down", self.ffn, h),
        ];
        if self.gated_mlp {
            l.push(("gate", h, self.ffn));
        }
        l
    }

    pub fn layer_params(&self) -> u64 {
        let weights: u64 = self.linears().iter().map(|(_, i, o)| i * o).sum();
        let b = |on: bool, n: u64| if on { n } else { 0 };
        let mlp_biases = if self.gated_mlp {
            2 * self.ffn + self.hidden
        } else {
            self.ffn + self.hidden
        };
        weights
            + b(self.qkv_bias, self.q_dim() + 2 * self.kv_dim())
            + b(self.out_bias, self.hidden)
            + b(self.mlp_bias, mlp_biases)
            + self.norms_per_layer * self.norm_params()
    }

    pub fn embedding_params(&self) -> u64 {
        let mut e = (self.vocab + self.learned_positions + self.token_types) * self.hidden;
        if self.post_norm_encoder {
            e += self.norm_params();
        }
        e
    }

    /// Every parameter, as `sum(p.numel() for p in model.parameters())` counts them.
    pub fn params(&self) -> u64 {
        let final_norm = if self.post_norm_encoder {
            0
        } else {
            self.norm_params()
        };
        let head = if self.tied_embeddings || self.post_norm_encoder {
            0
        } else {
            self.vocab * self.hidden
        } + if self.lm_head_bias { self.vocab } else { 0 };
        let pooler = if self.pooler {
            self.hidden * self.hidden + self.hidden
        } else {
            0
        };
        self.embedding_params() + self.layers * self.layer_params() + final_norm + head + pooler
    }

    /// Every parameter tensor with its element count, in the order a Hugging Face model of this
    /// shape registers them (embeddings, then each layer's attention, MLP and norms, then the
    /// final norm, the head and BERT's pooler): the inventory `simulate ddp` and `fsdp` bucket.
    /// Their counts add up to [`Self::params`]; a fused projection (GPT-2's `c_attn`) is
    /// listed as its parts (q, k, v), which buckets the same bytes in the same order.
    pub fn tensors(&self) -> Vec<(String, u64)> {
        let h = self.hidden;
        let mut t: Vec<(String, u64)> = vec![("embed_tokens.weight".into(), self.vocab * h)];
        if self.learned_positions > 0 {
            t.push(("embed_positions.weight".into(), self.learned_positions * h));
        }
        if self.token_types > 0 {
            t.push(("token_type_embeddings.weight".into(), self.token_types * h));
        }
        let norm = |t: &mut Vec<(String, u64)>, name: &str| {
            t.push((format!("{name}.weight"), h));
            if self.norm_bias {
                t.push((format!("{name}.bias"), h));
            }
        };
        if self.post_norm_encoder {
            norm(&mut t, "embeddings.norm");
        }
        for layer in 0..self.layers {
            let at = |what: &str| format!("layers.{layer}.{what}");
            for (name, i, o) in self.linears() {
                let module = match name {
                    "gate" | "up" | "down" => format!("mlp.{name}_proj"),
                    _ => format!("self_attn.{name}_proj"),
                };
                t.push((at(&format!("{module}.weight")), i * o));
                let bias = match name {
                    "q" | "k" | "v" => self.qkv_bias,
                    "o" => self.out_bias,
                    _ => self.mlp_bias,
                };
                if bias {
                    t.push((at(&format!("{module}.bias")), o));
                }
            }
            for n in 0..self.norms_per_layer {
                norm(&mut t, &at(&format!("norm{}", n + 1)));
            }
        }
        if !self.post_norm_encoder {
            norm(&mut t, "norm");
        }
        if !(self.tied_embeddings || self.post_norm_encoder) {
            t.push(("lm_head.weight".into(), self.vocab * h));
        }
        if self.lm_head_bias {
            t.push(("lm_head.bias".into(), self.vocab));
        }
        if self.pooler {
            t.push(("pooler.dense.weight".into(), h * h));
            t.push(("pooler.dense.bias".into(), h));
        }
        t
    }

    /// The largest single module (DeepSpeed's "largest layer": a module's own parameters):
    /// the token embedding or the largest linear.
    pub fn largest_module_params(&self) -> u64 {
        self.linears()
            .iter()
            .map(|(_, i, o)| i * o)
            .chain(std::iter::once(self.vocab * self.hidden))
            .max()
            .unwrap_or(0)
    }

    /// Parameters LoRA of `rank` adds on `modules` of every layer: r·(in + out) per linear.
    /// A module the architecture lacks (a gate without a gated MLP) adds nothing.
    pub fn lora_params(&self, rank: u64, modules: &[String]) -> u64 {
        self.layers
            * self
                .linears()
                .iter()
                .filter(|(n, _, _)| modules.iter().any(|m| m == n))
                .map(|(_, i, o)| rank * (i + o))
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_shapes_tensors_add_up_to_its_parameter_count() {
        for name in super::super::presets::preset_names() {
            let shape = super::super::presets::preset(name).unwrap_or_else(|e| panic!("{e}"));
            let sum: u64 = shape.tensors().iter().map(|t| t.1).sum();
            assert_eq!(sum, shape.params(), "{name}");
        }
    }

    #[test]
    fn lora_on_query_and_value_of_llama2_7b_is_4_2_million() {
        // PEFT's print_trainable_parameters for Llama-2-7B, r = 8 on q_proj and v_proj:
        // "trainable params: 4,194,304".
        let shape = super::super::presets::preset("llama2-7b").unwrap_or_else(|e| panic!("{e}"));
        let modules = vec!["q".to_string(), "v".to_string()];
        assert_eq!(shape.lora_params(8, &modules), 4_194_304);
    }
}
