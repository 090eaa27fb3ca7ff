//! `ncclprobe simulate` through the real binary.

use crate::common;

use common::{bin, host_sweep};
use predicates::str::contains;
use serde_json::Value;

const SEED_CURVE: &str = "tests/fixtures/seed002_allreduce.csv";

#[test]
fn seed_002_advice() {
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "bert-base",
            "--world-size",
            "2",
            "--batch-size",
            "128",
        ])
        .args(["--compute-ms", "204", "--curve", SEED_CURVE])
        .assert()
        .success()
        .stdout(contains("* 2 GPUs over this link are slower than 1"))
        .stdout(contains("with no_sync() wrapping forward and backward"))
        .stdout(contains(
            "accumulating without no_sync() all-reduces every micro-step",
        ));
}

#[test]
fn json_has_every_configuration_field() {
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "8",
            "--compute-ms",
            "350",
        ])
        .args([
            "--busbw",
            "20",
            "--latency-us",
            "25",
            "--bucket-cap-mb",
            "1,5,10,25,50,100",
            "--accumulation",
            "1,2,4,8",
        ])
        .args(["--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).expect("one JSON document");
    let doc: ncclprobe::documents::DdpSimulation =
        serde_json::from_value(v.clone()).expect("a typed simulation document");
    assert_eq!(doc.kind, ncclprobe::documents::Kind::Simulation);
    assert_eq!(doc.simulator, ncclprobe::documents::Simulator::Ddp);
    assert_eq!(doc.configurations.len(), 6 * 7);
    let configs = v["configurations"].as_array().unwrap();
    // 6 caps × (k=1 once + k=2,4,8 with and without no_sync).
    assert_eq!(configs.len(), 6 * 7);
    for c in configs {
        for key in [
            "bucket_cap_mb",
            "accumulation",
            "no_sync",
            "step_time_s",
            "exposed_comm_s",
            "iters_per_s",
            "samples_per_s",
            "scaling_efficiency",
            "bucket_bytes",
        ] {
            assert!(!c[key].is_null(), "missing {key} in {c}");
        }
    }
    let cap25: Vec<u64> = configs
        .iter()
        .find(|c| c["bucket_cap_mb"] == 25.0 && c["accumulation"] == 1)
        .unwrap()["bucket_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(cap25, vec![2052000, 28852224, 15853824]);
    assert_eq!(v["model"]["params"], 11689512);
    assert!(v["advice"].as_array().unwrap().len() >= 2);
}

#[test]
fn no_sync_filter_keeps_only_no_sync_rows() {
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "gpt2",
            "--world-size",
            "2",
            "--compute-ms",
            "300",
            "--busbw",
            "5",
        ])
        .args(["--no-sync", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let shown = v["configurations"].as_array().unwrap();
    assert!(!shown.is_empty(), "--no-sync shows its configurations");
    assert!(shown.iter().all(|c| c["no_sync"] == true));
}

#[test]
fn a_measured_sweep_is_a_curve() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    host_sweep(2)
        .args([
            "-b",
            "64K",
            "-e",
            "4M",
            "--min-samples",
            "6",
            "--max-samples",
            "8",
            "--point-budget",
            "0.05",
        ])
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet50",
            "--world-size",
            "2",
            "--compute-ms",
            "100",
            "--curve",
        ])
        .arg(&json)
        .assert()
        .success()
        .stdout(contains("all_reduce curve from"))
        .stdout(contains("7 sizes, 2 ranks"));
}

#[test]
fn fsdp_memory_and_volume() {
    let out = bin()
        .args([
            "simulate",
            "fsdp",
            "--model",
            "llama2-7b",
            "--world-size",
            "8",
            "--curve",
            SEED_CURVE,
            // Measured on 2 ranks, rescaled to 8.
            "--allow-partial",
        ])
        .args([
            "--compute-ms",
            "2000",
            "--gpu-memory-gb",
            "80",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let doc: ncclprobe::documents::FsdpSimulation =
        serde_json::from_value(v.clone()).expect("a typed simulation document");
    assert_eq!(doc.simulator, ncclprobe::documents::Simulator::Fsdp);
    let rows = v["strategies"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let bus: Vec<f64> = rows
        .iter()
        .map(|r| r["estimate"]["bus_bytes_per_gpu"].as_f64().unwrap())
        .collect();
    assert!(
        (bus[3] / bus[0] - 1.5).abs() < 1e-9,
        "FULL_SHARD moves 1.5x DDP's bytes"
    );
    // 16 bytes per parameter unsharded: 108 GB does not fit 80 GB; ZeRO-3 does.
    assert_eq!(rows[0]["fits"], false);
    assert_eq!(rows[3]["fits"], true);
}

#[test]
fn bad_input_is_named() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--model", "gpt5", "--busbw", "1"],
            "--model: unknown model preset 'gpt5' (did you mean `gpt2`?); presets:",
        ),
        (&["--model", "bert-base"], "give the link: --curve FILE"),
        (
            &[
                "--model",
                "bert-base",
                "--busbw",
                "1",
                "--bucket-cap-mb",
                "10,abc",
            ],
            "--bucket-cap-mb: unknown value 'abc'",
        ),
        (
            &["--model", "bert-base", "--busbw=-3"],
            "--busbw: must be a positive number",
        ),
        (
            &["--model", "bert-base", "--curve", "Cargo.toml"],
            "--curve:",
        ),
        (
            &["--model", "Cargo.toml", "--busbw", "1"],
            "--model: Cargo.toml: expected a JSON list",
        ),
    ];
    for (args, message) in cases {
        bin()
            .args([
                "simulate",
                "ddp",
                "--world-size",
                "2",
                "--compute-ms",
                "100",
            ])
            .args(*args)
            .assert()
            .code(2)
            .stderr(contains(*message));
    }
}

