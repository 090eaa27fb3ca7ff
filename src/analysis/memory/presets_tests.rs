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
    assert_eq!(note, None);
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
