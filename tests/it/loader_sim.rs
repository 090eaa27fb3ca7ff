//! The input pipeline in `simulate ddp` and `doctor`, through the real binary, on the field
//! reports' situations: seed 001 (3 GPUs, batch 16 x accumulation 8, num_workers=0, no
//! pin_memory) and seed 003 (num_workers=40 on 20 cores, one GPU).

use crate::common;

use common::{bin, json_stdout, Machine};
use ncclprobe::documents::DdpSimulation;
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

/// Seed 001: 150 ms of compute per batch of 16 (30 ms of it launch costs that do not grow
/// with the batch), 850 ms for one worker to load a batch: about the 1.02 s per step the
/// report's progress bar showed with num_workers=0.
const SEED_001: &[&str] = &[
    "simulate",
    "ddp",
    "--model",
    "resnet50",
    "--world-size",
    "3",
    "--batch-size",
    "16",
    "--accumulation",
    "8",
    "--compute-ms",
    "150",
    "--compute-fixed-ms",
    "30",
    "--busbw",
    "10",
    "--bucket-cap-mb",
    "25",
    "--num-workers",
    "0",
    "--data-ms",
    "850",
    "--cpu-cores",
    "32",
    "--sample-bytes",
    "600K",
    "--batch-sizes",
    "32x2",
];

#[test]
fn seed_001_is_data_bound_and_told_to_raise_workers_pin_memory_and_the_batch() {
    bin()
        .args(SEED_001)
        .assert()
        .success()
        .stdout(contains("data_ms    bound"))
        .stdout(contains("* data-bound at bucket_cap_mb=25, batch 16 x accumulation 8: num_workers=0 loads each batch in the training process"))
        .stdout(contains("* raise num_workers to 6 with pin_memory=True"))
        .stdout(contains("* batch 32 x accumulation 2 raises throughput"))
        .stdout(contains("the effective batch is 192 instead of 384"));
}

#[test]
fn seed_001_json_carries_the_loader_per_configuration() {
    let doc: DdpSimulation = json_stdout(bin().args(SEED_001).args(["--format", "json"]));
    let loader = doc
        .loader
        .unwrap_or_else(|| panic!("no loader in the document"));
    assert_eq!(loader.hiding_workers_pinned, Some(6));
    assert!(doc
        .configurations
        .iter()
        .all(|o| o.loader.is_some_and(|l| l.bound_by.name() == "data")));
    let rate = |i: usize| {
        loader.batch_options[i]
            .advised
            .map(|a| a.samples_per_s)
            .unwrap_or(0.0)
    };
    assert_eq!(loader.batch_options[1].batch_size, 32);
    assert!(rate(1) > 1.02 * rate(0), "{} vs {}", rate(1), rate(0));
    // Workers and pinning together: well over the 1.5-2x the report predicted.
    assert!(rate(0) / loader.current.samples_per_s > 2.0);
}

#[test]
fn seed_003_warns_of_oversubscription_and_names_about_eight_workers() {
    // One GPU, 40 ms a batch of 256 on the GPU, 300 ms for one worker to load it.
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "1",
            "--batch-size",
            "256",
            "--accumulation",
            "1",
            "--compute-ms",
            "40",
            "--busbw",
            "10",
            "--num-workers",
            "40",
            "--data-ms",
            "300",
            "--cpu-cores",
            "20",
            "--pin-memory",
            "--dataset-gb",
            "2",
            "--host-memory-gb",
            "64",
        ])
        .assert()
        .success()
        .stdout(contains("* oversubscribed: 40 workers x 1 rank = 40 worker processes on 20 cores"))
        .stdout(contains("use at most 19 workers per rank"))
        .stdout(contains("This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 20"))
        .stdout(contains("* num_workers can drop to 8 with pin_memory=True"))
        .stdout(contains("41 processes each end up with their own copy of the 2.0 GB dataset"));
}

#[test]
fn loader_flags_without_a_data_time_are_refused() {
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "2",
            "--compute-ms",
            "40",
            "--busbw",
            "10",
            "--num-workers",
            "4",
        ])
        .assert()
        .code(2)
        .stderr(contains("--data-ms"));
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "40", "--busbw", "10", "--data-ms", "10"])
        .args(["--ranks-per-node", "3"])
        .assert()
        .code(2)
        .stderr(contains("--ranks-per-node"));
}