const RESNET50_ON_4: [&str; 6] = [
    "simulate",
    "ddp",
    "--model",
    "resnet50",
    "--world-size",
    "4",
];

fn step_time(extra: &[&str]) -> (f64, Value) {
    let v: Value = common::json_stdout(
        bin()
            .args(RESNET50_ON_4)
            .args(["--compute-ms", "300", "--busbw", "2", "--latency-us", "30"])
            .args([
                "--bucket-cap-mb",
                "25",
                "--accumulation",
                "1",
                "--format",
                "json",
            ])
            .args(extra),
    );
    (v["configurations"][0]["step_time_s"].as_f64().unwrap(), v)
}

#[test]
fn overlap_slowdown_lengthens_overlapped_steps_and_is_recorded() {
    // Free overlap (0), the measured average (the default, 0.19), a slower one.
    let (free, _) = step_time(&["--overlap-slowdown", "0"]);
    let (default, d) = step_time(&[]);
    assert_eq!(d["overlap_slowdown"], 0.19);
    let (slowed, v) = step_time(&["--overlap-slowdown", "0.4"]);
    assert_eq!(v["overlap_slowdown"], 0.4);
    assert!(
        free < default && default < slowed,
        "{free} {default} {slowed}"
    );
    bin()
        .args(RESNET50_ON_4)
        .args([
            "--compute-ms",
            "300",
            "--busbw",
            "2",
            "--overlap-slowdown",
            "1.5",
        ])
        .assert()
        .code(2)
        .stderr(contains(
            "--overlap-slowdown: must be a fraction between 0 and 1, got 1.5",
        ));
}

