//! Documents under abuse: every command reads our JSON through one typed reader (version,
//! kind, shape, content), names an input for what it is, takes what `import` writes, refuses
//! a partial curve or another machine's topology, and ties a comparison to its own run.

use crate::common;

use common::{bin, host_sweep, Printed};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn corpus(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(rel)
}

/// A small complete host run on `ranks` ranks, written to `path`.
fn sweep(path: &Path, ranks: usize, max: &str) {
    host_sweep(ranks)
        .args(["-b", "1K", "-e", max, "--samples", "6", "--json"])
        .arg(path)
        .assert()
        .success();
}

fn stderr_of(cmd: &mut assert_cmd::Command, code: i32) -> String {
    String::from_utf8_lossy(&cmd.stderr_if(code)).into_owned()
}

/// The reading commands, each given `file` as the run it reads.
fn readers(file: &Path, out: &Path) -> Vec<(&'static str, assert_cmd::Command)> {
    let mut compare = bin();
    compare.arg("compare").arg(file).arg(file);
    let mut qualify = bin();
    qualify
        .arg("qualify")
        .arg(file)
        .args(["--min-busbw", "0.0001"]);
    let mut report = bin();
    report.arg("report").arg(file).arg("-o").arg(out);
    let mut diagnose = bin();
    diagnose.args(["diagnose", "--from"]).arg(file);
    let mut simulate = bin();
    simulate
        .args([
            "simulate",
            "ddp",
            "--model",
            "resnet50",
            "--world-size",
            "2",
        ])
        .args(["--compute-ms", "100", "--curve"])
        .arg(file);
    vec![
        ("compare", compare),
        ("qualify", qualify),
        ("report", report),
        ("diagnose", diagnose),
        ("simulate", simulate),
    ]
}

#[test]
fn every_reader_refuses_an_impossible_record_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("run.json");
    sweep(&good, 2, "64K");
    let record: Value = serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 6] = [
        (
            "v999",
            |r| r["schema_version"] = 999.into(),
            "has schema_version 999; this build of ncclprobe reads schema_version 1",
        ),
        (
            "v0",
            |r| r["schema_version"] = 0.into(),
            "has schema_version 0; this build of ncclprobe reads schema_version 1",
        ),
        (
            "kind",
            |r| r["kind"] = "comparison".into(),
            "is an ncclprobe `comparison` document, not a run record",
        ),
        (
            "nranks0",
            |r| r["points"][0]["nranks"] = 0.into(),
            ".nranks is 0",
        ),
        (
            "negative",
            |r| r["points"][0]["time_s"] = (-1.0).into(),
            ".time_s is -1; it must be finite and above zero",
        ),
        (
            "zero",
            |r| r["points"][1]["samples_s"][0] = 0.0.into(),
            ".samples_s[0] is 0; it must be finite and above zero",
        ),
    ];
    for (name, edit, says) in cases {
        let mut bad = record.clone();
        edit(&mut bad);
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_vec_pretty(&bad).unwrap()).unwrap();
        for (command, mut cmd) in readers(&file, &dir.path().join("out.html")) {
            // A report reads every kind: a run calling itself a comparison is read as one.
            let says = match (command, name) {
                ("report", "kind") => "not a valid ncclprobe comparison: unknown field",
                _ => says,
            };
            let err = stderr_of(&mut cmd, 2);
            assert!(
                err.contains(&format!("{}: ", file.display())) && err.contains(says),
                "{command} {name}: {err}"
            );
        }
    }
    // The untouched record is read by all of them.
    for (command, mut cmd) in readers(&good, &dir.path().join("out.html")) {
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn inputs_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("run.csv");
    host_sweep(2)
        .args(["-b", "1K", "-e", "4K", "--samples", "6", "--csv"])
        .arg(&csv)
        .assert()
        .success();
    let files: [(&str, &[u8], &str); 6] = [
        ("empty.json", b"", "is empty"),
        ("blank.txt", b"\n   \n", "is empty"),
        (
            "core",
            b"\x7fELF\x02\x01\x01\x00\x00",
            "is binary data, not text",
        ),
        (
            "array.json",
            b"[]\n",
            "is JSON but not an ncclprobe document (an array)",
        ),
        (
            "null.json",
            b"null",
            "is JSON but not an ncclprobe document (null)",
        ),
        (
            "notes.txt",
            b"epoch 1 loss 0.53\n",
            "is text in none of the formats ncclprobe reads",
        ),
    ];
    let mut inputs: Vec<(PathBuf, &str)> = files
        .iter()
        .map(|(name, bytes, says)| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            (p, *says)
        })
        .collect();
    inputs.push((
        csv.clone(),
        "is an ncclprobe CSV (sweep --csv); pass the JSON record (--json)",
    ));
    for (file, says) in &inputs {
        for (command, mut cmd) in readers(file, &dir.path().join("out.html")) {
            if command == "diagnose" || command == "simulate" {
                continue; // a log and a CSV curve are theirs to read
            }
            let err = stderr_of(&mut cmd, 2);
            assert!(
                err.contains(&format!("{}: {says}", file.display())),
                "{command} {}: {err}",
                file.display()
            );
            assert!(!err.contains("NCCL/PyTorch log"), "{command}: {err}");
        }
    }
    // stdin given twice: the second `-` is named, not read as empty.
    let run = dir.path().join("run.json");
    sweep(&run, 2, "4K");
    let err = stderr_of(
        bin().args(["compare", "-", "-"]).pipe_stdin(&run).unwrap(),
        2,
    );
    // Refused before anything is read (the path guard), or by the reader itself.
    assert!(
        err.contains("both read stdin") || err.contains("-: was already read by another argument"),
        "{err}"
    );
    // A real NCCL log is still a log where one is read.
    bin()
        .args(["diagnose", "--from"])
        .arg(corpus(
            "nccl-debug/06-wsl2-2gpu-no-path-pattern-intranode-p2p-0-excerpt.txt",
        ))
        .assert()
        .success();
}

