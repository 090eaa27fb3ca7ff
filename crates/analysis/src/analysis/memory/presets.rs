//! Transformer shapes by name (copied from each model's published `config.json`) and the
//! reader of a Hugging Face `config.json` (Llama-style names, and GPT-2's `n_embd`/`n_layer`).

use super::shape::Shape;
use serde::Deserialize;
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ShapeError {
    /// The name, the shapes, and a near name when there is one.
    #[error("unknown model '{0}' for the memory planner{2}; shapes: {1} (or a Hugging Face config.json file)")]
    Unknown(String, String, String),
    #[error("config.json: {0}")]
    Config(String),
}

/// (name, published config it copies, the published parameter count it must add up to).
pub const PRESETS: &[(&str, &str, u64)] = &[
    (
        "gpt2",
        "huggingface.co/openai-community/gpt2/config.json",
        124_439_808,
    ),
    (
        "gpt2-medium",
        "huggingface.co/openai-community/gpt2-medium/config.json",
        354_823_168,
    ),
    (
        "gpt2-xl",
        "huggingface.co/openai-community/gpt2-xl/config.json",
        1_557_611_200,
    ),
    (
        "bert-base",
        "huggingface.co/google-bert/bert-base-uncased/config.json",
        109_482_240,
    ),
    (
        "bert-large",
        "huggingface.co/google-bert/bert-large-uncased/config.json",
        335_141_888,
    ),
    (
        "llama2-7b",
        "huggingface.co/meta-llama/Llama-2-7b-hf/config.json",
        6_738_415_616,
    ),
    (
        "qwen2-1.5b",
        "huggingface.co/Qwen/Qwen2-1.5B/config.json",
        1_543_714_304,
    ),
    (
        "gemma-2b",
        "huggingface.co/google/gemma-2b/config.json",
        2_506_172_416,
    ),
    (
        "phi-2",
        "huggingface.co/microsoft/phi-2/config.json",
        2_779_683_840,
    ),
];

fn gpt2(name: &str, layers: u64, hidden: u64, heads: u64) -> Shape {
    Shape {
        gated_mlp: false,
        tied_embeddings: true,
        learned_positions: 1024,
        max_positions: Some(1024),
        norm_bias: true,
        qkv_bias: true,
        out_bias: true,
        mlp_bias: true,
        ..Shape::decoder(name, layers, hidden, heads, 4 * hidden, 50_257)
    }
}

fn bert(name: &str, layers: u64, hidden: u64, heads: u64) -> Shape {
    Shape {
        learned_positions: 512,
        max_positions: Some(512),
        token_types: 2,
        post_norm_encoder: true,
        pooler: true,
        ..gpt2(name, layers, hidden, heads)
    }
    .with_vocab(30_522)
}

impl Shape {
    fn with_vocab(mut self, vocab: u64) -> Shape {
        self.vocab = vocab;
        self
    }
}

fn build(name: &str) -> Option<Shape> {
    Some(match name {
        "gpt2" => gpt2(name, 12, 768, 12),
        "gpt2-medium" => gpt2(name, 24, 1024, 16),
        "gpt2-xl" => gpt2(name, 48, 1600, 25),
        "bert-base" => bert(name, 12, 768, 12),
        "bert-large" => bert(name, 24, 1024, 16),
        "llama2-7b" => Shape {
            max_positions: Some(4096),
            ..Shape::decoder(name, 32, 4096, 32, 11_008, 32_000)
        },
        "qwen2-1.5b" => Shape {
            kv_heads: 2,
            tied_embeddings: true,
            max_positions: Some(131_072),
            qkv_bias: true,
            ..Shape::decoder(name, 28, 1536, 12, 8960, 151_936)
        },
        "gemma-2b" => Shape {
            kv_heads: 1,
            head_dim: 256,
            tied_embeddings: true,
            max_positions: Some(8192),
            ..Shape::decoder(name, 18, 2048, 8, 16_384, 256_000)
        },
        "phi-2" => Shape {
            gated_mlp: false,
            norm_bias: true,
            norms_per_layer: 1,
            qkv_bias: true,
            out_bias: true,
            mlp_bias: true,
            lm_head_bias: true,
            max_positions: Some(2048),
            ..Shape::decoder(name, 32, 2560, 32, 10_240, 51_200)
        },
        _ => return None,
    })
}

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
}

