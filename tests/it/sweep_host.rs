//! `ncclprobe sweep` through the real binary on the host backend.

use crate::common;

use common::{bin, csv_rows, host_sweep, read_record, table_rows};
use ncclprobe::coll::Placement;
use ncclprobe::model::RunStatus;
use predicates::str::contains;
use std::time::{Duration, Instant};

const FAST: [&str; 6] = [
    "--min-samples",
    "6",
    "--max-samples",
    "12",
    "--point-budget",
    "0.05",
];

/// Within the rounding of the printed table.
fn close(table: f64, exact: f64, decimals: i32) -> bool {
    (table - exact).abs() <= 0.5 * 10f64.powi(-decimals) + 1e-9
        || (table - exact).abs() / exact.abs() < 1e-3
}

#[test]
fn table_json_and_csv_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("run.json"), dir.path().join("run.csv"));
    let out = host_sweep(3)
        .args(["-b", "8", "-e", "1M", "-f", "4"])
        .args([
            "--collective",
            "all_reduce,all_gather,reduce_scatter,broadcast,reduce,alltoall,sendrecv",
        ])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows = table_rows(&stdout);
    let record = read_record(&json);
    let (header, csv) = csv_rows(&csv);

    assert_eq!(record.status, RunStatus::Complete);
    assert_eq!(record.backend.name, "host");
    assert_eq!(record.backend.nranks, 3);
    // 7 collectives × 9 sizes (8 B .. 512 KiB by 4), both placements.
    assert_eq!(record.points.len(), 7 * 9 * 2);
    assert_eq!(rows.len(), 7 * 9);
    assert_eq!(csv.len(), record.points.len());
    assert_eq!(
        header.join(","),
        "collective,nranks,size_bytes,count,dtype,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong"
    );
    assert_eq!(stdout.matches("# Out of bounds values : 0 OK").count(), 7);

    for (i, row) in rows.iter().enumerate() {
        for (h, placement) in Placement::BOTH.into_iter().enumerate() {
            let p = &record.points[2 * i + h];
            let c = &csv[2 * i + h];
            assert_eq!(p.placement, placement);
            assert_eq!((row.size, row.count), (p.size_bytes, p.count));
            assert_eq!(row.root, p.root);
            assert_eq!(row.dtype, p.dtype.name());
            assert_eq!(row.redop, p.redop.map(|o| o.name()).unwrap_or("none"));
            let half = &row.halves[h];
            let time_us = p.time_s * 1e6;
            let decimals = if time_us >= 10000.0 {
                0
            } else if time_us >= 100.0 {
                1
            } else {
                2
            };
            assert!(
                close(half.time_us, time_us, decimals),
                "row {i}: {} vs {time_us}",
                half.time_us
            );
            assert!(close(half.algbw_gbps, p.algbw_bytes_per_s / 1e9, 2));
            assert!(close(half.busbw_gbps, p.busbw_bytes_per_s / 1e9, 2));
            assert_eq!(half.wrong, p.wrong);
            assert_eq!(p.wrong, Some(0));
            // CSV: same point, more digits.
            assert_eq!(c[0], p.collective.name());
            assert_eq!(c[1], "3");
            assert_eq!(c[2].parse::<u64>().unwrap(), p.size_bytes);
            assert_eq!(c[6].parse::<i64>().unwrap(), p.root);
            assert_eq!(c[7], placement.name());
            assert!((c[8].parse::<f64>().unwrap() - time_us).abs() < 1e-3);
            assert!((c[10].parse::<f64>().unwrap() - p.busbw_bytes_per_s / 1e9).abs() < 1e-5);
            assert_eq!(c[11], "0");
            // Statistics are present and consistent with the raw samples.
            assert!(p.samples_s.len() >= 6);
            assert_eq!(p.stats.samples, p.samples_s.len());
            assert!(p.stats.ci_level >= 0.95);
            assert!(p.stats.ci_low_s <= p.time_s && p.time_s <= p.stats.ci_high_s);
            assert_eq!(p.per_rank_time_s.len(), 3);
        }
    }
    // Non-rooted collectives print -1; rooted ones their root.
    assert!(csv
        .iter()
        .filter(|r| r[0] == "all_reduce")
        .all(|r| r[6] == "-1"));
    assert!(csv
        .iter()
        .filter(|r| r[0] == "broadcast")
        .all(|r| r[6] == "0"));
    // The headline follows the table.
    assert!(stdout.contains("# ncclprobe all_reduce sum float: plateau busbw"));
    assert_eq!(record.headlines.len(), 7);
}

