//! ncclprobe called by nccl-tests' names (`all_reduce_perf`, ...): the flags, stdout, -J JSON
//! and exit statuses of nccl-tests 2.19.6. The host backend unless a test says otherwise (the
//! GPU TEST DOUBLE for the device lines); what is checked is the format, not the timings.

use crate::common;

mod command_line;
mod environment_and_outputs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory holding `name` as a link to the built ncclprobe.
fn linked(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ncclprobe"), &link).unwrap();
    (dir, link)
}

/// Run `link` with `args` (split at spaces) in its directory.
fn perf(link: &Path, args: &str) -> Output {
    perf_env(link, args, &[])
}

/// `perf` with these environment variables set.
fn perf_env(link: &Path, args: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(link);
    common::without_host_settings(&mut c);
    c.args(args.split_whitespace())
        .current_dir(link.parent().unwrap())
        .envs(env.iter().copied());
    c.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The three header lines of 2.19.6's writeResultHeader without -C/-S, from its printf.
const HEADER: [&str; 3] = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
];

/// `%12li  %12li  %8s  %6s  %6s` and twice `  %7s  %6s  %6s  %6g`: every row is 118 wide.
const ROW_WIDTH: usize = 118;

#[test]
fn stdout_is_nccl_tests_line_for_line() {
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 2K -f 4 -g 2 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("# ncclprobe version ") && lines[0].contains(" nccl-library="),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], "# Collective test starting: all_reduce_perf");
    assert_eq!(
        lines[2],
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 2048 step: 4(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    );
    assert_eq!(lines[3], "#");
    assert_eq!(lines[4], "# Using devices");
    for (r, line) in lines[5..7].iter().enumerate() {
        let head = format!("#  Rank {r:2} Group  0 Pid ");
        assert!(line.starts_with(&head), "{line}");
        assert!(line.ends_with(" device host memory"), "{line}");
    }
    assert_eq!(lines[7], "#");
    assert_eq!(lines[8..11], HEADER);
    let rows: Vec<&str> = lines[11..17].to_vec();
    for (row, size) in rows.iter().zip([8u64, 32, 128, 512, 2048]) {
        assert_eq!(row.len(), ROW_WIDTH, "{row:?}");
        assert!(
            row.starts_with(&format!(
                "{size:>12}  {:>12}     float     sum      -1",
                size / 4
            )),
            "{row}"
        );
    }
    assert_eq!(lines[16], "# Out of bounds values : 0 OK");
    assert!(
        lines[17].starts_with("# Avg bus bandwidth    : ") && lines[17].ends_with(' '),
        "no NCCL_TESTS_MIN_BW, no verdict: {:?}",
        lines[17]
    );
    assert_eq!(
        lines[18..],
        ["#", "# Collective test concluded: all_reduce_perf", "#", ""]
    );
    // What reads nccl-tests' stdout reads this: ncclprobe's own importer, row for row.
    let log = _dir.path().join("log.txt");
    std::fs::write(&log, &stdout).unwrap();
    let record = _dir.path().join("r.json");
    common::bin()
        .args(["import"])
        .arg(&log)
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    let r = common::read_record(&record);
    assert_eq!(r.points.len(), 10, "5 rows, two placements each");
    assert_eq!(r.backend.nranks, 2);
}

