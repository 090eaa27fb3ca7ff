//! Which pairs, and which node, are far below the others: judged against the median cell of
//! the same direction and size, so the verdict needs no expectation of what the links give.

use super::{By, Direction, MatrixDocument, Outlier, PairMeasurement};
use crate::documents::topology::{describe_link, Topology};
use crate::units::format_size;

fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The cells of one direction at one size.
fn cells_of(cells: &[PairMeasurement], direction: Direction, size: u64) -> Vec<&PairMeasurement> {
    cells
        .iter()
        .filter(|m| m.direction == direction && m.size_bytes == size && m.time_s > 0.0)
        .collect()
}

fn cells(doc: &MatrixDocument, direction: Direction, size: u64) -> Vec<&PairMeasurement> {
    cells_of(&doc.measurements, direction, size)
}

/// Where each direction is judged: bandwidth at the largest size, latency at the smallest.
fn judged_size(cells: &[PairMeasurement], direction: Direction) -> Option<u64> {
    let sizes = cells
        .iter()
        .filter(|m| m.direction == direction)
        .map(|m| m.size_bytes);
    match direction {
        Direction::Latency => sizes.min(),
        _ => sizes.max(),
    }
}

/// A latency this much above the median is never called slow, whatever the ratio: tens of
/// nanoseconds between two cores are three times a median of ten, and no link's fault.
pub const LATENCY_FLOOR_S: f64 = 1e-6;

/// The cells below `fraction` of the median cell of their direction and size (latency: above
/// the median over `fraction`, and by at least `LATENCY_FLOOR_S`), with the ratio to the
/// median. A kind with fewer than three cells has no median to stand out from.
pub fn outlier_cells(cells: &[PairMeasurement], fraction: f64) -> Vec<(&PairMeasurement, f64)> {
    let mut found = Vec::new();
    for direction in [Direction::OneWay, Direction::TwoWay, Direction::Latency] {
        let Some(size) = judged_size(cells, direction) else {
            continue;
        };
        let kind = cells_of(cells, direction, size);
        if kind.len() < 3 {
            continue;
        }
        let mut bws: Vec<f64> = kind.iter().map(|m| m.bw_bytes_per_s).collect();
        let mut times: Vec<f64> = kind.iter().map(|m| m.time_s).collect();
        let (Some(median_bw), Some(median_time)) = (median(&mut bws), median(&mut times)) else {
            continue;
        };
        for m in kind {
            let (slow, ratio) = match direction {
                Direction::Latency => (
                    median_time / m.time_s < fraction && m.time_s - median_time >= LATENCY_FLOOR_S,
                    m.time_s / median_time,
                ),
                _ => {
                    let ratio = m.bw_bytes_per_s / median_bw;
                    (ratio < fraction, ratio)
                }
            };
            if slow {
                found.push((m, ratio));
            }
        }
    }
    found
}

/// The document's outliers, with what lies between the two ends.
pub fn outliers(doc: &MatrixDocument) -> Vec<Outlier> {
    let topology = topology(doc);
    outlier_cells(&doc.measurements, doc.outlier_fraction)
        .into_iter()
        .map(|(m, ratio)| Outlier {
            from: m.from,
            to: m.to,
            size_bytes: m.size_bytes,
            direction: m.direction,
            ratio_to_median: ratio,
            link: link(doc, topology.as_ref(), m.from, m.to),
        })
        .collect()
}

/// An endpoint whose own pairs are slow: its median one-way bandwidth (both directions, the
/// largest size) against the median endpoint's. Returns (endpoint, ratio). With three or more
/// endpoints a single bad one stands out: its pairs are all slow, everyone else's mostly fast.
pub fn slow_endpoints(doc: &MatrixDocument) -> Vec<(usize, f64)> {
    let Some(size) = judged_size(&doc.measurements, Direction::OneWay) else {
        return Vec::new();
    };
    let cells = cells(doc, Direction::OneWay, size);
    let n = doc.endpoints.len();
    if n < 3 {
        return Vec::new();
    }
    let scores: Vec<Option<f64>> = (0..n)
        .map(|e| {
            let mut bws: Vec<f64> = cells
                .iter()
                .filter(|m| m.from == e || m.to == e)
                .map(|m| m.bw_bytes_per_s)
                .collect();
            median(&mut bws)
        })
        .collect();
    let mut all: Vec<f64> = scores.iter().flatten().copied().collect();
    let Some(reference) = median(&mut all) else {
        return Vec::new();
    };
    scores
        .iter()
        .enumerate()
        .filter_map(|(e, s)| Some((e, (*s)? / reference)))
        .filter(|(_, ratio)| *ratio < doc.outlier_fraction)
        .collect()
}

/// The topology the document carries (this machine's, when it had GPUs).
pub fn topology(doc: &MatrixDocument) -> Option<Topology> {
    serde_json::from_value(doc.topology.clone()?).ok()
}

/// What lies between two endpoints: another host (the network), the GPU link matrix's class
/// for two GPUs of this host, or shared memory between processes of one host.
pub fn link(doc: &MatrixDocument, topology: Option<&Topology>, a: usize, b: usize) -> String {
    let (Some(x), Some(y)) = (doc.endpoints.get(a), doc.endpoints.get(b)) else {
        return "unknown".into();
    };
    if x.host != y.host {
        return format!("different hosts ({} and {}): the network", x.host, y.host);
    }
    if doc.by == By::Node {
        return "one host".into();
    }
    if let Some(t) = topology {
        // The document's topology is rank 0's host's (the process that wrote it).
        let here = doc.backend.ranks.first().map_or("", |r| r.host.as_str());
        if let (Some(i), Some(j)) = (x.gpu_row(t, here), y.gpu_row(t, here)) {
            if let Some(code) = t.link(&i, &j) {
                return format!("{} ({code})", describe_link(code));
            }
        }
    }
    match (x.device.is_some(), doc.backend.name.as_str()) {
        (true, _) => "two GPUs of one host (no link matrix to name the link)".into(),
        (false, "host") => "threads of one process (memory copies)".into(),
        (false, _) => format!("one host ({}: shared memory)", doc.backend.name),
    }
}

/// A cell's figure in words: `6.1 GB/s` or `3.2 µs`.
pub fn figure(m_direction: Direction, bw: f64, time_s: f64) -> String {
    match m_direction {
        Direction::Latency => format!("{:.1} µs", time_s * 1e6),
        _ => format!("{:.2} GB/s", bw / 1e9),
    }
}

/// "GPU3 -> GPU5 6.10 GB/s at 16MB, 0.24x the median pair; through the CPU's PCIe host bridge (PHB)"
pub fn describe(doc: &MatrixDocument, o: &Outlier) -> String {
    let cell = doc.measurements.iter().find(|m| {
        m.from == o.from
            && m.to == o.to
            && m.direction == o.direction
            && m.size_bytes == o.size_bytes
    });
    let value = cell.map_or_else(String::new, |m| {
        format!(" {}", figure(o.direction, m.bw_bytes_per_s, m.time_s))
    });
    let versus = match o.direction {
        Direction::Latency => format!("{:.1}x the median pair's latency", o.ratio_to_median),
        _ => format!("{:.2}x the median pair", o.ratio_to_median),
    };
    format!(
        "{} {}{value} at {}, {versus}; {}",
        doc.pair_label(o.from, o.to, o.direction),
        o.direction.name(),
        format_size(o.size_bytes),
        o.link
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_needs_company() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