#[test]
fn every_type_and_op_passes_the_check() {
    host_sweep(4)
        .args(["-b", "64", "-e", "4K", "-f", "8", "-d", "all", "-o", "all"])
        .args([
            "--collective",
            "all_reduce,reduce_scatter,reduce",
            "-r",
            "all",
        ])
        .args(["--samples", "1", "-n", "1", "--warmup-time", "0"])
        .assert()
        .success()
        .stdout(contains("# Out of bounds values : 0 OK"))
        .stdout(contains("bfloat16"))
        .stdout(contains("avg"));
}

#[test]
fn a_single_flipped_element_fails_the_run() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let out = host_sweep(2)
        .args(["-b", "1K", "-e", "4K", "--inject-fault", "corrupt:1:2K"])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .assert()
        .code(3)
        .stderr(contains("check failed: 2 wrong elements"))
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("# Out of bounds values : 2 FAILED"),
        "{stdout}"
    );
    let record = read_record(&json);
    assert_eq!(record.status, RunStatus::CheckFailed);
    let wrong: Vec<(u64, Option<u64>)> = record
        .points
        .iter()
        .map(|p| (p.size_bytes, p.wrong))
        .collect();
    // One element in each placement at 2 KiB; every other point clean.
    assert_eq!(
        wrong,
        vec![
            (1024, Some(0)),
            (1024, Some(0)),
            (2048, Some(1)),
            (2048, Some(1)),
            (4096, Some(0)),
            (4096, Some(0))
        ]
    );
}

#[test]
fn a_stalled_rank_times_out_naming_it_and_keeps_finished_points() {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let csv = dir.path().join("run.csv");
    let start = Instant::now();
    host_sweep(3)
        .args([
            "-b",
            "1K",
            "-e",
            "64K",
            "--timeout",
            "3",
            "--inject-fault",
            "stall:2:16K",
        ])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .timeout(Duration::from_secs(60))
        .assert()
        .code(4)
        .stderr(contains(
            "timeout: all_reduce float 16 KiB (16384 bytes) out-of-place made no progress",
        ))
        .stderr(contains("ranks that did not arrive: 2"));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    let record = read_record(&json);
    assert_eq!(record.status, RunStatus::TimedOut);
    assert!(record.error.as_deref().unwrap_or("").contains("16 KiB"));
    let sizes: Vec<u64> = record.points.iter().map(|p| p.size_bytes).collect();
    assert_eq!(sizes, vec![1024, 1024, 2048, 2048, 4096, 4096, 8192, 8192]);
    assert_eq!(csv_rows(&csv).1.len(), 8);
}

#[test]
fn csv_and_json_to_stdout() {
    let out = host_sweep(2)
        .args(["-b", "8", "-e", "64", "--format", "csv"])
        .args(FAST)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("collective,nranks,size_bytes,count,dtype,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong")
    );
    assert_eq!(lines.count(), 8);

    let out = host_sweep(2)
        .args(["-b", "8", "-e", "64", "--format", "json"])
        .args(FAST)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let record: ncclprobe::model::RunRecord =
        serde_json::from_slice(&out).expect("stdout is one JSON record");
    assert_eq!(record.points.len(), 8);
    assert!(record
        .env
        .keys()
        .all(|k| k.starts_with("NCCL_") || k.starts_with("CUDA_")));
}

