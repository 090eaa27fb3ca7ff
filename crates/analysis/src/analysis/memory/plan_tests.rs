use super::super::{plan, presets};
use super::*;

const GIB: f64 = (1u64 << 30) as f64;

pub(crate) use super::super::seeds::seed_004;

#[test]
fn terms_add_up_and_come_largest_first() {
    let e = seed_004().estimate(None);
    let sum: f64 = e.gpu.terms.iter().map(|t| t.bytes).sum();
    assert!((sum - e.gpu.total_bytes).abs() < 1.0);
    assert!(e.gpu.terms.windows(2).all(|w| w[0].bytes >= w[1].bytes));
    // Adam's fp32 states of 2.5 B parameters: 12 B each, nothing sharded on one GPU.
    assert_eq!(e.gpu.terms[0].name, "optimizer states");
    assert_eq!(e.gpu.terms[0].bytes, 12.0 * 2_506_172_416.0);
    assert_eq!(e.gpu.fits(), Some(false));
}

#[test]
fn the_logits_of_a_256k_vocabulary_are_the_500_mib_the_report_failed_to_allocate() {
    // "Tried to allocate 500.00 MiB": 1024 tokens x 256000 logits x 2 bytes.
    let s = seed_004();
    let batch = s.batch();
    let (_, hf) = activations::outside_layers_bytes(&s.shape, batch, Logits::HfUpcast);
    assert_eq!(hf / 18.0 * 2.0, 500.0 * 1024.0 * 1024.0);
}

#[test]
fn offload_and_lora_are_ranked_changes_that_fit_and_a_fitting_setup_gets_none() {
    // A host with room for DeepSpeed's 16 B per offloaded parameter and its 1.5 margin.
    let s = Setup {
        host_capacity: Some((64.0 * GIB, "test".into())),
        ..seed_004()
    };
    let doc = plan(&s, None, None, Vec::new(), None);
    let fitting: Vec<&str> = doc
        .changes
        .iter()
        .filter(|c| c.fits)
        .map(|c| c.change.as_str())
        .collect();
    assert!(
        fitting.iter().any(|c| c.contains("optimizer offloaded")),
        "{fitting:?}"
    );
    assert!(
        fitting.iter().any(|c| c.contains("--lora-rank")),
        "{fitting:?}"
    );
    // Offload moves the gradients down and the weights up over PCIe every step.
    let offload = doc
        .changes
        .iter()
        .find(|c| c.change.contains("optimizer offloaded"));
    assert!(offload.is_some_and(|c| c.added_host_device_bytes_per_gpu > 0.0));
    let fits = Setup {
        gpu_capacity: Some((80.0 * GIB, "test".into())),
        ..s
    };
    assert!(plan(&fits, None, None, Vec::new(), None).changes.is_empty());
}

#[test]
fn lora_keeps_only_the_adapters_gradients_and_optimizer_states() {
    let mut s = seed_004();
    s.strategy = Strategy::NoShard;
    s.trainable = Trainable::Lora {
        rank: 8,
        modules: vec!["q".into(), "v".into()],
    };
    let (params, trainable) = s.params();
    // Gemma-2B, r = 8 on q (2048 -> 2048) and v (2048 -> 256): 18 x 8 x (4096 + 2304).
    assert_eq!(trainable, 18 * 8 * (4096 + 2304));
    assert_eq!(params, 2_506_172_416 + trainable);
    let e = s.estimate(None);
    let term = |name: &str| e.gpu.terms.iter().find(|t| t.name == name).map(|t| t.bytes);
    assert_eq!(term("optimizer states"), Some(12.0 * trainable as f64));
    assert_eq!(term("weights"), Some(2.0 * params as f64));
}

#[test]
fn communication_comes_from_the_fsdp_model() {
    // ZeRO-3 over 8 GPUs moves 1.5x DDP's bytes (ZeRO §7), here for the planner's own sizes.
    let mut s = seed_004();
    s.world_size = 8;
    s.gpus_per_node = 8;
    let zero3 = s.estimate(None).traffic.bus_bytes_per_gpu;
    s.strategy = Strategy::NoShard;
    let ddp = s.estimate(None).traffic.bus_bytes_per_gpu;
    assert!((zero3 / ddp - 1.5).abs() < 1e-9);
    let curve = Curve::AlphaBeta {
        latency_s: 0.0,
        busbw_bytes_per_s: 100e9,
    };
    assert!(s
        .estimate(Some(&curve))
        .traffic
        .comm_s
        .is_some_and(|t| t > 0.0));
}

