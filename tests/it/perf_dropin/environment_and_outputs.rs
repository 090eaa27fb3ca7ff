//! The drop-in's environment variables and output files as nccl-tests 2.19.6 treats them
//! (review 2026-12-01, D2, D4, D25, D26, D28's matrix, D30): NCCL_TESTS_MIN_BW through `atof`,
//! NCCL_TESTS_SPLIT never fatal, the traffic matrix through strtod and printed as PRINT does,
//! no output on an input, -J left unclaimed by a refusal, and stdout errors said plainly.

use super::{linked, perf, perf_env, text};
use crate::common;

fn avg_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth"))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn min_bw_is_read_with_atof_and_minus_1_means_unchecked() {
    // common.cu:1829-1830 (`atof`, -1 unset), util.cu:778 (text: "" at -1, FAILED below 0.9x,
    // else OK: a NaN is OK), util.cu:791 (JSON: "unchecked" at -1, else bw >= 0.9x: a NaN is
    // "false"), common.cu:1851 (testNumResults, status 7, below 0.9x).
    let (dir, link) = linked("all_reduce_perf");
    // atof reads the number at the start: 5000, 1000, 1024 (GB/s), far above a host's.
    for value in ["5000 GB/s", "1e3abc", "0x1p10"] {
        let out = perf_env(
            &link,
            "-b 1K -e 4K -f 4 -t 2 --backend host",
            &[("NCCL_TESTS_MIN_BW", value)],
        );
        assert_eq!(out.status.code(), Some(7), "{value}");
        assert!(avg_line(&text(&out.stdout)).ends_with(" FAILED"), "{value}");
    }
    let out = perf_env(
        &link,
        "-b 1K -e 1K -t 2 --backend host",
        &[("NCCL_TESTS_MIN_BW", "1e308")],
    );
    assert!(
        text(&out.stderr).contains("(9e+307 GB/s)"),
        "%g: {}",
        text(&out.stderr)
    );
    for (value, verdict, okay) in [("-1", "", "unchecked"), ("nan", "OK", "false")] {
        let json = dir.path().join(format!("mb{value}.json"));
        let args = format!("-b 1K -e 1K -t 2 --backend host -J {}", json.display());
        let out = perf_env(&link, &args, &[("NCCL_TESTS_MIN_BW", value)]);
        assert_eq!(out.status.code(), Some(0), "{value}");
        let avg = avg_line(&text(&out.stdout));
        assert!(avg.ends_with(&format!(" {verdict}")), "{value}: {avg:?}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["average_bus_bandwidth"]["okay"], okay, "{value}");
    }
}

