//! The nccl-tests table, column for column (formats from nccl-tests' src/common.cu), so
//! existing parsers and eyes read it unchanged. Everything that is ours starts with `#`.

use crate::coll::Placement;
use crate::model::{Headline, Point, RunRecord};
use crate::units::{fixed, format_size};

pub fn header() -> String {
    header_with(false, false)
}

/// nccl-tests 2.19.6's header (src/util.cu, writeResultHeader): `cputime` for -C 1, and a
/// `timestamp` column for -S 1.
pub fn header_with(cputime: bool, timestamps: bool) -> String {
    let time = if cputime { "cputime" } else { "time" };
    let (label, format) = if timestamps {
        (
            format!("{:>19}", "timestamp"),
            format!("{:>19}", "%Y-%m-%d %H:%M:%S"),
        )
    } else {
        (String::new(), String::new())
    };
    let empty = ["", "", "", "", ""];
    let line = |c: [&str; 5], rest: [&str; 8], tail: &str| {
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} {tail}",
            c[0], c[1], c[2], c[3], c[4], rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], rest[7]
        )
    };
    [
        "#".to_string(),
        format!(
            "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          ",
            empty[0], empty[1], empty[2], empty[3], empty[4]
        ),
        line(
            ["size", "count", "type", "redop", "root"],
            [time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong"],
            &label,
        ),
        line(
            ["(B)", "(elements)", "", "", ""],
            ["(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""],
            &format,
        ),
    ]
    .join("\n")
}

/// nccl-tests 2.19.6's `getFloatStr` (src/util.cu): two decimals if they fit in `width`, else
/// one, else none, else C's `%.1e` (`%.0e` under 7 wide).
pub fn float_str(value: f64, width: usize) -> String {
    for decimals in [2, 1, 0] {
        let s = format!("{value:width$.decimals$}");
        if s.len() <= width {
            return s;
        }
    }
    let s = c_exponent(value, if width >= 7 { 1 } else { 0 });
    format!("{s:>width$}")
}

/// C's `%.Ne`: `1.2e+07`.
fn c_exponent(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$e}");
    let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

pub fn half(p: &Point) -> String {
    let wrong = match p.wrong {
        Some(w) => format!("{:>6}", format_g(w as f64)),
        // writeBenchmarkLineBody without a check: "  %7s  %6s  %6s    N/A".
        None => "  N/A".to_string(),
    };
    format!(
        "  {:>7}  {:>6}  {:>6}  {}",
        float_str(p.time_s * 1e6, 7),
        float_str(p.algbw_bytes_per_s / 1e9, 6),
        float_str(p.busbw_bytes_per_s / 1e9, 6),
        wrong
    )
}

/// One row: the size's out-of-place and in-place results side by side (src/util.cu,
/// writeBenchmarkLinePreamble `%12li  %12li  %8s  %6s  %6s` with the root as `%6i`, then
/// writeBenchmarkLineBody `  %7s  %6s  %6s  %6g` or `    N/A` per placement).
pub fn row(out_of_place: &Point, in_place: &Point) -> String {
    format!(
        "{}{}{}",
        preamble(out_of_place),
        half(out_of_place),
        half(in_place)
    )
}

/// The row's first five columns (writeBenchmarkLinePreamble).
pub fn preamble(p: &Point) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        p.size_bytes,
        p.count,
        p.dtype.name(),
        p.redop.map(|o| o.name()).unwrap_or("none"),
        p.root,
    )
}

/// C's `%g` (six significant digits), which nccl-tests uses for the average.
pub fn format_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v == 0.0 {
            "0".into()
        } else {
            format!("{v}")
        };
    }
    // C's rule: the exponent X is the one of the value rounded to six significant digits
    // (%.5e), so 999999.5 is 1e+06 and 9.9999951e-05 is 0.0001; %f with 5 - X decimals when
    // -4 <= X < 6, else %e, trailing zeros dropped either way.
    let rounded = format!("{:.5e}", v);
    let exp: i32 = rounded
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let (mantissa, e) = rounded.split_once('e').unwrap_or((&rounded, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        format!(
            "{}e{}{:02}",
            trim(mantissa.to_string()),
            if e < 0 { '-' } else { '+' },
            e.abs()
        )
    } else {
        trim(format!("{:.*}", (5 - exp).max(0) as usize, v))
    }
}