#[test]
fn csv_has_one_row_per_configuration_and_strategy() {
    let ddp = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet18",
            "--world-size",
            "2",
        ])
        .args([
            "--compute-ms",
            "100",
            "--busbw",
            "5",
            "--bucket-cap-mb",
            "5,25",
        ])
        .args(["--accumulation", "1,4", "--format", "csv"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(ddp).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("bucket_cap_mb,accumulation,no_sync,buckets,step_time_s"));
    // 2 caps × (k=1 once + k=4 with and without no_sync).
    assert_eq!(lines.len(), 1 + 2 * 3, "{text}");
    let fsdp = bin()
        .args(["simulate", "fsdp", "--model", "gpt2", "--world-size", "4"])
        .args(["--compute-ms", "300", "--busbw", "10", "--format", "csv"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(fsdp).unwrap();
    assert!(text.starts_with("strategy,bus_bytes_per_gpu,"), "{text}");
    assert_eq!(text.lines().count(), 1 + 4);
    // No --gpu-memory-gb: the fits column is empty, not "false".
    assert!(text.lines().skip(1).all(|l| l.ends_with(',')), "{text}");
}

#[test]
fn a_measured_step_fits_the_overlap_slowdown_and_says_when_none_can() {
    // The step the model gives at σ = 0.3, given back as measured, gives back σ = 0.3.
    let (at_03, _) = step_time(&["--overlap-slowdown", "0.3"]);
    let ms = format!("{}", at_03 * 1e3);
    let (_, v) = step_time(&["--measured-step-ms", &ms]);
    let sigma = v["overlap_slowdown"].as_f64().unwrap();
    assert!((sigma - 0.3).abs() < 1e-3, "{sigma}");
    assert!(v["advice"][0]
        .as_str()
        .unwrap()
        .starts_with("overlap slowdown 0.30 fitted to the measured step"));
    // Faster than free overlap allows: the inputs, not the overlap, are wrong.
    let (free, _) = step_time(&["--overlap-slowdown", "0"]);
    let out = bin()
        .args(RESNET50_ON_4)
        .args(["--compute-ms", "300", "--busbw", "2", "--latency-us", "30"])
        .args(["--bucket-cap-mb", "25", "--accumulation", "1"])
        .args(["--measured-step-ms", &format!("{}", free * 1e3 * 0.5)])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("faster than this model allows"), "{err}");
}

#[test]
fn the_gpu_estimates_the_optimizer_step_and_zero_divides_it() {
    // gpt2 (124M fp32 parameters) on an H100: 124,439,808 x 36 B / (0.8 x 3.35 TB/s) = 1.67 ms.
    let v: Value = common::json_stdout(bin().args([
        "simulate",
        "ddp",
        "--model",
        "gpt2",
        "--world-size",
        "2",
        "--batch-size",
        "8",
        "--compute-ms",
        "100",
        "--gpu",
        "h100",
        "--busbw",
        "100",
        "--bucket-cap-mb",
        "25",
        "--accumulation",
        "1",
        "--format",
        "json",
    ]));
    let opt = v["compute"]["optimizer_s"].as_f64().unwrap();
    assert!(
        (opt - 124_439_808.0 * 36.0 / (0.8 * 3.35e12)).abs() < 1e-6,
        "{opt}"
    );
    // Taken out of --compute-ms: forward and backward are what is left.
    let fb =
        v["compute"]["forward_s"].as_f64().unwrap() + v["compute"]["backward_s"].as_f64().unwrap();
    assert!((fb + opt - 0.1).abs() < 1e-9);
    // ZeRO-2 steps 1/N of the states; an unknown GPU is refused, naming the known ones.
    let f: Value = common::json_stdout(bin().args([
        "simulate",
        "fsdp",
        "--model",
        "gpt2",
        "--world-size",
        "4",
        "--optimizer-ms",
        "40",
        "--forward-ms",
        "10",
        "--backward-ms",
        "20",
        "--busbw",
        "1000",
        "--strategy",
        "no-shard,shard-grad-op",
        "--overlap-slowdown",
        "0",
        "--format",
        "json",
    ]));
    let ddp = f["strategies"][0]["estimate"]["step_time_s"]
        .as_f64()
        .unwrap();
    let z2 = f["strategies"][1]["estimate"]["step_time_s"]
        .as_f64()
        .unwrap();
    // DDP: 10 + 20 + 40 ms; ZeRO-2: 10 + 20 + 40/4 ms and the weights' gather.
    assert!((ddp - 0.07).abs() < 1e-9 && z2 < 0.045, "{ddp} {z2}");
    let out = bin()
        .args([
            "simulate",
            "ddp",
            "--model",
            "gpt2",
            "--world-size",
            "2",
            "--compute-ms",
            "100",
        ])
        .args(["--gpu", "toaster", "--busbw", "10"])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(err.contains("toaster") && err.contains("RTX 4090"), "{err}");
}

#[test]
fn max_batch_searches_the_largest_micro_batch_that_fits_and_names_what_stops_it() {
    let v: Value = common::json_stdout(bin().args([
        "simulate",
        "memory",
        "--model",
        "llama2-7b",
        "--precision",
        "pure-bf16",
        "--lora-rank",
        "8",
        "--seq-len",
        "1304",
        "--flash-attention",
        "--logits",
        "fused",
        "--gpu-memory-gib",
        "40",
        "--max-batch",
        "--host-memory-gb",
        "1000",
        "--format",
        "json",
    ]));
    let m = &v["max_micro_batch"];
    let k = m["micro_batch"].as_u64().unwrap();
    assert!(k >= 1);
    assert!(m["total_bytes"].as_f64() <= m["capacity_bytes"].as_f64());
    assert!(m["next_total_bytes"].as_f64() > m["capacity_bytes"].as_f64());
    assert_eq!(m["limiting_term"], "activations");
    assert!(v["notes"][0]
        .as_str()
        .unwrap()
        .contains(&format!("is {k} (")));
    // The plan at that batch fits; one more does not (exit 3, the does-not-fit verdict).
    let at = |mb: u64, code: i32| {
        bin()
            .args([
                "simulate",
                "memory",
                "--model",
                "llama2-7b",
                "--precision",
                "pure-bf16",
            ])
            .args(["--lora-rank", "8", "--seq-len", "1304", "--flash-attention"])
            .args([
                "--logits",
                "fused",
                "--gpu-memory-gib",
                "40",
                "--host-memory-gb",
                "1000",
            ])
            .args(["--micro-batch", &mb.to_string()])
            .assert()
            .code(code);
    };
    at(k, 0);
    at(k + 1, 3);
}