#[test]
fn split_text_nccl_tests_cannot_read_is_group_0_and_never_fatal() {
    // common.cu:1496-1528 sit inside `#ifdef MPI_SUPPORT`: a build without MPI never reads
    // NCCL_TESTS_SPLIT, and an MPI build puts what parseInt cannot read in color 0 and reads
    // MOD-1 as % -1. One process (the host backend's threads) runs, saying it is not applied.
    let (_dir, link) = linked("all_reduce_perf");
    for value in [
        "junk",
        "",
        "AND",
        "MOD-1",
        "OR",
        "xor1",
        "MOD99999999999999999999",
    ] {
        let out = perf_env(
            &link,
            "-b 8 -e 8 -t 2 --backend host",
            &[("NCCL_TESTS_SPLIT", value)],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{value:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("is not applied"), "{value:?}");
    }
}

#[test]
fn matrix_values_are_read_with_strtod_and_refusals_printed_on_stdout() {
    // alltoallv.cu:239-256: strtod takes hex, ERANGE is the plain "Invalid ... value", and
    // PRINT (alltoallv.cu:125) is printf: stdout, no prefix; testInternalError (1).
    let (dir, link) = linked("alltoallv_perf");
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let hex = write("hex.txt", "0x400 0x400\n0x400 0x400\n");
    let out = perf_env(
        &link,
        "-t 2 -b 4K -e 4K -n 1 -w 0 --backend host",
        &[("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", &hex)],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for (name, body, said) in [
        ("erange.txt", "1e400 1\n1 1\n", "Invalid alltoallv traffic matrix value at row 0 col 0 in file {}.\n"),
        ("one.txt", "16\n", "Invalid alltoallv traffic matrix, requested nranks (2) is larger than matrix size (1) in file {}.\n"),
        ("huge.txt", "1e20 0\n0 0\n", "Invalid alltoallv traffic matrix value at row 0 col 0 in file {}. Value overflow (value=1e+20 scale=1).\n"),
    ] {
        let path = write(name, body);
        let out = perf_env(&link, "-t 2 -b 4K -e 4K --backend host", &[("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", &path)]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert_eq!(text(&out.stdout), said.replace("{}", &path), "{name}");
        assert_eq!(text(&out.stderr), "", "{name}");
    }
}

#[test]
fn an_output_on_the_matrix_or_on_dash_j_is_refused_before_anything_is_written() {
    // D2: the matrix alltoallv.cu:150 reads is an input of the path guard, for the drop-in
    // and for a sweep. D4: -J's claim (jsonOutputInit, after common.cu:1445) comes after the
    // guard, so a refusal leaves no file.
    let (dir, link) = linked("alltoallv_perf");
    let matrix = dir.path().join("ok.json");
    std::fs::write(&matrix, "16 16\n16 16\n").unwrap();
    let m = matrix.display().to_string();
    let env = [("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", m.as_str())];
    let out = perf_env(
        &link,
        &format!("-t 2 -b 4K -e 4K --backend host --json {m}"),
        &env,
    );
    assert_eq!(out.status.code(), Some(6), "testInvalidUsage");
    assert!(
        text(&out.stderr).contains("would overwrite the input NCCL_TESTS_ALLTOALLV_MATRIX_FILE")
    );
    common::bin()
        .args([
            "sweep",
            "--backend",
            "host",
            "--ranks",
            "2",
            "--collective",
            "alltoallv",
        ])
        .args(["-b", "4K", "-e", "4K", "--max-samples", "6", "--json", &m])
        .env("NCCL_TESTS_ALLTOALLV_MATRIX_FILE", &m)
        .assert()
        .code(2);
    assert_eq!(std::fs::read_to_string(&matrix).unwrap(), "16 16\n16 16\n");

    let (dir, link) = linked("all_reduce_perf");
    let same = dir.path().join("same.json").display().to_string();
    let out = perf(
        &link,
        &format!("-b 8 -e 8 --backend host -J {same} --json {same}"),
    );
    assert_eq!(out.status.code(), Some(6));
    assert!(!std::path::Path::new(&same).exists(), "-J claimed nothing");
}

/// `link args` in a shell, with stdout as `redirect` says; (status, stderr).
fn shell(link: &std::path::Path, args: &str, redirect: &str) -> (Option<i32>, String) {
    let line = format!(
        "'{}' {args} {redirect}; exit ${{PIPESTATUS[0]}}",
        link.display()
    );
    let mut c = std::process::Command::new("bash");
    common::without_host_settings(&mut c);
    let out = c.args(["-c", &line]).output().unwrap();
    (out.status.code(), text(&out.stderr))
}

#[test]
fn a_reader_that_leaves_is_a_quiet_141_and_a_closed_stdout_is_said() {
    let (_dir, link) = linked("all_reduce_perf");
    let (code, stderr) = shell(
        &link,
        "--backend host -b 8 -e 1M -f 2",
        "| head -1 > /dev/null",
    );
    assert_eq!((code, stderr.as_str()), (Some(141), ""));
    let (code, stderr) = shell(&link, "--backend host -b 8 -e 64 -f 2", ">&-");
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "ncclprobe: cannot write to stdout: Bad file descriptor (os error 9)\n"
    );
    // The same writer serves every command.
    let (code, stderr) = shell(
        std::path::Path::new(env!("CARGO_BIN_EXE_ncclprobe")),
        "sweep --backend host --ranks 2 -b 8 -e 64 --max-samples 4",
        ">&-",
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("cannot write to stdout: Bad file descriptor"),
        "{stderr}"
    );
}