#[test]
fn llama2_7b_under_zero2_on_8_gpus_is_deepspeeds_estimate_term_by_term() {
    // estimate_zero2_model_states_mem_needs for 6738415616 parameters on 8 GPUs, one node:
    // GPU 4P + 16P/8 = 37.65 GiB; host 4P x 8 x 1.5 = 301.23 GiB; offloaded, GPU 2P =
    // 12.55 GiB and host P x max(4 x 8, 16) x 1.5 = 301.23 GiB.
    let mut s = seed_004();
    s.shape = presets::preset("llama2-7b").unwrap_or_else(|e| panic!("{e}"));
    s.strategy = Strategy::ShardGradOp;
    (s.world_size, s.gpus_per_node) = (8, 8);
    s.host_capacity = Some((512e9, "test".into()));
    let states_gib = |e: &Estimate| {
        let names = ["weights", "gradients", "optimizer states"];
        let b: f64 = e
            .gpu
            .terms
            .iter()
            .filter(|t| names.contains(&t.name.as_str()))
            .map(|t| t.bytes)
            .sum();
        (
            format!("{:.2}", b / GIB),
            format!("{:.2}", e.host.total_bytes / GIB),
        )
    };
    let (cpu, gpu) = states::deepspeed_zero2(6_738_415_616.0, 8, 1, false, 1.5);
    let want = (
        format!("{:.2}", gpu as f64 / GIB),
        format!("{:.2}", cpu as f64 / GIB),
    );
    assert_eq!(want, ("37.65".to_string(), "301.23".to_string()));
    assert_eq!(states_gib(&s.estimate(None)), want);
    s.offload_optimizer = Offload::Cpu;
    assert_eq!(
        states_gib(&s.estimate(None)),
        ("12.55".to_string(), "301.23".to_string())
    );
}

#[test]
fn sharded_terms_say_over_how_many_gpus_and_never_over_one() {
    let one = seed_004().estimate(None);
    let mut eight = seed_004();
    (eight.world_size, eight.gpus_per_node) = (8, 8);
    let eight = eight.estimate(None);
    let basis = |e: &Estimate, name: &str| {
        e.gpu
            .terms
            .iter()
            .chain(&e.host.terms)
            .find(|t| t.name == name)
            .map(|t| t.basis.clone())
            .unwrap_or_default()
    };
    for name in ["weights", "gradients", "optimizer states"] {
        assert!(
            basis(&eight, name).ends_with("/ 8 GPUs"),
            "{name}: {}",
            basis(&eight, name)
        );
        assert!(!basis(&one, name).contains("/ 1 GPUs"), "{name}");
    }
    assert!(one.host.terms.iter().all(|t| !t.basis.contains(" N")));
}

