//! The pair matrix for people (heat tables, the outliers in words) and as CSV
//! (`from,to,size_bytes,direction,time_us,bw_gbps`, one row per measured cell; two-way and
//! latency cells once per unordered pair, `from` first).

use crate::documents::matrix::analysis;
use crate::documents::matrix::{Direction, MatrixDocument};
use crate::units::format_size;
use std::fmt::Write;

pub const HEADER: [&str; 6] = [
    "from",
    "to",
    "size_bytes",
    "direction",
    "time_us",
    "bw_gbps",
];

pub fn csv(doc: &MatrixDocument) -> Result<String, ::csv::Error> {
    let name = |i: usize| {
        doc.endpoints
            .get(i)
            .map_or_else(|| i.to_string(), |e| e.label.clone())
    };
    super::csv::table(
        &HEADER,
        doc.measurements.iter().map(|m| {
            [
                name(m.from),
                name(m.to),
                m.size_bytes.to_string(),
                m.direction.name().to_string(),
                format!("{:.3}", m.time_s * 1e6),
                format!("{:.6}", m.bw_bytes_per_s / 1e9),
            ]
        }),
    )
}

/// How a cell compares with the median of its table, as a shade: █ at 0.9x or better down to
/// ░ below 0.5x (the default outlier line).
fn shade(goodness: f64) -> char {
    match goodness {
        g if g >= 0.9 => '█',
        g if g >= 0.7 => '▓',
        g if g >= 0.5 => '▒',
        _ => '░',
    }
}

/// One heat table: rows send (or start), columns receive (or answer).
fn heat_table(doc: &MatrixDocument, direction: Direction, size: u64) -> Option<String> {
    let cells: Vec<_> = doc
        .measurements
        .iter()
        .filter(|m| m.direction == direction && m.size_bytes == size)
        .collect();
    if cells.is_empty() {
        return None;
    }
    let mut values: Vec<f64> = cells
        .iter()
        .map(|m| match direction {
            Direction::Latency => m.time_s,
            _ => m.bw_bytes_per_s,
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    let n = doc.endpoints.len();
    let width = doc
        .endpoints
        .iter()
        .map(|e| e.label.chars().count())
        .max()
        .unwrap_or(4)
        .max(9)
        + 2;
    let (what, unit) = match direction {
        Direction::OneWay => ("one-way bandwidth, row sends to column", "GB/s"),
        Direction::TwoWay => ("two-way bandwidth (both directions together)", "GB/s"),
        Direction::Latency => ("latency (half a round trip)", "µs"),
    };
    let mut out = String::new();
    let _ = writeln!(out, "# {what} at {}, {unit}", format_size(size));
    let _ = write!(out, "{:width$}", "");
    for e in &doc.endpoints {
        let _ = write!(out, "{:>width$}", e.label);
    }
    out.push('\n');
    for a in 0..n {
        let _ = write!(out, "{:width$}", doc.endpoints[a].label);
        for b in 0..n {
            let cell = cells.iter().find(|m| {
                (m.from == a && m.to == b)
                    || (direction != Direction::OneWay && m.from == b && m.to == a)
            });
            let text = match cell {
                _ if a == b => "-".to_string(),
                None => "?".to_string(),
                Some(m) => {
                    let (value, goodness) = match direction {
                        Direction::Latency => (m.time_s * 1e6, median / m.time_s),
                        _ => (m.bw_bytes_per_s / 1e9, m.bw_bytes_per_s / median),
                    };
                    format!("{value:.2} {}", shade(goodness))
                }
            };
            let _ = write!(out, "{text:>width$}");
        }
        out.push('\n');
    }
    Some(out)
}

/// Everything `matrix` prints on stdout for people: where the pairs are, the heat tables at
/// the sizes judged (bandwidth at the largest, latency at the smallest), the outliers.
pub fn table(doc: &MatrixDocument) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# ncclprobe matrix: {} {}s, {} backend, {}",
        doc.endpoints.len(),
        match doc.by {
            crate::documents::matrix::By::Rank => "rank",
            crate::documents::matrix::By::Node => "node",
        },
        doc.backend.name,
        match doc.schedule {
            crate::documents::matrix::Schedule::Rounds => "rounds of disjoint pairs at once",
            crate::documents::matrix::Schedule::OnePairAtATime => "one pair at a time",
        }
    );
    for e in &doc.endpoints {
        let ranks: Vec<String> = e.ranks.iter().map(usize::to_string).collect();
        let _ = writeln!(
            out,
            "#  {:>10}  host {}  rank{} {}{}",
            e.label,
            e.host,
            if e.ranks.len() > 1 { "s" } else { "" },
            ranks.join(","),
            e.device
                .as_deref()
                .map(|d| format!("  device {}", d.trim()))
                .unwrap_or_default()
        );
    }
    let sizes = doc.sizes();
    let (Some(&small), Some(&large)) = (sizes.first(), sizes.last()) else {
        out.push_str("# no pair was measured\n");
        return out;
    };
    for (direction, size) in [
        (Direction::OneWay, large),
        (Direction::TwoWay, large),
        (Direction::Latency, small),
    ] {
        if let Some(t) = heat_table(doc, direction, size) {
            out.push('#');
            out.push('\n');
            out.push_str(&t);
        }
    }
    if sizes.len() > 2 {
        let _ = writeln!(
            out,
            "#\n# {} sizes from {} to {} per pair: every cell is in the JSON and CSV",
            sizes.len(),
            format_size(small),
            format_size(large)
        );
    }
    out.push_str("#\n");
    out.push_str(&verdict_lines(doc).join("\n"));
    out.push('\n');
    crate::render::safe::display(&out).into_owned()
}

/// The outliers in words, or that there are none (and why none could be judged).
pub fn verdict_lines(doc: &MatrixDocument) -> Vec<String> {
    let mut lines = Vec::new();
    for (e, ratio) in analysis::slow_endpoints(doc) {
        lines.push(format!(
            "# SLOW {}: {} — its pairs reach {ratio:.2}x the median {}'s one-way bandwidth",
            if doc.by == crate::documents::matrix::By::Node {
                "NODE"
            } else {
                "RANK"
            },
            doc.endpoints[e].label,
            if doc.by == crate::documents::matrix::By::Node {
                "node"
            } else {
                "rank"
            },
        ));
    }
    for o in &doc.outliers {
        lines.push(format!("# SLOW PAIR: {}", analysis::describe(doc, o)));
    }
    if lines.is_empty() {
        let cells = doc
            .measurements
            .iter()
            .filter(|m| m.direction == Direction::OneWay)
            .count();
        lines.push(if doc.endpoints.len() < 3 && cells < 3 {
            "# 2 endpoints: no median pair to hold a pair against (3 or more are needed)".into()
        } else {
            format!(
                "# no pair below {:.2}x the median pair",
                doc.outlier_fraction
            )
        });
    }
    let wrong = doc.total_wrong();
    if wrong > 0 {
        lines.push(format!(
            "# CHECK FAILED: {wrong} received bytes differ from what was sent"
        ));
    }
    lines
}
