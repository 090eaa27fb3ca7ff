//! ncclprobe's stdout as nccl-tests 2.19.6's `*_perf` binaries print theirs (src/util.cu:
//! writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeResultFooter,
//! finalizeFooter, writeErrors), line for line, with ncclprobe's version line in place of
//! nccl-tests'. The rows and the header are `table`'s.

use crate::coll::Collective;
use crate::model::Point;
use crate::render::table::{self, float_str};
use std::path::PathBuf;

/// What ncclprobe prints and decides as an nccl-tests 2.19.6 `*_perf` binary: the values its
/// banner line, summary and exit status are made of (src/util.cu, writeDeviceReport and
/// writeResultFooter; src/common.cu, run()).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerfStyle {
    /// `all_reduce_perf`, as called.
    pub program: String,
    pub nthreads: i64,
    pub ngpus: i64,
    /// -e as given, before any cut for memory ("Reducing maxBytes").
    pub max_bytes: u64,
    pub step_factor: u64,
    pub step_bytes: u64,
    pub warmup_iters: i64,
    pub iters: i64,
    pub agg_iters: i64,
    pub validation: i64,
    pub graph: i64,
    pub unalign: i64,
    pub blocking: i64,
    pub parallel_init: bool,
    /// -C 1: the time columns are titled `cputime` (the host's clock, as ncclprobe's are).
    pub report_cputime: bool,
    /// -S 1: each row ends with the local time.
    pub report_timestamps: bool,
    /// -M 1: the GPU memory each stage took, after the summary.
    pub memory: bool,
    /// -d all: nccl-tests adds the fp8 types on Hopper or newer with NCCL 2.24+.
    pub all_types: bool,
    /// -I 1: each call timed; the leading calls its summary skips (-K).
    pub per_iter_skip: Option<usize>,
    /// NCCL_TESTS_MIN_BW: the average bus bandwidth must reach 0.9 x this (GB/s).
    pub min_bw: Option<f64>,
    /// -J: nccl-tests' JSON, written at the end.
    pub json: Option<PathBuf>,
    /// The command line and environment as the process had them (for -J).
    pub argv: Vec<String>,
    /// NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: alltoallv_perf's traffic, whose per-rank figures
    /// it prints inside every row, before each placement's figures.
    pub alltoallv_summary: Option<crate::coll::Traffic>,
}

/// NCCL's version code from its version text (`2.27.3` → 22703): `NCCL_VERSION(X,Y,Z)` is
/// `X*10000 + Y*100 + Z` from 2.9 on, `X*1000 + Y*100 + Z` before (nccl.h).
pub fn version_code(text: &str) -> Option<u32> {
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    let (x, y, z): (u32, u32, u32) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    Some(if x > 2 || (x == 2 && y >= 9) {
        x * 10000 + y * 100 + z
    } else {
        x * 1000 + y * 100 + z
    })
}

/// The lines before `# Using devices`.
pub fn banner(style: &PerfStyle, min_bytes: u64, nccl_version: Option<&str>) -> Vec<String> {
    let code = nccl_version.and_then(version_code).unwrap_or(0);
    let (step, unit) = if style.step_factor > 1 {
        (style.step_factor, "factor")
    } else {
        (style.step_bytes, "bytes")
    };
    let mut lines = vec![
        format!(
            "# ncclprobe version {} nccl-library={code}",
            crate::buildinfo::VERSION
        ),
        format!("# Collective test starting: {}", style.program),
        format!(
            "# nThread {} nGpus {} minBytes {} maxBytes {} step: {step}({unit}) warmup iters: {} iters: {} agg iters: {} validation: {} graph: {} unalign: {}",
            style.nthreads,
            style.ngpus,
            min_bytes,
            style.max_bytes,
            style.warmup_iters,
            style.iters,
            style.agg_iters,
            style.validation,
            style.graph,
            style.unalign
        ),
    ];
    match style.blocking {
        1 => lines.push("# Blocking Enabled: wait and barrier after each inner iteration (-m) ".into()),
        2 => lines.push("# Blocking Enabled: wait after each inner iteration (-m), no barrier ".into()),
        3 => lines.push("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ".into()),
        _ => {}
    }
    if let Some(skip) = style.per_iter_skip {
        let skipped = match skip {
            0 => String::new(),
            k => format!("; summary skips first {k} iterations"),
        };
        lines.push(format!(
            "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows{skipped} "
        ));
    }
    if style.parallel_init {
        lines.push("# Parallel Init Enabled: threads call into NcclInitRank concurrently ".into());
    }
    lines.push("#".into());
    lines
}