/// A shipped shape by name.
pub fn preset(name: &str) -> Result<Shape, ShapeError> {
    let want = name.trim().to_ascii_lowercase();
    let (n, source, _) = PRESETS.iter().find(|p| p.0 == want).ok_or_else(|| {
        // The one model list (`analysis::models::preset_names`) names inventories without a
        // transformer shape too: said as such, not as unknown.
        // mutual import with crate::analysis::models: the list of model names is one (models
        // reads the shapes here for its inventories; the shapes' error names its inventories).
        let all = crate::analysis::models::preset_names();
        let hint = if all.contains(&want) {
            format!(
                " (`{want}` is a tensor inventory `simulate ddp` and `fsdp` take; the memory planner needs a transformer's shape, which it does not have)"
            )
        } else {
            let listed: Vec<&str> = all.iter().map(String::as_str).collect();
            crate::flags::did_you_mean(name, &listed)
        };
        ShapeError::Unknown(name.into(), preset_names().join(", "), hint)
    })?;
    let mut shape =
        build(n).ok_or_else(|| ShapeError::Unknown(name.into(), String::new(), String::new()))?;
    shape.source = format!("preset ({source})");
    Ok(shape)
}

/// The fields of a Hugging Face `config.json` the planner reads (others are ignored: configs
/// carry many).
#[derive(Deserialize, Default)]
struct HfConfig {
    model_type: Option<String>,
    #[serde(alias = "n_embd", alias = "d_model")]
    hidden_size: Option<u64>,
    #[serde(alias = "n_layer", alias = "num_layers")]
    num_hidden_layers: Option<u64>,
    #[serde(alias = "n_head")]
    num_attention_heads: Option<u64>,
    #[serde(alias = "num_kv_heads")]
    num_key_value_heads: Option<u64>,
    head_dim: Option<u64>,
    /// Falcon: one key/value head (the 7B), or `num_kv_heads` groups and two norms per layer
    /// (the new decoder architecture of the 40B and 180B); the MLP is `ffn_hidden_size` or
    /// 4 × hidden, not gated; `bias` on every linear.
    multi_query: Option<bool>,
    new_decoder_architecture: Option<bool>,
    ffn_hidden_size: Option<u64>,
    bias: Option<bool>,
    #[serde(alias = "n_inner")]
    intermediate_size: Option<u64>,
    vocab_size: Option<u64>,
    tie_word_embeddings: Option<bool>,
    #[serde(alias = "n_positions")]
    max_position_embeddings: Option<u64>,
    type_vocab_size: Option<u64>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    /// Mixture-of-experts configs (Mixtral, Qwen-MoE, DeepSeek) name their experts so.
    num_local_experts: Option<u64>,
    num_experts: Option<u64>,
    n_routed_experts: Option<u64>,
}

/// The largest sizes the planner takes (from a config or the flags): beyond them the
/// parameter count could wrap, and no published model comes near.
pub const SIZE_BOUNDS: &[(&str, u64)] = &[
    ("layers", 100_000),
    ("hidden", 1 << 20),
    ("heads", 1 << 16),
    ("ffn", 1 << 22),
    ("vocab", 1 << 24),
    ("head_dim", 1 << 16),
    ("positions", 1 << 24),
];

/// A size refused beyond its bound (`SIZE_BOUNDS`).
pub fn check_size(what: &str, field: &str, value: u64) -> Result<u64, ShapeError> {
    let bound = SIZE_BOUNDS
        .iter()
        .find(|b| b.0 == what)
        .map_or(u64::MAX, |b| b.1);
    if value > bound {
        return Err(ShapeError::Config(format!(
            "`{field}` {value} is beyond {bound}, the most the planner takes"
        )));
    }
    Ok(value)
}

