//! `ncclprobe simulate memory` refusing what it cannot plan: unreadable or absurd config.json
//! files, shapes that cannot be, and adapters or trainable counts the model does not have.

mod common;

use common::bin;
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
