//! What health checks and benchmark suites read from nccl-tests' stdout, read from ncclprobe's
//! as `all_reduce_perf` (host backend), by their own code where it runs here:
//!
//! - Azure HPC health checks (NHC), customTests/azure_nccl_allreduce.nhc: the field after
//!   `bandwidth`, and any `FAILED` (bash, vendored and run as written);
//! - Microsoft SuperBench, cuda_nccl_bw_performance.py `_process_raw_result`: each size's busbw,
//!   algbw and time by the header's column names, and an earlier release's largest
//!   out-of-place busbw (Python, vendored and run as written);
//! - Meta's GCM, health_checks/checks/check_nccl.py: the first number on the `Avg bus
//!   bandwidth` line against thresholds (Python, vendored and run as written);
//! - NVIDIA DCGM's nccl_tests plugin, NcclTestsPlugin.cpp: the `# Out of bounds values` and
//!   `# Avg bus bandwidth` lines, their `FAILED`, and the exit status (C++, ported below).
//!
//! Each also reads a real nccl-tests output (tests/corpus/nccl-tests/04, an HGX H100 run in the
//! 2.19 layout: `[domain:bus:device]` device lines, the redop and root columns), with the
//! figures read by eye from that file, so a wrong port or harness cannot pass by agreeing
//! with ncclprobe. The sources, commits and licenses are in
//! tests/fixtures/nccl_tests_parsers/README.md.
//!
//! Last, the table's header, rows and footer are rebuilt through C's own snprintf with the
//! format strings of nccl-tests 2.19.6's src/util.cu (writeResultHeader,
//! writeBenchmarkLinePreamble, writeBenchmarkLineBody with getFloatStr, writeTimestamp,
//! writeResultFooter) and compared with ncclprobe's, character for character.

use crate::common;

use std::ffi::{c_char, c_int, c_long, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::TableRow;

/// One ncclprobe run as `all_reduce_perf`.
struct Run {
    stdout: String,
    status: i32,
    /// Where `stdout` is saved, for the parsers that read a file.
    _dir: tempfile::TempDir,
    saved: PathBuf,
}

/// Run ncclprobe through a link named `all_reduce_perf` with `args` (split at spaces) and
/// `env`, and save its stdout.
fn all_reduce(args: &str, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("all_reduce_perf");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ncclprobe"), &link).unwrap();
    let mut c = Command::new(&link);
    common::without_host_settings(&mut c);
    c.args(args.split_whitespace())
        .current_dir(dir.path())
        .envs(env.iter().copied());
    let out = c.output().unwrap();
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    let saved = dir.path().join("stdout.txt");
    std::fs::write(&saved, &stdout).unwrap();
    Run {
        stdout,
        status: out.status.code().unwrap_or(-1),
        _dir: dir,
        saved,
    }
}

/// The run every parser reads: `-b 8 -e 128M -f 2 -g 2`, 25 sizes from 8 B to 128 MiB.
fn default_run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let run = all_reduce("-b 8 -e 128M -f 2 -g 2 --backend host", &[]);
        assert_eq!(run.status, 0, "{}", run.stdout);
        run
    })
}

/// A run whose average is below 0.9 x NCCL_TESTS_MIN_BW: `# Avg bus bandwidth : X FAILED`,
/// exit status 7 (testNumResults).
fn min_bw_failed_run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let run = all_reduce(
            "-b 64 -e 1K -f 2 -g 2 --backend host",
            &[("NCCL_TESTS_MIN_BW", "100000")],
        );
        assert_eq!(run.status, 7, "{}", run.stdout);
        run
    })
}

/// tests/corpus/nccl-tests/04: all_reduce_perf_mpi -b 8 -e 16g -f 2 -g 1 on 2 x 8 H100, as
/// posted (Open MPI's warnings and `NCCL version` line included), without the corpus' own
/// `# source:` line. Its figures, read from the file: 32 sizes from 8 B to 16 GiB, the last
/// row `17179869184 ... 68652 250.24 469.21 0 68668 250.19 469.10 0`, `# Out of bounds
/// values : 0 OK`, `# Avg bus bandwidth : 139.56`.
fn real_output() -> (String, PathBuf) {
    static SAVED: OnceLock<(String, tempfile::TempDir)> = OnceLock::new();
    let (text, dir) = SAVED.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
        let raw = std::fs::read_to_string(path).unwrap();
        let (source, posted) = raw.split_once('\n').unwrap();
        assert!(source.starts_with("# source: "), "{source}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stdout.txt"), posted).unwrap();
        (posted.to_string(), dir)
    });
    (text.clone(), dir.path().join("stdout.txt"))
}

const REAL_SIZES: usize = 32;
const REAL_AVG: f64 = 139.56;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nccl_tests_parsers")
        .join(name)
}