#[test]
fn what_import_writes_every_reader_takes() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(corpus("nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt"))
        .unwrap();
    // The 8 B row as nccl-tests prints a call below its resolution.
    let row = "           8             2     float     sum      -1    12.25 ";
    assert!(text.contains(row));
    let paste = dir.path().join("paste.txt");
    std::fs::write(
        &paste,
        text.replace(
            row,
            "           8             2     float     sum      -1     0.00 ",
        ),
    )
    .unwrap();
    let record = dir.path().join("imported.json");
    bin()
        .arg("import")
        .arg(&paste)
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("size 8 B out-of-place: time printed as 0.00 us (below the printout's resolution); dropped"),
        "{notes}"
    );
    assert_eq!(v["points"].as_array().unwrap().len(), 55);
    for (command, mut cmd) in [
        ("compare", {
            let mut c = bin();
            c.arg("compare").arg(&record);
            c
        }),
        ("qualify", {
            let mut c = bin();
            c.arg("qualify").arg(&record).args(["--min-busbw", "1"]);
            c
        }),
        ("report", {
            let mut c = bin();
            c.arg("report")
                .arg(&record)
                .arg("-o")
                .arg(dir.path().join("r.html"));
            c
        }),
        ("simulate", {
            let mut c = bin();
            c.args([
                "simulate",
                "ddp",
                "--model",
                "resnet50",
                "--world-size",
                "2",
            ])
            .args(["--compute-ms", "100", "--curve"])
            .arg(&record);
            c
        }),
    ] {
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A negative size in nccl-tests' -J JSON is refused, naming it, not read as 0.
    let json = dir.path().join("neg.json");
    std::fs::write(
        &json,
        r#"{"results":[{"size":-8,"count":2,"type":"float","redop":"sum","root":-1,
            "out_of_place":{"time":1.0,"alg_bw":0,"bus_bw":0,"nwrong":0},
            "in_place":{"time":1.0,"alg_bw":0,"bus_bw":0,"nwrong":0}}],"end_time":"x"}"#,
    )
    .unwrap();
    let err = stderr_of(bin().arg("import").arg(&json), 2);
    assert!(
        err.contains("results[0].size is -8, not a whole byte or element count"),
        "{err}"
    );
}

fn simulate_on(curve: &Path, world: &str) -> assert_cmd::Command {
    let mut c = bin();
    c.args([
        "simulate",
        "ddp",
        "--model",
        "resnet50",
        "--world-size",
        world,
    ])
    .args(["--compute-ms", "100", "--format", "json", "--curve"])
    .arg(curve);
    c
}

