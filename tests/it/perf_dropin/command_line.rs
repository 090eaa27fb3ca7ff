//! The drop-in's command line read as nccl-tests 2.19.6 reads it (review 2026-12-01, D24, D27,
//! D28, D29): glibc's getopt_long over its option table, sizes through `sscanf("%lf")` and a
//! `(size_t)` cast, `(int)strtol` numbers, roots and rank counts as its tests handle them.

use super::{linked, perf, text};

fn rows(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn sizes(stdout: &str) -> Vec<u64> {
    rows(stdout)
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The banner's value after `key` (`iters:` → `20`).
fn banner(stdout: &str, key: &str) -> String {
    let line = stdout.lines().find(|l| l.starts_with("# nThread")).unwrap();
    let at = line.find(key).unwrap() + key.len();
    line[at..].split_whitespace().next().unwrap().to_string()
}

#[test]
fn options_repeat_abbreviate_attach_and_operands_are_skipped_as_getopt_long_does() {
    // common.cu:1203-1210: getopt_long with `longopts` (1167-1200); each case sets the
    // variable again, so the last occurrence wins, and the loop ends at -1 ("--" or the end).
    let (_dir, link) = linked("all_reduce_perf");
    for (args, want) in [
        ("-b 8 -e 64 -f 2 -b 16", vec![16, 32, 64]),
        ("--minb 8 --maxb 64 --stepf 2", vec![8, 16, 32, 64]),
        ("--minbytes=8 --maxbytes=32 --stepfactor=2", vec![8, 16, 32]),
        ("-b8 -e16 -f2", vec![8, 16]),
        ("-b 8 -e 16 -f 2 extra args", vec![8, 16]),
        ("-b 8 -e 16 -f 2 -- -n 5 -b 1", vec![8, 16]),
    ] {
        let out = perf(&link, &format!("--backend host -n 2 -w 0 {args}"));
        assert_eq!(out.status.code(), Some(0), "{args}: {}", text(&out.stderr));
        assert_eq!(sizes(&text(&out.stdout)), want, "{args}");
    }
    let out = perf(&link, "-b 8 -e 8 -n 5 -n 7 --backend host");
    assert_eq!(banner(&text(&out.stdout), "warmup iters: 1 iters:"), "7");
}

#[test]
fn an_unknown_option_or_a_missing_value_is_getopts_line_then_the_usage_and_status_0() {
    // glibc prints its line on stderr; common.cu:1357-1404 (`default:`) prints "invalid
    // option '?'" (c is '?') and the usage on stdout, and main returns 0 (common.cu:1404).
    let (_dir, link) = linked("all_reduce_perf");
    let called = link.display().to_string();
    for (args, line) in [
        ("-q", format!("{called}: invalid option -- 'q'")),
        ("--nosuch", format!("{called}: unrecognized option '--nosuch'")),
        ("-n", format!("{called}: option requires an argument -- 'n'")),
        (
            "--minbytes",
            format!("{called}: option '--minbytes' requires an argument"),
        ),
        (
            "--re 1",
            format!("{called}: option '--re' is ambiguous; possibilities: '--report_cputime' '--report_timestamps'"),
        ),
    ] {
        let out = perf(&link, &format!("-b 8 -e 64 --backend host {args}"));
        assert_eq!(out.status.code(), Some(0), "{args}");
        assert_eq!(text(&out.stderr), format!("{line}\n"), "{args}");
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("invalid option '?'\nUSAGE: all_reduce_perf \n"),
            "{args}: {stdout}"
        );
        assert!(rows(&stdout).is_empty(), "{args}: nothing measured");
    }
}

#[test]
fn sizes_convert_as_parsesize_and_a_size_t_cast_do() {
    // common.cu:227-260 (sscanf "%lf %1s") and 1224-1231 (`maxBytes = (size_t)parsed`):
    // %lf reads hex; 1e20 and 2^64 cast to 0 with gcc on x86-64, NaN to 2^63, and the check
    // at common.cu:1406-1411 then refuses min > max with status 255.
    let (_dir, link) = linked("all_reduce_perf");
    for (args, said) in [
        (
            "-b 8 -e 99999999999999999999",
            "invalid sizes for 'minbytes' and 'maxbytes': 8 > 0\n",
        ),
        (
            "-b 8 -e 18446744073709551615",
            "invalid sizes for 'minbytes' and 'maxbytes': 8 > 0\n",
        ),
        (
            "-b 8 -b nan",
            "invalid sizes for 'minbytes' and 'maxbytes': 9223372036854775808 > 33554432\n",
        ),
        ("-b 8 -e 1T", "invalid size specified for 'maxbytes'\n"),
    ] {
        let out = perf(&link, &format!("{args} --backend host"));
        assert_eq!(out.status.code(), Some(255), "{args}");
        assert_eq!(text(&out.stderr), said, "{args}");
    }
    let out = perf(&link, "-b 8 -e 0x10 -f 2 --backend host -n 1 -w 0");
    assert_eq!(sizes(&text(&out.stdout)), [8, 16], "%lf reads 0x10 as 16");
}

#[test]
fn zero_iterations_time_inf_and_a_negative_check_shows_0_wrong() {
    // BenchTime divides by iters*agg_iters (common.cu:772): -n 0 or -m 0 is inf, bandwidth 0.
    // -c -1 runs no check (common.cu:803, `c < datacheck`) but prints #wrong (1762).
    let (_dir, link) = linked("all_reduce_perf");
    for args in ["-n 0", "-m 0"] {
        let out = perf(&link, &format!("-b 8 -e 16 -f 2 {args} --backend host"));
        assert_eq!(out.status.code(), Some(0), "{args}");
        let stdout = text(&out.stdout);
        for row in rows(&stdout) {
            let f: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(f[5..8], ["inf", "0.00", "0.00"], "{args}: {row}");
            assert_eq!(f[9..12], ["inf", "0.00", "0.00"], "{args}: {row}");
        }
        assert!(stdout.contains("# Avg bus bandwidth    : 0 \n"), "{stdout}");
    }
    let out = perf(&link, "-b 8 -e 8 -c -1 --backend host");
    let row = rows(&text(&out.stdout)).remove(0);
    let f: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((f[8], f[12]), ("0", "0"), "{row}");
    assert_eq!(banner(&text(&out.stdout), "validation:"), "-1");
}

#[test]
fn dash_v_is_read_as_nccl_2_28_reads_it() {
    // common.cu:1338-1348, NCCL 2.28 or newer: out of range is said, and 16 used.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 8 -V 200 --backend host");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).starts_with(
        "device_cta_count (-V) must be positive and less than 128, got 200. Using default value 16.\n"
    ));
}