/// The line run() prints when the GPUs' memory cuts the largest size.
pub fn reduced_max_bytes(max_bytes: u64) -> String {
    format!("#\n# Reducing maxBytes to {max_bytes} due to memory limitation")
}

/// The average nccl-tests prints: the mean busbw (GB/s) over every row's two placements
/// (src/common.cu, BenchTime: `bw += busBw; bw_count++`, then `bw /= bw_count`).
pub fn average_busbw_gbps(points: &[Point]) -> f64 {
    if points.is_empty() {
        return f64::NAN;
    }
    points
        .iter()
        .map(|p| p.busbw_bytes_per_s / 1e9)
        .sum::<f64>()
        / points.len() as f64
}

/// Whether the average fails NCCL_TESTS_MIN_BW: below 0.9 x the value (src/common.cu:1851,
/// `bw[0] < check_avg_bw*(0.9)`; a NaN threshold never fails, and the summary says OK).
pub fn below_min_bw(style: &PerfStyle, average_gbps: f64) -> bool {
    style.min_bw.is_some_and(|m| average_gbps < m * 0.9)
}

/// The JSON's `okay` for the average (src/util.cu:791): `bw[0] >= check_avg_bw*(0.9)`, the
/// opposite test, so a NaN threshold is "false" there while the table says OK.
pub fn min_bw_json_okay(style: &PerfStyle, average_gbps: f64) -> Option<bool> {
    style.min_bw.map(|m| average_gbps >= m * 0.9)
}

/// A point as nccl-tests would report it with these flags: BenchTime divides the timed loop
/// by `iters*agg_iters` (src/common.cu:772), so -n 0 or -m 0 time `inf` at bandwidth 0; and
/// `-c` below 0 runs no check (`for (c = 0; c < datacheck; c++)`, common.cu:803) yet shows the
/// #wrong column (`reportErrors = datacheck`, common.cu:1762) as 0.
pub fn as_reported(style: &PerfStyle, p: &Point) -> Point {
    let mut p = p.clone();
    if style.iters * style.agg_iters == 0 {
        p.time_s = f64::INFINITY;
        p.algbw_bytes_per_s = 0.0;
        p.busbw_bytes_per_s = 0.0;
    }
    if style.validation < 0 && p.wrong.is_none() {
        p.wrong = Some(0);
    }
    p
}

/// What the summary after the rows says: the checks that found wrong elements ("Out of
/// bounds values" counts those, CheckData's `if (*wrongElts) errors++`, not the elements), the
/// average bus bandwidth, and whether it meets NCCL_TESTS_MIN_BW (None when that is not set).
pub fn footer_figures(style: &PerfStyle, points: &[Point]) -> (usize, f64, Option<bool>) {
    let points: Vec<Point> = points.iter().map(|p| as_reported(style, p)).collect();
    let failed_checks = points.iter().filter(|p| p.wrong.unwrap_or(0) > 0).count();
    let average = average_busbw_gbps(&points);
    let min_bw_ok = style.min_bw.map(|_| !below_min_bw(style, average));
    (failed_checks, average, min_bw_ok)
}

/// `getMemString` (src/util.cu): binary units, two decimals under 10, one under 100.
pub fn memory_amount(bytes: i64) -> String {
    let mut amount = bytes as f64;
    let mut unit = " B";
    for (size, name) in [(1u64 << 30, " GB"), (1 << 20, " MB"), (1 << 10, " KB")] {
        if amount.abs() >= size as f64 {
            amount /= size as f64;
            unit = name;
            break;
        }
    }
    let precision = if amount.abs() < 10.0 {
        2
    } else if amount.abs() < 100.0 {
        1
    } else {
        0
    };
    format!("{amount:.precision$}{unit}")
}