#[test]
fn doctor_passes_the_loader_flags_to_its_simulation() {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let out = dir.path().join("report");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    common::without_host_settings(&mut cmd);
    machine.apply(&mut cmd);
    let output = cmd
        .env("NCCLPROBE_CUDA_DRIVER", "none")
        .env("NCCLPROBE_NVML_LIBRARY", "none")
        .args([
            "doctor",
            "--backend",
            "host",
            "--ranks",
            "2",
            "-e",
            "1K",
            "-o",
        ])
        .arg(&out)
        .args([
            "--model",
            "resnet18",
            "--compute-ms",
            "40",
            "--batch-size",
            "16",
        ])
        // The curve stops at 1 KiB, so the buckets' time is extrapolated from small-message
        // latency, which a loaded machine can stretch a hundredfold: loading a batch takes
        // far longer than any of that, so the run is data-bound on any machine.
        .args([
            "--num-workers",
            "0",
            "--data-ms",
            "9000000",
            "--cpu-cores",
            "8",
        ])
        .output()
        .unwrap_or_else(|e| panic!("doctor: {e}"));
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("simulation.json"))
        .unwrap_or_else(|e| panic!("simulation.json: {e}"));
    let doc: DdpSimulation = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let loader = doc
        .loader
        .unwrap_or_else(|| panic!("doctor's simulation has no loader"));
    assert_eq!((loader.num_workers, loader.cpu_cores), (0, 8));
    assert!(
        loader.verdict.starts_with("data-bound"),
        "{}",
        loader.verdict
    );
    let summary = std::fs::read_to_string(out.join("summary.md"))
        .unwrap_or_else(|e| panic!("summary.md: {e}"));
    assert!(summary.contains("Input pipeline:"), "{summary}");
    assert!(
        summary.contains("the input pipeline starves the GPUs"),
        "{summary}"
    );
}

/// The tester's base command: 3 GPUs, batch 16 x accumulation 8, num_workers=0, 300 ms a batch.
const BASE: &[&str] = &[
    "simulate",
    "ddp",
    "--model",
    "resnet50",
    "--world-size",
    "3",
    "--busbw",
    "20",
    "--batch-size",
    "16",
    "--compute-ms",
    "200",
    "--accumulation",
    "8",
    "--bucket-cap-mb",
    "25",
    "--cpu-cores",
    "20",
    "--num-workers",
    "0",
    "--data-ms",
    "300",
];

/// BASE with `extra` (a later value of a flag wins over BASE's), refused with exit 2 and a
/// message containing each of `says`.
fn refused(extra: &[&str], says: &[&str]) {
    let mut args: Vec<&str> = BASE.to_vec();
    // Drop BASE's own value of each flag `extra` gives again (clap refuses repeats).
    for flag in extra.iter().filter(|a| a.starts_with("--")) {
        let name = flag.split('=').next().unwrap_or(flag);
        if let Some(i) = args.iter().position(|a| *a == name) {
            args.drain(i..i + 2);
        }
    }
    args.extend_from_slice(extra);
    let mut assert = bin().args(&args).assert().code(2);
    for s in says {
        assert = assert.stderr(contains(*s));
    }
}

#[test]
fn a_fixed_compute_at_or_over_the_compute_is_refused_naming_both_flags() {
    refused(
        &["--compute-fixed-ms", "250"],
        &["--compute-fixed-ms", "--compute-ms"],
    );
    refused(
        &["--compute-fixed-ms", "200"],
        &["--compute-fixed-ms", "200 ms"],
    );
    refused(&["--compute-fixed-ms=-5"], &["--compute-fixed-ms"]);
}

#[test]
fn loader_times_and_sizes_have_upper_bounds_and_copies_are_not_empty() {
    refused(
        &["--data-ms=1e300"],
        &["--data-ms: must be at most 10000000 milliseconds"],
    );
    refused(&["--data-ms=inf"], &["--data-ms"]);
    refused(&["--data-ms=nan"], &["--data-ms"]);
    let rest: &[&[&str]] = &[
        &["--sample-ms=1e300"],
        &["--compute-fixed-ms=1e300"],
        &["--dataset-gb=1e300"],
        &["--host-memory-gb=1e300"],
        &["--h2d-gbps=1e300"],
        &["--batch-bytes", "0"],
        &["--sample-bytes", "0"],
    ];
    for extra in rest {
        let flag = extra[0].split('=').next().unwrap_or(extra[0]);
        let extra: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|a| *a != "--data-ms")
            .collect();
        if flag == "--sample-ms" {
            // --sample-ms conflicts with BASE's --data-ms: give it alone.
            let mut args: Vec<&str> = BASE[..BASE.len() - 2].to_vec();
            args.extend_from_slice(&extra);
            bin()
                .args(&args)
                .assert()
                .code(2)
                .stderr(contains("--sample-ms: must be at most"));
            continue;
        }
        refused(&extra, &[flag]);
    }
}

#[test]
fn pytorch_refuses_prefetch_factor_and_persistent_workers_without_workers() {
    refused(
        &["--prefetch-factor", "4"],
        &["prefetch_factor option could only be specified in multiprocessing"],
    );
    refused(
        &["--persistent-workers"],
        &["persistent_workers option needs num_workers > 0"],
    );
    // With workers both are what PyTorch takes.
    let mut args: Vec<&str> = BASE[..BASE.len() - 4].to_vec();
    args.extend_from_slice(&["--num-workers", "2", "--data-ms", "300"]);
    args.extend_from_slice(&["--prefetch-factor", "4", "--persistent-workers"]);
    bin().args(&args).assert().success();
}

