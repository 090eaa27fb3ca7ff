//! `ncclprobe matrix` and `sweep --stragglers` on the host backend: every pair measured, an
//! injected slow link named in both directions and nothing else, nodes grouped by host, a
//! slow node named, a late rank named, and `diagnose` reading it all back.

#[path = "it/common/mod.rs"]
mod common;

use common::{bin, csv_rows, read_record};
use ncclprobe::matrix::{Direction, MatrixDocument};
use std::collections::BTreeSet;

/// Tests that judge timings run one at a time: two matrices sharing two cores would measure
/// each other.
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn matrix(ranks: usize, extra: &[&str], json: &std::path::Path) -> std::process::Output {
    let _alone = TIMING.lock().unwrap_or_else(|p| p.into_inner());
    let out = bin()
        .args(["matrix", "--backend", "host", "--ranks", &ranks.to_string()])
        .args(["--json", json.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "matrix failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read(path: &std::path::Path) -> MatrixDocument {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not a matrix document: {e}", path.display()))
}

/// The titles of `diagnose --from FILE`'s findings with this id.
fn finding_titles(file: &std::path::Path, id: &str) -> Vec<String> {
    let diag = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(file)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&diag.stdout).unwrap();
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .map(|f| f["title"].as_str().unwrap().to_string())
        .collect()
}

fn cells(doc: &MatrixDocument, d: Direction) -> BTreeSet<(usize, usize)> {
    doc.measurements
        .iter()
        .filter(|m| m.direction == d)
        .map(|m| (m.from, m.to))
        .collect()
}

#[test]
fn four_ranks_measure_every_ordered_pair_both_ways_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let csv = dir.path().join("m.csv");
    let out = matrix(4, &["--csv", csv.to_str().unwrap()], &json);
    let doc = read(&json);
    assert_eq!(serde_json::to_value(&doc).unwrap()["kind"], "matrix");
    assert_eq!(doc.status, ncclprobe::model::RunStatus::Complete);
    assert_eq!(doc.endpoints.len(), 4);
    let ordered: BTreeSet<_> = (0..4)
        .flat_map(|a| (0..4).filter(move |&b| b != a).map(move |b| (a, b)))
        .collect();
    assert_eq!(
        cells(&doc, Direction::OneWay),
        ordered,
        "all 12 ordered pairs"
    );
    let unordered: BTreeSet<_> = ordered.iter().copied().filter(|(a, b)| a < b).collect();
    assert_eq!(cells(&doc, Direction::TwoWay), unordered);
    assert_eq!(cells(&doc, Direction::Latency), unordered);
    assert_eq!(doc.sizes(), vec![8, 16 << 20], "one small, one large size");
    for m in &doc.measurements {
        assert!(m.time_s > 0.0 && m.bw_bytes_per_s > 0.0, "{m:?}");
        assert_eq!(m.wrong_bytes, 0, "{m:?}");
        assert!(m.samples >= 6, "{m:?}");
    }
    // Rounds are recorded as run: with more ranks than cores the host backend goes one pair
    // at a time and says so; with enough cores, two disjoint pairs share each round.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = if cores >= 4 {
        "rounds"
    } else {
        "one-pair-at-a-time"
    };
    assert_eq!(serde_json::to_value(doc.schedule).unwrap(), expected);
    let (header, rows) = csv_rows(&csv);
    assert_eq!(
        header,
        [
            "from",
            "to",
            "size_bytes",
            "direction",
            "time_us",
            "bw_gbps"
        ]
    );
    assert_eq!(rows.len(), doc.measurements.len());
    assert!(rows
        .iter()
        .any(|r| r[0] == "rank 3" && r[1] == "rank 0" && r[3] == "one-way"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("one-way bandwidth, row sends to column at 16 MiB"),
        "{stdout}"
    );
    assert!(
        stdout.contains("latency (half a round trip) at 8 B"),
        "{stdout}"
    );
}

