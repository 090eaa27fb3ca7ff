//! Activation memory of one micro-batch by the accounting of Korthikanti et al. 2022,
//! "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198, §4):
//! per layer `sbh(34 + 5as/h)` bytes with 16-bit activations and 1-byte dropout masks, no
//! tensor or sequence parallelism. The 34 is written out term by term so that grouped-query
//! attention, a gated MLP and an MLP width other than 4h count what they hold; with
//! multi-head attention and a 4h two-linear MLP it is the paper's 34 exactly.

use super::shape::Shape;
pub use crate::documents::memory::{Checkpointing, Logits};

/// One micro-batch's shape and the width of an activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Batch {
    pub seq_len: u64,
    pub micro_batch: u64,
    /// 2 for bf16/fp16 activations, 4 for fp32.
    pub bytes_per_value: f64,
    /// FlashAttention: the s×s scores are never stored (the `5as²b` term goes).
    pub flash_attention: bool,
}

/// One layer's activations split as the paper does: the part linear in s, and the attention
/// scores' part in s².
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    pub linear_bytes: f64,
    pub scores_bytes: f64,
}

impl Layer {
    pub fn bytes(&self) -> f64 {
        self.linear_bytes + self.scores_bytes
    }
}

/// The paper's per-layer terms, in units of `sb` (tokens of the micro-batch) bytes at 16 bits.
pub fn layer(shape: &Shape, batch: Batch) -> Layer {
    let (h, f) = (shape.hidden as f64, shape.ffn as f64);
    let q = (shape.heads * shape.head_dim) as f64;
    let kv = (shape.kv_heads * shape.head_dim) as f64;
    // Attention: QKV input 2h, Q 2q, K and V 2kv each, the output projection's input 2q,
    // its dropout mask h (1 byte). With q = kv = h: 11h.
    let attention = 2.0 * h + 2.0 * q + 4.0 * kv + 2.0 * q + h;
    // MLP: input 2h and dropout mask h; two linears hold the first one's output and the
    // activation's (4f: 16h at f = 4h); gated, the gate's and up's outputs, the activation's
    // and the product (8f).
    let mlp = 3.0 * h + if shape.gated_mlp { 8.0 * f } else { 4.0 * f };
    // Each norm keeps its input (2h).
    let norms = 2.0 * h * shape.norms_per_layer as f64;
    let sb = (batch.seq_len * batch.micro_batch) as f64;
    let scale = batch.bytes_per_value / 2.0;
    // Softmax output 2as²b, its dropout mask as²b, the dropout's output 2as²b.
    let scores = if batch.flash_attention {
        0.0
    } else {
        5.0 * shape.heads as f64 * (batch.seq_len as f64) * sb
    };
    Layer {
        linear_bytes: sb * (attention + mlp + norms) * scale,
        scores_bytes: scores * scale,
    }
}

/// What the layers hold at the peak under a checkpointing policy: every layer's activations;
/// with selective recomputation, all but the attention scores; with full recomputation, each
/// layer's input (2sbh) plus one layer recomputed in full during backward.
pub fn layers_bytes(shape: &Shape, batch: Batch, policy: Checkpointing) -> f64 {
    let one = layer(shape, batch);
    let l = shape.layers as f64;
    match policy {
        Checkpointing::None => l * one.bytes(),
        Checkpointing::Selective => l * one.linear_bytes,
        Checkpointing::Full => {
            let input = 2.0 * (batch.seq_len * batch.micro_batch * shape.hidden) as f64;
            l * input * batch.bytes_per_value / 2.0 + one.bytes()
        }
    }
}

/// Outside the layers (§4.3): the embedding's dropout mask sbh, and the output layer: the
/// final norm's and the projection's inputs (4sbh) and the logits as the loss keeps them.
pub fn outside_layers_bytes(shape: &Shape, batch: Batch, logits: Logits) -> (f64, f64) {
    let sb = (batch.seq_len * batch.micro_batch) as f64;
    let h = shape.hidden as f64;
    let edges = sb * h + 4.0 * sb * h * batch.bytes_per_value / 2.0;
    let logits_bytes = loss_allocations(shape, batch, logits)
        .iter()
        .map(|a| a.bytes)
        .sum();
    (edges, logits_bytes)
}

/// One tensor the loss allocates.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub what: String,
    pub bytes: f64,
}