#[test]
fn a_partial_or_mismatched_curve_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.json");
    sweep(&run, 2, "64K");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
    v["status"] = "interrupted".into();
    let kept: Vec<Value> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["size_bytes"].as_u64() <= Some(1024))
        .cloned()
        .collect();
    v["points"] = kept.into();
    let killed = dir.path().join("killed.json");
    std::fs::write(&killed, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = stderr_of(&mut simulate_on(&killed, "2"), 2);
    assert!(
        err.contains("its run is interrupted (measured up to 1 KiB)"),
        "{err}"
    );
    assert!(
        err.contains("far below the largest message simulated"),
        "{err}"
    );
    assert!(err.contains("--allow-partial"), "{err}");
    let out = simulate_on(&killed, "2")
        .arg("--allow-partial")
        .assert()
        .success()
        .get_output()
        .clone();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let link = doc["link"].as_str().unwrap();
    assert!(
        link.contains("partial curve allowed: its run is interrupted"),
        "{link}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("used as allowed"));

    // Three ranks measured, two simulated: refused, and with the flag the rescaling is said.
    let three = dir.path().join("three.json");
    sweep(&three, 3, "64K");
    let err = stderr_of(&mut simulate_on(&three, "2"), 2);
    assert!(err.contains("measured on 3 ranks, rescaled to 2"), "{err}");
    let out = simulate_on(&three, "2")
        .arg("--allow-partial")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    assert!(
        doc["link"].as_str().unwrap().contains("x 0.750"),
        "{}",
        doc["link"]
    );
    // The complete curve on the ranks simulated needs nothing.
    simulate_on(&run, "2").assert().success();
}

#[test]
fn a_report_refuses_a_comparison_or_qualification_of_another_run() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    sweep(&a, 2, "16K");
    sweep(&b, 2, "16K");
    let cmp = dir.path().join("cmp.json");
    std::fs::write(
        &cmp,
        bin()
            .arg("compare")
            .arg(&b)
            .arg(&a)
            .args(["--format", "json"])
            .stdout_if(0),
    )
    .unwrap();
    let q = dir.path().join("q.json");
    std::fs::write(
        &q,
        bin()
            .arg("qualify")
            .arg(&a)
            .args(["--min-busbw", "0.0001", "--format", "json"])
            .stdout_if(0),
    )
    .unwrap();
    let html = dir.path().join("r.html");
    for doc in [&cmp, &q] {
        let err = stderr_of(bin().arg("report").arg(&b).arg(doc).arg("-o").arg(&html), 2);
        assert!(
            err.contains(&format!("{}: is the", doc.display()))
                && err.contains("which is none of the runs given"),
            "{err}"
        );
    }
    // Its own run, also under another name, is its run.
    let renamed = dir.path().join("renamed.json");
    std::fs::copy(&a, &renamed).unwrap();
    bin()
        .arg("report")
        .arg(&renamed)
        .arg(&cmp)
        .arg(&q)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
}

#[test]
fn compare_refuses_the_topology_of_another_machine() {
    let run = corpus("nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt");
    let h100 = corpus("topo/06-h100x8-nv18-8nic-mlx5-pix-gpu-numa-id.txt");
    let err = stderr_of(bin().arg("compare").arg(&run).arg("--topo").arg(&h100), 2);
    assert!(
        err.contains("by NV18, which no GeForce card has")
            && err.contains("NVIDIA GeForce RTX 2080 Ti"),
        "{err}"
    );
    // Fewer GPUs than the run's ranks on a node.
    let a100 = corpus("nccl-tests/05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let four = corpus("topo/17-azure-nc96ads-a100v4-4x-a100pcie-nv12-pairs-4numa.txt");
    let err = stderr_of(bin().arg("compare").arg(&a100).arg("--topo").arg(&four), 2);
    assert!(
        err.contains("has 4 GPUs, but the run put 8 ranks on a node"),
        "{err}"
    );
    // A machine with more GPUs than the run used: which ones are assumed is said.
    let seven = corpus("topo/09-7gpu-gtx1070-pix-phb-old-format-tabs.txt");
    let out = bin()
        .arg("compare")
        .arg(&run)
        .arg("--topo")
        .arg(&seven)
        .args(["--format", "json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has 7 GPUs and the run used 2 per node")
            && err.contains("assumed to be GPU0, GPU1"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["warnings"]
        .to_string()
        .contains("assumed to be GPU0, GPU1"));
    // The run's own machine is taken without a word about it.
    let own = corpus("topo/01-2080ti-x2-autodl-pix-gpu-numa-id.txt");
    let out = bin()
        .arg("compare")
        .arg(&run)
        .arg("--topo")
        .arg(&own)
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("assumed"));
}

#[test]
fn a_record_with_sorted_keys_and_a_long_env_is_still_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.json");
    sweep(&run, 2, "4K");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
    let env: serde_json::Map<String, Value> = (0..4000)
        .map(|i| (format!("VAR_{i:05}"), Value::from("x".repeat(40))))
        .collect();
    v["env"] = Value::Object(env);
    // As `jq -S` writes it: keys sorted, so `env` (4000 lines) comes before `kind` and
    // `schema_version`, far past the first bytes.
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let b: std::collections::BTreeMap<&String, Value> =
                    m.iter().map(|(k, x)| (k, sorted(x))).collect();
                serde_json::to_value(b).unwrap()
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let text = serde_json::to_string_pretty(&sorted(&v)).unwrap();
    assert!(text.find("\"env\"").unwrap() < text.find("\"kind\"").unwrap());
    assert!(
        text[..64 << 10].find("\"kind\"").is_none(),
        "kind is past the head"
    );
    let sorted_run = dir.path().join("sorted.json");
    std::fs::write(&sorted_run, text).unwrap();
    let out = dir.path().join("r.html");
    for (name, mut cmd) in readers(&sorted_run, &out) {
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            !stderr.contains("results") && !stderr.contains("nccl-tests"),
            "{name} read the record as nccl-tests JSON: {stderr}"
        );
        if name == "simulate" {
            // Read as the record it is: refused only for stopping at 4 KiB.
            assert!(stderr.contains("far below the largest message"), "{stderr}");
        } else {
            assert_eq!(o.status.code(), Some(0), "{name}: {stderr}");
        }
    }
}

