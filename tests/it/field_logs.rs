//! Real logs users posted (tests/corpus, each with its thread on line 1), diagnosed as the
//! maintainers of those threads did, and the message catalogue's commands: `diagnose
//! --explain LINE` and `messages`. The catalogue is written from the projects' sources; these
//! logs only check that what it says of them matches what the threads concluded.

use crate::common::bin;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn corpus(dir: &str, prefix: &str) -> PathBuf {
    crate::common::corpus_file(dir, prefix)
}

fn diagnose(path: &Path) -> Vec<Value> {
    let out = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    v["findings"].as_array().unwrap().clone()
}

#[test]
fn the_first_finding_is_the_threads_verdict() {
    // (file, the first finding's id, words its title or fix must carry): each thread's
    // verdict in INDEX.md.
    let cases = [
        // kiskra, sjeaugey: restart the Fabric Manager (NVLS multicast).
        ("nccl-debug", "42-", "nccl.nvls", "fabricmanager"),
        ("nccl-debug", "43-", "nccl.nvls", "fabricmanager"),
        // The same error with its prefix stripped and split over three lines.
        ("nccl-debug", "44-", "nccl.nvls", "Fabric Manager"),
        // sjeaugey: unset NCCL_GRAPH_FILE.
        ("nccl-debug", "40-", "nccl.topology", "NCCL_GRAPH_FILE"),
        // Mount a larger /dev/shm.
        ("nccl-debug", "41-", "devshm.failure", "shm-size"),
        // kiskra: the plugin lines are not a failure.
        ("nccl-debug", "46-", "nccl.choices", "not used"),
        // Two hosts whose messages no single NCCL release prints together.
        ("nccl-debug", "48-", "nccl.versions-differ", "dgxh100-3"),
        // sjeaugey: GDR off, the NIC too far from the GPU.
        ("nccl-debug", "55-", "transport.gdr-disabled", "GPUDirect"),
        // verl: two ranks on one GPU.
        ("torch", "01-", "gpu.duplicate", "LOCAL_RANK"),
        // kiskra: fix MPI's launch first (PRRTE lost its remote daemon).
        ("launcher", "01-", "prte.daemons", "daemon"),
        // /dev/infiniband not exposed to the container: libfabric finds no EFA provider.
        ("launcher", "02-", "ofi.provider", "/dev/infiniband"),
        // The GPUs are in Exclusive Process mode.
        (
            "nccl-tests",
            "14-",
            "nccl-tests.failure",
            "Exclusive Process",
        ),
    ];
    for (dir, prefix, id, words) in cases {
        let f = diagnose(&corpus(dir, prefix));
        let first = f
            .first()
            .unwrap_or_else(|| panic!("{dir}/{prefix}: no findings"));
        assert_eq!(first["id"], id, "{dir}/{prefix}: {first:#}");
        let text = format!("{} {}", first["title"], first["fix"]);
        assert!(
            text.contains(words),
            "{dir}/{prefix}: {words:?} not in {text}"
        );
    }
}

#[test]
fn no_new_real_log_is_refused_or_answered_generically() {
    // Every failure log of the classes the catalogue reads: NCCL's own (prefixes stripped,
    // quoted, tagged, wrapped), PyTorch's, and what MPI, PMIx, UCX and libfabric print
    // before NCCL starts. None may be refused, and none may open with the catch-all finding.
    let mut read = 0;
    for dir in ["nccl-debug", "torch", "launcher"] {
        let base = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(base)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let new = dir != "nccl-debug" || name[..2].parse::<u32>().unwrap() >= 40;
            if !new {
                continue;
            }
            let f = diagnose(&path);
            if let Some(first) = f.first() {
                assert_ne!(first["id"], "nccl.error", "{dir}/{name}: {first:#}");
                assert_ne!(first["id"], "nccl.message", "{dir}/{name}: {first:#}");
            }
            read += 1;
        }
    }
    assert!(read >= 40, "{read} new logs");
}

#[test]
fn one_line_explained_with_its_source_and_releases() {
    let out = bin()
        .args([
            "diagnose",
            "--explain",
            "gpu-7:1:1 [0] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    // The caller's file, not the CUDACHECK macro's, picks the class.
    assert!(text.starts_with("nccl.nvls [error]"), "{text}");
    assert!(text.contains("from      src/include/"), "{text}");
    assert!(text.contains("printed   by v2."), "{text}");
    assert!(text.contains("values    1 | invalid argument"), "{text}");

    let out = bin()
        .args([
            "diagnose",
            "--explain",
            "[1,3]<stderr>:UCX  ERROR   connect(fd=48, dest_addr=172.17.0.1:42887) failed: Connection refused",
            "--format",
            "json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["kind"], "messages");
    assert_eq!(v["entry"]["project"], "ucx");
    assert!(
        v["entry"]["class"].as_str().unwrap().starts_with("ucx."),
        "{v:#}"
    );

    // A line no project prints: said so, exit 3, nothing made up.
    bin()
        .args(["diagnose", "--explain", "Epoch 3: loss 0.25"])
        .assert()
        .code(3)
        .stdout(predicates::str::contains("not in the catalogue"));
}

#[test]
fn the_catalogue_lists_its_entries_and_each_releases_coverage() {
    let out = bin()
        .args(["messages", "--coverage", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["schema_version"], 1);
    let rows = v["coverage"].as_array().unwrap();
    let newest = rows
        .iter()
        .find(|r| r["project"] == "nccl" && r["tag"] == "v2.30.7-1" && r["level"] == "WARN")
        .expect("NCCL 2.30.7's WARN formats");
    // Every format the source prints has an entry.
    assert_eq!(newest["formats"], newest["entries"]);
    assert!(newest["formats"].as_u64().unwrap() > 500);
    for project in [
        "nccl",
        "rccl",
        "aws-ofi-nccl",
        "pytorch",
        "openmpi",
        "ucx",
        "libfabric",
    ] {
        assert!(rows.iter().any(|r| r["project"] == project), "{project}");
    }
    let out = bin()
        .args([
            "messages",
            "--version",
            "2.21.5",
            "--level",
            "WARN",
            "--grep",
            "got completion from peer",
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().count() >= 2, "{text}");
    assert!(
        text.lines().skip(1).all(|l| l.contains("nccl.net-ib")),
        "{text}"
    );
    bin()
        .args(["messages", "--grep", "no format says this"])
        .assert()
        .code(3);
}
