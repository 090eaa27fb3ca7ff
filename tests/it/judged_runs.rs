//! Runs a vendor or maintainer judged (tests/corpus/judged, each with its source and the
//! verdict quoted in tests/corpus/INDEX.md section M): `compare` on each, with nothing stated
//! and with the hardware stated as the source states it, against the judged verdict. The table
//! is printed (`cargo test --test it judged_runs:: -- --nocapture`) for the closing note.
//!
//! Each case records what ncclprobe answers today and whether that is the judged verdict: a
//! change that turns an agreement into a miss fails here, and so does one that mends a miss
//! without moving it to the agreements (say what mended it).

use crate::common::bin;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a vendor or maintainer said of the run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Judged {
    Expected,
    Below,
}

/// (file prefix, judged, nodes, --hardware as the source states it)
const CASES: &[(&str, Judged, usize, &str)] = &[
    ("01-", Judged::Expected, 2, "2 x p4de.24xlarge"),
    ("02-", Judged::Expected, 2, "2 x p5.48xlarge"),
    (
        "03-",
        Judged::Expected,
        2,
        "2 nodes x 4 GH200, 4x200G Slingshot",
    ),
    (
        "04-",
        Judged::Below,
        2,
        "2 nodes x 4 GH200, 4x200G Slingshot",
    ),
    ("05-", Judged::Expected, 2, "2 x a3-highgpu-8g"),
    ("06-", Judged::Expected, 2, "2 x a3-megagpu-8g"),
    ("07-", Judged::Expected, 18, "18 x GB200 NVL72"),
    ("08-", Judged::Expected, 36, "36 x GB200 NVL72"),
    ("09-", Judged::Expected, 360, "360 x GB200 NVL72"),
    ("10-", Judged::Expected, 2, "2 x BM.GPU.H100.8"),
    ("11-", Judged::Expected, 2, "2 x DGX A100"),
    ("12-", Judged::Expected, 2, "2 nodes x 8 V100, 2x100G RoCE"),
    ("13-", Judged::Expected, 4, "4 x DGX A100"),
    ("14-", Judged::Expected, 2, "2 x p5.48xlarge"),
    ("15-", Judged::Expected, 2, "2 x BM.GPU.H100.8"),
    (
        "16-",
        Judged::Below,
        8,
        "8 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "17-",
        Judged::Below,
        2,
        "2 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "18-",
        Judged::Below,
        8,
        "8 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "19-",
        Judged::Below,
        128,
        "128 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "20-",
        Judged::Below,
        2,
        "2 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "21-",
        Judged::Below,
        8,
        "8 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "22-",
        Judged::Below,
        2,
        "2 nodes x 8 H100 SXM, 8x400G IB per node",
    ),
    (
        "23-",
        Judged::Expected,
        8,
        "8 nodes x 4 A100 SXM, 2x200G Slingshot",
    ),
    (
        "24-",
        Judged::Expected,
        2,
        "2 nodes x 8 A100 SXM, 8x200G IPoIB per node",
    ),
    ("25-", Judged::Expected, 2, "2 x ND96asr_v4"),
    ("26-", Judged::Expected, 2, "2 x BM.GPU.MI300X.8"),
    ("27-", Judged::Expected, 1, "8x MI300X"),
    ("28-", Judged::Expected, 2, "2 x a3-ultragpu-8g"),
    ("29-", Judged::Expected, 32, "32 x BM.GPU.GB200-v3.4"),
];

/// What the source says of the run itself that the paste does not carry, given with and
/// without the hardware: file 05's table cannot tell all_gather from alltoall (validation was
/// off), and the guide runs it as `allgather.sh`.
const RUN_ARGS: &[(&str, &[&str])] = &[("05-", &["--collective", "all_gather"])];

fn run_args(prefix: &str) -> &'static [&'static str] {
    RUN_ARGS
        .iter()
        .find(|(p, _)| *p == prefix)
        .map_or(&[], |(_, a)| a)
}

/// What ncclprobe answered today, with the hardware stated and with nothing stated; `agrees`
/// says whether the stated answer is the judged verdict.
const TODAY: &[(&str, &str, &str)] = &[
    ("01-", "ok", "refused: the run names no GPU"),
    ("02-", "ok", "refused: the run names no GPU"),
    ("03-", "ok", "conditional"),
    ("04-", "far-below", "assumed below-if-rdma"),
    ("05-", "ok", "refused: the run names no GPU"),
    ("06-", "ok", "refused: the run names no GPU"),
    ("07-", "ok", "ok"),
    ("08-", "ok", "ok"),
    ("09-", "ok", "ok"),
    ("10-", "ok", "conditional"),
    ("11-", "ok", "refused: the run names no GPU"),
    ("12-", "ok", "refused: the run names no GPU"),
    ("13-", "ok", "refused: the run names no GPU"),
    ("14-", "ok", "refused: the run names no GPU"),
    ("15-", "ok", "assumed above-two-nodes"),
    ("16-", "far-below", "assumed below-if-rdma"),
    ("17-", "far-below", "conditional"),
    ("18-", "far-below", "conditional"),
    ("19-", "far-below", "assumed below-if-rdma"),
    ("20-", "far-below", "assumed below-if-rdma"),
    ("21-", "far-below", "assumed below-if-rdma"),
    ("22-", "far-below", "refused: the run names no GPU"),
    ("23-", "ok", "conditional"),
    ("24-", "ok", "refused: the run names no GPU"),
    ("25-", "ok", "refused: the run names no GPU"),
    ("26-", "ok", "conditional"),
    ("27-", "ok", "ok"),
    ("28-", "ok", "refused: the run names no GPU"),
    ("29-", "ok", "ok"),
];

