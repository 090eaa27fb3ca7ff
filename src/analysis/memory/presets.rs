//! Transformer shapes by name (copied from each model's published `config.json`) and the
//! reader of a Hugging Face `config.json` (Llama-style names, and GPT-2's `n_embd`/`n_layer`).

use super::shape::Shape;
use serde::Deserialize;
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ShapeError {
    #[error("unknown model '{0}' for the memory planner; shapes: {1}")]
    Unknown(String, String),
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
        "llama2-7b" => Shape::decoder(name, 32, 4096, 32, 11_008, 32_000),
        "qwen2-1.5b" => Shape {
            kv_heads: 2,
            tied_embeddings: true,
            qkv_bias: true,
            ..Shape::decoder(name, 28, 1536, 12, 8960, 151_936)
        },
        "gemma-2b" => Shape {
            kv_heads: 1,
            head_dim: 256,
            tied_embeddings: true,
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
    let (n, source, _) = PRESETS
        .iter()
        .find(|p| p.0 == want)
        .ok_or_else(|| ShapeError::Unknown(name.into(), preset_names().join(", ")))?;
    let mut shape = build(n).ok_or_else(|| ShapeError::Unknown(name.into(), String::new()))?;
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
    num_key_value_heads: Option<u64>,
    head_dim: Option<u64>,
    #[serde(alias = "n_inner")]
    intermediate_size: Option<u64>,
    vocab_size: Option<u64>,
    tie_word_embeddings: Option<bool>,
    #[serde(alias = "n_positions")]
    max_position_embeddings: Option<u64>,
    type_vocab_size: Option<u64>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
}

/// A shape from a Hugging Face `config.json`. The architecture's conventions (norms, biases,
/// gating) follow `model_type`; an unknown type is read as a Llama-style decoder, said in the
/// returned note.
pub fn from_hf_config(name: &str, text: &str) -> Result<(Shape, Option<String>), ShapeError> {
    let c: HfConfig =
        serde_json::from_str(text).map_err(|e| ShapeError::Config(format!("not JSON: {e}")))?;
    let need = |v: Option<u64>, field: &str| {
        v.filter(|&n| n > 0)
            .ok_or_else(|| ShapeError::Config(format!("`{field}` is missing or 0")))
    };
    let hidden = need(c.hidden_size, "hidden_size")?;
    let layers = need(c.num_hidden_layers, "num_hidden_layers")?;
    let heads = need(c.num_attention_heads, "num_attention_heads")?;
    let vocab = need(c.vocab_size, "vocab_size")?;
    let model_type = c.model_type.clone().unwrap_or_default();
    let ffn = c.intermediate_size.filter(|&n| n > 0);
    let mut note = None;
    let mut shape = match model_type.as_str() {
        "gpt2" => Shape {
            ffn: ffn.unwrap_or(4 * hidden),
            learned_positions: c.max_position_embeddings.unwrap_or(1024),
            ..gpt2(name, layers, hidden, heads).with_vocab(vocab)
        },
        "bert" | "roberta" => Shape {
            ffn: need(ffn, "intermediate_size")?,
            learned_positions: c.max_position_embeddings.unwrap_or(512),
            token_types: c.type_vocab_size.unwrap_or(2),
            ..bert(name, layers, hidden, heads).with_vocab(vocab)
        },
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
                note = Some(format!(
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
    shape.head_dim = c.head_dim.filter(|&n| n > 0).unwrap_or(hidden / heads);
    // Hugging Face's PretrainedConfig ties the embeddings unless told not to.
    shape.tied_embeddings = c.tie_word_embeddings.unwrap_or(true);
    if shape.kv_heads > heads || heads % shape.kv_heads != 0 {
        return Err(ShapeError::Config(format!(
            "num_key_value_heads {} does not divide num_attention_heads {heads}",
            shape.kv_heads
        )));
    }
    Ok((shape, note))
}

#[cfg(test)]
#[path = "presets_tests.rs"]
mod tests;