/// The figures nccl-tests' footer prints, read strictly (writeResultFooter's
/// `# %-20s : %d %s` and `# %-20s : %g %s`): the out-of-bounds count and verdict, the
/// average as printed, and its verdict ("" without NCCL_TESTS_MIN_BW).
struct Footer {
    oob: u64,
    oob_verdict: String,
    avg: String,
    avg_verdict: String,
}

fn footer(stdout: &str) -> Footer {
    let oob = regex::Regex::new(r"(?m)^# Out of bounds values : (\d+) (OK|FAILED)$").unwrap();
    let avg = regex::Regex::new(r"(?m)^# Avg bus bandwidth    : (\S+) (|OK|FAILED)$").unwrap();
    let o = oob.captures(stdout).expect("an Out of bounds values line");
    let a = avg.captures(stdout).expect("an Avg bus bandwidth line");
    Footer {
        oob: o[1].parse().unwrap(),
        oob_verdict: o[2].to_string(),
        avg: a[1].to_string(),
        avg_verdict: a[2].to_string(),
    }
}

/// The mean of every row's two busbw columns, which the footer's average is (src/common.cu:
/// `bw += busBw; bw_count++` per placement, then `bw /= bw_count`), within the table's rounding.
fn assert_average_is_the_tables(rows: &[TableRow], avg: f64) {
    let busbw: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.halves.iter().map(|h| h.busbw_gbps))
        .collect();
    let mean = busbw.iter().sum::<f64>() / busbw.len() as f64;
    assert!(
        (mean - avg).abs() <= 0.05 + avg * 1e-5,
        "the footer's average {avg} is not the table's mean busbw {mean}"
    );
}

// ---------------------------------------------------------------------------------------------
// Azure HPC health checks (NHC), run as written.

/// What check_nccl_allreduce decided: the `die:`/`pass:` lines and the field it read.
struct Nhc {
    calls: Vec<String>,
    avg_bus_bw: String,
}

/// tests/fixtures/nccl_tests_parsers/run_nhc.sh: azure_nccl_allreduce.nhc's
/// check_nccl_allreduce on `output` (its mpirun prints the file and exits with `status`),
/// expecting `expected` GB/s. The check's parsing, quoted from the file:
///
/// ```text
/// if [[ "${nccl_allreduce_out_lines[$i]//FAILED}" != "${nccl_allreduce_out_lines[$i]}" ]]
///    ... die 1 "$FUNCNAME: NCCL allreduce, Out of bounds values failed. FaultCode: NHC2010"
/// if [[ "${nccl_allreduce_out_lines[$i]//bandwidth}" != "${nccl_allreduce_out_lines[$i]}" ]]
///    ... avg_bus_bw=${nccl_allreduce_out_line[5]}
/// if (( $(echo "$avg_bus_bw < $EXP_NCCL_ALLREDUCE_BW" | bc -l) )); then
/// ```
fn nhc(output: &Path, expected: &str, status: i32) -> Nhc {
    for tool in ["bash", "bc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        assert!(
            found.status.success(),
            "the Azure NHC check needs {tool} (ci/test installs bc)"
        );
    }
    let out = Command::new("bash")
        .arg(fixture("run_nhc.sh"))
        .arg(output)
        .arg(expected)
        .arg(status.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "run_nhc.sh: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut calls = Vec::new();
    let mut avg_bus_bw = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("avg_bus_bw=") {
            avg_bus_bw = Some(v.to_string());
        } else {
            calls.push(line.to_string());
        }
    }
    Nhc {
        calls,
        avg_bus_bw: avg_bus_bw.expect("run_nhc.sh prints avg_bus_bw"),
    }
}

const NHC_PASSED: &str = "pass: 0 check_nccl_allreduce: NCCL all reduce bandwidth test passed,";
const NHC_OOB: &str =
    "die: 1 check_nccl_allreduce: NCCL allreduce, Out of bounds values failed. FaultCode: NHC2010";
const NHC_LOW: &str = "die: 1 check_nccl_allreduce: NCCL allreduce, BUS BW (expected >=";

#[test]
fn azure_nhc_reads_the_real_average_and_judges_it() {
    let (_, real) = real_output();
    let n = nhc(&real, "100", 0);
    assert_eq!(n.avg_bus_bw, "139.56");
    assert_eq!(n.calls.len(), 1, "{:?}", n.calls);
    assert!(n.calls[0].starts_with(NHC_PASSED), "{:?}", n.calls);
    let n = nhc(&real, "200", 0);
    assert_eq!(n.avg_bus_bw, "139.56");
    assert_eq!(n.calls.len(), 1, "{:?}", n.calls);
    assert!(n.calls[0].starts_with(NHC_LOW), "{:?}", n.calls);
}