/// The loss's tensors in the order a step allocates them, all held at the peak (the start of
/// backward). Hugging Face's causal LMs (`logits = logits.float()`, then `CrossEntropyLoss`
/// on the shifted logits): the 16-bit logits, their fp32 upcast (none in fp32 training, where
/// `.float()` returns the tensor itself), the shifted contiguous copy, the log-softmax kept
/// for backward, and its fp32 gradient. A chunked loss holds one chunk, small beside them.
pub fn loss_allocations(shape: &Shape, batch: Batch, logits: Logits) -> Vec<Allocation> {
    let sbv = (batch.seq_len * batch.micro_batch) as f64 * shape.vocab as f64;
    let w = batch.bytes_per_value;
    let one = |what: &str, width: f64| Allocation {
        what: format!("{what} (seq x micro-batch x vocab x {width} B)"),
        bytes: width * sbv,
    };
    match logits {
        Logits::Fp32 => vec![one("the fp32 logits", 4.0)],
        Logits::HfUpcast => {
            let mut out = vec![one(
                if w < 4.0 {
                    "the 16-bit logits, lm_head's output"
                } else {
                    "the logits, lm_head's output"
                },
                w,
            )];
            if w < 4.0 {
                out.push(one("the logits' fp32 upcast", 4.0));
            }
            out.push(one("the shifted logits' contiguous copy", 4.0));
            out.push(one("the log-softmax", 4.0));
            out.push(one("the log-softmax's gradient", 4.0));
            out
        }
        Logits::Fused => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt3(name: &str, layers: u64, hidden: u64, heads: u64) -> Shape {
        Shape {
            gated_mlp: false,
            norm_bias: true,
            ..Shape::decoder(name, layers, hidden, heads, 4 * hidden, 51_200)
        }
    }

    fn batch(flash: bool) -> Batch {
        Batch {
            seq_len: 2048,
            micro_batch: 1,
            bytes_per_value: 2.0,
            flash_attention: flash,
        }
    }

    #[test]
    fn per_layer_activations_are_the_papers_34_plus_5as_over_h() {
        // §4.1: sbh(34 + 5as/h). §4.2: for GPT-3 (a = 96, s = 2048, h = 12288) 5as/h = 80,
        // and for MT-NLG (a = 128, h = 20480) 64.
        for (shape, five_as_over_h) in [
            (gpt3("gpt3-175b", 96, 12_288, 96), 80.0),
            (gpt3("mt-nlg-530b", 105, 20_480, 128), 64.0),
        ] {
            let sbh = 2048.0 * shape.hidden as f64;
            let one = layer(&shape, batch(false));
            assert_eq!(one.linear_bytes, 34.0 * sbh, "{}", shape.name);
            assert_eq!(one.scores_bytes, five_as_over_h * sbh, "{}", shape.name);
        }
    }

    #[test]
    fn selective_recomputation_saves_what_the_paper_says() {
        // §4.2: selective recomputation saves 70% of the activation memory for GPT-3 and 65%
        // for MT-NLG; full recomputation keeps 2sbh per layer.
        for (shape, saved) in [
            (gpt3("gpt3-175b", 96, 12_288, 96), 0.70),
            (gpt3("mt-nlg-530b", 105, 20_480, 128), 0.65),
        ] {
            let none = layers_bytes(&shape, batch(false), Checkpointing::None);
            let selective = layers_bytes(&shape, batch(false), Checkpointing::Selective);
            assert!(
                ((1.0 - selective / none) - saved).abs() < 0.005,
                "{}",
                shape.name
            );
            let full = layers_bytes(&shape, batch(false), Checkpointing::Full);
            let sbh = 2048.0 * shape.hidden as f64;
            let one = layer(&shape, batch(false)).bytes();
            assert_eq!(full, shape.layers as f64 * 2.0 * sbh + one);
        }
    }

    #[test]
    fn flash_attention_removes_exactly_the_scores() {
        let shape = gpt3("gpt3-175b", 96, 12_288, 96);
        assert_eq!(
            layers_bytes(&shape, batch(true), Checkpointing::None),
            layers_bytes(&shape, batch(false), Checkpointing::Selective)
        );
    }

    #[test]
    fn the_output_layer_is_4sbh_times_1_plus_v_over_h_plus_the_embedding_mask() {
        // §4.3: the output layer's 4sbh(1 + v/h) (fp32 logits), the embedding dropout's sbh.
        let shape = gpt3("gpt3-175b", 96, 12_288, 96);
        let (edges, logits) = outside_layers_bytes(&shape, batch(false), Logits::Fp32);
        let sbh = 2048.0 * 12_288.0;
        let paper = sbh + 4.0 * sbh * (1.0 + 51_200.0 / 12_288.0);
        assert!(((edges + logits) / paper - 1.0).abs() < 1e-12);
    }
}