#[test]
fn the_rows_are_the_sizes_counts_types_and_roots_nccl_tests_runs() {
    // reduce_scatter's count is each rank's share; broadcast's root is -r; -d all runs every
    // type in nccl-tests' order; -i steps by bytes when -f is 1.
    let (_dir, link) = linked("reduce_scatter_perf");
    let out = perf(&link, "-b 1K -e 3K -i 1K -f 1 -g 4 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows = common::table_rows(&text(&out.stdout));
    let got: Vec<(u64, u64)> = rows.iter().map(|r| (r.size, r.count)).collect();
    assert_eq!(got, [(1024, 64), (2048, 128), (3072, 192)]);
    assert!(text(&out.stdout).contains("step: 1024(bytes)"));

    let (_dir, link) = linked("broadcast_perf");
    let out = perf(&link, "-b 64 -e 64 -r 1 -d all -g 2 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows = common::table_rows(&text(&out.stdout));
    let types: Vec<&str> = rows.iter().map(|r| r.dtype.as_str()).collect();
    assert_eq!(
        types,
        [
            "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
            "bfloat16"
        ]
    );
    assert!(rows.iter().all(|r| r.root == 1 && r.redop == "none"));
}

#[test]
fn help_and_bad_options_print_the_usage_and_exit_0_as_nccl_tests_does() {
    let (_dir, link) = linked("all_gather_perf");
    let out = perf(&link, "-h");
    assert_eq!(out.status.code(), Some(0));
    let usage = text(&out.stdout);
    assert!(usage.starts_with("USAGE: all_gather_perf \n"), "{usage}");
    for flag in [
        "-t,--nthreads",
        "-J,--output_file",
        "-R,--local_register",
        "-K,--per_iter_skip",
    ] {
        assert!(usage.contains(flag), "{flag} missing from the usage");
    }
    // common.cu:1357-1358: c is '?' for every option getopt refuses.
    let out = perf(&link, "-q");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("invalid option '?'\nUSAGE: all_gather_perf"));
}

#[test]
fn what_ncclprobe_cannot_run_exits_5_saying_what() {
    for (name, args, said) in [
        ("all_reduce_perf", "-D 1 -R 2", "device API"),
        ("all_reduce_perf", "-G 10 -z 2", "-G with -z 1 or 2"),
    ] {
        let (_dir, link) = linked(name);
        let args = format!("{args} --backend host");
        let out = perf(&link, &args);
        assert_eq!(
            out.status.code(),
            Some(5),
            "{name} {args:?}: testNotImplemented"
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains(said), "{name} {args:?}: {stderr}");
    }
}

#[test]
fn an_unknown_type_falls_back_to_float_as_nccl_tests_does() {
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 64 -e 64 -d nosuch -g 2 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("invalid type nosuch, defaulting to float"),
        "{stdout}"
    );
    let table: String = stdout
        .lines()
        .filter(|l| !l.starts_with("invalid type"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(common::table_rows(&table)[0].dtype, "float");
}

#[test]
fn nccl_tests_min_bw_fails_the_run_with_status_7_and_names_the_slow_rows() {
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf_env(
        &link,
        "-b 64 -e 256 -f 2 -g 2 --backend host",
        &[("NCCL_TESTS_MIN_BW", "100000")],
    );
    assert_eq!(out.status.code(), Some(7), "testNumResults");
    let stdout = text(&out.stdout);
    let avg = stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth"))
        .unwrap();
    assert!(avg.ends_with(" FAILED"), "{avg}");
    assert!(
        stdout.contains(": Test failure common.cu:"),
        "TESTCHECK's line: {stdout}"
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("6 rows are below it"), "{stderr}");

    // A bar the run clears: OK, status 0.
    let out = perf_env(
        &link,
        "-b 64 -e 64 -g 2 --backend host",
        &[("NCCL_TESTS_MIN_BW", "0.000001")],
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let avg = stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth"))
        .unwrap();
    assert!(avg.ends_with(" OK"), "{avg}");
}

#[test]
fn cputime_and_timestamps_change_the_header_and_rows_as_c_and_s_do() {
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 64 -e 64 -g 2 -C 1 -S 1 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong           timestamp\n"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .unwrap();
    // `%21s` of "%Y-%m-%d %H:%M:%S" after the in-place half.
    assert_eq!(row.len(), ROW_WIDTH + 21, "{row:?}");
    let stamp = row[ROW_WIDTH..].trim_start();
    assert_eq!(stamp.len(), 19, "{stamp:?}");
    assert_eq!(&stamp[4..5], "-");
    assert_eq!(&stamp[13..14], ":");
}

#[test]
fn dash_j_writes_nccl_tests_json_version_3_beside_the_table_and_never_overwrites() {
    let (dir, link) = linked("all_reduce_perf");
    let args = "-b 8 -e 512 -f 4 -g 2 -J run.json --backend host";
    let out = perf(&link, args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.lines().next(),
        Some("# Writing JSON output to run.json")
    );
    let raw = std::fs::read_to_string(dir.path().join("run.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut order: Vec<usize> = [
        "\"version\"",
        "\"start_time\"",
        "\"args\"",
        "\"env\"",
        "\"nccl_version\"",
        "\"config\"",
        "\"results\"",
        "\"out_of_bounds\"",
        "\"average_bus_bandwidth\"",
        "\"errors\"",
        "\"end_time\"",
    ]
    .iter()
    .map(|k| {
        raw.find(k)
            .unwrap_or_else(|| panic!("{k} missing: {keys:?}"))
    })
    .collect();
    let found = order.clone();
    order.sort();
    assert_eq!(
        found, order,
        "top-level keys in jsonOutputInit..Finalize order"
    );
    assert_eq!(v["version"], 3);
    assert_eq!(v["args"][0], "all_reduce_perf");
    assert_eq!(v["config"]["step_factor"], 4);
    assert_eq!(
        v["config"]["blocking_collectives"], "false",
        "jsonBool writes strings"
    );
    assert_eq!(v["config"]["devices"].as_array().unwrap().len(), 2);
    let table = common::table_rows(&stdout);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), table.len());
    for (j, t) in results.iter().zip(&table) {
        assert_eq!(j["size"], t.size);
        assert_eq!(j["count"], t.count);
        assert_eq!(j["type"], "float");
        assert_eq!(j["root"], "    -1", "%6i");
        assert_eq!(j["actual_iterations"], 20);
        let us = j["out_of_place"]["time"].as_f64().unwrap();
        assert!(
            (us - t.halves[0].time_us).abs() <= 0.01 + us * 0.01,
            "{us} vs {}",
            t.halves[0].time_us
        );
        assert_eq!(j["in_place"]["nwrong"], 0.0);
    }
    assert_eq!(v["out_of_bounds"]["okay"], "true");
    assert_eq!(v["average_bus_bandwidth"]["okay"], "unchecked");
    assert!(v["end_time"].is_string());

    // The name is taken now: the next run writes run.json.0 and leaves run.json alone.
    let out = perf(&link, args);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout).lines().next(),
        Some("# Writing JSON output to run.json.0")
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("run.json")).unwrap(),
        raw
    );

    // ncclprobe's importer reads it as it reads nccl-tests' own.
    let record = dir.path().join("imported.json");
    common::bin()
        .arg("import")
        .arg(dir.path().join("run.json"))
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    assert_eq!(common::read_record(&record).points.len(), 2 * table.len());

    // Not a .json name: nothing written, nothing said (classifyOutputFile).
    let out = perf(&link, "-b 8 -e 8 -g 2 -J run.txt --backend host");
    assert_eq!(out.status.code(), Some(0));
    assert!(!dir.path().join("run.txt").exists());
    assert!(!text(&out.stdout).contains("JSON"));
}

#[test]
fn gpus_show_as_nccl_tests_prints_them_and_the_library_version_code() {
    // The GPU TEST DOUBLE (doubles/gpu) as libcuda and libnccl.
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (_dir, link) = linked("all_reduce_perf");
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    let out = c
        .args(["-b", "1K", "-e", "1K", "-g", "2", "-J", "d.json"])
        .current_dir(_dir.path())
        .env("LD_LIBRARY_PATH", libs.path())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "2")
        .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22703")
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(" nccl-library=22703\n"), "{stdout}");
    let devices: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("#  Rank"))
        .collect();
    assert_eq!(devices.len(), 2);
    for (r, line) in devices.iter().enumerate() {
        // "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
        let tail = line.split(" device ").nth(1).unwrap();
        assert!(tail.starts_with(&format!("{r:2} [0000:")), "{line}");
        assert_eq!(&tail[14..16], "] ", "{line}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(_dir.path().join("d.json")).unwrap())
            .unwrap();
    assert_eq!(v["nccl_version"], 22703);
    let d = &v["config"]["devices"][1];
    assert_eq!(d["device"], 1);
    assert_eq!(d["device_hex"].as_str().unwrap().len(), 10, "{d}");
}

#[test]
fn aliases_link_each_measured_collective_and_leave_taken_names_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("reduce_perf"), "someone else's").unwrap();
    let out = common::bin()
        .arg("aliases")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "one name was taken");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("reduce_perf")).unwrap(),
        "someone else's"
    );
    for name in [
        "all_reduce_perf",
        "all_gather_perf",
        "alltoall_perf",
        "sendrecv_perf",
        "gather_perf",
        "scatter_perf",
        "hypercube_perf",
        "alltoallv_perf",
    ] {
        let target = std::fs::canonicalize(dir.path().join(name)).unwrap();
        assert_eq!(
            target,
            std::fs::canonicalize(env!("CARGO_BIN_EXE_ncclprobe")).unwrap()
        );
    }
    // Made through the link, a run is the drop-in.
    let out = perf(
        &dir.path().join("sendrecv_perf"),
        "-b 8 -e 8 -g 2 --backend host",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("# Collective test starting: sendrecv_perf"));
}