#[test]
fn azure_nhc_reads_ncclprobes_average_and_judges_it() {
    let run = default_run();
    let f = footer(&run.stdout);
    let avg: f64 = f.avg.parse().unwrap();
    assert!(avg > 0.0, "{}", run.stdout);
    // The first line with `bandwidth` is the footer's: nothing ncclprobe prints above it says
    // `bandwidth` or `FAILED`.
    let n = nhc(&run.saved, &format!("{}", avg / 2.0), 0);
    assert_eq!(n.avg_bus_bw, f.avg);
    assert_eq!(
        n.calls,
        [format!("{NHC_PASSED} {} GB/s", f.avg)],
        "{}",
        run.stdout
    );
    let n = nhc(&run.saved, &format!("{}", avg * 2.0 + 1.0), 0);
    assert_eq!(n.avg_bus_bw, f.avg);
    assert_eq!(n.calls.len(), 1, "{:?}", n.calls);
    assert!(n.calls[0].starts_with(NHC_LOW), "{:?}", n.calls);

    // The size NHC runs (`-b $MESSAGE_SIZE -f 2 -g 1 -e $MESSAGE_SIZE -c 1`, one rank per GPU
    // under mpirun; two host ranks here): one row, its average.
    let one = all_reduce("-b 16M -f 2 -g 2 -e 16M -c 1 --backend host", &[]);
    assert_eq!(one.status, 0, "{}", one.stdout);
    let rows = common::table_rows(&one.stdout);
    assert_eq!(rows.len(), 1);
    let f = footer(&one.stdout);
    assert_average_is_the_tables(&rows, f.avg.parse().unwrap());
    let n = nhc(&one.saved, "0", 0);
    assert_eq!(n.avg_bus_bw, f.avg);
    assert_eq!(n.calls, [format!("{NHC_PASSED} {} GB/s", f.avg)]);
}

#[test]
fn azure_nhc_fails_a_run_ncclprobe_flags_failed() {
    // NCCL_TESTS_MIN_BW unmet: `# Avg bus bandwidth : X FAILED` and exit status 7. NHC's
    // FAILED test comes first on each line, so it reports "Out of bounds values failed" for
    // that line, as it does for nccl-tests' own; the status is reported as an error code.
    let run = min_bw_failed_run();
    let n = nhc(&run.saved, "0", run.status);
    assert_eq!(
        n.calls,
        [
            "die: 1 collect_nccl_allreduce_data: nccl_allreduce returned error code 7. FaultCode: NHCNA",
            NHC_OOB
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Microsoft SuperBench, run as written.

/// What `_process_raw_result` returned and recorded: `metrics` in the order it added them.
struct SuperBench {
    ok: bool,
    metrics: Vec<(String, Vec<f64>)>,
    errors: Vec<String>,
}

/// tests/fixtures/nccl_tests_parsers/run_parser.py with `args`, its JSON answer.
fn run_parser(args: &[&str]) -> serde_json::Value {
    let mut c = Command::new("python3");
    c.arg(fixture("run_parser.py")).args(args);
    // SuperBench reads these: rank > 0 under mpirun skips the parse; the SB_MODE_* indexes
    // rename its metrics.
    for var in [
        "OMPI_COMM_WORLD_RANK",
        "SB_MODE_SERIAL_INDEX",
        "SB_MODE_PARALLEL_INDEX",
    ] {
        c.env_remove(var);
    }
    let out = c
        .output()
        .expect("python3 runs the vendored parsers (standard library only)");
    assert!(
        out.status.success(),
        "run_parser.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// SuperBench's current parser (commit 2c88db90), out-of-place or `--in_place`.
fn superbench(output: &Path, in_place: bool) -> SuperBench {
    let path = output.to_str().unwrap();
    let mut args = vec!["superbench", path];
    if in_place {
        args.push("--in-place");
    }
    superbench_answer(run_parser(&args))
}

fn superbench_answer(v: serde_json::Value) -> SuperBench {
    let metrics = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            let name = pair[0].as_str().unwrap().to_string();
            let values = pair[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            (name, values)
        })
        .collect();
    SuperBench {
        ok: v["ok"].as_bool().unwrap(),
        metrics,
        errors: v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect(),
    }
}

/// What SuperBench should record from `rows`: per nonzero size, in row order,
/// `allreduce_<size>_busbw`, `_algbw`, `_time` of the chosen placement, one value per row of
/// that size (several with -d all).
fn superbench_expected(rows: &[TableRow], in_place: bool) -> Vec<(String, Vec<f64>)> {
    let h = usize::from(in_place);
    let mut metrics: Vec<(String, Vec<f64>)> = Vec::new();
    for r in rows.iter().filter(|r| r.size != 0) {
        for (name, value) in [
            ("busbw", r.halves[h].busbw_gbps),
            ("algbw", r.halves[h].algbw_gbps),
            ("time", r.halves[h].time_us),
        ] {
            let key = format!("allreduce_{}_{name}", r.size);
            match metrics.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(value),
                None => metrics.push((key, vec![value])),
            }
        }
    }
    metrics
}

fn metric<'a>(sb: &'a SuperBench, name: &str) -> &'a [f64] {
    &sb.metrics
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("{name} not recorded: {:?}", sb.metrics))
        .1
}