/// Hugging Face's default for `tie_word_embeddings` by `model_type` (each config class's
/// own default: GPT2Config, GemmaConfig tie; LlamaConfig, MistralConfig, Qwen2Config,
/// PhiConfig do not); `None` for a type not listed here.
fn ties_by_default(model_type: &str) -> Option<bool> {
    match model_type {
        "gpt2" | "gemma" | "gemma2" | "bert" | "roberta" | "falcon" => Some(true),
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen3" | "phi" => Some(false),
        _ => None,
    }
}

/// Falcon's shape: multi-query or grouped attention, parallel attention with one norm (two in
/// the new decoder architecture), a 4h GELU MLP unless `ffn_hidden_size` says, `bias` on every
/// linear.
fn falcon(name: &str, c: &HfConfig, layers: u64, hidden: u64, heads: u64, vocab: u64) -> Shape {
    let biased = c.bias.unwrap_or(false);
    let new = c.new_decoder_architecture.unwrap_or(false);
    let mut f = Shape::decoder(
        name,
        layers,
        hidden,
        heads,
        c.ffn_hidden_size.unwrap_or(4 * hidden),
        vocab,
    );
    f.gated_mlp = false;
    f.norm_bias = true;
    // Parallel attention: one norm per layer, two in the new architecture.
    f.norms_per_layer = if new { 2 } else { 1 };
    f.qkv_bias = biased;
    f.out_bias = biased;
    f.mlp_bias = biased;
    f
}

/// Configs the planner does not model, refused with the reason: mixture-of-experts and
/// encoder-decoder models.
fn refuse_unmodelled(c: &HfConfig) -> Result<(), ShapeError> {
    if let Some((field, n)) = [
        ("num_local_experts", c.num_local_experts),
        ("num_experts", c.num_experts),
        ("n_routed_experts", c.n_routed_experts),
    ]
    .into_iter()
    .find_map(|(f, v)| v.filter(|&n| n > 0).map(|n| (f, n)))
    {
        return Err(ShapeError::Config(format!(
            "a mixture-of-experts model (`{field}` {n}): the planner does not model experts"
        )));
    }
    if let Some(t) = c.model_type.as_deref().filter(|t| {
        [
            "t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "longt5",
        ]
        .contains(t)
    }) {
        return Err(ShapeError::Config(format!(
            "an encoder-decoder model (`model_type` {t}): the planner models one stack (a decoder, or BERT's encoder), not two with cross-attention; --layers/--hidden/--heads/--vocab give one stack's shape"
        )));
    }
    Ok(())
}