/// nccl-tests' footer for one collective's rows.
pub fn footer(points: &[Point]) -> String {
    let wrong: u64 = points.iter().filter_map(|p| p.wrong).sum();
    let avg = if points.is_empty() {
        0.0
    } else {
        points
            .iter()
            .map(|p| p.busbw_bytes_per_s / 1e9)
            .sum::<f64>()
            / points.len() as f64
    };
    format!(
        "# Out of bounds values : {} {}\n# Avg bus bandwidth    : {} \n#",
        wrong,
        if wrong == 0 { "OK" } else { "FAILED" },
        format_g(avg)
    )
}

/// Our headline for one collective: the plateau and the latency, not the misleading average.
pub fn headline(h: &Headline) -> String {
    let op = h.redop.map(|o| format!(" {o}")).unwrap_or_default();
    let sizes = match (h.plateau_sizes_bytes.first(), h.plateau_sizes_bytes.last()) {
        (Some(a), Some(b)) if a != b => format!("{}..{}", format_size(*a), format_size(*b)),
        (Some(a), _) => format_size(*a),
        _ => "-".into(),
    };
    let what = format!("# ncclprobe {}{} {}", h.collective, op, h.dtype);
    let busbw = fixed(h.plateau_busbw_bytes_per_s / 1e9, 2);
    let (us, small) = (
        fixed(h.small_latency_s * 1e6, 2),
        format_size(h.small_size_bytes),
    );
    if h.plateau_sizes_bytes == [h.small_size_bytes] {
        // One size measured: neither a plateau nor a latency can be told from it.
        return format!("{what}: one size only, {small}: busbw {busbw} GB/s, {us} us per call");
    }
    let latency = if h.small_size_bytes <= SMALL_MESSAGE_BYTES {
        format!("small-message latency {us} us at {small}")
    } else {
        format!("smallest size {small} takes {us} us (no small message measured)")
    };
    format!("{what}: plateau busbw {busbw} GB/s (median over {sizes}), {latency}")
}

/// The largest message whose time is its latency (NCCL's LL protocol range).
const SMALL_MESSAGE_BYTES: u64 = 64 << 10;

/// An imported run as text: what was read and guessed, then its table(s) and headlines.
pub fn imported(file: &str, record: &RunRecord) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let info = record.import.as_ref();
    let _ = writeln!(
        out,
        "# imported {file} ({} points, {} ranks, status {:?})",
        record.points.len(),
        record.backend.nranks,
        record.status
    );
    if let Some(info) = info {
        let _ = writeln!(
            out,
            "# collective: {}; ranks from {}",
            info.collective_from, info.nranks_from
        );
    }
    for note in &record.notes {
        let _ = writeln!(out, "# note: {note}");
    }
    for e in info.iter().flat_map(|i| i.errors.iter().take(5)) {
        let _ = writeln!(out, "# error in log: {e}");
    }
    let mut current = None;
    let mut group: Vec<Point> = Vec::new();
    let flush = |out: &mut String, group: &mut Vec<Point>| {
        if !group.is_empty() {
            let _ = writeln!(out, "{}", footer(group));
            group.clear();
        }
    };
    for pair in record.points.chunks(2) {
        let [oop, inp] = pair else { continue };
        if oop.placement != Placement::OutOfPlace {
            continue;
        }
        if current != Some(oop.collective) {
            flush(&mut out, &mut group);
            current = Some(oop.collective);
            let _ = writeln!(
                out,
                "#\n# Collective test: {}_perf (imported)",
                oop.collective
            );
            let _ = writeln!(out, "{}", header());
        }
        let _ = writeln!(out, "{}", row(oop, inp));
        group.push(oop.clone());
        group.push(inp.clone());
    }
    flush(&mut out, &mut group);
    for h in &record.headlines {
        let _ = writeln!(out, "{}", headline(h));
    }
    // Notes and errors quote the log's own lines.
    crate::render::safe::display(&out).into_owned()
}