#[test]
fn superbench_reads_every_size_of_a_real_output() {
    let (_, real) = real_output();
    let sb = superbench(&real, false);
    assert!(sb.ok, "{:?}", sb.errors);
    assert_eq!(sb.metrics.len(), 3 * REAL_SIZES);
    assert_eq!(sb.metrics[0].0, "allreduce_8_busbw");
    assert_eq!(metric(&sb, "allreduce_8_time"), [68.52]);
    assert_eq!(metric(&sb, "allreduce_17179869184_busbw"), [469.21]);
    assert_eq!(metric(&sb, "allreduce_17179869184_algbw"), [250.24]);
    assert_eq!(metric(&sb, "allreduce_17179869184_time"), [68652.0]);
    let sb = superbench(&real, true);
    assert!(sb.ok, "{:?}", sb.errors);
    assert_eq!(metric(&sb, "allreduce_17179869184_busbw"), [469.10]);
    assert_eq!(metric(&sb, "allreduce_17179869184_algbw"), [250.19]);
    assert_eq!(metric(&sb, "allreduce_17179869184_time"), [68668.0]);
}

#[test]
fn superbench_reads_every_size_of_ncclprobes_table() {
    let run = default_run();
    let rows = common::table_rows(&run.stdout);
    assert_eq!(rows.len(), 25, "8 B to 128 MiB by 2");
    for in_place in [false, true] {
        let sb = superbench(&run.saved, in_place);
        assert!(sb.ok, "{:?}", sb.errors);
        assert_eq!(sb.metrics, superbench_expected(&rows, in_place));
    }

    // The command SuperBench builds (`-b {} -e {} -f {} -g {} -c {} -n {} -w {} -G {} -d {}`,
    // with its defaults -c 0 -n 20 -w 5 -G 0 -d float): #wrong is N/A without the check.
    let run = all_reduce(
        "-b 8 -e 1M -f 2 -g 2 -c 0 -n 20 -w 5 -G 0 -d float --backend host",
        &[],
    );
    assert_eq!(run.status, 0, "{}", run.stdout);
    let rows = common::table_rows(&run.stdout);
    assert_eq!(rows.len(), 18);
    assert!(rows
        .iter()
        .all(|r| r.halves.iter().all(|h| h.wrong.is_none())));
    let sb = superbench(&run.saved, false);
    assert!(sb.ok, "{:?}", sb.errors);
    assert_eq!(sb.metrics, superbench_expected(&rows, false));
}

#[test]
fn superbench_reads_every_type_of_dash_d_all() {
    // `--data_type all`: one table, each size once per type; SuperBench appends each type's
    // figures to the size's metrics in the order of the rows.
    let run = all_reduce("-b 64 -e 256 -f 2 -g 2 -d all --backend host", &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    let rows = common::table_rows(&run.stdout);
    let types: Vec<&str> = rows.iter().map(|r| r.dtype.as_str()).collect();
    assert_eq!(types.len(), 3 * 10, "{types:?}");
    let sb = superbench(&run.saved, false);
    assert!(sb.ok, "{:?}", sb.errors);
    let expected = superbench_expected(&rows, false);
    assert_eq!(expected.len(), 3 * 3);
    assert!(expected.iter().all(|(_, v)| v.len() == 10));
    assert_eq!(sb.metrics, expected);
}

#[test]
fn superbench_reads_dash_c_and_dash_s_tables_as_it_reads_nccl_tests() {
    // -C 1 titles the time columns `cputime` (writeResultHeader's timeStr): SuperBench's
    // `line.index('time')` finds no `time` column and it rejects the output, as it would
    // nccl-tests' own -C 1 output.
    let run = all_reduce("-b 64 -e 256 -f 2 -g 2 -C 1 --backend host", &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    let sb = superbench(&run.saved, false);
    assert!(!sb.ok);
    assert_eq!(sb.errors, ["The result format is invalid"]);

    // -S 1 adds a `timestamp` header column (one word) and "%Y-%m-%d %H:%M:%S" to each row
    // (two words): SuperBench's indexes from the end are off by one, so it reads #wrong as
    // busbw and algbw as time, as it would from nccl-tests' -S 1 output.
    let run = all_reduce("-b 64 -e 256 -f 2 -g 2 -S 1 --backend host", &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    // The rows without their last two words are 2.19's 13 columns.
    let untimed: String = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 15, "{l:?}");
            format!("{}\n", w[..13].join(" "))
        })
        .collect();
    let rows = common::table_rows(&untimed);
    assert_eq!(rows.len(), 3);
    let sb = superbench(&run.saved, false);
    assert!(sb.ok, "{:?}", sb.errors);
    let misread: Vec<(String, Vec<f64>)> = rows
        .iter()
        .flat_map(|r| {
            let h = &r.halves[0];
            [
                (
                    format!("allreduce_{}_busbw", r.size),
                    vec![h.wrong.unwrap() as f64],
                ),
                (format!("allreduce_{}_algbw", r.size), vec![h.busbw_gbps]),
                (format!("allreduce_{}_time", r.size), vec![h.algbw_gbps]),
            ]
        })
        .collect();
    assert_eq!(sb.metrics, misread);
}