/// A shape from a Hugging Face `config.json`. The architecture's conventions (norms, biases,
/// gating) follow `model_type`; an unknown type is read as a Llama-style decoder, said in the
/// returned note.
pub fn from_hf_config(name: &str, text: &str) -> Result<(Shape, Vec<String>), ShapeError> {
    let c: HfConfig =
        serde_json::from_str(text).map_err(|e| ShapeError::Config(format!("not JSON: {e}")))?;
    let need = |v: Option<u64>, field: &str| {
        v.filter(|&n| n > 0)
            .ok_or_else(|| ShapeError::Config(format!("`{field}` is missing or 0")))
    };
    refuse_unmodelled(&c)?;
    let hidden = check_size("hidden", "hidden_size", need(c.hidden_size, "hidden_size")?)?;
    let layers = check_size(
        "layers",
        "num_hidden_layers",
        need(c.num_hidden_layers, "num_hidden_layers")?,
    )?;
    let heads = check_size(
        "heads",
        "num_attention_heads",
        need(c.num_attention_heads, "num_attention_heads")?,
    )?;
    let vocab = check_size("vocab", "vocab_size", need(c.vocab_size, "vocab_size")?)?;
    let ffn = c
        .intermediate_size
        .filter(|&n| n > 0)
        .map(|n| check_size("ffn", "intermediate_size", n))
        .transpose()?;
    let head_dim = c
        .head_dim
        .filter(|&n| n > 0)
        .map(|n| check_size("head_dim", "head_dim", n))
        .transpose()?;
    let positions = c
        .max_position_embeddings
        .filter(|&n| n > 0)
        .map(|n| check_size("positions", "max_position_embeddings", n))
        .transpose()?;
    if head_dim.is_none() && hidden % heads != 0 {
        return Err(ShapeError::Config(format!(
            "num_attention_heads {heads} does not divide hidden_size {hidden} (and no head_dim)"
        )));
    }
    let model_type = c.model_type.clone().unwrap_or_default();
    let mut notes = Vec::new();
    let mut shape = match model_type.as_str() {
        "gpt2" => Shape {
            ffn: ffn.unwrap_or(4 * hidden),
            learned_positions: positions.unwrap_or(1024),
            ..gpt2(name, layers, hidden, heads).with_vocab(vocab)
        },
        "bert" | "roberta" => Shape {
            ffn: need(ffn, "intermediate_size")?,
            learned_positions: positions.unwrap_or(512),
            token_types: c.type_vocab_size.unwrap_or(2),
            ..bert(name, layers, hidden, heads).with_vocab(vocab)
        },
        "falcon" => falcon(name, &c, layers, hidden, heads, vocab),
        "phi" => Shape {
            ffn: need(ffn, "intermediate_size")?,
            vocab,
            ..build("phi-2").unwrap_or_else(|| Shape::decoder(name, layers, hidden, heads, 0, 0))
        },
        other => {
            let known = [
                "llama", "mistral", "qwen2", "gemma", "gemma2", "mixtral", "qwen3",
            ];
            if !known.contains(&other) {
                notes.push(format!(
                    "model_type `{other}` is read as a Llama-style decoder (RMSNorm, gated MLP, rotary)"
                ));
            }
            Shape {
                qkv_bias: other == "qwen2" || c.attention_bias.unwrap_or(false),
                out_bias: c.attention_bias.unwrap_or(false),
                mlp_bias: c.mlp_bias.unwrap_or(false),
                ..Shape::decoder(
                    name,
                    layers,
                    hidden,
                    heads,
                    need(ffn, "intermediate_size")?,
                    vocab,
                )
            }
        }
    };
    shape.name = name.into();
    shape.layers = layers;
    shape.hidden = hidden;
    shape.heads = heads;
    shape.kv_heads = c.num_key_value_heads.filter(|&n| n > 0).unwrap_or(heads);
    if model_type == "falcon" && !c.new_decoder_architecture.unwrap_or(false) {
        shape.kv_heads = if c.multi_query.unwrap_or(true) {
            1
        } else {
            heads
        };
    }
    shape.head_dim = head_dim.unwrap_or(hidden / heads);
    shape.max_positions = positions.or(match model_type.as_str() {
        "gpt2" => Some(1024),
        "bert" | "roberta" => Some(512),
        _ => None,
    });
    shape.tied_embeddings = match (c.tie_word_embeddings, ties_by_default(&model_type)) {
        (Some(tied), _) => tied,
        (None, Some(tied)) => tied,
        (None, None) => {
            notes.push(format!(
                "tie_word_embeddings not given and model_type `{model_type}` has no known default: read as untied (a separate output head)"
            ));
            false
        }
    };
    if shape.kv_heads > heads || heads % shape.kv_heads != 0 {
        return Err(ShapeError::Config(format!(
            "num_key_value_heads {} does not divide num_attention_heads {heads}",
            shape.kv_heads
        )));
    }
    Ok((shape, notes))
}

#[cfg(test)]
#[path = "presets_tests.rs"]
mod tests;