#[test]
fn roots_are_read_only_by_the_rooted_tests_and_nccl_refuses_one_outside_the_ranks() {
    // all_reduce never passes -r to NCCL (common.cu:972 hands ncclroot to its RunTest, which
    // ignores it); broadcast passes it (broadcast.cu:94-103) and NCCL's ArgsCheck refuses
    // it: NCCLCHECK's line (common.h:42-54), TESTCHECK's up to main (common.cu:1454), 3.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 8 -r -5 --backend host");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for (name, root, call) in [
        ("broadcast_perf", "99", "broadcast.cu:50"),
        ("broadcast_perf", "-5", "broadcast.cu:50"),
        ("scatter_perf", "9", "scatter.cu:54"),
    ] {
        let (_dir, link) = linked(name);
        let out = perf(&link, &format!("-t 2 -b 8 -e 64 -r {root} --backend host"));
        assert_eq!(
            out.status.code(),
            Some(3),
            "{name} -r {root}: testNcclError"
        );
        let stdout = text(&out.stdout);
        let first = stdout.lines().next().unwrap();
        assert!(
            first.contains(&format!(": Test NCCL failure {call} 'invalid argument (run with NCCL_DEBUG=WARN for details) / "))
                && first.ends_with(&format!(" : invalid root {root} (root should be in the 0..2 range)'")),
            "{first}"
        );
        assert!(
            stdout.trim_end().ends_with(": Test failure common.cu:1454"),
            "{stdout}"
        );
    }
}

#[test]
fn hypercube_on_ranks_not_a_power_of_two_says_so_and_runs_nothing() {
    // hypercube.cu:104-112: the line on stdout, no rows, testSuccess.
    let (_dir, link) = linked("hypercube_perf");
    let out = perf(&link, "-t 3 -b 8 -e 64 --backend host");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "nRanks 3 is not a power of 2, skipping\n"
    );
}

#[test]
fn threads_times_gpus_are_the_ranks_whichever_backend_runs_and_an_error_names_t_and_g() {
    // common.cu:1555-1556 and 1717-1760: nThreads*nGpus ranks in the process. With no GPU,
    // the backend chosen for the user (host here) runs that many, as the banner says.
    let (_dir, link) = linked("all_reduce_perf");
    let out = perf(&link, "-b 8 -e 8");
    let stdout = text(&out.stdout);
    if out.status.code() != Some(0) {
        // A GPU host whose NCCL cannot run (ci/gpu-host-env's stub): the auto choice is NCCL,
        // and the drop-in says why it cannot, as nccl-tests would, instead of measuring host memory.
        let stderr = text(&out.stderr);
        assert!(
            out.status.code() == Some(5) && stderr.contains("--backend nccl"),
            "{:?}: {stderr}",
            out.status.code()
        );
    } else if stdout.contains("device host memory") {
        assert_eq!(
            stdout.matches("#  Rank ").count(),
            1,
            "nThread 1 nGpus 1: {stdout}"
        );
        let out = perf(&link, "-b 8 -e 8 -t 3");
        assert_eq!(text(&out.stdout).matches("#  Rank ").count(), 3);
    }
    let out = perf(&link, "-b 8 -e 8 -t 100000 --backend host");
    assert_eq!(out.status.code(), Some(6));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("-t 100000 x -g 1") && !stderr.contains("--ranks"),
        "{stderr}"
    );
}