#[test]
fn only_nccl_and_cuda_variables_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    host_sweep(2)
        .args(["-b", "8", "-e", "8"])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .env("NCCL_DEBUG", "INFO")
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .env("SECRET_TOKEN", "hunter2")
        .assert()
        .success();
    let record = read_record(&json);
    assert_eq!(
        record.env.get("NCCL_DEBUG").map(String::as_str),
        Some("INFO")
    );
    assert_eq!(
        record.env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0,1")
    );
    assert!(!std::fs::read_to_string(&json).unwrap().contains("hunter2"));
}

#[test]
fn bad_input_gets_one_line_and_the_right_code() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--collective", "allreduce2"],
            2,
            "--collective: unknown value 'allreduce2'; allowed: all_reduce",
        ),
        (
            &["-d", "complex64"],
            2,
            "-d/--datatype: unknown value 'complex64'",
        ),
        (
            &["-o", "premulsum"],
            2,
            "-o/--op: unknown value 'premulsum'",
        ),
        (
            &["-b", "1M", "-e", "1K"],
            2,
            "-b/--minbytes (1048576) is larger than -e/--maxbytes (1024)",
        ),
        (&["-b", "lots"], 2, "-b/--minbytes: 'lots' is not a size"),
        (&["-b", "1T", "-e", "1T"], 2, "do not fit in memory"),
        (&["-f", "1"], 2, "-f/--stepfactor: must be 2 or more"),
        (
            &["--timeout", "0"],
            2,
            "--timeout: must be a positive number",
        ),
        (
            &["--collective", "broadcast", "-r", "7"],
            2,
            "-r/--root: rank 7 does not exist with 2 ranks",
        ),
        (&["--backend", "nccl"], 5, "--backend nccl:"),
        (&["--backend", "gpu"], 2, "invalid value 'gpu'"),
    ];
    for (args, code, message) in cases {
        // The host backend unless the case names one; "no driver" on any machine.
        let backend: &[&str] = if args.contains(&"--backend") {
            &[]
        } else {
            &["--backend", "host"]
        };
        let out = bin()
            .args(["sweep", "--ranks", "2"])
            .args(backend)
            .args(*args)
            .env("NCCLPROBE_CUDA_DRIVER", "none")
            .assert()
            .code(*code)
            .stderr(contains(*message))
            .get_output()
            .clone();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn version_names_commit_and_features() {
    bin()
        .arg("--version")
        .assert()
        .success()
        .stdout(contains("commit "))
        .stdout(contains("features: "));
}

#[test]
fn a_huge_max_is_clipped_and_said() {
    // 1 TiB never fits: the sweep keeps running, clipped, and says so in the table header and
    // the record. Only the first size runs here (the second would be big), so -e is huge but
    // -b equal to a small power and a factor that jumps past memory.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let out = host_sweep(2)
        .args(["-b", "8", "-e", "1T", "-f", "1048576"])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let stdout = String::from_utf8(out).unwrap();
    assert!(stdout.contains("# Reducing maxBytes to"), "{stdout}");
    let record = read_record(&json);
    assert!(record
        .notes
        .iter()
        .any(|n| n.contains("due to memory limitation")));
    assert!(record.settings.as_ref().unwrap().max_bytes < 1 << 40);
    assert!(record
        .points
        .iter()
        .all(|p| p.size_bytes <= record.settings.as_ref().unwrap().max_bytes));
}

/// nccl-tests' -a: each sample is the chosen rank time; the per-rank medians are kept either way.
#[test]
fn across_ranks_choice_is_applied_and_recorded() {
    let run = |a: &str| -> ncclprobe::model::RunRecord {
        common::json_stdout(
            host_sweep(3)
                .args(["-b", "1M", "-e", "1M", "--format", "json", "-a", a])
                .args(FAST),
        )
    };
    let min = run("2");
    assert_eq!(
        min.settings.as_ref().unwrap().across_ranks,
        ncclprobe::model::AcrossRanks::Min
    );
    assert!(min
        .notes
        .iter()
        .any(|n| n.contains("sample times are the minimum across ranks (-a 2)")));
    for p in &min.points {
        // Every sample is the fastest rank's, so no rank's median is below the samples' minimum.
        let fastest_rank = p
            .per_rank_time_s
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        assert!(p.stats.min_s <= fastest_rank + 1e-12, "{p:?}");
    }
    let max = run("3");
    assert_eq!(
        max.settings.as_ref().unwrap().across_ranks,
        ncclprobe::model::AcrossRanks::Max
    );
    for p in &max.points {
        let slowest_rank = p.per_rank_time_s.iter().copied().fold(0.0, f64::max);
        assert!(p.time_s >= slowest_rank - 1e-12, "{p:?}");
    }
    bin().args(["sweep", "-a", "4"]).assert().code(2);
}

/// The host backend averages floats as NCCL does (inputs times 1/n, then summed) and the check
/// expects that, at rank counts where 1/n is inexact.
#[test]
fn float_avg_matches_nccls_arithmetic_at_awkward_rank_counts() {
    for ranks in ["7", "13"] {
        let out = bin()
            .args([
                "sweep",
                "--backend",
                "host",
                "--ranks",
                ranks,
                "-b",
                "1K",
                "-e",
                "64K",
            ])
            .args([
                "-f",
                "8",
                "-o",
                "avg",
                "-d",
                "float,double,half,bfloat16,int32",
            ])
            .args([
                "--collective",
                "all_reduce,reduce_scatter",
                "--samples",
                "6",
            ])
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: ncclprobe::model::RunRecord = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r.points.iter().all(|p| p.wrong == Some(0)), "{ranks} ranks");
    }
}