/// -M's line (src/util.cu, writeMemInfo).
pub fn memory_line(m: &crate::model::GpuMemory) -> String {
    let stages = [
        ("Initialization", m.initialization_bytes),
        ("User-Allocated", m.user_allocated_bytes),
        ("Collective", m.collective_bytes),
    ];
    let total: i64 = stages.iter().map(|(_, b)| b).sum();
    let parts: Vec<String> = stages
        .iter()
        .map(|(name, b)| format!("{name} {} ", memory_amount(*b)))
        .collect();
    format!(
        "# {:<20} : {}| Total  {}",
        "GPU memory usage",
        parts.join("| "),
        memory_amount(total)
    )
}

/// The summary after the rows, through the empty line writeErrors prints when NCCL has no
/// error to report; -M's line before the last `#` (finalizeFooter).
pub fn footer(
    style: &PerfStyle,
    points: &[Point],
    memory: Option<&crate::model::GpuMemory>,
) -> Vec<String> {
    let (failed_checks, average, min_bw_ok) = footer_figures(style, points);
    let verdict = match min_bw_ok {
        None => "",
        Some(false) => "FAILED",
        Some(true) => "OK",
    };
    vec![
        format!(
            "# {:<20} : {failed_checks} {}",
            "Out of bounds values",
            if failed_checks > 0 { "FAILED" } else { "OK" }
        ),
        format!(
            "# {:<20} : {} {verdict}",
            "Avg bus bandwidth",
            crate::render::table::format_g(average)
        ),
        "#".into(),
        format!("# Collective test concluded: {}", style.program),
    ]
    .into_iter()
    .chain(memory.map(memory_line))
    .chain(["#".into(), String::new()])
    .collect()
}

/// What NCCL_TESTS_MIN_BW does not say: the rows under the threshold, slowest first.
pub fn min_bw_culprits(style: &PerfStyle, points: &[Point]) -> Option<String> {
    let floor = style.min_bw? * 0.9;
    let (_, average, _) = footer_figures(style, points);
    if !below_min_bw(style, average) {
        return None;
    }
    let mut low: Vec<&Point> = points
        .iter()
        .filter(|p| p.busbw_bytes_per_s / 1e9 < floor)
        .collect();
    low.sort_by(|a, b| a.busbw_bytes_per_s.total_cmp(&b.busbw_bytes_per_s));
    let named: Vec<String> = low
        .iter()
        .take(8)
        .map(|p| {
            format!(
                "{} {} {:.2} GB/s",
                crate::units::format_size(p.size_bytes),
                p.placement.name(),
                p.busbw_bytes_per_s / 1e9
            )
        })
        .collect();
    Some(format!(
        "the average bus bandwidth {} GB/s is below 0.9 x NCCL_TESTS_MIN_BW ({} GB/s); {} of {} rows are below it: {}{}",
        crate::render::table::format_g(average),
        crate::render::table::format_g(floor),
        low.len(),
        points.len(),
        named.join(", "),
        if low.len() > named.len() { ", ..." } else { "" }
    ))
}

/// The local time as nccl-tests' -S column shows it (`%21s` of strftime("%Y-%m-%d %H:%M:%S")).
pub fn timestamp_now() -> String {
    format!("{:>21}", local_time())
}