#[test]
fn doctor_refuses_loader_flags_without_a_model_before_any_step() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let out = dir.path().join("report");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    common::without_host_settings(&mut cmd);
    let output = cmd
        .args([
            "doctor",
            "--backend",
            "host",
            "--ranks",
            "2",
            "-e",
            "1K",
            "-o",
        ])
        .arg(&out)
        .args(["--num-workers", "4", "--data-ms", "nan"])
        .output()
        .unwrap_or_else(|e| panic!("doctor: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the loader flags need --model"), "{stderr}");
    assert!(!out.exists(), "doctor started before refusing its flags");
}

#[test]
fn csv_carries_the_whole_step_with_the_loader_like_the_table_and_json() {
    let doc: DdpSimulation = json_stdout(bin().args(BASE).args(["--format", "json"]));
    let output = bin()
        .args(BASE)
        .args(["--format", "csv"])
        .output()
        .unwrap_or_else(|e| panic!("csv: {e}"));
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let row: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} in {header:?}"));
        row[i]
    };
    let num = |name: &str| {
        col(name)
            .parse::<f64>()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let o = &doc.configurations[0];
    let l = o.loader.unwrap_or_else(|| panic!("no loader step"));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(num("step_time_s"), l.step_time_s), "{text}");
    assert!(close(num("samples_per_s"), l.samples_per_s), "{text}");
    assert!(close(num("iters_per_s"), 8.0 / l.step_time_s), "{text}");
    assert!(close(num("comm_step_time_s"), o.step_time_s), "{text}");
    assert!(close(num("data_interval_s"), l.data_interval_s), "{text}");
    assert_eq!(col("bound"), "data", "{text}");
    // Loading is most of this step: the communication-only step is far shorter.
    assert!(num("step_time_s") > 2.0 * num("comm_step_time_s"), "{text}");
}

#[test]
fn advised_workers_are_capped_by_host_memory_when_the_dataset_is_given() {
    // 2 pinned workers hide loading, but 3 ranks x (1 + 2) = 9 processes x 4 GB = 36 GB on a
    // 32 GB node; 1 worker (24 GB) fits under 90% and does not hide it.
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend_from_slice(&["--dataset-gb", "4", "--host-memory-gb", "32"]);
    bin()
        .args(&args)
        .assert()
        .success()
        .stdout(contains("* no num_workers both hides loading and fits in host memory: num_workers=2 with pin_memory=True would hide it"))
        .stdout(contains("need 36.0 GB of the host's 32.0 GB (at most 1 worker per rank fits under 90%)"))
        .stdout(contains("raise num_workers to").not());
    // With 64 GB the same 2 workers fit, and are advised.
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend_from_slice(&["--dataset-gb", "4", "--host-memory-gb", "64"]);
    bin()
        .args(&args)
        .assert()
        .success()
        .stdout(contains("* raise num_workers to 2 with pin_memory=True"));
}

#[test]
fn each_batch_tried_gets_the_workers_that_hide_loading_at_that_batch() {
    // Seed 001: 6 pinned workers hide loading at batch 16; at 32 x 2 a batch takes one worker
    // twice as long, the GPU less than twice (30 ms of it does not grow): 6 are too few.
    let doc: DdpSimulation = json_stdout(bin().args(SEED_001).args(["--format", "json"]));
    let loader = doc
        .loader
        .unwrap_or_else(|| panic!("no loader in the document"));
    let options = &loader.batch_options;
    assert_eq!(options[0].advised_workers, Some(6));
    assert_eq!(options[1].batch_size, 32);
    assert!(
        options[1].advised_workers.is_some_and(|w| w > 6),
        "{:?}",
        options[1].advised_workers
    );
    for o in options {
        let advised = o
            .advised
            .unwrap_or_else(|| panic!("batch {} has no advised step", o.batch_size));
        assert_ne!(advised.bound_by.name(), "data", "batch {}", o.batch_size);
    }
}

#[test]
fn counts_of_one_read_in_the_singular() {
    let args = [
        "simulate",
        "ddp",
        "--model",
        "resnet18",
        "--world-size",
        "1",
        "--batch-size",
        "256",
        "--accumulation",
        "1",
        "--compute-ms",
        "40",
        "--busbw",
        "10",
        "--num-workers",
        "4",
        "--data-ms",
        "300",
        "--cpu-cores",
        "3",
    ];
    let out = bin()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("simulate: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("# 1 GPU, batch 256 per GPU"), "{text}");
    assert!(text.contains("1 rank per node"), "{text}");
    assert!(
        text.contains("4 workers x 1 rank = 4 worker processes on 3 cores"),
        "{text}"
    );
    for wrong in ["1 GPUs", "(s)", "1 ranks", "at most 1 workers"] {
        assert!(!text.contains(wrong), "{wrong}: {text}");
    }
}