#[test]
fn a_time_budget_is_shared_where_calls_are_long_and_misses_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    // A target no point can reach: every point samples until its share is spent.
    let out = host_sweep(2)
        .args([
            "-b",
            "32K",
            "-e",
            "32M",
            "-f",
            "32",
            "--target-ci",
            "0.00001",
        ])
        .args(["--time-budget", "3", "--max-samples", "100000"])
        .arg("--json")
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let stdout = String::from_utf8_lossy(&out);
    let record = read_record(&json);
    let n = record.points.len();
    assert_eq!(n, 6, "32 KiB to 32 MiB by 32: 3 sizes");
    assert!(
        stdout.contains(&format!("# 0 of {n} points within ±0.0%")),
        "{stdout}"
    );
    assert!(
        stdout.contains("short of it: all_reduce 32 KiB out-of-place"),
        "{stdout}"
    );
    assert!(stdout.contains("(budget)"), "{stdout}");
    assert!(stdout.contains("all_reduce 32 MiB in-place"), "{stdout}");
    let settings = record.settings.as_ref().unwrap();
    assert_eq!(settings.time_budget_s, Some(3.0));
    let budget = |size: u64| {
        let p = record
            .points
            .iter()
            .find(|p| p.size_bytes == size && p.placement == Placement::OutOfPlace)
            .unwrap();
        let cost = p.cost.unwrap();
        assert!(cost.sampling_s >= 0.0 && cost.check_s > 0.0 && cost.wall_s > 0.0);
        assert_eq!(p.stop_reason, ncclprobe::stats::StopReason::Budget);
        cost.budget_s
    };
    // Calls of 32 MiB are a thousand times longer than calls of 32 KiB: their share is larger.
    let largest = record.points.iter().map(|p| p.size_bytes).max().unwrap();
    assert_eq!(largest, 32 << 20);
    // Which point gets more of the slack depends on how long the earlier points ran, which a
    // busy machine stretches; what the share guarantees does not: every point gets at least
    // the time its fewest samples take (4 samples of at least one call each, as predicted
    // before it ran: half the measured time leaves room for a prediction a busy machine beat).
    for p in record
        .points
        .iter()
        .filter(|p| p.placement == Placement::OutOfPlace)
    {
        assert!(
            budget(p.size_bytes) >= 0.5 * 4.0 * p.time_s,
            "{}: budget {} s under 4 calls of {} s",
            p.size_bytes,
            budget(p.size_bytes),
            p.time_s
        );
    }
    // The shares are of the 3 s: their sum cannot be much more than the whole.
    let total: f64 = record.points.iter().map(|p| p.cost.unwrap().budget_s).sum();
    assert!(total <= 3.0, "{total}");
}