#[test]
fn per_iteration_timing_adds_its_columns_and_json_that_nccl_tests_own_reader_takes() {
    let (dir, link) = linked("all_reduce_perf");
    let out = perf(
        &link,
        "-b 8 -e 4K -f 8 -g 2 -n 12 -I 1 -K 2 -J it.json --backend host",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(
        "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 iterations \n"
    ));
    // writeResultHeader under -I: `  %7s` for each i_ column after each placement's four.
    assert!(stdout.contains(
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% \n"
    ), "{stdout}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 4);
    for row in &rows {
        // Each placement gains `  %7s` four times: 118 + 2 x 36.
        assert_eq!(row.len(), ROW_WIDTH + 72, "{row:?}");
        let c: Vec<f64> = row
            .split_whitespace()
            .skip(5)
            .map(|v| v.parse().unwrap())
            .collect();
        let (min, max, p99) = (c[4], c[5], c[6]);
        assert!(min <= p99 && p99 <= max, "i_min <= i_p99 <= i_max: {row}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("it.json")).unwrap())
            .unwrap();
    assert_eq!(v["config"]["per_iter_timing"], "true");
    assert_eq!(v["config"]["per_iter_skip"], 2);
    let first = &v["results"][0];
    let each = &first["out_of_place_per_iter"];
    assert_eq!(each["times_us"].as_array().unwrap().len(), 12);
    assert_eq!(each["skipped_iterations"], 2);
    let times: Vec<f64> = each["times_us"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    let kept = &times[2..];
    let min = kept.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(
        each["min_us"].as_f64().unwrap(),
        min,
        "the summary skips -K's calls"
    );
    let keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in ["out_of_place_per_iter", "in_place_per_iter"] {
        assert!(keys.contains(&key), "{keys:?}");
    }

    // nccl-tests' own reader (tools/analyze_perf_json.py of the 2.19.6 tarball, unchanged).
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nccl-tests/analyze_perf_json.py");
    let run = Command::new("python3")
        .arg(&script)
        .arg(dir.path().join("it.json"))
        .arg("--all")
        .output()
        .expect("python3 runs nccl-tests' analyze_perf_json.py (install python3)");
    let report = text(&run.stdout);
    assert!(run.status.success(), "{report}\n{}", text(&run.stderr));
    assert!(
        report.contains("Summary skip: 2 leading iterations"),
        "{report}"
    );
    let stats: Vec<&str> = report
        .split("PER-ITERATION STATS (OOP)")
        .nth(1)
        .unwrap()
        .lines()
        .skip(4)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let sizes: Vec<u64> = stats
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(sizes, [8, 64, 512, 4096], "{report}");
    assert!(report.contains("ITERATION 0 WARMUP IMPACT"), "{report}");

    // Imported, every kept call is a sample: the points get an interval, the time stays the
    // batch's.
    let record = dir.path().join("imported.json");
    common::bin()
        .arg("import")
        .arg(dir.path().join("it.json"))
        .arg("--json")
        .arg(&record)
        .assert()
        .success();
    let r = common::read_record(&record);
    let p = &r.points[0];
    assert_eq!(p.samples_s.len(), 10, "12 calls, 2 skipped");
    assert!(p.stats.ci_level > 0.0, "{:?}", p.stats);
    let each = p.per_iteration.as_ref().unwrap();
    assert_eq!((each.times_s.len(), each.skipped), (12, 2));
    assert!((p.time_s * 1e6 - first["out_of_place"]["time"].as_f64().unwrap()).abs() < 1e-6);
}

#[test]
fn run_cycles_walk_the_sizes_again_and_print_every_cycle() {
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 512 -f 8 -N 3 -g 2 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let sizes: Vec<u64> = common::table_rows(&text(&out.stdout))
        .iter()
        .map(|r| r.size)
        .collect();
    assert_eq!(sizes, [8, 64, 512, 8, 64, 512, 8, 64, 512]);
}

#[test]
fn run_cycles_0_walks_the_sizes_until_a_signal_and_keeps_only_the_latest_walk() {
    let (dir, link) = linked("all_reduce_perf");
    let (json, perf_json) = (dir.path().join("run.json"), dir.path().join("perf.json"));
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    let child = c
        .args([
            "-b",
            "8",
            "-e",
            "64",
            "-f",
            "8",
            "-g",
            "2",
            "-N",
            "0",
            "--backend",
            "host",
        ])
        .arg("--json")
        .arg(&json)
        .arg("-J")
        .arg(&perf_json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Far more rows than one walk's two before the signal: the walks do not end by themselves.
    // The rows are read as they come, and the signal goes once seven are out.
    let mut child = child;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let is_row = |l: &String| !l.starts_with('#') && !l.trim().is_empty();
    let mut lines = Vec::new();
    while lines.iter().filter(|l| is_row(l)).count() <= 6 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(e) => panic!("seven rows did not come within 60 s ({e}): {lines:?}"),
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    assert_eq!(status.code(), Some(130), "{}", stderr.join().unwrap());
    let sizes: Vec<u64> = lines
        .iter()
        .filter(|l| is_row(l))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert!(sizes.len() > 6, "every walk is printed: {sizes:?}");
    assert!(sizes.chunks(2).all(|w| w[0] == 8), "{sizes:?}");
    // The records hold one walk, not every walk: bounded however long it runs.
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(record["status"], "interrupted");
    assert_eq!(
        record["points"].as_array().unwrap().len(),
        4,
        "two sizes, two placements"
    );
    let nt: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&perf_json).unwrap()).unwrap();
    assert!(nt["results"].as_array().unwrap().len() <= 2);
}

#[test]
fn nccl_tests_device_picks_the_first_gpu_and_refuses_past_the_last_with_status_5() {
    // The GPU TEST DOUBLE with four GPUs (buses 18, 28, 38, 48).
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (_dir, link) = linked("all_reduce_perf");
    let run = |first: &str| {
        let mut c = Command::new(&link);
        common::without_host_settings(&mut c);
        c.args(["-b", "8", "-e", "8", "-g", "2"])
            .env("LD_LIBRARY_PATH", libs.path())
            .env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
            .env("NCCL_TESTS_DEVICE", first)
            .output()
            .unwrap()
    };
    let out = run("2");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let devices: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("#  Rank"))
        .map(|l| l.split(" device ").nth(1).unwrap()[..15].to_string())
        .collect();
    assert_eq!(devices, [" 2 [0000:38:00]", " 3 [0000:48:00]"]);
    let out = run("3");
    assert_eq!(out.status.code(), Some(5), "testNotImplemented");
    assert!(text(&out.stderr).contains("Invalid number of GPUs: 5 requested but only 4 were found"));
}

#[test]
fn aggregated_iterations_make_m_calls_per_timed_iteration() {
    // The GPU TEST DOUBLE's call trace counts the collectives NCCL was asked for.
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (dir, link) = linked("all_reduce_perf");
    let trace = dir.path().join("trace.txt");
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    let out = c
        .args([
            "-b", "8", "-e", "64", "-f", "8", "-g", "1", "-n", "2", "-m", "3", "-w", "1",
        ])
        .env("LD_LIBRARY_PATH", libs.path())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "1")
        .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(" agg iters: 3 "));
    let calls = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.ends_with("call=ncclAllReduce"))
        .count();
    // Per size and placement: the checked call (also the one warm-up call), BenchTime's
    // untimed "Sync" call, then 2 iterations of 3 calls.
    assert_eq!(calls, 2 * 2 * (1 + 1 + 2 * 3));
}

