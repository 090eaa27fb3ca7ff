//! A verdict is earned, never defaulted: a page rendered by `sweep --report` says what the gate
//! said; nothing judged reads NOT JUDGED with its reason, on every output; a gate that could
//! not run leaves a JUnit file that says so; a comparison that compared nothing is not a pass.

use crate::common::{self, bin, host_sweep, Machine, Printed};
use predicates::str::contains;
use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The summary.md a command wrote to `md` (it must succeed), once its first line says NOT
/// JUDGED.
fn not_judged_summary(cmd: &mut assert_cmd::Command, md: &Path) -> String {
    cmd.arg("--markdown").arg(md).assert().success();
    let summary = read(md);
    assert!(
        first_line(&summary).contains("**NOT JUDGED**"),
        "{}",
        first_line(&summary)
    );
    summary
}

#[test]
fn a_report_rendered_by_sweep_says_what_its_gate_said() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (html, md, xml, json) = (
        dir.path().join("node.html"),
        dir.path().join("node.md"),
        dir.path().join("node.xml"),
        dir.path().join("node.json"),
    );
    // Host memory between two threads never reaches 5000 GB/s: the gate fails (exit 3).
    host_sweep(2)
        .args(["-b", "8", "-e", "64K", "-f", "8", "--max-samples", "5"])
        .args(["--min-busbw", "5000", "--retries", "1"])
        .arg("--junit")
        .arg(&xml)
        .arg("--report")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .arg("--json")
        .arg(&json)
        .assert()
        .code(3);
    let summary = read(&md);
    assert!(
        first_line(&summary).contains("**FAILED**"),
        "the report's first line: {}",
        first_line(&summary)
    );
    assert!(summary.contains("qualification failed"), "{summary}");
    let page = read(&html);
    assert!(page.contains("<div class=\"state\">FAILED</div>"), "{page}");
    // The rule table is on the page: the rule, what was measured and what was required.
    assert!(page.contains("min-busbw"), "no rule table on the page");
    assert!(
        page.contains("FAIL after 1 retry"),
        "no gate summary on the page"
    );
    // The record says the same, and so does a report rendered from it later.
    let later = dir.path().join("later.md");
    bin()
        .arg("report")
        .arg(&json)
        .arg("--markdown")
        .arg(&later)
        .assert()
        .success();
    let later = read(&later);
    assert!(first_line(&later).contains("**FAILED**"), "{later}");
    // The JUnit file says where and when.
    let junit = read(&xml);
    for attribute in ["hostname=\"", "timestamp=\"", "time=\""] {
        assert!(junit.contains(attribute), "no {attribute} in {junit}");
    }
}

#[test]
fn a_gate_refused_before_measuring_still_writes_its_junit_as_an_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let xml = dir.path().join("node.xml");
    // The profile describes NCCL on GPUs; the host backend is refused for it (exit 2).
    host_sweep(2)
        .args(["--qualify", "h100-sxm-nvswitch-8", "--retries", "2"])
        .arg("--junit")
        .arg(&xml)
        .assert()
        .code(2);
    let junit = read(&xml);
    assert!(junit.contains("<error"), "no <error> test case: {junit}");
    assert!(
        junit.contains("exit 2"),
        "the exit code is not said: {junit}"
    );
    assert!(junit.contains("hostname=\""), "{junit}");
    assert!(junit.contains("errors=\"1\""), "{junit}");
}

#[test]
fn a_gate_that_failed_keeps_its_verdict_in_the_junit_not_an_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let xml = dir.path().join("node.xml");
    host_sweep(2)
        .args(["-b", "8", "-e", "8K", "-f", "8", "--max-samples", "4"])
        .args(["--max-latency-us", "0.001"])
        .arg("--junit")
        .arg(&xml)
        .assert()
        .code(3);
    let junit = read(&xml);
    assert!(junit.contains("<failure"), "{junit}");
    assert!(!junit.contains("<error"), "{junit}");
}

#[test]
fn a_report_on_a_host_memory_run_is_not_judged_and_says_why() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let md = dir.path().join("run.md");
    let mut sweep = host_sweep(2);
    sweep.args(["-b", "8", "-e", "64K", "-f", "8", "--max-samples", "4"]);
    let summary = not_judged_summary(&mut sweep, &md);
    assert!(summary.contains("no GPU was measured"), "{summary}");
    assert!(summary.contains("host backend"), "{summary}");
    assert!(!summary.contains("HEALTHY"), "{summary}");
}

#[test]
fn a_report_on_a_run_no_expectation_applies_to_is_not_judged() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let md = dir.path().join("a100.md");
    let log = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let mut report = bin();
    report.arg("report").arg(&log);
    let summary = not_judged_summary(&mut report, &md);
    assert!(summary.contains("give --collective"), "{summary}");
}

#[test]
fn compare_that_compared_nothing_exits_2_and_says_why() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let json = dir.path().join("a100.json");
    bin()
        .arg("import")
        .arg(&log)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    bin()
        .arg("compare")
        .arg(&json)
        .assert()
        .code(2)
        .stderr(contains("not judged"));
    // Named, the collective is compared, and that is a verdict.
    bin()
        .arg("compare")
        .arg(&json)
        .args(["--collective", "all_gather"])
        .assert()
        .success();
}

#[test]
fn doctor_on_the_host_backend_is_not_judged_and_env_findings_do_not_degrade_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("report");
    // A bare machine: no driver, no NVML, none of the host's own settings, so a GPU host's
    // live findings do not stand in for what this test checks.
    let machine = Machine::bare();
    let mut cmd = bin();
    common::without_host_settings(&mut cmd);
    machine.apply(&mut cmd);
    let stdout = cmd
        .env("NCCLPROBE_CUDA_DRIVER", "none")
        .env("NCCLPROBE_NVML_LIBRARY", "none")
        .args(["doctor", "--backend", "host", "--ranks", "2", "-o"])
        .arg(&out)
        .env("NCCL_SHM_DISABLE", "1")
        .stdout_if(0);
    let text = String::from_utf8_lossy(&stdout);
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    assert!(
        first.starts_with("NOT JUDGED: no GPU was measured"),
        "{text}"
    );
    let second = lines.next().unwrap_or("");
    assert!(
        second.contains("host backend") && second.contains("chosen by doctor"),
        "the backend and why are not on the second line: {text}"
    );
    assert!(!text.contains("DEGRADED"), "{text}");
    let diagnosis = read(&out.join("diagnosis.json"));
    assert!(
        diagnosis.contains("the host backend measured here does not"),
        "the SHM finding does not say it applies to NCCL's jobs: {diagnosis}"
    );
}
