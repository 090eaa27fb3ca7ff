//! The nccl-tests table, column for column (formats from nccl-tests' src/common.cu), so
//! existing parsers and eyes read it unchanged. Everything that is ours starts with `#`.

use crate::coll::Placement;
use crate::model::{Headline, Point, RunRecord};
use crate::units::format_size;

pub fn header() -> String {
    [
        "#",
        "#                                                              out-of-place                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
    ]
    .join("\n")
}

/// nccl-tests' time column: fewer decimals as the number grows, always 7 wide.
fn time_str(time_s: f64) -> String {
    let us = time_s * 1e6;
    if us >= 10000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

fn half(p: &Point) -> String {
    let wrong = match p.wrong {
        Some(w) => format!("{:>6}", w),
        None => format!("{:>6}", "N/A"),
    };
    format!(
        "  {}  {:6.2}  {:6.2}  {}",
        time_str(p.time_s),
        p.algbw_bytes_per_s / 1e9,
        p.busbw_bytes_per_s / 1e9,
        wrong
    )
}

/// One row: the size's out-of-place and in-place results side by side.
pub fn row(out_of_place: &Point, in_place: &Point) -> String {
    let p = out_of_place;
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
        p.size_bytes,
        p.count,
        p.dtype.name(),
        p.redop.map(|o| o.name()).unwrap_or("none"),
        p.root,
        half(out_of_place),
        half(in_place)
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
    let exp = v.abs().log10().floor() as i32;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
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
    format!(
        "# ncclprobe {}{} {}: plateau busbw {:.2} GB/s (median over {sizes}), small-message latency {:.2} us at {}",
        h.collective,
        op,
        h.dtype,
        h.plateau_busbw_bytes_per_s / 1e9,
        h.small_latency_s * 1e6,
        format_size(h.small_size_bytes)
    )
}

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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_column_matches_nccl_tests() {
        assert_eq!(time_str(12.25e-6), "  12.25");
        assert_eq!(time_str(150.2e-6), "  150.2");
        assert_eq!(time_str(16801e-6), "  16801");
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
