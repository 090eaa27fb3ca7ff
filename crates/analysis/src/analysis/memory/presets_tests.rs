use super::*;

#[test]
fn every_preset_adds_up_to_its_published_parameter_count() {
    for (name, source, published) in PRESETS {
        let shape = preset(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(shape.params(), *published, "{name} ({source})");
    }
}

#[test]
fn gemma_2b_config_json_reads_as_the_preset() {
    // huggingface.co/google/gemma-2b/config.json (the fields the planner reads).
    let text = r#"{"architectures": ["GemmaForCausalLM"], "model_type": "gemma",
        "hidden_size": 2048, "intermediate_size": 16384, "num_attention_heads": 8,
        "num_hidden_layers": 18, "num_key_value_heads": 1, "head_dim": 256,
        "vocab_size": 256000, "hidden_act": "gelu", "torch_dtype": "bfloat16"}"#;
    let (shape, note) = from_hf_config("gemma", text).unwrap_or_else(|e| panic!("{e}"));
    assert!(note.is_empty(), "{note:?}");
    assert_eq!(shape.params(), 2_506_172_416);
    assert_eq!(shape.largest_module_params(), 256_000 * 2048);
}

#[test]
fn gpt2_names_and_untied_llama_read_right() {
    let gpt2 = r#"{"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25,
        "n_inner": null, "n_positions": 1024, "vocab_size": 50257}"#;
    let (shape, _) = from_hf_config("gpt2-xl", gpt2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 1_557_611_200);
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "vocab_size": 32000, "tie_word_embeddings": false}"#;
    let (shape, _) = from_hf_config("llama", llama).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 6_738_415_616);
}

#[test]
fn a_config_without_its_widths_is_refused_naming_the_field() {
    let e = from_hf_config("x", r#"{"model_type": "llama", "hidden_size": 64}"#);
    assert_eq!(
        e.err(),
        Some(ShapeError::Config(
            "`num_hidden_layers` is missing or 0".into()
        ))
    );
    let odd = r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 128}"#;
    assert!(from_hf_config("x", odd).is_err());
}

#[test]
fn absurd_sizes_heads_that_do_not_divide_and_experts_are_refused() {
    let base = |extra: &str| {
        format!(
            r#"{{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000{extra}}}"#
        )
    };
    let wraps = base("").replace("4096", "18446744073709551615");
    let e = from_hf_config("x", &wraps).err().map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("`hidden_size`")),
        "{e:?}"
    );
    let odd = base("").replace("\"num_attention_heads\": 32", "\"num_attention_heads\": 30");
    let e = from_hf_config("x", &odd).err().map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("does not divide")),
        "{e:?}"
    );
    for field in ["num_local_experts", "num_experts", "n_routed_experts"] {
        let moe = base(&format!(r#", "{field}": 8"#));
        let e = from_hf_config("x", &moe).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("mixture-of-experts")),
            "{e:?}"
        );
    }
}

#[test]
fn tied_embeddings_default_to_each_model_types_own_default() {
    // LlamaConfig and Qwen2Config default to untied, GPT2Config and GemmaConfig to tied: the
    // published counts hold without the field (Llama-2-7B 6738415616, Qwen2-1.5B's config
    // states it tied).
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000}"#;
    let (shape, notes) = from_hf_config("llama", llama).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 6_738_415_616);
    assert!(notes.is_empty(), "{notes:?}");
    let gpt2 = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "vocab_size": 50257}"#;
    let (shape, _) = from_hf_config("gpt2", gpt2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 124_439_808);
    let unknown = llama.replace("\"llama\"", "\"newarch\"");
    let (shape, notes) = from_hf_config("x", &unknown).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 6_738_415_616);
    assert!(
        notes.iter().any(|n| n.contains("read as untied")),
        "{notes:?}"
    );
}

#[test]
fn falcon_configs_count_what_huggingface_counts() {
    // tiiuae/falcon-7b: multi-query (one key/value head), parallel attention with one
    // LayerNorm, a 4h GELU MLP, tied head: 6,921,720,704 parameters.
    let f7 = r#"{"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32,
        "multi_query": true, "parallel_attn": true, "bias": false,
        "new_decoder_architecture": false, "vocab_size": 65024}"#;
    let (shape, notes) = from_hf_config("falcon-7b", f7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.params(), 6_921_720_704);
    assert_eq!(shape.kv_heads, 1);
    assert!(!shape.gated_mlp);
    assert!(notes.is_empty(), "{notes:?}");
    // tiiuae/falcon-40b: the new decoder architecture, 8 key/value groups, two norms.
    let f40 = r#"{"model_type": "falcon", "hidden_size": 8192, "n_head": 128, "n_layer": 60,
        "num_kv_heads": 8, "parallel_attn": true, "bias": false,
        "new_decoder_architecture": true, "vocab_size": 65024}"#;
    let (shape, _) = from_hf_config("falcon-40b", f40).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(shape.kv_heads, 8);
    assert_eq!(shape.norms_per_layer, 2);
    assert_eq!(shape.params(), 41_303_293_952);
}

#[test]
fn an_encoder_decoder_config_is_refused_saying_so() {
    let t5 = r#"{"model_type": "t5", "d_model": 1024, "num_layers": 24, "num_heads": 16,
        "d_ff": 4096, "vocab_size": 32128}"#;
    let e = from_hf_config("t5-large", t5).err().map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("encoder-decoder")),
        "{e:?}"
    );
}