#[test]
fn superbench_v0_reads_the_largest_out_of_place_busbw() {
    // The earlier parser (commit 0776b391): `content[out_of_place_index + 4:...]` skips the
    // header's two lines and the first row, then takes max(float(line[-6])).
    let (_, real) = real_output();
    let sb = superbench_answer(run_parser(&["superbench-v0", real.to_str().unwrap()]));
    assert!(sb.ok, "{:?}", sb.errors);
    assert_eq!(sb.metrics, [("allreduce".to_string(), vec![469.21])]);

    let run = default_run();
    let rows = common::table_rows(&run.stdout);
    let largest = rows[1..]
        .iter()
        .map(|r| r.halves[0].busbw_gbps)
        .fold(f64::MIN, f64::max);
    let sb = superbench_answer(run_parser(&["superbench-v0", run.saved.to_str().unwrap()]));
    assert!(sb.ok, "{:?}", sb.errors);
    assert_eq!(sb.metrics, [("allreduce".to_string(), vec![largest])]);
}

// ---------------------------------------------------------------------------------------------
// Meta's GCM, run as written.

/// GCM's check-nccl on `output` with the command's exit status and thresholds (GB/s):
/// get_avg_bus_bw's figure and process_nccl_test_ouput's verdict.
///
/// ```text
/// if output.returncode > 0 or "Avg bus bandwidth" not in output.stdout:
///     return None
/// ...
///     match = re.search(r"[-+]?(\d*\.*\d+)", line)
///     avg_bus_bw = float(match.group()) if match else 0.0
/// ```
fn gcm(output: &Path, status: i32, critical: f64) -> (Option<f64>, String) {
    let v = run_parser(&[
        "gcm",
        output.to_str().unwrap(),
        "--returncode",
        &status.to_string(),
        "--critical",
        &critical.to_string(),
    ]);
    (
        v["avg_bus_bw"].as_f64(),
        v["exitcode"].as_str().unwrap().to_string(),
    )
}

#[test]
fn meta_gcm_reads_the_real_average() {
    let (_, real) = real_output();
    assert_eq!(gcm(&real, 0, 100.0), (Some(REAL_AVG), "OK".into()));
    assert_eq!(gcm(&real, 0, 200.0), (Some(REAL_AVG), "CRITICAL".into()));
}

#[test]
fn meta_gcm_reads_ncclprobes_average() {
    let run = default_run();
    let f = footer(&run.stdout);
    let avg: f64 = f.avg.parse().unwrap();
    assert_eq!(f.oob, 0);
    assert_eq!(f.avg_verdict, "");
    assert_average_is_the_tables(&common::table_rows(&run.stdout), avg);
    assert_eq!(gcm(&run.saved, 0, avg / 2.0), (Some(avg), "OK".into()));
    assert_eq!(
        gcm(&run.saved, 0, avg * 2.0 + 1.0),
        (Some(avg), "CRITICAL".into())
    );
    // A failed run (NCCL_TESTS_MIN_BW unmet, status 7): no figure, a warning.
    let failed = min_bw_failed_run();
    assert_eq!(
        gcm(&failed.saved, failed.status, 0.0),
        (None, "WARN".into())
    );
}

// ---------------------------------------------------------------------------------------------
// NVIDIA DCGM's nccl_tests plugin, ported.

/// NVIDIA DCGM, nvvs/plugin_src/nccl_tests/NcclTestsPlugin.cpp (commit 2fc25add,
/// Apache-2.0), NcclTestsPlugin::Go after the launch: the errors it adds for the output and
/// exit status of `$DCGM_NCCL_TESTS_BIN_PATH/all_reduce_perf` run with no arguments; the test
/// passes when there are none.
///
/// ```text
/// while (std::getline(stream, line))
/// {
///     if (line.find("# Out of bounds values") != std::string::npos)
///     {
///         foundOobLine = true;
///         if (line.find("FAILED") != std::string::npos)
///         { ... failed = true; }
///     }
///     else if (line.find("# Avg bus bandwidth") != std::string::npos)
///     {
///         foundBwLine = true;
///         if (line.find("FAILED") != std::string::npos)
///         { ... failed = true; }
///     }
/// }
/// if (exitCode != 0) { ... oss << "nccl_tests exited with code " << exitCode; ... failed = true; }
/// if (!foundOobLine || !foundBwLine) { ... "Output missing expected result lines" ... failed = true; }
/// ```
fn dcgm_errors(output: &str, exit_code: i32) -> Vec<String> {
    let mut errors = Vec::new();
    let mut found_oob_line = false;
    let mut found_bw_line = false;
    for line in output.split('\n') {
        if line.contains("# Out of bounds values") {
            found_oob_line = true;
            if line.contains("FAILED") {
                errors.push(line.to_string());
            }
        } else if line.contains("# Avg bus bandwidth") {
            found_bw_line = true;
            if line.contains("FAILED") {
                errors.push(line.to_string());
            }
        }
    }
    if exit_code != 0 {
        errors.push(format!("nccl_tests exited with code {exit_code}"));
    }
    if !found_oob_line || !found_bw_line {
        errors.push("Output missing expected result lines".into());
    }
    errors
}

