//! Text from inputs under abuse: a record whose error, hosts, notes and environment carry
//! terminal escapes, bidi overrides, NUL, Markdown links and a 100 KB value; absurd figures;
//! duplicate topology labels; sizes that were never measured; runs that never completed.

use crate::common;

use common::bin;
use serde_json::Value;
use std::path::{Path, PathBuf};

const FAST: [&str; 8] = [
    "--backend",
    "host",
    "--ranks",
    "2",
    "--min-samples",
    "3",
    "--max-samples",
    "4",
];

/// A real record (host backend, 8 B to 1 KiB) to bend.
fn record(dir: &Path) -> Value {
    let path = dir.join("base.json");
    bin()
        .args(["sweep", "-b", "8", "-e", "1K", "--json"])
        .arg(&path)
        .args(FAST)
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The document with `schema_version` and `kind` first, as ncclprobe writes it (the reader
/// tells a record by its opening bytes).
fn write(dir: &Path, name: &str, doc: &Value) -> PathBuf {
    let mut rest = doc.as_object().unwrap().clone();
    let mut text = String::from("{");
    for key in ["schema_version", "kind"] {
        let v = rest.remove(key).unwrap();
        text.push_str(&format!("{}:{},", Value::from(key), v));
    }
    let rest = serde_json::to_string(&rest).unwrap();
    text.push_str(&rest[1..]);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const LINK: &str = "[x](http://evil)";
/// What must not reach a terminal: escapes (OSC 8 hyperlinks among them), bidi overrides, NUL.
const LIVE: [&str; 4] = ["\x1b", "\u{202e}", "\0", "\u{9b}"];

/// The record with hostile text everywhere a person reads it.
fn hostile(dir: &Path) -> PathBuf {
    let mut doc = record(dir);
    doc["status"] = "failed".into();
    doc["error"] =
        format!("boom {LINK} \x1b[31mRED\x1b[0m \u{202e}evil\u{202c} nul\0here \u{9b}2J").into();
    doc["backend"]["hosts"] = serde_json::json!([format!("node\x1b]0;owned\x07{LINK}")]);
    doc["notes"] = serde_json::json!([format!("note \x1b[2J{LINK}\u{202e}")]);
    doc["env"] = serde_json::json!({
        "NCCL_DEBUG": "INFO\x1b[2J",
        "NCCL_HUGE": "A".repeat(100_000),
    });
    write(dir, "evil\x1b[31m[x](http:evil).json", &doc)
}

fn assert_inert(what: &str, text: &str) {
    let markdown = what.contains("arkdown") || what.contains("summary") || what.contains("HTML");
    let link = markdown.then_some(LINK);
    for live in LIVE.into_iter().chain(link) {
        assert!(
            !text.contains(live),
            "{what} carries {live:?} live:\n{}",
            text.chars().take(2000).collect::<String>()
        );
    }
}

fn run(args: &[&str], files: &[&Path]) -> (Option<i32>, String, String) {
    let out = bin().args(args).args(files).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn qualify_compare_report_and_diagnose_print_nothing_live_from_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let evil = hostile(dir.path());
    let base = dir.path().join("base.json");
    for format in ["table", "markdown", "csv"] {
        let (code, out, err) = run(
            &["qualify", "--min-busbw", "0.000001", "--format", format],
            &[&evil],
        );
        assert_eq!(code, Some(3), "{err}");
        assert!(out.contains("boom"), "the error is still shown: {out}");
        assert_inert(&format!("qualify --format {format}"), &out);
        assert_inert("qualify's stderr", &err);
        let (code, out, err) = run(&["compare", "--format", format], &[&base, &evil]);
        assert_eq!(code, Some(0), "{err}");
        assert_inert(&format!("compare --format {format}"), &out);
        assert_inert("compare's warning", &err);
    }
    let (code, out, err) = run(&["report"], &[&evil]);
    assert_eq!(code, Some(0), "{err}");
    assert_inert("report's Markdown on stdout", &out);
    for format in ["table", "csv"] {
        let (_, out, _) = run(&["diagnose", "--format", format, "--from"], &[&evil]);
        assert!(out.contains("run.incomplete"), "{out}");
        assert_inert(&format!("diagnose --format {format}"), &out);
    }
    // A name that cannot be read is quoted in the error without its escapes.
    let (code, _, err) = run(&["qualify"], &[&dir.path().join("gone\x1b[31m.json")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("gone[31m.json") || err.contains("gone.json"),
        "{err}"
    );
    assert_inert("an error message", &err);
}

#[test]
fn report_pages_escape_input_text_and_cap_long_values() {
    let dir = tempfile::tempdir().unwrap();
    let evil = hostile(dir.path());
    let (html, md) = (dir.path().join("r.html"), dir.path().join("summary.md"));
    bin()
        .arg("report")
        .arg(&evil)
        .arg("-o")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .assert()
        .success();
    let summary = std::fs::read_to_string(&md).unwrap();
    assert_inert("summary.md", &summary);
    assert!(summary.contains("\\[x\\](http://evil)"), "{summary}");
    assert!(
        summary.len() < 20_000,
        "summary.md is {} bytes",
        summary.len()
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert_inert("the HTML page", &page);
    assert!(!page.contains(&"A".repeat(1000)), "the 100 KB value is cut");
    assert!(page.contains("more bytes)"), "and the cut is counted");
}

#[test]
fn absurd_figures_are_printed_in_scientific_notation() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = record(dir.path());
    for p in doc["points"].as_array_mut().unwrap() {
        p["busbw_bytes_per_s"] = 1e308.into();
        p["algbw_bytes_per_s"] = 1e308.into();
        p["time_s"] = 1e300.into();
    }
    let huge = write(dir.path(), "huge.json", &doc);
    let base = dir.path().join("base.json");
    for (args, files) in [
        (vec!["compare"], vec![&huge, &base]),
        (vec!["compare", "--format", "markdown"], vec![&base, &huge]),
        (vec!["report"], vec![&huge]),
        (vec!["qualify", "--min-busbw", "1"], vec![&huge]),
    ] {
        let files: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
        let (_, out, err) = run(&args, &files);
        let longest = out
            .split(|c: char| !c.is_ascii_digit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(
            longest < 40,
            "{args:?} prints a {longest}-digit number:\n{out}{err}"
        );
        assert!(
            out.contains("e+") || out.contains("e-3"),
            "{args:?} shows the figures: {out}"
        );
    }
}

#[test]
fn at_size_names_the_measured_sizes_around_it_and_refuses_zero() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path());
    let base = dir.path().join("base.json");
    let (code, out, _) = run(
        &["qualify", "--min-busbw", "1", "--at-size", "100"],
        &[&base],
    );
    assert_eq!(code, Some(3));
    assert!(
        out.contains("between the sizes measured (64 B and 128 B)"),
        "{out}"
    );
    assert!(!out.contains("rerun with -e"), "{out}");
    let (_, out, _) = run(
        &["qualify", "--min-busbw", "1", "--at-size", "100K"],
        &[&base],
    );
    assert!(out.contains("rerun with -e 100KiB"), "{out}");
    for flags in [
        vec!["qualify", "--min-busbw", "1", "--at-size", "0"],
        vec!["qualify", "--max-latency-us", "9", "--at-size-small", "0"],
    ] {
        let (code, _, err) = run(&flags, &[&base]);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains("0 bytes"), "{err}");
    }
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nmin_busbw_gbps = 1\nat_size = 0\n").unwrap();
    let (code, _, err) = run(&["qualify", "--rules"], &[&rules, &base]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("rule 1: at_size must be at least 1 byte"),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "sweep",
            "-b",
            "8",
            "-e",
            "64",
            "--min-busbw",
            "1",
            "--at-size",
            "0",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn topo_refuses_a_device_named_twice_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, line) in [
        (
            "columns.txt",
            "\tGPU0\tGPU0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\t X \t0-7\n",
            "line 1: the header names GPU0 twice",
        ),
        (
            "rows.txt",
            "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPIX\nGPU1\tPIX\t X \tPIX\nGPU0\tPIX\tPIX\t X \n",
            "line 4: a second row for GPU0",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run(&["topo", "--from"], &[&path]);
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(err.contains(line), "{name}: {err}");
    }
}

#[test]
fn diagnose_finds_every_run_that_did_not_complete() {
    let dir = tempfile::tempdir().unwrap();
    let doc = record(dir.path());
    for (status, severity, code) in [
        ("failed", "error", 3),
        ("timed-out", "error", 3),
        ("running", "error", 3),
        ("interrupted", "warning", 3),
        ("complete", "", 0),
    ] {
        let mut d = doc.clone();
        d["status"] = status.into();
        if status != "complete" {
            d["error"] = format!("stopped: {status}").into();
        }
        let path = write(dir.path(), &format!("{status}.json"), &d);
        let (got, out, err) = run(
            &[
                "diagnose",
                "--format",
                "json",
                "--fail-on",
                "warning",
                "--from",
            ],
            &[&path],
        );
        assert_eq!(got, Some(code), "{status}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let found: Vec<&Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"] == "run.incomplete")
            .collect();
        if severity.is_empty() {
            assert!(found.is_empty(), "{status}: {out}");
            continue;
        }
        assert_eq!(found.len(), 1, "{status}: {out}");
        assert_eq!(found[0]["severity"], severity, "{status}");
        let evidence = found[0]["evidence"].to_string();
        assert!(evidence.contains(&format!("status {status}")), "{evidence}");
        assert!(
            evidence.contains("last size measured: all_reduce 1 KiB"),
            "{evidence}"
        );
        assert!(
            evidence.contains(&format!("error: stopped: {status}")),
            "{evidence}"
        );
    }
}

#[test]
fn simulate_and_flag_messages_print_absurd_figures_in_scientific_notation() {
    let longest_number = |text: &str| {
        text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .map(str::len)
            .max()
            .unwrap_or(0)
    };
    for args in [
        &[
            "ddp",
            "--model",
            "bert-base",
            "--world-size",
            "2",
            "--compute-ms",
            "1e300",
            "--busbw",
            "10",
        ][..],
        &[
            "fsdp",
            "--model",
            "llama2-7b",
            "--world-size",
            "8",
            "--compute-ms",
            "100",
            "--busbw",
            "1e-300",
        ],
    ] {
        let out = bin().arg("simulate").args(args).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("e+"), "{text}");
        assert!(longest_number(&text) < 20, "{text}");
    }
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "bert-base",
            "--world-size",
            "2",
        ])
        .args([
            "--compute-ms",
            "100",
            "--busbw",
            "10",
            "--overlap-slowdown",
            "1e300",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(longest_number(&stderr) < 20, "{stderr}");
}