/// The GPU TEST DOUBLE as NCCL `version` with two GPUs, run as `all_reduce_perf` with `args`:
/// the output and the call trace.
fn on_double(version: &str, args: &[&str]) -> (Output, String) {
    on_double_as("all_reduce_perf", 2, version, args)
}

/// `on_double` as the binary `name` with `gpus` GPUs.
fn on_double_as(name: &str, gpus: usize, version: &str, args: &[&str]) -> (Output, String) {
    on_double_env(name, gpus, version, args, &[])
}

/// `on_double_as` with these environment variables set.
fn on_double_env(
    name: &str,
    gpus: usize,
    version: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, String) {
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (dir, link) = linked(name);
    let trace = dir.path().join("trace.txt");
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    let out = c
        .args(args)
        .env("LD_LIBRARY_PATH", libs.path())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", gpus.to_string())
        .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
        .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (out, std::fs::read_to_string(&trace).unwrap_or_default())
}

/// The values of `field=` on the trace's lines of `call`, each once.
fn traced(trace: &str, call: &str, field: &str) -> std::collections::BTreeSet<String> {
    let key = format!(" {field}=");
    trace
        .lines()
        .filter(|l| l.contains(&format!("call={call}")))
        .filter_map(|l| l.split(key.as_str()).nth(1))
        .map(|v| v.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn cta_policy_reaches_nccl_config_from_2_27_and_is_ignored_as_nccl_tests_ignores_it() {
    let policies = |trace: &str| -> Vec<String> {
        trace
            .lines()
            .filter(|l| l.starts_with("call=ncclCommInitRankConfig"))
            .map(|l| l.rsplit("CTAPolicy=").next().unwrap().to_string())
            .collect()
    };
    let ignored = "Option -x (cta_policy) 2 is not supported before NCCL 2.28. Ignoring";
    for (version, x, set, says) in [
        ("22703", "1", "1", false),
        ("22703", "0", "0", false),
        ("22703", "2", "unset", true),
        ("22803", "2", "2", false),
        ("22600", "1", "unset", false),
        // Set only `if (ctaPolicy >= 0)`.
        ("22803", "-1", "unset", false),
    ] {
        let (out, trace) = on_double(version, &["-b", "8", "-e", "8", "-g", "2", "-x", x]);
        let what = format!("NCCL {version} -x {x}");
        assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
        assert_eq!(policies(&trace), [set, set], "{what}: {trace}");
        assert_eq!(text(&out.stdout).contains(ignored), says, "{what}");
    }
    // NCCL itself refuses a policy it does not know (2.28: 0..2): init fails, status 3
    // (testNcclError) is not what ncclprobe can promise, but the run must fail.
    let (out, _) = on_double("22803", &["-b", "8", "-e", "8", "-g", "2", "-x", "3"]);
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn blocking_modes_wait_for_each_iteration_and_say_so_in_the_record() {
    let (dir, link) = linked("all_reduce_perf");
    for (z, mode) in [
        ("1", "wait-and-barrier"),
        ("2", "wait"),
        ("3", "wait-barrier-excluded"),
    ] {
        let json = dir.path().join(format!("z{z}.json"));
        let args = format!(
            "-b 8 -e 1K -f 4 -g 2 -n 5 -m 2 -I 1 -z {z} --backend host --json {}",
            json.display()
        );
        let out = perf(&link, &args);
        assert_eq!(out.status.code(), Some(0), "-z {z}: {}", text(&out.stderr));
        let rows = text(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && l.trim_start().starts_with(char::is_numeric))
            .count();
        assert_eq!(rows, 4, "-z {z}: 8, 32, 128 and 512 bytes");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(record["settings"]["blocking"], mode, "-z {z}");
        assert_eq!(record["settings"]["agg_iters"], 2, "-z {z}");
        let point = &record["points"][0];
        assert_eq!(
            point["per_iteration"]["times_s"].as_array().unwrap().len(),
            5,
            "-z {z}: one time per iteration of -m calls"
        );
        assert_eq!(point["per_iteration"]["timing"], "host-clock-each-waited");
    }
}

#[test]
fn unalign_moves_both_buffers_by_whole_elements_and_the_results_stay_right() {
    // The GPU TEST DOUBLE traces how aligned every buffer NCCL is handed is. One size, -e's:
    // smaller ones rotate through the buffers call by call as nccl-tests' do (startColl's
    // shift), which moves them by their own size as well.
    for (u, dtype, align) in [
        ("0", "float", "256"),
        ("1", "float", "4"),
        ("3", "int8", "1"),
    ] {
        let (out, trace) = on_double(
            "22703",
            &["-b", "4K", "-e", "4K", "-g", "2", "-u", u, "-d", dtype],
        );
        let what = format!("-u {u} -d {dtype}");
        assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("# Out of bounds values : 0 OK"),
            "{what}: {}",
            text(&out.stdout)
        );
        let expected: std::collections::BTreeSet<String> = [align.to_string()].into();
        assert_eq!(traced(&trace, "ncclAllReduce", "align"), expected, "{what}");
    }
    // The host backend moves its buffers the same way; its results are checked as well.
    let (_dir, link) = linked("all_gather_perf");
    let out = perf(&link, "-b 8 -e 4K -f 8 -g 3 -u 5 -d int8 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
}

#[test]
fn memory_report_prints_what_init_buffers_and_collectives_took_as_write_mem_info_does() {
    // The GPU TEST DOUBLE takes 48 MiB of each GPU at NCCL init and 12 MiB at the first launch
    // (the connections), as NCCL takes memory at both; the buffers are two of -e's 2 MiB.
    let (out, _) = on_double(
        "22703",
        &["-b", "8", "-e", "2M", "-f", "64", "-g", "2", "-M", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let tail: Vec<&str> = stdout.lines().rev().take(5).collect();
    assert_eq!(
        tail,
        [
            "",
            "#",
            "# GPU memory usage     : Initialization 48.0 MB | User-Allocated 4.00 MB | Collective 12.0 MB | Total  64.0 MB",
            "# Collective test concluded: all_reduce_perf",
            "#",
        ],
        "{stdout}"
    );
    // Without -M, no such line.
    let (out, _) = on_double("22703", &["-b", "8", "-e", "8", "-g", "2"]);
    assert!(!text(&out.stdout).contains("GPU memory usage"));
    // The host backend has no GPU memory: it says so instead of printing zeros.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 8 -g 2 -M 1 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("GPU memory usage"));
    assert!(text(&out.stderr).contains("-M 1: no GPU memory to report"));
}

#[test]
fn stream_null_puts_every_call_on_the_legacy_stream_of_each_gpu() {
    // The GPU TEST DOUBLE keeps one legacy stream per device, as CUDA does: with one stream
    // for all, two GPUs from one thread would wait for each other forever.
    for (y, stream) in [("0", "own"), ("1", "null")] {
        let (out, trace) = on_double(
            "22703",
            &[
                "-b", "8", "-e", "64K", "-f", "64", "-g", "2", "-y", y, "-I", "1",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "-y {y}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
        let expected: std::collections::BTreeSet<String> = [stream.to_string()].into();
        assert_eq!(
            traced(&trace, "ncclAllReduce", "stream"),
            expected,
            "-y {y}"
        );
    }
    // Without GPUs there are no streams: said, and not claimed in the record.
    let (dir, link) = linked("all_reduce_perf");
    let json = dir.path().join("run.json");
    let out = perf(
        &link,
        &format!(
            "-b 8 -e 8 -g 2 -y 1 -x 1 --backend host --json {}",
            json.display()
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("apply to the NCCL backend only"));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(record["settings"].get("stream_null").is_none());
    assert!(record["settings"].get("cta_policy").is_none());
}

#[test]
fn gather_scatter_and_hypercube_run_as_their_binaries_with_their_counts_and_roots() {
    // nccl-tests' rows for 4 ranks of floats: each rank's share is count/4 rounded down to 16
    // bytes, printed as the count; the size is the whole gathered buffer.
    for (name, root) in [
        ("gather_perf", "1"),
        ("scatter_perf", "1"),
        ("hypercube_perf", "-1"),
    ] {
        let (_dir, link) = linked(name);
        let out = perf(&link, "-b 1K -e 64K -f 8 -g 4 -r 1 --backend host");
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let rows: Vec<Vec<&str>> = stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        let sizes: Vec<(&str, &str, &str, &str)> =
            rows.iter().map(|r| (r[0], r[1], r[3], r[4])).collect();
        assert_eq!(
            sizes,
            [
                ("1024", "64", "none", root),
                ("8192", "512", "none", root),
                ("65536", "4096", "none", root)
            ],
            "{name}"
        );
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{name}: {stdout}"
        );
    }
    // On the GPU TEST DOUBLE, through NCCL's sends and receives, every root and misaligned.
    for name in ["gather_perf", "scatter_perf", "hypercube_perf"] {
        let args = [
            "-b", "8", "-e", "64K", "-f", "32", "-g", "4", "-r", "-1", "-u", "1",
        ];
        let (out, _) = on_double_as(name, 4, "21805", &args);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{name}: {stdout}"
        );
        let rows = stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        let roots = if name == "hypercube_perf" { 1 } else { 4 };
        assert_eq!(rows, 3 * roots, "{name}: -r -1 runs every root: {stdout}");
    }
    // Hypercube pairs rank r with r ^ 2^k: three ranks cannot (hypercube.cu:104-112).
    let (_dir, link) = linked("hypercube_perf");
    let out = perf(&link, "-b 8 -e 8 -g 3 --backend host");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "nRanks 3 is not a power of 2, skipping\n"
    );
}

#[test]
fn cudagraph_captures_each_sample_and_launches_it_g_times_on_the_nccl_backend_only() {
    // The GPU TEST DOUBLE records captures and launches as CUDA does: work on a capturing
    // stream runs only when the graph is launched, and a wait inside the capture fails it.
    let (out, trace) = on_double(
        "22703",
        &[
            "-b", "8", "-e", "1K", "-f", "128", "-g", "2", "-n", "3", "-m", "2", "-G", "4",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
    assert!(text(&out.stdout).contains(" graph: 4"));
    let count = |what: &str| trace.lines().filter(|l| l.starts_with(what)).count();
    // Two sizes, two placements, two ranks: eight captures in thread-local mode, each of the
    // three iterations' groups of two calls, each launched four times; and, as nccl-tests
    // checks (common.cu 806-831), eight captures of the check's one call, launched once.
    assert_eq!(count("call=cuStreamBeginCapture mode=1"), 8 + 8, "{trace}");
    assert_eq!(
        count("call=cuStreamEndCapture nodes=6 invalidated=false"),
        8
    );
    assert_eq!(
        count("call=cuStreamEndCapture nodes=1 invalidated=false"),
        8
    );
    assert_eq!(count("call=cuGraphLaunch"), 8 * 4 + 8);
    // CUDA forbids waiting inside a capture: nccl-tests' -z 1 and 2 would, so they are refused.
    let (out, _) = on_double(
        "22703",
        &["-b", "8", "-e", "8", "-g", "2", "-G", "2", "-z", "1"],
    );
    assert_eq!(out.status.code(), Some(5));
    // A fault only graph launches show (one byte wrong on rank 1): the check, captured and
    // launched as nccl-tests does, finds it; an eager check would report #wrong 0.
    let (out, _) = on_double_env(
        "all_reduce_perf",
        2,
        "22703",
        &["-b", "1K", "-e", "1K", "-g", "2", "-G", "2", "-n", "2"],
        &[("NCCLPROBE_TEST_DOUBLE_FAULT", "graph-wrong:1")],
    );
    let stdout = text(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{stdout}");
    assert!(
        !stdout.contains("# Out of bounds values : 0 OK"),
        "{stdout}"
    );
    // Without GPUs there are no graphs: said, and the calls run as without -G.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 8 -g 2 -G 3 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("-G (CUDA graphs) applies to the NCCL backend only"));
}

/// `ranks` processes of the drop-in `name`, started as torchrun starts them on one host with
/// NCCL_TESTS_SPLIT="MOD 2", on `gpus` GPUs of the TEST DOUBLE; the directory of their
/// records (`rankN.json`) and their outputs, in rank order.
fn split_on_double(
    name: &str,
    ranks: usize,
    gpus: usize,
    args: &[&str],
) -> (tempfile::TempDir, Vec<Output>) {
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (dir, link) = linked(name);
    let port = common::free_port();
    let visible: Vec<String> = (0..gpus).map(|g| g.to_string()).collect();
    let children: Vec<_> = (0..ranks)
        .map(|rank| {
            let mut c = Command::new(&link);
            common::without_host_settings(&mut c);
            c.args(args)
                .arg("--json")
                .arg(dir.path().join(format!("rank{rank}.json")))
                .env("LD_LIBRARY_PATH", libs.path())
                .env("NCCLPROBE_TEST_DOUBLE_GPUS", gpus.to_string())
                .env("CUDA_VISIBLE_DEVICES", visible.join(","))
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", ranks.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", ranks.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("NCCLPROBE_RENDEZVOUS_PORT", port.to_string())
                .env("NCCL_TESTS_SPLIT", "MOD 2")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    (dir, outs)
}

/// NCCL checks for a shared GPU among the peers of one communicator (src/init.cc, v2.28.9
/// 903-904): under NCCL_TESTS_SPLIT two processes of different colors may use one GPU, as
/// NCCL and nccl-tests run them, and ncclprobe does not refuse them first.
#[test]
fn two_split_groups_may_share_a_gpu_as_nccl_allows() {
    let (_dir, outs) = split_on_double(
        "all_reduce_perf",
        2,
        1,
        &["-b", "1K", "-e", "4K", "-f", "4"],
    );
    for (r, o) in outs.iter().enumerate() {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "rank {r}: {err}");
        assert!(!err.contains("would both use GPU"), "rank {r}: {err}");
    }
}

#[test]
fn nccl_tests_split_runs_a_communicator_per_color_and_prints_every_groups_rows() {
    // Four processes as torchrun starts them, on the GPU TEST DOUBLE's four GPUs;
    // "MOD 2" puts ranks 0 and 2 in group 0, 1 and 3 in group 1.
    let (dir, outs) = split_on_double(
        "all_gather_perf",
        4,
        4,
        &["-b", "1K", "-e", "64K", "-f", "8"],
    );
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(0), "rank {r}: {}", text(&o.stderr));
    }
    let stdout = text(&outs[0].stdout);
    let groups: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("#  Rank"))
        .map(|l| l.split(" Group ").nth(1).unwrap()[..2].trim())
        .collect();
    assert_eq!(groups, ["0", "1", "0", "1"], "{stdout}");
    // Rows are per group of two ranks: 1 KiB of floats is 128 per rank.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..2], ["1024", "128"], "{stdout}");
    assert_eq!(rows.len(), 3);
    assert_eq!(stdout.matches("#  group  0 of  2 ranks").count(), 3);
    assert_eq!(stdout.matches("#  group  1 of  2 ranks").count(), 3);
    assert!(stdout.contains("# Group bus bandwidth  : "));
    assert!(stdout.contains("(group 1: ranks 1,3)"));
    assert!(stdout.contains("# Out of bounds values : 0 OK"));
    // Only rank 0 prints, as nccl-tests.
    assert!(outs[1..].iter().all(|o| o.stdout.is_empty()));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("rank0.json")).unwrap()).unwrap();
    assert_eq!(record["backend"]["nranks"], 2);
    assert_eq!(record["backend"]["ranks"][3]["group"], 1);
    assert_eq!(
        record["points"][0]["per_rank_time_s"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // Text nccl-tests cannot read leaves every process in color 0 (common.cu:1499-1524), so
    // the run goes on; without processes to group, it is said.
    let (_link_dir, link) = linked("all_gather_perf");
    let out = perf_env(
        &link,
        "-b 8 -e 8 --backend host",
        &[("NCCL_TESTS_SPLIT", "XOR 1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("NCCL_TESTS_SPLIT=XOR 1 is not applied"));
    let out = perf_env(
        &link,
        "-b 8 -e 8 -g 2 --backend host",
        &[("NCCL_TESTS_SPLIT_MASK", "1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("NCCL_TESTS_SPLIT_MASK=1 is not applied"));
}

#[test]
fn mulsum_sums_every_input_times_its_ranks_scalar_on_every_backend() {
    // nccl-tests' scalar is 1 on even ranks and 2 on odd ones; the check holds every rank to
    // that, so a backend that summed plainly would count wrong elements.
    let (_dir, link) = linked("reduce_scatter_perf");
    let out = perf(
        &link,
        "-b 1K -e 64K -f 64 -g 3 -o mulsum -d all --backend host",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    let ops: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(ops.len(), 20, "ten types, two sizes: {stdout}");
    assert!(ops.iter().all(|o| *o == "mulsum"));
    // -o all is nccl-tests' six ops, mulsum last.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 64 -e 64 -g 2 -o all --backend host");
    let ops: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().nth(3).unwrap().to_string())
        .collect();
    assert_eq!(ops, ["sum", "prod", "max", "min", "avg", "mulsum"]);
    // NCCL: an op made per call with ncclRedOpCreatePreMulSum (the GPU TEST DOUBLE applies
    // each rank's scalar before the sum, as FuncPreMulSum does).
    let (out, _) = on_double(
        "22703",
        &[
            "-b", "8", "-e", "64K", "-f", "32", "-g", "2", "-o", "mulsum", "-d", "half",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
}

#[test]
fn from_nccl_2_28_alltoall_gather_and_scatter_call_nccls_own_entry_points_as_nccl_tests_does() {
    // The GPU TEST DOUBLE answers ncclAlltoAll, ncclGather and ncclScatter only when it plays
    // NCCL 2.28 or newer; before, ncclprobe must use sends and receives.
    for (name, native) in [
        ("alltoall_perf", "call=ncclAlltoAll"),
        ("gather_perf", "call=ncclGather"),
        ("scatter_perf", "call=ncclScatter"),
    ] {
        for (version, uses) in [("22803", true), ("22703", false)] {
            let args = ["-b", "1K", "-e", "1K", "-g", "2", "-r", "1"];
            let (out, calls) = on_double_as(name, 2, version, &args);
            let what = format!("{name} on NCCL {version}");
            assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
            assert!(
                text(&out.stdout).contains("# Out of bounds values : 0 OK"),
                "{what}"
            );
            assert_eq!(calls.contains(native), uses, "{what}");
        }
    }
}

#[test]
fn fp8_types_run_from_nccl_2_24_and_join_dash_d_all_on_hopper_as_in_nccl_tests() {
    // Host ranks reduce fp8 through f32, rounding to nearest even and saturating.
    let (_dir, link) = linked("all_reduce_perf");
    for dtype in ["f8e4m3", "f8e5m2"] {
        let args = format!("-b 8 -e 4K -f 8 -g 3 -o all -d {dtype} --backend host");
        let out = perf(&link, &args);
        assert_eq!(out.status.code(), Some(0), "{dtype}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{dtype}: {stdout}"
        );
        assert!(stdout
            .lines()
            .any(|l| l.contains(&format!(" {dtype}  mulsum "))));
    }
    // NCCL 2.24 has them (the GPU TEST DOUBLE reduces them with its own arithmetic); 2.23
    // does not, and the run is refused before any call.
    let args = [
        "-b", "8", "-e", "4K", "-f", "8", "-g", "2", "-o", "all", "-d", "f8e5m2",
    ];
    let (out, _) = on_double("22403", &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("# Out of bounds values : 0 OK"));
    let (out, _) = on_double("22303", &args);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("came in 2.24"),
        "{}",
        text(&out.stderr)
    );
    // -d all adds them after bfloat16 where every GPU is compute capability 9.0 or newer
    // (the double's default) and NCCL is 2.24 or newer; not on an older GPU.
    let types = |out: &Output| -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for l in text(&out.stdout).lines().filter(|l| !l.starts_with('#')) {
            if let Some(t) = l.split_whitespace().nth(2) {
                if !seen.iter().any(|s| s == t) {
                    seen.push(t.to_string());
                }
            }
        }
        seen
    };
    let all = ["-b", "64", "-e", "64", "-g", "2", "-d", "all"];
    let (out, _) = on_double("22803", &all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = types(&out);
    assert_eq!(t.len(), 12, "{t:?}");
    assert_eq!(t[9..], ["bfloat16", "f8e4m3", "f8e5m2"]);
    let libs = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let (_dir, link) = linked("all_reduce_perf");
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    let out = c
        .args(all)
        .env("LD_LIBRARY_PATH", libs.path())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "2")
        .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22803")
        .env("NCCLPROBE_TEST_DOUBLE_COMPUTE_CAPABILITY", "8.0")
        .output()
        .unwrap();
    assert_eq!(types(&out).len(), 10, "an A100 runs no fp8 in -d all");
}

/// (peer, count) of each `call` (ncclSend or ncclRecv) rank `rank` made, as traced.
fn p2p_calls(trace: &str, rank: usize, call: &str) -> std::collections::BTreeSet<(usize, usize)> {
    let field = |l: &str, k: &str| -> usize {
        l.split(&format!(" {k}="))
            .nth(1)
            .and_then(|v| v.split(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(usize::MAX)
    };
    trace
        .lines()
        .filter(|l| l.contains(&format!(" rank={rank} ")) && l.contains(&format!(" call={call} ")))
        .map(|l| (field(l, "peer"), field(l, "count")))
        .collect()
}

/// The rows of a table: (size, count, in-place #wrong).
fn size_count_rows(stdout: &str) -> Vec<(String, String, String)> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .map(|r| (r[0].clone(), r[1].clone(), r[r.len() - 1].clone()))
        .collect()
}

#[test]
fn alltoallv_sends_each_peer_its_distance_weighted_part_as_nccl_tests_does() {
    // 3 ranks of floats, spread 1: count/3 rounded to 16 bytes is the count column; each rank
    // sends 1/3 and 2/3 of the total to its next two peers (rounded to 16 bytes), and the size
    // column is what the busiest rank sends. In place is not checked (N/A), as nccl-tests.
    let (_dir, link) = linked("alltoallv_perf");
    let out = perf(&link, "-b 1K -e 1M -f 32 -g 3 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let want = [("1008", "84"), ("32736", "2728"), ("1048560", "87380")];
    let rows = size_count_rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    for (row, (size, count)) in rows.iter().zip(want) {
        assert_eq!(
            (row.0.as_str(), row.1.as_str(), row.2.as_str()),
            (size, count, "N/A")
        );
    }
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(stdout.contains("float    none      -1"), "{stdout}");

    // Through NCCL on the GPU TEST DOUBLE, spread 0.5, 4 GPUs, 4 KiB of floats: rank 0 sends
    // 0.5 * 1024 B + 0.5 * d * 4096/6 B to the peer at distance d, rounded to 16 bytes:
    // 512, 848, 1184, 1536 B = 128, 212, 296, 384 floats; it receives from peer p what p sends
    // at distance 4 - p.
    let (out, trace) = on_double_env(
        "alltoallv_perf",
        4,
        "22803",
        &["-b", "4K", "-e", "4K", "-g", "4"],
        &[("NCCL_TESTS_ALLTOALLV_SPREAD", "0.5")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        size_count_rows(&stdout),
        [("4080".into(), "256".into(), "N/A".into())],
        "{stdout}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    let sends: Vec<(usize, usize)> = p2p_calls(&trace, 0, "ncclSend").into_iter().collect();
    assert_eq!(sends, [(0, 128), (1, 212), (2, 296), (3, 384)]);
    let recvs: Vec<(usize, usize)> = p2p_calls(&trace, 0, "ncclRecv").into_iter().collect();
    assert_eq!(recvs, [(0, 128), (1, 384), (2, 296), (3, 212)]);
}

#[test]
fn alltoallv_reads_a_traffic_matrix_and_refuses_what_nccl_tests_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = dir.path().join("traffic.txt");
    // Rank 0 sends most (0 + 4096 + 992 + 16 = 5104 bytes); rank 1 sends only to rank 0.
    std::fs::write(
        &matrix,
        "0 4096 1000 16\n48 0 0 0\n32 32 32 0\n800 0 16 16\n",
    )
    .unwrap();
    let m = matrix.to_str().unwrap();
    let run = |args: &str, file: &str| {
        let args: Vec<&str> = args.split_whitespace().collect();
        let env = [("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", file)];
        on_double_env("alltoallv_perf", 8, "22803", &args, &env)
    };
    let (out, trace) = run("-b 8K -e 8K -g 4 -c 2", m);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        size_count_rows(&stdout),
        [("5104".into(), "0".into(), "N/A".into())],
        "{stdout}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    // Parts are in elements (floats) and an empty part is not sent at all.
    let sends: Vec<_> = p2p_calls(&trace, 1, "ncclSend").into_iter().collect();
    assert_eq!(sends, [(0, 12)]);
    let recvs: Vec<_> = p2p_calls(&trace, 1, "ncclRecv").into_iter().collect();
    assert_eq!(recvs, [(0, 1024), (2, 8)]);

    // What nccl-tests refuses, in its words, as testInternalError (1).
    for (args, file, said) in [
        (
            "-b 4K -e 4K -g 4",
            m,
            "maxBytes (-e) must be at least 5104 bytes",
        ),
        (
            "-b 1K -e 8K -g 4",
            m,
            "-b and -e options must be set to the same value",
        ),
        (
            "-b 8K -e 8K -g 5",
            m,
            "requested nranks (5) is larger than matrix size (4)",
        ),
        (
            "-b 8K -e 8K -g 2",
            "/nonexistent/traffic.txt",
            "Unable to open alltoallv traffic matrix file /nonexistent/traffic.txt.",
        ),
    ] {
        let (out, _) = run(args, file);
        assert_eq!(out.status.code(), Some(1), "{args} {file}");
        let said_all = text(&out.stdout) + &text(&out.stderr);
        assert!(said_all.contains(said), "{args} {file}: {said_all}");
    }
}

#[test]
fn alltoallv_summary_lines_sit_inside_each_row_and_import_joins_the_row_again() {
    let (dir, link) = linked("alltoallv_perf");
    let out = perf_env(
        &link,
        "-b 1K -e 64K -f 64 -g 2 --backend host",
        &[("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY", "1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // Row start, summary, out-of-place figures, summary, in-place figures (AlltoAllvGetBw).
    let starts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("-1# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=2"))
        .collect();
    assert_eq!(starts.len(), 2, "{stdout}");
    // Two ranks: each sends all of its share to the other.
    assert!(
        starts[0].starts_with("        1024           128     float    none      -1# "),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("#   rank=1 send_bytes=").count(),
        4,
        "{stdout}"
    );
    assert_eq!(stdout.matches("    N/A\n").count(), 2, "{stdout}");
    // The same rows as without the summary, once the pieces are joined.
    let log = dir.path().join("summary.txt");
    std::fs::write(&log, &stdout).unwrap();
    let json = dir.path().join("summary.json");
    common::bin()
        .args([
            "import",
            log.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .assert()
        .success();
    let record = common::read_record(&json);
    let got: Vec<(u64, u64, bool)> = record
        .points
        .iter()
        .map(|p| (p.size_bytes, p.count, p.wrong.is_some()))
        .collect();
    assert_eq!(
        got,
        [
            (1024, 128, true),
            (1024, 128, false),
            (65536, 8192, true),
            (65536, 8192, false)
        ]
    );
}

/// nccl-tests' sendrecv takes its op from -o and prints it (src/sendrecv.cu, SendRecvRunTest:
/// `TimeTest(..., run_ops[j], run_opnames[j], -1)`), one series per op under `-o all`, while
/// the data moves unreduced; every other collective without a reduction prints `none`.
#[test]
fn sendrecv_rows_name_the_op_as_nccl_tests_does() {
    let (_dir, link) = linked("sendrecv_perf");
    for (flags, ops) in [
        ("", vec!["sum"]),
        ("-o prod", vec!["prod"]),
        ("-o all", vec!["sum", "prod", "max", "min", "avg", "mulsum"]),
    ] {
        let out = perf(
            &link,
            &format!("-b 8 -e 64 -f 8 -g 2 {flags} --backend host"),
        );
        assert_eq!(out.status.code(), Some(0), "{flags}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
        let printed: Vec<String> = stdout
            .lines()
            .filter(|l| !l.starts_with('#') && l.trim_start().starts_with(char::is_numeric))
            .map(|l| l.split_whitespace().nth(3).unwrap_or_default().to_string())
            .collect();
        let expected: Vec<String> = ops
            .iter()
            .flat_map(|op| [op.to_string(), op.to_string()])
            .collect();
        assert_eq!(printed, expected, "{flags}: {stdout}");
    }
}