#[test]
fn the_check_runs_first_and_every_point_says_where_its_time_went() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let started = std::time::Instant::now();
    host_sweep(2)
        .args(["-b", "8", "-e", "1M", "-f", "32"])
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    let elapsed = started.elapsed().as_secs_f64();
    let record = read_record(&json);
    assert!(!record.points.is_empty());
    let mut walls = 0.0;
    for p in &record.points {
        let cost = p.cost.unwrap();
        assert_eq!(p.wrong, Some(0));
        assert!(cost.check_s > 0.0, "{cost:?}");
        // Bounds that hold whatever the bookkeeping: at least half the samples took the
        // median or longer, and the sampling is part of the point's wall time.
        let n = p.samples_s.len() as f64;
        let least = 0.5 * n * p.time_s * p.iters_per_sample as f64;
        assert!(
            cost.sampling_s >= least * (1.0 - 1e-9),
            "{cost:?} vs {least}"
        );
        assert!(cost.wall_s >= cost.sampling_s + cost.check_s, "{cost:?}");
        walls += cost.wall_s;
        assert_eq!(cost.budget_s, 0.05);
        assert_ne!(p.stats.ci_method, ncclprobe::stats::CiMethod::None);
    }
    // Every point's time happened inside the process the test timed.
    assert!(walls <= elapsed, "{walls} s of points in {elapsed} s");
}

#[test]
fn the_count_column_is_what_each_rank_passes_as_nccl_tests_prints_it() {
    // nccl-tests: `count = nbytes / wordSize` with `nbytes = paramCount * wordSize`
    // (src/common.cu, setupArgs): all_gather, reduce_scatter and alltoall pass each rank's
    // share, rounded down to 16 bytes; the size column is the larger buffer.
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("run.json"), dir.path().join("run.csv"));
    let out = host_sweep(3)
        .args([
            "-b",
            "1K",
            "-e",
            "1K",
            "-d",
            "float",
            "--samples",
            "4",
            "-n",
            "2",
        ])
        .args([
            "--collective",
            "all_reduce,broadcast,all_gather,reduce_scatter,alltoall",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows = table_rows(&String::from_utf8(out).unwrap());
    let got: Vec<(u64, u64)> = rows.iter().map(|r| (r.size, r.count)).collect();
    // 1 KiB of floats is 256; a third of it is 85, rounded down to 16 bytes 84 (x3 = 1008 B).
    assert_eq!(
        got,
        vec![(1024, 256), (1024, 256), (1008, 84), (1008, 84), (1008, 84)]
    );
    let record = read_record(&json);
    let (header, csv) = csv_rows(&csv);
    let col = header.iter().position(|h| h == "count").unwrap();
    for (i, p) in record.points.iter().enumerate() {
        assert_eq!((p.size_bytes, p.count), got[i / 2], "{:?}", p.collective);
        assert_eq!(csv[i][col], p.count.to_string());
    }
}

/// `ncclprobe sweep | head -3`: the reader goes away after three lines. The run is not a
/// crash (no panic; exit 141, quietly, as a tool whose reader left) and the record on disk has every point.
#[test]
fn a_reader_that_closes_stdout_early_loses_nothing_on_disk() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args([
            "sweep",
            "--backend",
            "host",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "--max-samples",
            "6",
            "--json",
        ])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        if lines.next().is_none() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "stdout ended within 3 lines: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    drop(lines);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The run measures on and writes its record, then ends as a tool whose reader went away
    // does: 141, quietly (the README's exit-code table).
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("cannot write to stdout"), "{stderr}");
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::Complete);
    assert_eq!(r.points.len(), 2 * 9, "8 B to 1 MiB by 4, both placements");
}