/// NCCL's tuner choices across sizes, one collective's points (out-of-place) at a time: `Ring/LL
/// up to 64 KiB, Tree/LL128 to 8 MiB, NVLS/Simple above`. `None` when no point has one.
pub fn algo_ranges(points: &[Point]) -> Vec<String> {
    use crate::coll::Placement;
    let mut out = Vec::new();
    let mut colls: Vec<crate::coll::Collective> = Vec::new();
    for p in points {
        if !colls.contains(&p.collective) {
            colls.push(p.collective);
        }
    }
    for coll in colls {
        let mut pts: Vec<&Point> = points
            .iter()
            .filter(|p| p.collective == coll && p.placement == Placement::OutOfPlace)
            .filter(|p| p.nccl_algo.is_some())
            .collect();
        pts.sort_by_key(|p| p.size_bytes);
        pts.dedup_by_key(|p| p.size_bytes);
        // Runs of one algorithm/protocol: (label, last size).
        let mut runs: Vec<(String, u64)> = Vec::new();
        for p in &pts {
            let a = p
                .nccl_algo
                .as_ref()
                .map(|a| format!("{}/{}", a.algo, a.proto));
            let a = a.unwrap_or_default();
            match runs.last_mut() {
                Some((label, last)) if *label == a => *last = p.size_bytes,
                _ => runs.push((a, p.size_bytes)),
            }
        }
        if runs.is_empty() {
            continue;
        }
        let n = runs.len();
        let parts: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(i, (label, last))| match i {
                _ if n == 1 => format!("{label} at every size"),
                0 => format!("{label} up to {}", crate::units::format_size(*last)),
                _ if i + 1 == n => format!("{label} above"),
                _ => format!("{label} to {}", crate::units::format_size(*last)),
            })
            .collect();
        out.push(format!(
            "# NCCL chose ({}): {}",
            coll.name(),
            parts.join(", ")
        ));
    }
    out
}

/// What NCCL said about the run, in one or two lines: the network and transports it used, and
/// why no tuner column could be filled.
pub fn nccl_said(record: &crate::model::RunRecord) -> Vec<String> {
    let Some(n) = &record.nccl else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut said = Vec::new();
    if !n.networks.is_empty() {
        said.push(format!("network {}", n.networks.join("+")));
    }
    if !n.transports.is_empty() {
        said.push(format!("transports {}", n.transports.join(", ")));
    }
    if let Some(c) = &n.channels {
        if let Some(coll) = c.coll {
            said.push(format!("{coll} channels"));
        }
    }
    if let Some(s) = n.nvls_support {
        said.push(format!(
            "NVLS {}",
            if s { "available" } else { "unavailable" }
        ));
    }
    if !said.is_empty() {
        out.push(format!("# NCCL said: {}", said.join("; ")));
    }
    out.extend(n.notes.iter().map(|note| format!("# {note}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_formatted_as_get_float_str_does() {
        // Values from printf("%*.2f") and friends in C, as getFloatStr picks them.
        for (v, width, want) in [
            (12.25, 7, "  12.25"),
            (150.2, 7, " 150.20"),
            (9999.994, 7, "9999.99"),
            (16801.0, 7, "16801.0"),
            (1234567.8, 7, "1234568"),
            (12345678.0, 7, "1.2e+07"),
            (0.0, 6, "  0.00"),
            (999.994, 6, "999.99"),
            (1234.5, 6, "1234.5"),
            (123456.0, 6, "123456"),
            (1234567.0, 6, " 1e+06"),
        ] {
            assert_eq!(float_str(v, width), want, "{v} in {width}");
        }
    }

    #[test]
    fn the_header_is_the_printf_of_write_result_header() {
        let plain = header_with(false, false);
        let lines: Vec<&str> = plain.lines().collect();
        assert_eq!(lines[0], "#");
        assert_eq!(lines[1], "#                                                              out-of-place                       in-place          ");
        assert_eq!(lines[2], "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ");
        assert_eq!(lines[3], "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ");
        let both = header_with(true, true);
        let lines: Vec<&str> = both.lines().collect();
        assert!(
            lines[2].contains("  cputime   algbw")
                && lines[2].ends_with("  #wrong           timestamp"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].ends_with("(GB/s)           %Y-%m-%d %H:%M:%S"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn g_format_matches_c() {
        assert_eq!(format_g(2.05774), "2.05774");
        assert_eq!(format_g(443.007), "443.007");
        assert_eq!(format_g(0.0), "0");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(0.00001234), "1.234e-05");
        assert_eq!(format_g(12.0), "12");
    }
}