/// `accelerate estimate-memory bert-base-cased`, as Accelerate's model size estimator guide
/// prints it (huggingface.co/docs/accelerate/usage_guides/model_size_estimator): float32
/// largest layer 84.95 MB, total 413.18 MB, training using Adam 1.61 GB; float16 42.47 MB and
/// 206.59 MB. Its "MB" are MiB. It builds `AutoModel` (BertModel: the pooler, no MLM head) on
/// the meta device and counts buffers too: `position_ids` and `token_type_ids`, 512 int64
/// each. Its training figure is 4x the total: weights, gradients and Adam's two moments.
#[test]
fn bert_base_cased_is_accelerates_estimate_memory_table() {
    // huggingface.co/bert-base-cased/config.json (the fields the planner reads).
    let config = r#"{"architectures": ["BertForMaskedLM"], "hidden_size": 768,
        "intermediate_size": 3072, "max_position_embeddings": 512, "model_type": "bert",
        "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2,
        "vocab_size": 28996}"#;
    let (shape, _) =
        presets::from_hf_config("bert-base-cased", config).unwrap_or_else(|e| panic!("{e}"));
    const MIB: f64 = (1u64 << 20) as f64;
    let buffers = 2.0 * 512.0 * 8.0;
    let params = shape.params() as f64;
    let largest = shape.largest_module_params() as f64;
    assert_eq!(format!("{:.2}", 4.0 * largest / MIB), "84.95");
    assert_eq!(format!("{:.2}", 2.0 * largest / MIB), "42.47");
    assert_eq!(format!("{:.2}", (4.0 * params + buffers) / MIB), "413.18");
    assert_eq!(format!("{:.2}", (2.0 * params + buffers) / MIB), "206.59");
    // The planner's fp32 model states on one GPU: 4 + 4 + 8 B per parameter.
    let s = Setup {
        shape,
        strategy: Strategy::NoShard,
        offload_optimizer: Offload::None,
        precision: TrainPrecision::Fp32,
        ..seed_004()
    };
    let e = s.estimate(None);
    let states: f64 = e
        .gpu
        .terms
        .iter()
        .filter(|t| ["weights", "gradients", "optimizer states"].contains(&t.name.as_str()))
        .map(|t| t.bytes)
        .sum();
    assert_eq!(states, 16.0 * params);
    assert_eq!(format!("{:.2}", states / GIB), "1.61");
}

fn term(s: &Setup, name: &str) -> f64 {
    s.estimate(None)
        .gpu
        .terms
        .iter()
        .find(|t| t.name == name)
        .map_or(0.0, |t| t.bytes)
}

#[test]
fn qlora_stores_the_decoder_linears_in_nf4_and_keeps_embeddings_and_head_16_bit() {
    let lora = Setup {
        trainable: Trainable::Lora {
            rank: 8,
            modules: vec!["q".into(), "v".into()],
        },
        strategy: Strategy::NoShard,
        ..seed_004()
    };
    let q = Setup {
        quantize: Some(Quantization::Nf4),
        ..lora.clone()
    };
    let linears = q.quantized_params() as f64;
    let s = &q.shape;
    let per_layer: u64 = s.linears().iter().map(|(_, i, o)| i * o).sum();
    assert_eq!(linears, (per_layer * s.layers) as f64);
    // Each quantized weight drops from 2 bytes to 0.516; nothing else moves.
    let saved = term(&lora, "weights") - term(&q, "weights");
    assert!((saved - linears * (2.0 - Quantization::Nf4.bytes_per_weight())).abs() < 1.0);
    // A quantized base cannot train.
    let full = Setup {
        quantize: Some(Quantization::Nf4),
        ..seed_004()
    };
    assert!(full.invalid().unwrap_or("").contains("frozen base"));
}

#[test]
fn autocast_holds_16_bit_copies_and_foreach_adam_a_moment_beyond_the_activations() {
    let amp = Setup {
        precision: TrainPrecision::Amp,
        strategy: Strategy::NoShard,
        ..seed_004()
    };
    assert!(term(&amp, "16-bit weight copies (autocast)") > 0.0);
    let mixed = Setup {
        precision: TrainPrecision::Mixed,
        ..amp.clone()
    };
    assert_eq!(term(&mixed, "16-bit weight copies (autocast)"), 0.0);
    // foreach AdamW's temporary is one moment (4 B per parameter under autocast), counted
    // only where it exceeds what the activations freed; fused AdamW has none.
    let long = Setup {
        seq_len: 16,
        ..amp.clone()
    };
    let t = term(&long, "optimizer step temporaries");
    let moment = 4.0 * long.params().1 as f64;
    assert!(t > 0.0 && t < moment, "{t} of {moment}");
    let fused = Setup {
        optimizer: Optimizer::AdamwFused,
        ..long.clone()
    };
    assert_eq!(term(&fused, "optimizer step temporaries"), 0.0);
    // 8-bit Adam keeps a quarter of AdamW's fp32 moments.
    let adam8 = Setup {
        optimizer: Optimizer::Adamw8bit,
        ..long
    };
    assert_eq!(
        term(&adam8, "optimizer states"),
        2.0 * adam8.params().1 as f64
    );
}
