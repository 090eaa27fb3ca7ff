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
    // The first line is the answer, and it agrees with the exit code: 64 GB of host RAM is
    // short of the offloaded states, so it does not fit, whatever the GPU has to spare.
    let first = first_line(&text);
    assert!(
        first.starts_with("DOES NOT FIT: the host (per node) is "),
        "{first}"
    );
    assert_eq!(out.status.code(), Some(3), "{text}");
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

/// The first line of `text` that is not blank.
fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// Journey 1: doctor with the DDP question, as typed. Without a GPU its verdict says that the
/// GPUs were not judged and what was measured instead; with one, a verdict word and a figure.
#[test]
fn journey_1_doctor_with_the_model() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let command = "ncclprobe doctor --model bert-base --batch-size 128 --compute-ms 204 -o report/";
    let out = bin()
        .args(words(command))
        .args(["-b", "1K", "-e", "1M", "--point-budget", "0.05"])
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = first_line(&text);
    let word = ["HEALTHY", "DEGRADED", "FAILED", "NOT JUDGED"]
        .into_iter()
        .find(|w| first.starts_with(&format!("{w}:")))
        .unwrap_or_else(|| panic!("no verdict first: {text}"));
    if word == "NOT JUDGED" {
        assert!(first.contains("host memory"), "{first}");
        // The DDP figure it gives is labelled as what it was modelled on.
        if let Some(ddp) = text.lines().find(|l| l.contains("samples/s")) {
            assert!(ddp.contains("host-memory curve"), "{ddp}");
        }
    }
    assert!(dir.path().join("report/index.html").is_file(), "{text}");
}

/// Journey 2: diagnose as typed, live and on a pasted nvidia-smi.
#[test]
fn journey_2_diagnose_live_and_from_smi() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let live = bin()
        .arg("diagnose")
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&live.stdout);
    assert!(text.contains("# NCCL "), "{text}");
    assert!(
        !text.contains("hosts 0;"),
        "a live read is of this host: {text}"
    );
    let smi = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/host/01-titanxp-driver450-idle.txt");
    std::fs::copy(&smi, dir.path().join("smi.txt")).unwrap_or_else(|e| panic!("{e}"));
    let text = stdout_of("ncclprobe diagnose --from smi.txt", dir.path(), 0);
    assert!(
        first_line(&text).starts_with("# input: smi.txt (nvidia-smi"),
        "{text}"
    );
    assert!(text.contains("hosts not named;"), "{text}");
}

/// Journey 4: import, then compare against the topology it ran on, as typed.
#[test]
fn journey_4_import_then_compare_with_the_topology() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    std::fs::copy(
        corpus.join("nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt"),
        dir.path().join("all_reduce.log"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(
        corpus.join("topo/01-2080ti-x2-autodl-pix-gpu-numa-id.txt"),
        dir.path().join("topo.txt"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = stdout_of(
        "ncclprobe import all_reduce.log --json run.json",
        dir.path(),
        0,
    );
    assert!(
        first_line(&text).starts_with("# imported all_reduce.log"),
        "{text}"
    );
    let out = bin()
        .args(words("ncclprobe compare run.json --topo topo.txt"))
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(first_line(&text).starts_with("# run: run.json"), "{text}");
    // The answer is the sentence at the end: which path, and how far from it.
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.contains("all_reduce reaches ") && last.contains("x of "),
        "{last}"
    );
    for line in text
        .lines()
        .filter(|l| l.starts_with("all_reduce ") && !l.contains(" reaches "))
    {
        assert!(line.chars().count() <= 120, "{line}");
    }
}

/// Journey 5: before and after, as Markdown for the ticket (appended, as typed).
#[test]
fn journey_5_before_and_after_for_a_ticket() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for name in ["before.json", "after.json"] {
        crate::common::host_sweep(2)
            .args(["-b", "1K", "-e", "64K"])
            .args(["-n", "2", "-w", "1", "--samples", "6", "-q", "--json", name])
            .current_dir(dir.path())
            .assert()
            .success();
    }
    let text = stdout_of(
        "ncclprobe compare before.json after.json --format markdown",
        dir.path(),
        0,
    );
    assert!(
        first_line(&text).starts_with("### ncclprobe compare: after.json"),
        "{text}"
    );
    assert!(text.contains("| after GB/s | before GB/s |"), "{text}");
    assert!(
        !text.contains("within-noise") && !text.contains("NaN"),
        "{text}"
    );
}

/// Journey 8: the fleet's drain list for a ticket, as typed (a SQLite store where the journey
/// names a PostgreSQL one; the fleet tests run both).
#[test]
fn journey_8_the_weeks_drain_list_for_a_ticket() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for (i, node) in ["n01", "n02", "n03"].iter().enumerate() {
        let name = format!("run{i}.json");
        crate::common::host_sweep(2)
            .args(["-b", "1M", "-e", "4M"])
            .args([
                "-n",
                "2",
                "-w",
                "1",
                "--samples",
                "6",
                "-q",
                "--json",
                &name,
            ])
            .args(["--history", "fleet.sqlite", "--node-name", node])
            .current_dir(dir.path())
            .assert()
            .success();
    }
    // Three host runs of one SKU: judged against each other (exit 0 or 3) or, with too few
    // peers for the rules, not judged (exit 2, said): never a silent pass.
    let out = bin()
        .args(words(
            "ncclprobe fleet --history fleet.sqlite --since 7d --format markdown",
        ))
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(out.status.code(), Some(0) | Some(2) | Some(3)),
        "{out:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        first_line(&text).starts_with("## Fleet: fleet.sqlite"),
        "{text}"
    );
    assert!(
        text.contains(" nodes judged (against peers or their own past)"),
        "{text}"
    );
    assert!(!text.contains("&lt;"), "plain text for a ticket: {text}");
}
