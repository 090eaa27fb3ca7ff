//! `--show-algo` and NCCL's log on the double: the tuner's bytes as each version states them,
//! timings that NCCL's per-call logging does not touch, and a user's NCCL_DEBUG left to them.

use super::{doubles, probe, run, text, SMALL};
use crate::common::read_record;

fn sweep_args(c: &mut std::process::Command, collective: &str) {
    c.args([
        "sweep",
        "--collective",
        collective,
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "--max-samples",
        "6",
        "--point-budget",
        "0.03",
        "--warmup-time=0.002",
    ]);
}

/// From NCCL 2.24 AllGather and ReduceScatter lines state per-rank bytes (enqueue.cc:741-742);
/// 2.23 states the whole buffer with numbers (v2.23.4 enqueue.cc:1855): both fill the column.
#[test]
fn all_gather_and_reduce_scatter_find_their_tuner_line_on_every_version() {
    let d = doubles();
    for version in ["22805", "22304", "22204"] {
        for coll in ["all_gather", "reduce_scatter"] {
            let dir = tempfile::tempdir().unwrap();
            let json = dir.path().join("run.json");
            let mut c = probe(d.path());
            c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version);
            sweep_args(&mut c, coll);
            c.args(["--show-algo", "--json"]).arg(&json);
            let (out, _) = run(c);
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
            let r = read_record(&json);
            let missing: Vec<u64> = r
                .points
                .iter()
                // An empty call is dropped before NCCL tunes it (enqueue.cc, taskAppend).
                .filter(|p| p.nccl_algo.is_none() && p.size_bytes > 0)
                .map(|p| p.size_bytes)
                .collect();
            assert!(
                missing.is_empty(),
                "{version} {coll}: {missing:?}\n{stdout}"
            );
        }
    }
}

/// NCCL 2.19 and earlier print no tuner line at INFO (v2.19.4 enqueue.cc:1217): the run says
/// so instead of showing a column of dashes without reason.
#[test]
fn nccl_2_19_states_no_choice_and_the_run_says_so() {
    let d = doubles();
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "21904")
        .args(SMALL)
        .arg("--show-algo");
    let (out, _) = run(c);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("NCCL stated no tuner choice (NCCL 2.19 and earlier"),
        "{stdout}"
    );
}

/// The smallest sizes' time per call, out of place, from a record.
fn small_time_s(json: &std::path::Path) -> (f64, Option<String>, u64, usize) {
    let r = read_record(json);
    let mut t: Vec<f64> = r
        .points
        .iter()
        .filter(|p| p.size_bytes <= 1024 && p.placement == ncclprobe::coll::Placement::OutOfPlace)
        .map(|p| p.time_s)
        .collect();
    t.sort_by(f64::total_cmp);
    let points = r.points.len();
    let lines = r.nccl.as_ref().map_or(0, |n| n.tuner_lines);
    (
        t[t.len() / 2],
        r.nccl.and_then(|n| n.algo_learned),
        lines,
        points,
    )
}

/// Each line NCCL writes costs its time on rank 0's enqueue path (debug.cc's mutex, format and
/// write). With `ncclResetDebugInit` (2.24+) `--show-algo` turns the tuner's lines on around each
/// point's untimed first call only: the small-message times match a run without it. Without it
/// (2.23) the record says the times include the logging.
#[test]
fn show_algo_leaves_small_message_times_alone_where_nccl_can_be_told() {
    let d = doubles();
    let line_us = "200";
    let mut times = Vec::new();
    for (version, show) in [("22805", false), ("22805", true), ("22304", true)] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("run.json");
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .env("NCCLPROBE_TEST_DOUBLE_LOG_LINE_US", line_us);
        sweep_args(&mut c, "all_reduce");
        if show {
            c.arg("--show-algo");
        }
        c.arg("--json").arg(&json);
        let (out, _) = run(c);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (t, learned, lines, points) = small_time_s(&json);
        eprintln!(
            "NCCL {version}, --show-algo {show}, {line_us} us a log line: {:.1} us per call at <=1 KiB ({learned:?})",
            t * 1e6
        );
        times.push((t, learned, lines, points));
    }
    let (without, with, logged) = (&times[0], &times[1], &times[2]);
    assert_eq!(
        without.2, 0,
        "{} tuner lines without --show-algo",
        without.2
    );
    assert_eq!(with.1.as_deref(), Some("untimed-first-call"));
    assert_eq!(logged.1.as_deref(), Some("logged-every-call"));
    // Deterministic: only the checked calls logged (one per placement), against every call.
    assert!(
        with.2 <= with.3 as u64,
        "{} tuner lines, {} points",
        with.2,
        with.3
    );
    assert!(logged.2 > 10 * logged.3 as u64, "{} tuner lines", logged.2);
    // The times are printed, not asserted: on a loaded 2-core machine the scheduler's slices
    // (milliseconds) swamp a small call and no margin holds (CI saw the run without logging
    // slower than the one logging every call). What the times would show, that no timed call
    // wrote a line, the line counts above show exactly.
}

/// A user who set NCCL_DEBUG=INFO without a file watches NCCL's log on their terminal: it stays
/// on stdout (NCCL's default, debug.cc:34), with NCCL's default subsystems, and the record says
/// ncclprobe did not read it.
#[test]
fn the_users_nccl_debug_stays_on_their_terminal() {
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut c = probe(d.path());
    c.env("NCCL_DEBUG", "INFO")
        .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22805")
        .args(SMALL)
        .arg("--json")
        .arg(&json);
    let (out, _) = run(c);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("NCCL INFO NCCL version 2.28.5"), "{stdout}");
    assert!(stdout.contains("Init COMPLETE"), "{stdout}");
    let r = read_record(&json);
    let n = r.nccl.expect("the record's nccl");
    assert!(
        !n.set_by_ncclprobe
            .iter()
            .any(|v| v.starts_with("NCCL_DEBUG_SUBSYS=") || v.starts_with("NCCL_DEBUG_FILE=")),
        "{:?}",
        n.set_by_ncclprobe
    );
    assert!(
        n.notes
            .iter()
            .any(|m| m.contains("went to stdout as asked")),
        "{:?}",
        n.notes
    );
}

/// With nothing set, NCCL's log is ncclprobe's to read, and its warnings reach stderr as they
/// are read, in a run that succeeds too.
#[test]
fn nccl_warnings_reach_stderr_as_the_run_goes() {
    let d = doubles();
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_NCCL_WARN", "NET/IB : port 1 is down")
        .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22805")
        .args(SMALL);
    let (out, _) = run(c);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("ncclprobe: NCCL said:") && stderr.contains("NET/IB : port 1 is down"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("NCCL WARN"));
}
