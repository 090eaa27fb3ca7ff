//! The journeys' commands exactly as JOURNEYS.md writes them (where they run without a GPU or
//! a cluster launcher), each with the first line a person reads. A command the journey gives
//! that does not parse is the first thing a newcomer meets.

use crate::common::{bin, Printed};
use std::path::Path;

fn words(command: &str) -> Vec<String> {
    command
        .split_whitespace()
        .filter(|w| *w != "\\")
        .skip(1) // "ncclprobe"
        .map(str::to_string)
        .collect()
}

fn stdout_of(command: &str, dir: &Path, code: i32) -> String {
    let out = bin().args(words(command)).current_dir(dir).stdout_if(code);
    String::from_utf8_lossy(&out).into_owned()
}

/// Journey 6: data-bound or not, for each num_workers, on 20 cores.
#[test]
fn journey_6_num_workers_as_a_list() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let command = "ncclprobe simulate ddp --model bert-base --world-size 3 --batch-size 16 --accumulation 8,2 \\
    --compute-ms 300 --num-workers 0,4,8 --data-ms 120 --cpu-cores 20 --pin-memory";
    let text = stdout_of(command, dir.path(), 0);
    assert!(text.starts_with("# num_workers=0\n"), "{text}");
    for n in [
        "# num_workers=4",
        "# num_workers=8",
        "# num_workers compared",
    ] {
        assert!(text.contains(n), "no {n:?} in {text}");
    }
    // Serial loading is said as what it costs, not as compute-bound.
    let compared = &text[text.find("# num_workers compared").unwrap_or(0)..];
    assert!(
        compared.contains("num_workers=0: ") && compared.contains("loading adds"),
        "{compared}"
    );
    assert!(compared.contains("fastest of those given"), "{compared}");
}

/// Journey 7: a Hugging Face config file as --model, and --offload as a list.
#[test]
fn journey_7_model_config_file_and_offload_list() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // google/gemma-2b's published config.json (the fields the planner reads).
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
        "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let command = "ncclprobe simulate memory --model config.json --strategy zero3 --offload optimizer,params \\
    --seq-len 1024 --micro-batch 1 --gpu-memory-gb 24";
    let out = bin()
        .args(words(command))
        .args(["--host-memory-gb", "64"])
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "exit {:?}: {err}",
        out.status.code()
    );
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(!err.contains("unknown model"), "{err}");
    assert!(
        text.contains("config.json"),
        "the shape's source is not named: {text}"
    );
    // Both states offloaded: the plan says so.
    assert!(text.to_lowercase().contains("offload"), "{text}");
    // The same with the two flags gives the same plan.
    let long = bin()
        .args(words(&command.replace(
            "--offload optimizer,params",
            "--offload-optimizer cpu --offload-params cpu",
        )))
        .args(["--host-memory-gb", "64"])
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&long.stdout), text);
}

/// Journey 3's matrix command, on this machine's ranks: the flag exists and the JUnit has one
/// test case per rule.
#[test]
fn journey_3_matrix_junit() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let xml = dir.path().join("pairs.xml");
    let out = bin()
        .args(["matrix", "--backend", "host", "--ranks", "3", "--junit"])
        .arg(&xml)
        .args(["--min-pair-bw", "100000"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    // Host memory never moves 100 TB/s: the rule fails, exit 3.
    assert_eq!(out.status.code(), Some(3), "{err}");
    let junit = std::fs::read_to_string(&xml).unwrap_or_else(|e| panic!("{e}"));
    for case in ["name=\"completed\"", "name=\"correct\"", "min-pair-bw"] {
        assert!(junit.contains(case), "no {case} in {junit}");
    }
    assert!(junit.contains("<failure"), "{junit}");
    assert!(junit.contains("hostname=\""), "{junit}");
}