#[test]
fn import_refuses_json_sizes_no_record_could_hold() {
    let dir = tempfile::tempdir().unwrap();
    let row = |size: &str, time: &str| {
        format!(
            r#"{{"config":{{"devices":[{{"rank":0,"hostname":"a","pid":1}},{{"rank":1,"hostname":"a","pid":2}}]}},
            "results":[{{"size":{size},"count":2,"type":"float","redop":"sum","root":-1,
            "out_of_place":{{"time":{time},"alg_bw":0,"bus_bw":0,"nwrong":0}},
            "in_place":{{"time":{time},"alg_bw":0,"bus_bw":0,"nwrong":0}}}}],"end_time":"x"}}"#
        )
    };
    for (size, said) in [
        ("1e30", "not a whole byte or element count"),
        ("8.5", "not a whole byte or element count"),
        ("0", "cannot hold count 2 float elements"),
    ] {
        let json = dir.path().join("bad.json");
        std::fs::write(&json, row(size, "1.0")).unwrap();
        let err = stderr_of(bin().arg("import").arg(&json), 2);
        assert!(err.contains(said), "size {size}: {err}");
    }
    // A negative time is no time, and is not blamed on the printout's resolution.
    let json = dir.path().join("negtime.json");
    std::fs::write(&json, row("8", "-5")).unwrap();
    let out = bin().arg("import").arg(&json).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("-5 us is no time a call takes"), "{stdout}");
    assert!(!stdout.contains("resolution"), "{stdout}");
    // Without devices, and no bandwidths to tell it, the rank count is unknown: refused.
    let bare = r#"{"results":[{"size":8,"count":2,"type":"float","redop":"sum","root":-1,
        "out_of_place":{"time":1.0,"alg_bw":0,"bus_bw":0,"nwrong":0},
        "in_place":{"time":1.0,"alg_bw":0,"bus_bw":0,"nwrong":0}}],"end_time":"x"}"#;
    let json = dir.path().join("bare.json");
    std::fs::write(&json, bare).unwrap();
    let err = stderr_of(bin().arg("import").arg(&json), 2);
    assert!(err.contains("rank count cannot be told"), "{err}");
}

#[test]
fn stated_hardware_that_disagrees_with_the_run_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("t2080.json");
    bin()
        .arg("import")
        .arg(corpus("nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt"))
        .arg("--json")
        .arg(&run)
        .assert()
        .success();
    let out = bin()
        .arg("compare")
        .arg(&run)
        .args(["--hardware", "8x H100 SXM"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the run's GPUs are NVIDIA GeForce RTX 2080 Ti; H100 SXM stated"),
        "{stderr}"
    );
    assert!(stderr.contains("8 GPUs per node stated"), "{stderr}");
    // What agrees says nothing.
    let out = bin()
        .arg("compare")
        .arg(&run)
        .args(["--hardware", "2x RTX 2080 Ti"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--hardware:"));
}