/// The local time in nccl-tests' TIME_STRING_FORMAT, "%Y-%m-%d %H:%M:%S" (src/util.cu).
pub fn local_time() -> String {
    let mut now: libc::time_t = 0;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let mut buf = [0u8; 64];
    // SAFETY: time and localtime_r write only into the locals given; strftime writes at most
    // `buf.len()` bytes and returns how many.
    let n = unsafe {
        libc::time(&mut now);
        libc::localtime_r(&now, &mut tm);
        libc::strftime(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            c"%Y-%m-%d %H:%M:%S".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// computeIterStats (src/util.cu) over the calls after the skipped ones, in seconds; the
/// percentiles are nearest-rank (`min(n - 1, (n * p + 99) / 100 - 1)`), the deviation the
/// population's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterStats {
    pub min: f64,
    pub max: f64,
    pub avg: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub stdev: f64,
    /// stdev / avg x 100 (0 when avg is 0).
    pub cv_pct: f64,
}

pub fn iter_stats(times: &[f64]) -> IterStats {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len().max(1);
    let at = |i: usize| sorted.get(i).copied().unwrap_or(f64::NAN);
    let percentile = |p: usize| at((n - 1).min((n * p).div_ceil(100).saturating_sub(1)));
    let avg = sorted.iter().sum::<f64>() / n as f64;
    let stdev = (sorted.iter().map(|t| (t - avg).powi(2)).sum::<f64>() / n as f64).sqrt();
    IterStats {
        min: at(0),
        max: at(n - 1),
        avg,
        p50: at(n / 2),
        p95: percentile(95),
        p99: percentile(99),
        stdev,
        cv_pct: if avg > 0.0 { stdev / avg * 100.0 } else { 0.0 },
    }
}

/// The calls a point's -I summary covers (after -K's skipped ones).
pub fn summarised(each: &crate::model::PerIteration) -> &[f64] {
    &each.times_s[each.skipped.min(each.times_s.len())..]
}

/// writePerIterReport's columns: `  %7s  %7s  %7s  %7s` of i_min, i_max, i_p99 (us), i_cv%.
fn per_iter_columns(p: &Point) -> String {
    let Some(each) = &p.per_iteration else {
        return String::new();
    };
    let s = iter_stats(summarised(each));
    let f = |v: f64| float_str(v, 7);
    format!(
        "  {:>7}  {:>7}  {:>7}  {:>7}",
        f(s.min * 1e6),
        f(s.max * 1e6),
        f(s.p99 * 1e6),
        f(s.cv_pct)
    )
}

/// One row as the binary prints it: both placements, each followed by its -I columns, then
/// -S's time.
pub fn row(style: &PerfStyle, out_of_place: &Point, in_place: &Point) -> String {
    let (out_of_place, in_place) = (
        &as_reported(style, out_of_place),
        &as_reported(style, in_place),
    );
    // alltoallv's summary is printed when each placement's bandwidth is worked out, after
    // the row's start and before that placement's figures (AlltoAllvGetBw).
    let summary = |p: &Point| match &style.alltoallv_summary {
        Some(traffic) if p.collective == Collective::Alltoallv => {
            traffic.summary(p.nranks, p.count as usize, p.dtype.size_bytes(), p.time_s)
        }
        _ => String::new(),
    };
    let mut row = format!(
        "{}{}{}{}{}{}{}",
        table::preamble(out_of_place),
        summary(out_of_place),
        table::half(out_of_place),
        per_iter_columns(out_of_place),
        summary(in_place),
        table::half(in_place),
        per_iter_columns(in_place)
    );
    if style.report_timestamps {
        row.push_str(&timestamp_now());
    }
    row
}

/// NCCL_TESTS_SPLIT: each group's figures at the row's size, from its ranks' times, as
/// comment lines under the row (nccl-tests prints one row, its time averaged over every
/// process of every group under -a 1, src/common.cu 338-351; its open PR 376 asks for these). Nothing when every rank is in one group.
pub fn group_rows(
    out_of_place: &Point,
    in_place: &Point,
    groups: &[usize],
    across: crate::model::AcrossRanks,
) -> Vec<String> {
    split_groups(groups)
        .into_iter()
        .map(|(g, members)| {
            let label = format!("#  group {g:>2} of {:>2} ranks", members.len());
            format!(
                "{label:<52}{}{}",
                table::half(&group_point(out_of_place, &members, across)),
                table::half(&group_point(in_place, &members, across))
            )
        })
        .collect()
}

/// NCCL_TESTS_SPLIT: each group's average bus bandwidth over the rows, after nccl-tests' own
/// average (over every group).
pub fn group_footer(
    points: &[Point],
    groups: &[usize],
    across: crate::model::AcrossRanks,
) -> Vec<String> {
    split_groups(groups)
        .into_iter()
        .map(|(g, members)| {
            let own: Vec<Point> = points
                .iter()
                .map(|p| group_point(p, &members, across))
                .collect();
            let ranks: Vec<String> = members.iter().map(|r| r.to_string()).collect();
            format!(
                "# {:<20} : {} (group {g}: ranks {})",
                "Group bus bandwidth",
                crate::render::table::format_g(average_busbw_gbps(&own)),
                ranks.join(",")
            )
        })
        .collect()
}

/// The groups and their ranks, when there are two or more.
fn split_groups(groups: &[usize]) -> Vec<(usize, Vec<usize>)> {
    let mut colors: Vec<usize> = groups.to_vec();
    colors.sort_unstable();
    colors.dedup();
    if colors.len() < 2 {
        return Vec::new();
    }
    colors
        .into_iter()
        .map(|g| {
            let members = (0..groups.len()).filter(|&r| groups[r] == g).collect();
            (g, members)
        })
        .collect()
}

/// `p` as the ranks `members` (of the whole job) saw it: their time, taken across them as the
/// run takes it (-a), and the bandwidths of a collective of that many ranks.
fn group_point(p: &Point, members: &[usize], across: crate::model::AcrossRanks) -> Point {
    let times: Vec<f64> = members
        .iter()
        .filter_map(|&r| p.per_rank_time_s.get(r).copied())
        .collect();
    let time_s = across.pick(&times);
    let count = p.size_bytes as usize / p.dtype.size_bytes().max(1);
    let (algbw, busbw) = match p.collective {
        // Its bandwidth counts the busiest rank's bytes, which is the size it is printed under.
        Collective::Alltoallv if time_s > 0.0 => {
            let algbw = p.size_bytes as f64 / time_s;
            (algbw, algbw * p.collective.busbw_factor(members.len()))
        }
        _ => crate::coll::bandwidths(
            p.collective,
            count,
            p.dtype,
            members.len(),
            &crate::coll::Traffic::default(),
            time_s,
        ),
    };
    Point {
        time_s,
        algbw_bytes_per_s: algbw,
        busbw_bytes_per_s: busbw,
        nranks: members.len(),
        ..p.clone()
    }
}

/// The table's header (writeResultHeader), with -I's columns when asked.
pub fn header(style: &PerfStyle) -> String {
    if style.per_iter_skip.is_none() {
        return table::header_with(style.report_cputime, style.report_timestamps);
    }
    let time = if style.report_cputime {
        "cputime"
    } else {
        "time"
    };
    let (label, format) = match style.report_timestamps {
        true => (
            format!("{:>19}", "timestamp"),
            format!("{:>19}", "%Y-%m-%d %H:%M:%S"),
        ),
        false => (String::new(), String::new()),
    };
    let line = |c: [&str; 5], h: [&str; 16], tail: &str| {
        let mut text = format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}",
            c[0], c[1], c[2], c[3], c[4]
        );
        for half in h.chunks(8) {
            text.push_str(&format!(
                "  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7}",
                half[0], half[1], half[2], half[3], half[4], half[5], half[6], half[7]
            ));
        }
        format!("{text} {tail}")
    };
    [
        "#".to_string(),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)                                in-place (+ per-iteration)",
            "", "", "", "", ""
        ),
        line(
            ["size", "count", "type", "redop", "root"],
            [
                time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", time,
                "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
            ],
            &label,
        ),
        line(
            ["(B)", "(elements)", "", "", ""],
            [
                "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", "(us)", "(GB/s)",
                "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
            ],
            &format,
        ),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_amounts_round_as_get_mem_string_does() {
        // std::fixed with setprecision(2 under 10, 1 under 100, else 0), binary units.
        for (bytes, text) in [
            (0, "0.00 B"),
            (9, "9.00 B"),
            (99, "99.0 B"),
            (1023, "1023 B"),
            (1536, "1.50 KB"),
            (50 << 20, "50.0 MB"),
            (4 << 30, "4.00 GB"),
            (-2048, "-2.00 KB"),
        ] {
            assert_eq!(memory_amount(bytes), text, "{bytes}");
        }
        let m = crate::model::GpuMemory {
            initialization_bytes: 600 << 20,
            user_allocated_bytes: 1 << 30,
            collective_bytes: 0,
        };
        assert_eq!(
            memory_line(&m),
            "# GPU memory usage     : Initialization 600 MB | User-Allocated 1.00 GB | Collective 0.00 B | Total  1.59 GB"
        );
    }
}