fn file(prefix: &str) -> PathBuf {
    crate::common::corpus_file("judged", prefix)
}

/// The answer in a few words: the verdict most of the largest sizes got, the conditional or
/// assumed answer, or the refusal's first words.
fn answer(path: &Path, args: &[&str], hardware: Option<&str>) -> String {
    let mut cmd = bin();
    cmd.arg("compare")
        .arg(path)
        .args(["--format", "json"])
        .args(args);
    if let Some(h) = hardware {
        cmd.args(["--hardware", h]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let Ok(doc) = serde_json::from_slice::<Value>(&out.stdout) else {
        let why = stderr
            .lines()
            .find(|l| !l.contains("warning"))
            .unwrap_or("")
            .trim_start_matches("ncclprobe: ");
        for words in [
            "the run names no GPU",
            "no shipped expectation",
            "its rank count cannot be told",
        ] {
            if why.contains(words) {
                return format!("refused: {words}");
            }
        }
        return format!("refused: {why}");
    };
    if let Some(a) = doc["assumed"]["verdict"].as_str() {
        return format!("assumed {a}");
    }
    if doc["baseline"]["kind"] == "conditional" {
        return "conditional".into();
    }
    let points = doc["points"].as_array().cloned().unwrap_or_default();
    let largest = points
        .iter()
        .filter_map(|p| p["size_bytes"].as_u64())
        .max()
        .unwrap_or(0);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for p in points
        .iter()
        .filter(|p| p["size_bytes"].as_u64().unwrap_or(0) >= largest / 4)
    {
        *counts
            .entry(p["verdict"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(v, _)| v)
        .unwrap_or_else(|| "no points".into())
}

/// Whether an answer is the judged verdict: `ok` for a run judged as expected (or above the
/// NICs at 2 nodes, NCCL's tree), below or far below for one judged below.
fn agrees(answer: &str, judged: Judged, nodes: usize) -> bool {
    match judged {
        Judged::Expected => {
            answer == "ok"
                || answer == "assumed consistent"
                || (nodes == 2
                    && (answer == "above-expectation" || answer == "assumed above-two-nodes"))
        }
        Judged::Below => matches!(
            answer,
            "below" | "far-below" | "assumed below" | "assumed far-below" | "assumed below-if-rdma"
        ),
    }
}

#[test]
fn judged_runs_get_the_judged_verdict_with_the_hardware_stated() {
    let mut table = vec![format!(
        "{:<4} {:<9} {:<40} {:<40} {}",
        "file", "judged", "with --hardware", "nothing stated", "--hardware"
    )];
    let mut drift = Vec::new();
    let (mut stated_agree, mut bare_agree) = (0, 0);
    for (&(prefix, judged, nodes, hw), &(p2, today_stated, today_bare)) in CASES.iter().zip(TODAY) {
        assert_eq!(prefix, p2);
        let path = file(prefix);
        let stated = answer(&path, run_args(prefix), Some(hw));
        let bare = answer(&path, run_args(prefix), None);
        stated_agree += usize::from(agrees(&stated, judged, nodes));
        bare_agree += usize::from(agrees(&bare, judged, nodes));
        if stated != today_stated || bare != today_bare {
            drift.push(format!(
                "{prefix}: now `{stated}` / `{bare}`, recorded `{today_stated}` / `{today_bare}`"
            ));
        }
        table.push(format!(
            "{prefix:<4} {:<9} {:<40} {:<40} {hw}",
            format!("{judged:?}").to_lowercase(),
            format!(
                "{stated}{}",
                if agrees(&stated, judged, nodes) {
                    " ✓"
                } else {
                    ""
                }
            ),
            format!(
                "{bare}{}",
                if agrees(&bare, judged, nodes) {
                    " ✓"
                } else {
                    ""
                }
            ),
        ));
    }
    table.push(format!(
        "judged verdict given: {stated_agree}/{} with the hardware stated, {bare_agree}/{} with nothing stated",
        CASES.len(),
        CASES.len()
    ));
    let table = table.join("\n");
    eprintln!("{table}");
    assert!(
        drift.is_empty(),
        "answers changed; update TODAY and the closing note:\n{}\n{table}",
        drift.join("\n")
    );
    // What the designs, the Slingshot, TCPX/TCPXO, NVL72, xGMI and RoCE 400G entries bought: 29
    // of 29 with the hardware stated, the 8 runs judged below among them; with nothing stated,
    // the NVL72 and MI300X runs, and the runs too slow for any RDMA NIC.
    assert!(stated_agree >= 29, "{table}");
    assert!(bare_agree >= 11, "{table}");
    let below = CASES.iter().filter(|c| c.1 == Judged::Below).count();
    assert!(
        CASES.len() >= 20 && below >= 8,
        "the corpus holds {} judged runs, {below} of them below",
        CASES.len()
    );
}

/// The shape of a curve, without any reference run: Oracle's two-rack GB200 example dips at
/// 1 GiB in both placements (411 GB/s at 512 MiB, 285 at 1 GiB, 549 at 2 GiB), which the
/// per-size verdict takes as one `below` row among `ok` ones; ALCF's tuned Polaris run rises
/// smoothly and has no finding.
#[test]
fn a_curve_that_falls_over_a_range_of_sizes_is_a_finding_with_the_range() {
    let shape = |prefix: &str, hw: &str| -> Vec<Value> {
        let out = bin()
            .arg("compare")
            .arg(file(prefix))
            .args(["--format", "json", "--hardware", hw])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["shape"].as_array().cloned().unwrap_or_default()
    };
    let dip = shape("29-", "32 x BM.GPU.GB200-v3.4");
    assert_eq!(dip.len(), 1, "{dip:?}");
    assert_eq!(dip[0]["kind"], "falls");
    assert_eq!(dip[0]["from_bytes"], 1u64 << 30);
    assert_eq!(dip[0]["to_bytes"], 1u64 << 30);
    let sentence = dip[0]["sentence"].as_str().unwrap();
    assert!(
        sentence
            .contains("from 411.0 GB/s at 512 MiB to 284.6 GB/s at 1 GiB and recovers at 2 GiB"),
        "{sentence}"
    );
    let text = bin()
        .arg("compare")
        .arg(file("29-"))
        .args(["--hardware", "32 x BM.GPU.GB200-v3.4"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("# shape: all_reduce busbw falls"));
    let smooth = shape("23-", "8 nodes x 4 A100 SXM, 2x200G Slingshot");
    assert!(smooth.is_empty(), "{smooth:?}");
    // The HTML report carries it beside the comparison's warnings.
    let dir = tempfile::tempdir().unwrap();
    let (record, doc, page) = (
        dir.path().join("r.json"),
        dir.path().join("c.json"),
        dir.path().join("r.html"),
    );
    bin()
        .arg("import")
        .arg(file("29-"))
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    let out = bin()
        .arg("compare")
        .arg(&record)
        .args(["--format", "json", "--hardware", "32 x BM.GPU.GB200-v3.4"])
        .output()
        .unwrap();
    std::fs::write(&doc, &out.stdout).unwrap();
    bin()
        .arg("report")
        .args([&record, &doc])
        .arg("-o")
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("shape: all_reduce busbw falls from 411.0 GB&#x2f;s at 512 MiB"),
        "the report leaves the shape finding out"
    );
}

/// The expected curve follows NCCL 2.30's constants; a run on an NCCL whose cost model is
/// pipeline-based (2.32.6 and later) says so, and one on an older NCCL does not.
#[test]
fn a_run_on_an_nccl_with_another_cost_model_says_which_model_the_curve_follows() {
    let text = std::fs::read_to_string(file("29-")).unwrap();
    assert!(text.contains("NCCL version 2.29.2+cuda13.1"));
    let dir = tempfile::tempdir().unwrap();
    let newer = dir.path().join("newer.txt");
    std::fs::write(
        &newer,
        text.replace(
            "NCCL version 2.29.2+cuda13.1",
            "NCCL version 2.32.6+cuda13.1",
        ),
    )
    .unwrap();
    let warnings = |path: &Path| -> Vec<String> {
        let out = bin()
            .arg("compare")
            .arg(path)
            .args(["--format", "json", "--hardware", "32 x BM.GPU.GB200-v3.4"])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(doc["method"]
            .as_str()
            .unwrap()
            .contains("NCCL 2.30's tuning.cc constants"));
        doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let w = warnings(&newer);
    assert!(
        w.iter().any(|w| w
            .starts_with("the run used NCCL 2.32.6+cuda13.1, whose cost model is pipeline-based")),
        "{w:?}"
    );
    assert!(!warnings(&file("29-"))
        .iter()
        .any(|w| w.contains("pipeline-based")));
}