#[test]
fn an_injected_slow_link_is_named_in_both_directions_and_nothing_else_is() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    // Ten times slower, judged at 0.3 of the median: the injected pair is three times below
    // the line, and noise on a busy two-core machine would have to cost a healthy pair two
    // thirds of its bandwidth (after it was measured again alone) to be named.
    let out = matrix(
        4,
        &["--inject-fault", "slow:1-3:10", "--outlier", "0.3"],
        &json,
    );
    let doc = read(&json);
    let named: BTreeSet<(usize, usize, Direction)> = doc
        .outliers
        .iter()
        .map(|o| (o.from, o.to, o.direction))
        .collect();
    assert!(
        named
            .iter()
            .all(|&(a, b, _)| (a.min(b), a.max(b)) == (1, 3)),
        "only the pair 1-3 may be named: {named:?}"
    );
    for want in [
        (1, 3, Direction::OneWay),
        (3, 1, Direction::OneWay),
        (1, 3, Direction::TwoWay),
    ] {
        assert!(named.contains(&want), "{want:?} not named: {named:?}");
    }
    // The slow pair's cells were measured again alone and stayed slow. Another cell may also
    // have been measured again (on two cores a neighbour's thread can cost one a microsecond),
    // but it cleared when alone: only 1-3 is named above.
    for want in [(1, 3, Direction::OneWay), (3, 1, Direction::OneWay)] {
        assert!(
            doc.measurements
                .iter()
                .any(|m| m.remeasured && (m.from, m.to, m.direction) == want),
            "{want:?} was not measured again alone"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("SLOW PAIR: rank 1 -> rank 3 one-way")
            && stdout.contains("SLOW PAIR: rank 3 -> rank 1 one-way"),
        "{stdout}"
    );

    // diagnose reads the document back and says the same.
    assert_eq!(
        finding_titles(&json, "matrix.slow-pair"),
        ["rank 1 <-> rank 3 is far below the median pair"]
    );

    // qualify gates on it: the slow pair fails, and so does a floor the slow link is below.
    let q = bin()
        .args(["qualify", "--format", "json", "--min-pair-bw", "0.000001"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(q.status.code(), Some(3));
    let q: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    let verdicts: Vec<(String, bool)> = q["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap().to_string(),
                r["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    // One result per slow pair and direction (1 -> 3, 3 -> 1, both at once), so CI lists
    // each as a test case; the sizes it is slow at are one case.
    assert_eq!(
        verdicts,
        [
            ("completed".to_string(), true),
            ("correct".to_string(), true),
            ("no-slow-pair".to_string(), false),
            ("no-slow-pair".to_string(), false),
            ("no-slow-pair".to_string(), false),
            ("min-pair-bw".to_string(), true),
        ]
    );
    let subjects: Vec<&str> = q["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["subject"].as_str())
        .collect();
    assert_eq!(subjects.len(), 3, "{subjects:?}");
    for s in &subjects {
        assert!(s.contains("rank 1") && s.contains("rank 3"), "{subjects:?}");
    }
    let distinct: std::collections::BTreeSet<&&str> = subjects.iter().collect();
    assert_eq!(distinct.len(), 3, "{subjects:?}");

    // A rule only a run can be judged by is refused on a matrix, never passed unchecked; the
    // pair thresholds are validated as --min-busbw is.
    for (args, said) in [
        (&["--min-busbw", "1"][..], "--min-busbw judge a run"),
        (
            &["--max-skew", "1.2", "--profile", "ib-ndr-400"][..],
            "--max-skew, --profile judge a run",
        ),
        (
            &["--min-pair-bw=-1"][..],
            "--min-pair-bw: must be a positive number of GB/s",
        ),
        (
            &["--max-pair-latency-us", "inf"][..],
            "--max-pair-latency-us: must be a positive number",
        ),
        (
            &["--min-pair-bw", "NaN"][..],
            "--min-pair-bw: must be a positive number",
        ),
    ] {
        let q = bin().arg("qualify").args(args).arg(&json).output().unwrap();
        let stderr = String::from_utf8_lossy(&q.stderr);
        assert_eq!(q.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }

    // report draws the heat map and calls the machine degraded, naming the pair.
    let html = dir.path().join("r.html");
    let pngs = dir.path().join("png");
    let r = bin()
        .arg("report")
        .arg(&json)
        .arg("-o")
        .arg(&html)
        .arg("--png-dir")
        .arg(&pngs)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("DEGRADED") || page.contains("degraded"),
        "verdict"
    );
    assert!(
        page.contains("rank 1 -&gt; rank 3 one-way"),
        "the slow pair in words"
    );
    let png = std::fs::read(pngs.join("m.png").with_file_name("matrix-m.png")).unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let info = decoder.read_info().unwrap();
    assert_eq!((info.info().width, info.info().height), (1200, 700));
}

/// Every cell of `doc` set by rule, not timing: 10 GB/s and a round trip of 2 µs, except the
/// cells `slow` picks, at a tenth of the bandwidth and ten times the latency.
fn set_cells(doc: &mut MatrixDocument, slow: impl Fn(usize, usize) -> bool) {
    for m in &mut doc.measurements {
        let factor = if slow(m.from, m.to) { 10.0 } else { 1.0 };
        match m.direction {
            Direction::Latency => m.time_s = 2e-6 * factor,
            _ => {
                m.bw_bytes_per_s = 10e9 / factor;
                m.time_s = m.size_bytes.max(1) as f64 / m.bw_bytes_per_s;
            }
        }
    }
    doc.outliers = ncclprobe::matrix::analysis::outliers(doc);
}

#[test]
fn outliers_and_a_slow_node_follow_from_the_cells_alone() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    matrix(
        4,
        &[
            "--by",
            "node",
            "--inject-fault",
            "hosts:a,b,c,d",
            "-e",
            "64K",
        ],
        &json,
    );
    let mut doc = read(&json);
    // Even cells: nothing stands out, and diagnose says nothing about pairs or nodes.
    set_cells(&mut doc, |_, _| false);
    assert!(doc.outliers.is_empty(), "{:?}", doc.outliers);
    assert!(ncclprobe::matrix::analysis::slow_endpoints(&doc).is_empty());
    let even = dir.path().join("even.json");
    std::fs::write(&even, serde_json::to_vec(&doc).unwrap()).unwrap();
    assert!(finding_titles(&even, "matrix.slow-node").is_empty());

    // The pair b-d at a tenth: its cells in every direction, and nothing else, at the
    // ratio the cells give; no node is slow (b and d have two good pairs each).
    let pair = |a: usize, b: usize| (a.min(b), a.max(b)) == (1, 3);
    set_cells(&mut doc, pair);
    let named: BTreeSet<(usize, usize, Direction)> = doc
        .outliers
        .iter()
        .map(|o| (o.from, o.to, o.direction))
        .collect();
    let expected: BTreeSet<(usize, usize, Direction)> = doc
        .measurements
        .iter()
        .filter(|m| pair(m.from, m.to))
        .map(|m| (m.from, m.to, m.direction))
        .collect();
    assert_eq!(expected.len(), 4, "one-way both ways, two-way, latency");
    assert_eq!(named, expected);
    for o in &doc.outliers {
        let want = match o.direction {
            Direction::Latency => 10.0,
            _ => 0.1,
        };
        assert!((o.ratio_to_median - want).abs() < 1e-9, "{o:?}");
    }
    assert!(ncclprobe::matrix::analysis::slow_endpoints(&doc).is_empty());

    // Node c (endpoint 2) at a tenth with every peer: c is the slow node, at 0.10x.
    set_cells(&mut doc, |a, b| a == 2 || b == 2);
    let slow = ncclprobe::matrix::analysis::slow_endpoints(&doc);
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0].0, 2);
    assert!((slow[0].1 - 0.1).abs() < 1e-9, "{slow:?}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&doc).unwrap()).unwrap();
    let titles = finding_titles(&bad, "matrix.slow-node");
    assert!(
        titles
            .iter()
            .any(|t| t.starts_with("node c:") && t.contains("0.10x")),
        "{titles:?}"
    );
    assert!(
        finding_titles(&bad, "matrix.slow-pair").is_empty(),
        "a node matrix names nodes"
    );
}

#[test]
fn nodes_are_grouped_by_host_and_a_node_with_a_bad_link_is_named() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let out = matrix(
        4,
        &["--by", "node", "--inject-fault", "hosts:a,b,c,d;slow:2:4"],
        &json,
    );
    let doc = read(&json);
    let labels: Vec<&str> = doc.endpoints.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(labels, ["a", "b", "c", "d"]);
    assert_eq!(cells(&doc, Direction::OneWay).len(), 12);
    let slow = ncclprobe::matrix::analysis::slow_endpoints(&doc);
    assert_eq!(
        slow.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
        [2],
        "{slow:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("SLOW NODE: c"), "{stdout}");

    // Two ranks per host: a node pair moves both rank pairs at once.
    let json2 = dir.path().join("m2.json");
    matrix(
        4,
        &[
            "--by",
            "node",
            "--inject-fault",
            "hosts:x,y,x,y",
            "-e",
            "64K",
        ],
        &json2,
    );
    let doc = read(&json2);
    assert_eq!(doc.endpoints.len(), 2);
    assert_eq!(
        (
            doc.endpoints[0].ranks.clone(),
            doc.endpoints[1].ranks.clone()
        ),
        (vec![0, 2], vec![1, 3])
    );
    assert!(!doc.measurements.is_empty());
    assert!(doc.measurements.iter().all(|m| m.rank_pairs == 2));
}

#[test]
fn a_matrix_needs_two_ends_and_a_sane_outlier_fraction() {
    let out = bin()
        .args(["matrix", "--backend", "host", "--ranks", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pairs need at least 2"));
    let out = bin()
        .args(["matrix", "--backend", "host", "--by", "node"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 2 hosts"));
    let out = bin().args(["matrix", "--outlier", "1.5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_hung_pair_is_named_by_the_watchdog() {
    common::needs_fault_injection();
    // The waiting rank spins until the watchdog fires: a core taken from any timing beside it.
    let _alone = TIMING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let out = bin()
        .args([
            "matrix",
            "--backend",
            "host",
            "--ranks",
            "2",
            "--timeout",
            "2",
        ])
        .args(["--inject-fault", "stall:1"])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let doc = read(&json);
    assert_eq!(doc.status, ncclprobe::model::RunStatus::TimedOut);
    let error = doc.error.unwrap_or_default();
    assert!(error.contains("matrix one-way rank 0 -> rank 1"), "{error}");
}

#[test]
fn a_late_rank_is_named_by_stragglers() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let alone = TIMING.lock().unwrap_or_else(|p| p.into_inner());
    // Three ranks: a median rank to be late against, and no more threads than a busy
    // two-core machine can run without making every call cost a scheduler tick.
    let out = common::host_sweep(3)
        .args(["-b", "8", "-e", "64K", "-f", "8", "--stragglers"])
        // 5 ms: past what a descheduled rank loses on a busy two-core machine (a scheduler
        // tick is 4 ms at HZ=250); 1 ms was lost in that noise beside other loads.
        .args(["--inject-fault", "late:2:5000"])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    println!("{}", stdout.lines().last().unwrap_or_default());
    assert!(stdout.contains("# STRAGGLER: rank 2 (host "), "{stdout}");
    let record = read_record(&json);
    // Rank 2 is late by 5 ms at every point. Where a busy machine makes the call itself
    // cost more than that, the point may name nobody, but never another rank, and the run
    // names rank 2 (above) only when most points do.
    let (mut named, mut late) = (0, 0);
    for p in &record.points {
        let a = p.arrivals.as_ref().expect("arrival times at every point");
        // Half the injected lateness: a busy machine delays the others' arrivals too, and a
        // descheduled rank can be the late one at a point (counted below, not per point).
        if a.late_s[2] > 2.5e-3 {
            late += 1;
        }
        match a.straggler() {
            Some(2) => named += 1,
            None => {}
            other => panic!("{} names {other:?}: {a:?}", p.size_bytes),
        }
    }
    assert!(
        named * 2 >= record.points.len(),
        "{named} of {}",
        record.points.len()
    );
    assert!(
        late * 4 >= record.points.len() * 3,
        "rank 2 late by half the injection at {late} of {} points",
        record.points.len()
    );
    assert_eq!(
        finding_titles(&json, "result.straggler"),
        ["Rank 2 holds the collectives up"]
    );

    // Without the injection nobody is named.
    let quiet = common::host_sweep(2)
        .args(["-b", "1M", "-e", "1M", "--stragglers"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&quiet.stdout).contains("# stragglers: no rank entered last"));
    drop(alone);
}
