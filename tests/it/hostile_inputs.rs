//! Inputs and flags under abuse: pipes and stdin read once, bounded numbers, overflowing
//! models, the wrong curve. Each case names the exit code and what the user is told.

use crate::common;

use common::{bin, host_sweep};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn corpus(dir: &str, prefix: &str) -> PathBuf {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", base.display()))
}

/// Run ncclprobe with `stdin_bytes` on its standard input.
fn with_stdin(args: &[&str], stdin_bytes: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = stdin_bytes.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

#[test]
fn import_reads_stdin_and_pipes_once() {
    let log = std::fs::read(corpus("nccl-tests", "07-")).unwrap();
    for arg in ["-", "/dev/stdin"] {
        let out = with_stdin(&["import", arg, "--format", "json"], &log);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{arg}: {stderr}");
        let r: ncclprobe::model::RunRecord = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!r.points.is_empty(), "{arg}");
    }
}

#[test]
fn a_named_fifo_is_read_once_not_hung_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let log = std::fs::read(corpus("nccl-debug", "03-")).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, log).unwrap())
    };
    let out = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(&fifo)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: ncclprobe::documents::DiagnosisDocument = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc
        .findings
        .iter()
        .any(|f| f.id == "transport.socket-internode"));
    assert_eq!(doc.facts.inputs[0].kind, "nccl-tests output");
}

#[test]
fn diagnose_takes_stdin_too() {
    let topo = std::fs::read(corpus("topo", "04-")).unwrap();
    let out = with_stdin(&["diagnose", "--from", "-", "--format", "json"], &topo);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: ncclprobe::documents::DiagnosisDocument = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc.facts.inputs[0].file, "(stdin)");
    assert_eq!(doc.facts.inputs[0].kind, "nvidia-smi topo -m");
}

fn usage_error(args: &[&str], says: &str) {
    let out = bin().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn seconds_beyond_a_duration_are_refused_not_panicked() {
    usage_error(
        &["sweep", "--backend", "host", "--timeout", "1e20"],
        "--timeout: 100000000000000000000 seconds is more than",
    );
    usage_error(
        &["sweep", "--backend", "host", "--point-budget", "inf"],
        "--point-budget",
    );
    usage_error(
        &["sweep", "--backend", "host", "--warmup-time=-1"],
        "--warmup-time",
    );
}

#[test]
fn a_zero_start_with_a_factor_is_refused_and_repeats_are_measured_once() {
    usage_error(
        &["sweep", "--backend", "host", "-b", "0", "-e", "64"],
        "-b/--minbytes 0",
    );
    let out = host_sweep(2)
        .args(["-b", "8", "-e", "64"])
        .args([
            "--collective",
            "all_reduce,all_reduce",
            "--samples",
            "6",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: ncclprobe::model::RunRecord = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.points.len(), 8, "4 sizes x 2 placements, once");
    assert!(
        r.notes.iter().any(|n| n.contains("given more than once")),
        "{:?}",
        r.notes
    );
}

const DDP: [&str; 8] = [
    "simulate",
    "ddp",
    "--model",
    "resnet18",
    "--compute-ms",
    "100",
    "--busbw",
    "5",
];

#[test]
fn every_simulate_number_is_checked_by_one_validator() {
    let ws = ["--world-size", "2"];
    let cases: &[(&[&str], &str)] = &[
        (&["--latency-us", "NaN"], "--latency-us"),
        (&["--latency-us=-1"], "--latency-us"),
        (&["--optimizer-ms", "NaN"], "--optimizer-ms"),
    ];
    for (extra, says) in cases {
        let mut args: Vec<&str> = DDP.to_vec();
        args.extend(ws);
        args.extend(*extra);
        usage_error(&args, says);
    }
    let mut huge: Vec<&str> = DDP.to_vec();
    huge.extend(["--world-size", "18446744073709551615"]);
    usage_error(&huge, "--world-size: must be from 1 to 1048576");
    let fsdp = [
        "simulate",
        "fsdp",
        "--model",
        "gpt2",
        "--world-size",
        "4",
        "--compute-ms",
        "100",
        "--busbw",
        "5",
    ];
    for (flag, value) in [
        ("--activations-gb", "-1"),
        ("--activations-gb", "NaN"),
        ("--gpu-memory-gb", "NaN"),
        ("--gpu-memory-gb", "-80"),
    ] {
        let mut args = fsdp.to_vec();
        let joined = format!("{flag}={value}");
        args.push(&joined);
        usage_error(&args, flag);
    }
}

#[test]
fn ddp_needs_an_all_reduce_curve_and_fsdp_says_when_one_stands_in() {
    let dir = tempfile::tempdir().unwrap();
    let ag = dir.path().join("ag.json");
    let ar = dir.path().join("ar.json");
    for (coll, path) in [("all_gather", &ag), ("all_reduce", &ar)] {
        host_sweep(2)
            .args(["-b", "1K", "-e", "64K"])
            .args(["--samples", "6", "--collective", coll, "--json"])
            .arg(path)
            .assert()
            .success();
    }
    let mut args: Vec<String> = DDP.iter().map(|s| s.to_string()).collect();
    args.truncate(6);
    args.extend(["--world-size", "2", "--curve"].map(String::from));
    args.push(ag.display().to_string());
    let out = bin().args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no out-of-place all_reduce points"));

    let out = bin()
        .args([
            "simulate",
            "fsdp",
            "--model",
            "gpt2",
            "--world-size",
            "2",
            "--compute-ms",
            "100",
        ])
        .args(["--format", "json", "--curve"])
        .arg(&ar)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: ncclprobe::documents::FsdpSimulation = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc.link
            .contains("all_reduce curve used as a stand-in for reduce_scatter"),
        "{}",
        doc.link
    );
}

#[test]
fn an_endless_curve_is_refused_at_once() {
    let mut args: Vec<&str> = DDP.to_vec();
    args.truncate(6);
    args.extend(["--world-size", "2", "--curve", "/dev/zero"]);
    let out = bin()
        .args(&args)
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("binary data"));
}
