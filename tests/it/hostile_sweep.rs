//! Sweep gates and budgets under abuse (host backend, no GPU): what cannot apply is refused
//! before measuring, and retries stay inside the time budget.

use crate::common;

use common::{bin, read_record};

#[test]
fn retries_spend_from_the_time_budget_and_stop_when_it_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    // A gate no host can pass, so every point fails and asks for a retry; the budget is spent
    // by the first pass (every size gets its minimum whatever the budget).
    let out = bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "1M",
        ])
        .args([
            "--time-budget",
            "0.05",
            "--min-busbw",
            "100000",
            "--retries",
            "3",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let record = read_record(&json);
    assert!(
        record.retried_points.is_empty(),
        "no retry started past the budget: {} retried",
        record.retried_points.len()
    );
    assert!(
        record
            .notes
            .iter()
            .any(|n| n.starts_with("--retries: not measuring again") && n.contains("--time-budget")),
        "{:?}",
        record.notes
    );
    // With time to spare the same gate retries (the budget, not a bug, stopped it above).
    let json2 = dir.path().join("run2.json");
    bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "64",
        ])
        .args([
            "--time-budget",
            "600",
            "--min-busbw",
            "100000",
            "--retries",
            "1",
        ])
        .args(["--min-samples", "6", "--max-samples", "8"])
        .arg("--json")
        .arg(&json2)
        .assert()
        .code(3);
    assert!(!read_record(&json2).retried_points.is_empty());
}

#[test]
fn a_gpu_profile_on_the_host_backend_is_refused_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let out = bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--qualify",
            "h100-sxm-nvswitch-8",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("describes NCCL on GPUs"), "{stderr}");
    assert!(!stderr.contains("-e 8 GiB"), "{stderr}");
    assert!(!json.exists(), "refused before measuring");
}

#[test]
fn one_rank_says_no_interconnect_was_measured() {
    let out = bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "1",
            "-b",
            "8",
            "-e",
            "1K",
        ])
        .args(["--min-samples", "6", "--max-samples", "8"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("# one rank: no interconnect measured"),
        "{stdout}"
    );
    assert!(!stdout.contains("plateau busbw"), "{stdout}");
    for gate in [
        &["--min-busbw", "10"][..],
        &["--max-skew", "1.1"],
        &["--qualify", "pcie-gen4-x16-shm"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("run.json");
        let out = bin()
            .args([
                "sweep",
                "--backend",
                "host",
                "--ranks",
                "1",
                "--retries",
                "2",
            ])
            .args(gate)
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{gate:?}: {stderr}");
        assert!(
            stderr.contains("one rank: no interconnect measured"),
            "{stderr}"
        );
        assert!(!json.exists(), "refused before measuring");
    }
    // A latency gate applies to one rank's own work.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("one.json");
    bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "1",
            "-b",
            "8",
            "-e",
            "64",
        ])
        .args([
            "--min-samples",
            "6",
            "--max-samples",
            "8",
            "--max-latency-us",
            "100000",
        ])
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    // qualify holds a one-rank record to the same line.
    let out = bin()
        .arg("qualify")
        .arg(&json)
        .args(["--min-busbw", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("one rank: no interconnect measured"),
        "{stderr}"
    );
    bin()
        .arg("qualify")
        .arg(&json)
        .args(["--max-latency-us", "100000"])
        .assert()
        .success();
}

#[test]
fn a_rules_file_refuses_an_unbounded_skew_as_the_flag_does() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "64",
        ])
        .args(["--min-samples", "6", "--max-samples", "8", "--json"])
        .arg(&json)
        .assert()
        .success();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nmax_skew = inf\n").unwrap();
    let out = bin()
        .arg("qualify")
        .arg(&json)
        .arg("--rules")
        .arg(&rules)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("max_skew"), "{stderr}");
}
