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
];

/// What ncclprobe answered today, with the hardware stated and with nothing stated; `agrees`
/// says whether the stated answer is the judged verdict.
const TODAY: &[(&str, &str, &str)] = &[
    ("01-", "ok", "refused: the run names no GPU"),
    ("02-", "ok", "refused: the run names no GPU"),
    ("03-", "ok", "conditional"),
    ("04-", "far-below", "conditional"),
    (
        "05-",
        "refused: its rank count cannot be told",
        "refused: its rank count cannot be told",
    ),
    ("06-", "above-expectation", "refused: the run names no GPU"),
    (
        "07-",
        "above-expectation",
        "refused: no shipped expectation",
    ),
    (
        "08-",
        "above-expectation",
        "refused: no shipped expectation",
    ),
    (
        "09-",
        "above-expectation",
        "refused: no shipped expectation",
    ),
    ("10-", "ok", "conditional"),
    ("11-", "ok", "refused: the run names no GPU"),
    ("12-", "ok", "refused: the run names no GPU"),
    ("13-", "ok", "refused: the run names no GPU"),
    ("14-", "ok", "refused: the run names no GPU"),
    ("15-", "ok", "assumed above-two-nodes"),
];

fn file(prefix: &str) -> PathBuf {
    crate::common::corpus_file("judged", prefix)
}

/// The answer in a few words: the verdict most of the largest sizes got, the conditional or
/// assumed answer, or the refusal's first words.
fn answer(path: &Path, hardware: Option<&str>) -> String {
    let mut cmd = bin();
    cmd.arg("compare").arg(path).args(["--format", "json"]);
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
            "below" | "far-below" | "assumed below" | "assumed far-below"
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
        let stated = answer(&path, Some(hw));
        let bare = answer(&path, None);
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
    // What the designs and the Slingshot entry bought: 11 of 15 with the hardware stated, the
    // one run judged below among them.
    assert!(stated_agree >= 11, "{table}");
    let below = CASES.iter().position(|c| c.1 == Judged::Below).unwrap();
    assert!(agrees(TODAY[below].1, Judged::Below, 2), "{table}");
}