#[test]
fn dcgm_passes_the_real_output() {
    let (text, _) = real_output();
    assert_eq!(dcgm_errors(&text, 0), Vec::<String>::new());
    // The port is the plugin's: its own test's stand-in passes, an output without the
    // footer does not.
    let stand_in = "# Out of bounds values : PASSED\n# Avg bus bandwidth : PASSED\n";
    assert!(dcgm_errors(stand_in, 0).is_empty());
    let cut = &text[..text.find("# Out of bounds").unwrap()];
    assert_eq!(
        dcgm_errors(cut, 0),
        ["Output missing expected result lines"]
    );
}

#[test]
fn dcgm_passes_ncclprobe_run_as_it_runs_nccl_tests_and_fails_a_flagged_run() {
    // DCGM runs the binary with no arguments (execArgv is the path alone): the defaults,
    // -b 32M -e 32M -g 1. `--backend host` is the only addition.
    let run = all_reduce("--backend host", &[]);
    assert_eq!(run.status, 0, "{}", run.stdout);
    assert_eq!(common::table_rows(&run.stdout).len(), 1);
    assert_eq!(dcgm_errors(&run.stdout, run.status), Vec::<String>::new());
    let run = default_run();
    assert_eq!(dcgm_errors(&run.stdout, run.status), Vec::<String>::new());

    let failed = min_bw_failed_run();
    let f = footer(&failed.stdout);
    assert_eq!(f.avg_verdict, "FAILED");
    assert_eq!(
        dcgm_errors(&failed.stdout, failed.status),
        [
            format!("# Avg bus bandwidth    : {} FAILED", f.avg),
            "nccl_tests exited with code 7".to_string()
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The table, through C's printf with util.cu's formats.

/// C's snprintf into a buffer: `write` gets the buffer and its size and returns snprintf's.
fn c_string(write: impl FnOnce(*mut c_char, usize) -> c_int) -> String {
    let mut buf = vec![0u8; 1024];
    let n = write(buf.as_mut_ptr().cast(), buf.len());
    assert!(n >= 0 && (n as usize) < buf.len(), "snprintf returned {n}");
    String::from_utf8(buf[..n as usize].to_vec()).unwrap()
}

fn cs(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// src/util.cu, getFloatStr, through C's snprintf:
///
/// ```text
/// if (snprintf(str, width+1, "%*.2f", width, value) <= width) return;
/// if (snprintf(str, width+1, "%*.1f", width, value) <= width) return;
/// if (snprintf(str, width+1, "%*.0f", width, value) <= width) return;
/// snprintf(str, width+1, width >= 7 ? "%*.1e" : "%*.0e", width, value);
/// ```
fn get_float_str(value: f64, width: usize) -> String {
    let w = width as c_int;
    let mut buf = vec![0u8; width + 1];
    let p: *mut c_char = buf.as_mut_ptr().cast();
    // SAFETY: each call writes at most width+1 bytes, the buffer's size.
    unsafe {
        let fits = libc::snprintf(p, width + 1, c"%*.2f".as_ptr(), w, value) <= w
            || libc::snprintf(p, width + 1, c"%*.1f".as_ptr(), w, value) <= w
            || libc::snprintf(p, width + 1, c"%*.0f".as_ptr(), w, value) <= w;
        if !fits {
            let f = if width >= 7 { c"%*.1e" } else { c"%*.0e" };
            libc::snprintf(p, width + 1, f.as_ptr(), w, value);
        }
    }
    let end = buf.iter().position(|&b| b == 0).unwrap();
    String::from_utf8(buf[..end].to_vec()).unwrap()
}

fn c_g(value: f64) -> String {
    // SAFETY: snprintf writes at most `len` bytes into the buffer c_string owns.
    c_string(|p, len| unsafe { libc::snprintf(p, len, c"%g".as_ptr(), value) })
}

/// writeResultHeader's four lines (the branch without per-iteration timing).
fn c_header(report_cputime: bool, report_timestamps: bool) -> Vec<String> {
    let ts_lbl = cs(if report_timestamps { "timestamp" } else { "" });
    let ts_pad: c_int = if report_timestamps { 19 } else { 0 };
    let ts_fmt = cs(if report_timestamps {
        "%Y-%m-%d %H:%M:%S"
    } else {
        ""
    });
    let time_str = cs(if report_cputime { "cputime" } else { "time" });
    let [e, size, count, ty, redop, root, b, elements, algbw, busbw, wrong, us, gbps] = [
        "",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "(B)",
        "(elements)",
        "algbw",
        "busbw",
        "#wrong",
        "(us)",
        "(GB/s)",
    ]
    .map(cs);
    let e = e.as_ptr();
    // SAFETY: snprintf with the argument types util.cu passes (char* and int for %*s),
    // writing at most `len` bytes into the buffer c_string owns.
    let title = c_string(|p, len| unsafe {
        libc::snprintf(
            p,
            len,
            c"# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n"
                .as_ptr(),
            e,
            e,
            e,
            e,
            e,
        )
    });
    let names = c_string(|p, len| unsafe {
        libc::snprintf(
            p,
            len,
            c"# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n".as_ptr(),
            size.as_ptr(),
            count.as_ptr(),
            ty.as_ptr(),
            redop.as_ptr(),
            root.as_ptr(),
            time_str.as_ptr(),
            algbw.as_ptr(),
            busbw.as_ptr(),
            wrong.as_ptr(),
            time_str.as_ptr(),
            algbw.as_ptr(),
            busbw.as_ptr(),
            wrong.as_ptr(),
            ts_pad,
            ts_lbl.as_ptr(),
        )
    });
    let units = c_string(|p, len| unsafe {
        libc::snprintf(
            p,
            len,
            c"# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n".as_ptr(),
            b.as_ptr(),
            elements.as_ptr(),
            e,
            e,
            e,
            us.as_ptr(),
            gbps.as_ptr(),
            gbps.as_ptr(),
            e,
            us.as_ptr(),
            gbps.as_ptr(),
            gbps.as_ptr(),
            e,
            ts_pad,
            ts_fmt.as_ptr(),
        )
    });
    ["#\n".to_string(), title, names, units]
        .iter()
        .map(|l| l.trim_end_matches('\n').to_string())
        .collect()
}

/// One row as util.cu prints it, from the figures `line` shows: writeBenchmarkLinePreamble,
/// writeBenchmarkLineBody twice (with getFloatStr, and `%6g` or `N/A` for #wrong), then
/// writeTimestamp's `%21s` with -S.
fn c_row(line: &str, report_timestamps: bool) -> String {
    let w: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(w.len(), if report_timestamps { 15 } else { 13 }, "{line:?}");
    let size: c_long = w[0].parse().unwrap();
    let count: c_long = w[1].parse().unwrap();
    let root: c_int = w[4].parse().unwrap();
    // SAFETY: as in c_header: util.cu's argument types, bounded writes.
    let root_name = c_string(|p, len| unsafe { libc::snprintf(p, len, c"%6i".as_ptr(), root) });
    let (ty, op, root_name) = (cs(w[2]), cs(w[3]), cs(&root_name));
    let mut row = c_string(|p, len| unsafe {
        libc::snprintf(
            p,
            len,
            c"%12li  %12li  %8s  %6s  %6s".as_ptr(),
            size,
            count,
            ty.as_ptr(),
            op.as_ptr(),
            root_name.as_ptr(),
        )
    });
    for half in [&w[5..9], &w[9..13]] {
        let time = cs(&get_float_str(half[0].parse().unwrap(), 7));
        let alg = cs(&get_float_str(half[1].parse().unwrap(), 6));
        let bus = cs(&get_float_str(half[2].parse().unwrap(), 6));
        row += &if half[3] == "N/A" {
            c_string(|p, len| unsafe {
                libc::snprintf(
                    p,
                    len,
                    c"  %7s  %6s  %6s    N/A".as_ptr(),
                    time.as_ptr(),
                    alg.as_ptr(),
                    bus.as_ptr(),
                )
            })
        } else {
            let wrong: f64 = half[3].parse().unwrap();
            c_string(|p, len| unsafe {
                libc::snprintf(
                    p,
                    len,
                    c"  %7s  %6s  %6s  %6g".as_ptr(),
                    time.as_ptr(),
                    alg.as_ptr(),
                    bus.as_ptr(),
                    wrong,
                )
            })
        };
    }
    if report_timestamps {
        let stamp = cs(&format!("{} {}", w[13], w[14]));
        row +=
            &c_string(|p, len| unsafe { libc::snprintf(p, len, c"%21s".as_ptr(), stamp.as_ptr()) });
    }
    row
}

/// writeResultFooter's two figure lines, from the figures `stdout` shows.
fn c_footer(f: &Footer) -> [String; 2] {
    let oob_name = cs("Out of bounds values");
    let avg_name = cs("Avg bus bandwidth");
    let oob_verdict = cs(if f.oob > 0 { "FAILED" } else { "OK" });
    let avg_verdict = cs(&f.avg_verdict);
    let errors = f.oob as c_int;
    let avg: f64 = f.avg.parse().unwrap();
    // SAFETY: as in c_header.
    [
        c_string(|p, len| unsafe {
            libc::snprintf(
                p,
                len,
                c"# %-20s : %d %s".as_ptr(),
                oob_name.as_ptr(),
                errors,
                oob_verdict.as_ptr(),
            )
        }),
        c_string(|p, len| unsafe {
            libc::snprintf(
                p,
                len,
                c"# %-20s : %g %s".as_ptr(),
                avg_name.as_ptr(),
                avg,
                avg_verdict.as_ptr(),
            )
        }),
    ]
}

/// Check `stdout`'s header, every row and the footer against util.cu's printf.
fn assert_printf_table(stdout: &str, report_cputime: bool, report_timestamps: bool) {
    let lines: Vec<&str> = stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("out-of-place"))
        .expect("a header")
        - 1;
    assert_eq!(
        lines[at..at + 4],
        c_header(report_cputime, report_timestamps),
        "writeResultHeader(report_cputime={report_cputime}, report_timestamps={report_timestamps})"
    );
    let oob = lines
        .iter()
        .position(|l| l.starts_with("# Out of bounds values"))
        .expect("a footer");
    let rows = &lines[at + 4..oob];
    assert!(!rows.is_empty());
    for row in rows {
        assert_eq!(*row, c_row(row, report_timestamps));
    }
    let f = footer(stdout);
    assert_eq!(lines[oob..oob + 2], c_footer(&f));
    assert_eq!(f.oob_verdict, if f.oob > 0 { "FAILED" } else { "OK" });
    // %g shows six significant digits: the figure printed is the average's, not a rounding
    // of it to the table's two decimals.
    assert_eq!(c_g(f.avg.parse().unwrap()), f.avg);
}

#[test]
fn header_rows_and_footer_are_util_cus_printf() {
    assert_printf_table(&default_run().stdout, false, false);
    assert_printf_table(&min_bw_failed_run().stdout, false, false);
    for (args, cputime, timestamps) in [
        ("-C 1", true, false),
        ("-S 1", false, true),
        ("-C 1 -S 1", true, true),
        ("-d all -o all", false, false),
    ] {
        let run = all_reduce(&format!("-b 4 -e 4K -f 8 -g 3 {args} --backend host"), &[]);
        assert_eq!(run.status, 0, "{args}: {}", run.stdout);
        assert_printf_table(&run.stdout, cputime, timestamps);
    }
}

#[test]
fn rows_without_the_check_print_n_a_as_util_cu_does() {
    for (args, cputime, timestamps) in [("-c 0", false, false), ("-C 1 -S 1 -c 0", true, true)] {
        let run = all_reduce(&format!("-b 4 -e 4K -f 8 -g 3 {args} --backend host"), &[]);
        assert_eq!(run.status, 0, "{args}: {}", run.stdout);
        assert_printf_table(&run.stdout, cputime, timestamps);
    }
}

/// Values a table holds (times in us, GB/s), the edges where a decimal no longer fits in
/// getFloatStr's width, and those where C's %g rounds up to the next power of ten.
fn table_values() -> Vec<f64> {
    let mut values = vec![
        0.0,
        0.004,
        0.005,
        0.0051,
        0.015,
        0.125,
        1.0,
        9.995,
        9.9951,
        99.995,
        99.9951,
        999.95,
        999.951,
        1234.5,
        9999.5,
        99999.5,
        999999.5,
        1e6,
        1.25e7,
        123456789.0,
        9.999995e9,
    ];
    let mut x = 1e-7;
    while x < 1e12 {
        for m in [
            1.0, 1.234567, 2.5, 4.999999, 5.0, 9.99999, 9.999995, 9.9999951,
        ] {
            values.push(x * m);
        }
        x *= 10.0;
    }
    values
}

/// Whether rounding `v` to %g's six significant digits carries it to the next power of ten
/// (C takes %g's exponent after that rounding: 999999.5 is `1e+06`).
fn rounds_up_a_decade(v: f64) -> bool {
    // SAFETY: as in c_header.
    let e = c_string(|p, len| unsafe { libc::snprintf(p, len, c"%.5e".as_ptr(), v) });
    let after: i32 = e.split_once('e').unwrap().1.parse().unwrap();
    v != 0.0 && after != v.abs().log10().floor() as i32
}

#[test]
fn get_float_str_and_percent_g_are_cs() {
    // The table's two number formats, ncclprobe's (src/render/table.rs) against C's.
    for v in table_values() {
        for width in [6, 7] {
            assert_eq!(
                ncclprobe::render::table::float_str(v, width),
                get_float_str(v, width),
                "getFloatStr({v:e}, {width})"
            );
        }
        if !rounds_up_a_decade(v) {
            assert_eq!(ncclprobe::render::table::format_g(v), c_g(v), "%g of {v:e}");
        }
    }
}

#[test]
fn percent_g_rounds_up_a_decade_as_c_does() {
    let carried: Vec<f64> = table_values()
        .into_iter()
        .filter(|&v| rounds_up_a_decade(v))
        .collect();
    assert!(carried.len() >= 2, "{carried:?}");
    for v in carried {
        assert_eq!(ncclprobe::render::table::format_g(v), c_g(v), "%g of {v:e}");
    }
}
