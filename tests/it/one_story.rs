//! One screen, one story: the figures on a page never contradict each other (one ratio per
//! page, no `NaNx`, no start time an import does not know, no collective said twice as
//! unknown), and advice is given only where it can change something.

use crate::common::{bin, Printed};
use std::path::{Path, PathBuf};

fn corpus(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(rel)
}

const A100: &str = "nccl-tests/05-a100-dgx-allgather-old-format-no-redop-column.txt";

#[test]
fn an_unnamed_collective_is_said_once_with_what_it_may_be() {
    let out = bin().arg("import").arg(corpus(A100)).stdout_if(0);
    let text = String::from_utf8(out).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("# collective:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!line.contains("unknown: unknown"), "{line}");
    assert!(
        line.contains("all_gather") && line.contains("reduce_scatter"),
        "{line}"
    );
    assert!(line.contains("give --collective"), "{line}");
    // Not all_reduce: the size is count × 8 ranks.
    assert!(!line.contains("all_reduce"), "{line}");
}

#[test]
fn the_page_gives_the_summarys_ratio_and_says_where_the_band_is_missed() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    bin()
        .arg("report")
        .arg(corpus(A100))
        .args(["--collective", "all_gather", "--markdown"])
        .arg(&summary)
        .assert()
        .success();
    let md = std::fs::read_to_string(&summary).unwrap();
    let sentence = md
        .lines()
        .find(|l| l.starts_with("all_gather reaches "))
        .unwrap_or_else(|| panic!("{md}"));
    let ratio = sentence
        .trim_start_matches("all_gather reaches ")
        .split_whitespace()
        .next()
        .unwrap();
    let headline = md
        .lines()
        .find(|l| l.starts_with("| all_gather |"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        headline.contains(&format!("{ratio} at 1 GiB and above")),
        "one ratio per page: {sentence}\n{headline}"
    );
    // Healthy at the plateau while points below the band: where they are is said.
    assert!(
        sentence.contains("points below the band, all of them under 1 GiB"),
        "{sentence}"
    );
}

#[test]
fn imported_runs_compared_say_no_start_time_and_no_nan() {
    let before = corpus("nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt");
    let after = corpus("nccl-tests/24-2x4090-docker-pcie-very-low-busbw.txt");
    let out = bin()
        .arg("compare")
        .arg(&before)
        .arg(&after)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("NaN"), "{text}");
    assert!(text.contains("start not in the log; imported"), "{text}");
    // Zero-byte rows (0/0) read "–".
    let zero: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("all_reduce") && l.contains(" 0 B "))
        .collect();
    for r in &zero {
        assert!(r.contains(" – "), "{r}");
    }
}

#[test]
fn one_gpu_gets_no_bucket_advice() {
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "bert-base",
            "--world-size",
            "1",
        ])
        .args(["--compute-ms", "200", "--busbw", "10"])
        .stdout_if(0);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("world size 1: no gradient all-reduce"),
        "{text}"
    );
    assert!(!text.contains("best tried"), "{text}");
}

#[test]
fn a_simulation_on_a_host_memory_curve_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("host.json");
    crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "1M"])
        .args(["-n", "2", "-w", "1", "--samples", "3", "-q", "--json"])
        .arg(&record)
        .assert()
        .success();
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "50", "--format", "json", "--curve"])
        .arg(&record)
        .stdout_if(0);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let link = doc["link"].as_str().unwrap();
    assert!(link.contains("on the host-memory curve"), "{link}");
}

#[test]
fn fixes_name_the_cause_on_every_platform_and_what_torchrun_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nccl.log");
    std::fs::write(
        &log,
        "host:1:1 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1.\n\
         host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0\n",
    )
    .unwrap();
    let out = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(&log)
        .stdout_if(0);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let shm = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "env.shm-disabled")
        .unwrap_or_else(|| panic!("{doc:#}"));
    let fix = shm["fix"].as_str().unwrap();
    assert!(fix.contains("--shm-size") && fix.contains("WSL2"), "{fix}");
    let rules = ncclprobe::diagnose::rules::RULES;
    let one_gpu = rules
        .iter()
        .find(|r| r.id == "gpu.process-on-multiple-gpus")
        .unwrap();
    assert!(
        one_gpu.fix.contains("does not set CUDA_VISIBLE_DEVICES"),
        "{}",
        one_gpu.fix
    );
}
