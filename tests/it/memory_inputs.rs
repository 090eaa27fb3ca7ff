//! `ncclprobe simulate memory` refusing what it cannot plan: unreadable or absurd config.json
//! files, shapes that cannot be, and adapters or trainable counts the model does not have.

use crate::common;

use common::bin;
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

fn memory() -> assert_cmd::Command {
    let mut cmd = bin();
    cmd.args([
        "simulate",
        "memory",
        "--gpu-memory-gb",
        "80",
        "--host-memory-gb",
        "64",
    ]);
    cmd.timeout(std::time::Duration::from_secs(60));
    cmd
}

#[test]
fn a_config_that_is_binary_huge_or_a_directory_is_refused() {
    memory()
        .args(["--model-config", "/dev/zero"])
        .assert()
        .code(2)
        .stderr(contains("binary data (NUL bytes"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    memory()
        .arg("--model-config")
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(contains("is a directory"));
    let huge = dir.path().join("config.json");
    let mut text = String::from("{\"model_type\": \"llama\", \"pad\": \"");
    text.push_str(&" ".repeat(5 << 20));
    text.push_str("\"}");
    std::fs::write(&huge, text).unwrap_or_else(|e| panic!("{e}"));
    memory()
        .arg("--model-config")
        .arg(&huge)
        .assert()
        .code(2)
        .stderr(contains("larger than 4 MiB"));
}

#[test]
fn adapters_and_trainable_counts_the_model_lacks_are_refused() {
    memory()
        .args([
            "--model",
            "gpt2",
            "--lora-rank",
            "8",
            "--lora-modules",
            "gate",
        ])
        .assert()
        .code(2)
        .stderr(contains(
            "gpt2 has no `gate` projection; its linears: q, k, v, o, up, down",
        ));
    memory()
        .args([
            "--model",
            "gpt2",
            "--lora-rank",
            "1000",
            "--lora-modules",
            "q",
        ])
        .assert()
        .code(2)
        .stderr(contains("--lora-rank: 1000 is above 768"));
    memory()
        .args(["--model", "gpt2", "--lora-rank", "0"])
        .assert()
        .code(2)
        .stderr(contains("--lora-rank"));
    memory()
        .args(["--model", "gpt2", "--trainable-params", "2e9"])
        .assert()
        .code(2)
        .stderr(contains("more than the model's 124439808 parameters"));
    memory()
        .args([
            "--model",
            "gpt2",
            "--lora-rank",
            "8",
            "--lora-modules",
            "all",
        ])
        .assert()
        .success();
}

#[test]
fn absurd_config_sizes_and_experts_exit_2() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cases = [
        (
            r#""hidden_size": 18446744073709551615, "num_attention_heads": 32"#,
            "`hidden_size`",
        ),
        (
            r#""hidden_size": 4096, "num_attention_heads": 30"#,
            "does not divide",
        ),
        (
            r#""hidden_size": 4096, "num_attention_heads": 32, "num_local_experts": 8"#,
            "mixture-of-experts",
        ),
    ];
    for (i, (fields, says)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("config{i}.json"));
        let text = format!(
            r#"{{"model_type": "llama", {fields}, "intermediate_size": 11008,
            "num_hidden_layers": 32, "vocab_size": 32000}}"#
        );
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        memory()
            .arg("--model-config")
            .arg(&path)
            .assert()
            .code(2)
            .stderr(contains(*says));
    }
}

#[test]
fn capacities_no_gpu_has_and_oom_figures_that_contradict_are_refused() {
    // Review D33: these were planned as given ("fits: 4.59 GiB of inf GiB", exit 0).
    for (flag, value) in [
        ("--gpu-memory-gb", "1e308"),
        ("--gpu-memory-gib", "100000"),
        ("--cuda-context-mb", "1e300"),
    ] {
        bin()
            .args(["simulate", "memory", "--model", "gpt2", flag, value])
            .assert()
            .code(2)
            .stderr(contains(flag).and(contains("must be at most")));
    }
    let line = |capacity: &str, free: &str| {
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of {capacity} of which {free} is free. Including non-PyTorch memory, this process has 23.12 GiB memory in use. Of the allocated memory 22.40 GiB is allocated by PyTorch, and 301.25 MiB is reserved by PyTorch but unallocated.\n"
        )
    };
    for (capacity, free, why) in [
        ("-23.63 GiB", "243.94 MiB", "is beyond any GPU"),
        ("1e308 GiB", "243.94 MiB", "is beyond any GPU"),
        (
            "23.63 GiB",
            "30.00 GiB",
            "more than the GPU's 23.63 GiB capacity",
        ),
    ] {
        bin()
            .args(["simulate", "memory", "--model", "gpt2", "--oom", "-"])
            .write_stdin(line(capacity, free))
            .assert()
            .code(2)
            .stderr(contains(why).and(contains("is the message intact?")));
    }
}
