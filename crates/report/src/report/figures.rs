//! Which plots a report gets from its documents: busbw vs size per collective (every run, the
//! expected band and the published plateau), latency vs size, measured/expected ratio,
//! per-rank time spread (stragglers), and the DDP heat map. A plot without data is left out.

use crate::coll::{Collective, Placement};
use crate::documents::DdpSimulation;
use crate::model::{Point, RunRecord};
use crate::render::plots::{Axis, Band, Chart, HLine, Heatmap, LineChart, Plot, Series};
use crate::report::reading::same_file;
use crate::report::Documents;
use crate::units::format_size;
use plotters::chart::SeriesLabelPosition;
use std::collections::BTreeMap;

const BLACK: usize = crate::render::plots::draw::REFERENCE;

fn out_of_place(run: &RunRecord, coll: Collective) -> Vec<&Point> {
    let mut v: Vec<&Point> = run
        .points
        .iter()
        .filter(|p| {
            p.collective == coll && p.placement == Placement::OutOfPlace && p.size_bytes > 0
        })
        .collect();
    v.sort_by_key(|p| p.size_bytes);
    v
}

fn collectives(docs: &Documents) -> Vec<Collective> {
    let mut colls = Vec::new();
    for r in &docs.runs {
        for p in &r.doc.points {
            if !colls.contains(&p.collective) {
                colls.push(p.collective);
            }
        }
    }
    colls
}

fn line(title: String, y_label: &str, y_axis: Axis) -> LineChart {
    LineChart {
        title,
        x_label: "message size (bytes, log2)".into(),
        y_label: y_label.into(),
        x_axis: Axis::Log2Bytes,
        y_axis,
        y_from_zero: y_axis == Axis::Linear,
        series: Vec::new(),
        bands: Vec::new(),
        hlines: Vec::new(),
        legend_at: SeriesLabelPosition::UpperLeft,
    }
}

fn busbw(docs: &Documents, run_labels: &[String], coll: Collective) -> Option<Plot> {
    let mut chart = line(
        format!("{coll}: bus bandwidth vs message size"),
        "busbw (GB/s)",
        Axis::Linear,
    );
    let mut sources = Vec::new();
    let mut baselines: Vec<String> = Vec::new();
    for (i, (run, label)) in docs.runs.iter().zip(run_labels).enumerate() {
        let points = out_of_place(&run.doc, coll);
        if points.is_empty() {
            continue;
        }
        let word = run.doc.source.name();
        sources.push(format!("{label}: {word}"));
        chart.series.push(Series {
            label: format!("{label} ({word})"),
            points: points
                .iter()
                .map(|p| (p.size_bytes as f64, p.busbw_bytes_per_s / 1e9))
                .collect(),
            colour: i,
            dashed: false,
            markers: true,
        });
        let Some(cmp) = docs.expectation_of(&run.file) else {
            continue;
        };
        if baselines.contains(&cmp.baseline.id) {
            continue;
        }
        baselines.push(cmp.baseline.id.clone());
        let mut expected: Vec<_> = cmp
            .points
            .iter()
            .filter(|p| {
                p.collective == coll && p.placement == Placement::OutOfPlace && p.size_bytes > 0
            })
            .collect();
        expected.sort_by_key(|p| p.size_bytes);
        if expected.is_empty() {
            continue;
        }
        chart.bands.push(Band {
            label: format!("expected band ({}, modelled)", cmp.baseline.id),
            points: expected
                .iter()
                .map(|p| {
                    (
                        p.size_bytes as f64,
                        p.expected_low_bytes_per_s / 1e9,
                        p.expected_high_bytes_per_s / 1e9,
                    )
                })
                .collect(),
            colour: i,
        });
        chart.series.push(Series {
            label: format!("expected ({})", cmp.baseline.id),
            points: expected
                .iter()
                .map(|p| (p.size_bytes as f64, p.expected_busbw_bytes_per_s / 1e9))
                .collect(),
            colour: i,
            dashed: true,
            markers: false,
        });
        let table = crate::expect::shipped();
        if let Some(entry) = table.get(&cmp.baseline.id).filter(|e| !e.per_nic) {
            if let Some(v) = entry.busbw_gbps.get(coll.name()) {
                chart.hlines.push(HLine {
                    label: format!(
                        "published plateau {v} GB/s ({}, {})",
                        entry.id, cmp.baseline.provenance
                    ),
                    y: *v,
                    colour: BLACK,
                });
            }
        }
    }
    if chart.series.is_empty() {
        return None;
    }
    let caption = format!(
        "Out-of-place busbw per size ({}). {}",
        sources.join("; "),
        if baselines.is_empty() {
            "No expectation was given or found for these runs.".to_string()
        } else {
            format!(
                "Shaded: the band the expectation allows ({}); dashed: the expected busbw at each size from NCCL's cost model anchored on the entry's plateau; the black dashed line is the entry's published plateau.",
                baselines.join(", ")
            )
        }
    );
    Some(Plot {
        name: format!("busbw-{}", coll.name()),
        title: chart.title.clone(),
        caption,
        chart: Chart::Line(chart),
    })
}

fn latency(docs: &Documents, run_labels: &[String], colls: &[Collective]) -> Option<Plot> {
    let mut chart = line(
        "Time per call vs message size".into(),
        "time per call (µs, log10)",
        Axis::Log10,
    );
    for (i, (run, label)) in docs.runs.iter().zip(run_labels).enumerate() {
        for (j, coll) in colls.iter().enumerate() {
            let points = out_of_place(&run.doc, *coll);
            if points.is_empty() {
                continue;
            }
            chart.series.push(Series {
                label: if colls.len() > 1 {
                    format!("{label}: {coll}")
                } else {
                    label.clone()
                },
                points: points
                    .iter()
                    .map(|p| (p.size_bytes as f64, p.time_s * 1e6))
                    .collect(),
                colour: i,
                dashed: j > 0,
                markers: true,
            });
        }
    }
    if chart.series.is_empty() {
        return None;
    }
    Some(Plot {
        name: "latency".into(),
        title: chart.title.clone(),
        caption: "Median time per call (the slowest rank's, as recorded), out-of-place, log-log: the flat left part is latency, the rising right part bandwidth.".into(),
        chart: Chart::Line(chart),
    })
}

fn ratio(docs: &Documents) -> Option<Plot> {
    let mut chart = line(
        "Measured / expected busbw".into(),
        "measured / expected (x)",
        Axis::Linear,
    );
    chart.legend_at = SeriesLabelPosition::UpperRight;
    let run_labels = docs.run_labels();
    for (i, c) in docs.comparisons.iter().enumerate() {
        let doc = &c.doc;
        let colour = docs
            .runs
            .iter()
            .position(|r| same_file(&r.file, &doc.run))
            .unwrap_or(i);
        let who = docs
            .runs
            .iter()
            .position(|r| same_file(&r.file, &doc.run))
            .map(|k| run_labels[k].clone())
            .unwrap_or_else(|| doc.run.clone());
        let mut by_coll: BTreeMap<Collective, Vec<&crate::documents::ComparedPoint>> =
            BTreeMap::new();
        for p in doc
            .points
            .iter()
            .filter(|p| p.placement == Placement::OutOfPlace && p.size_bytes > 0)
        {
            by_coll.entry(p.collective).or_default().push(p);
        }
        for (j, (coll, mut points)) in by_coll.into_iter().enumerate() {
            points.sort_by_key(|p| p.size_bytes);
            let expected =
                |p: &&crate::documents::ComparedPoint| p.expected_busbw_bytes_per_s.max(1e-30);
            if j == 0 {
                chart.bands.push(Band {
                    label: format!("band vs {}", doc.baseline.id),
                    points: points
                        .iter()
                        .map(|p| {
                            (
                                p.size_bytes as f64,
                                p.expected_low_bytes_per_s / expected(p),
                                p.expected_high_bytes_per_s / expected(p),
                            )
                        })
                        .collect(),
                    colour,
                });
            }
            chart.series.push(Series {
                label: format!("{who}: {coll} vs {}", doc.baseline.id),
                points: points
                    .iter()
                    .map(|p| (p.size_bytes as f64, p.ratio))
                    .collect(),
                colour,
                dashed: j > 0,
                markers: true,
            });
        }
    }
    if chart.series.is_empty() {
        return None;
    }
    chart.hlines.push(HLine {
        label: "as expected (1.0x)".into(),
        y: 1.0,
        colour: BLACK,
    });
    Some(Plot {
        name: "ratio".into(),
        title: chart.title.clone(),
        caption: "Each size's measured busbw over what its baseline gives at that size (an expectation: modelled from the published plateau; an earlier run: measured). Shaded: the band within which a point counts as expected.".into(),
        chart: Chart::Line(chart),
    })
}

fn spread(docs: &Documents, run_labels: &[String], colls: &[Collective]) -> Option<Plot> {
    let coll = colls
        .iter()
        .copied()
        .find(|c| *c == Collective::AllReduce)
        .or_else(|| colls.first().copied())?;
    let mut chart = line(
        format!("{coll}: spread of per-rank times (stragglers)"),
        "slowest − fastest rank (% of median)",
        Axis::Linear,
    );
    let mut notes = Vec::new();
    for (i, (run, label)) in docs.runs.iter().zip(run_labels).enumerate() {
        let points: Vec<&Point> = out_of_place(&run.doc, coll)
            .into_iter()
            .filter(|p| p.per_rank_time_s.len() > 1)
            .collect();
        if points.is_empty() {
            continue;
        }
        let mut slowest: BTreeMap<usize, usize> = BTreeMap::new();
        let values = points
            .iter()
            .map(|p| {
                let t = &p.per_rank_time_s;
                let (lo, hi) = t
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                        (l.min(*v), h.max(*v))
                    });
                if let Some((rank, _)) = t.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) {
                    *slowest.entry(rank).or_insert(0) += 1;
                }
                let mid = if p.time_s > 0.0 { p.time_s } else { hi };
                (p.size_bytes as f64, (hi - lo) / mid * 100.0)
            })
            .collect();
        if let Some((rank, n)) = slowest.iter().max_by_key(|(_, n)| **n) {
            let host = run
                .doc
                .backend
                .ranks
                .iter()
                .find(|r| r.rank == *rank)
                .map(|r| {
                    format!(
                        " ({}{})",
                        r.host,
                        r.device
                            .as_ref()
                            .map(|d| format!(", {d}"))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            notes.push(format!(
                "{label}: rank {rank}{host} is the slowest at {n} of {} sizes",
                points.len()
            ));
        }
        chart.series.push(Series {
            label: label.clone(),
            points: values,
            colour: i,
            dashed: false,
            markers: true,
        });
    }
    if chart.series.is_empty() {
        return None;
    }
    chart.legend_at = SeriesLabelPosition::UpperRight;
    Some(Plot {
        name: "rank-spread".into(),
        title: chart.title.clone(),
        caption: format!(
            "Per size, the gap between the slowest and the fastest rank's median time, as a share of the point's time (measured). {}.",
            notes.join("; ")
        ),
        chart: Chart::Line(chart),
    })
}

fn ddp_heatmap(file: &str, sim: &DdpSimulation) -> Option<Plot> {
    let mut caps: Vec<f64> = Vec::new();
    let mut accs: Vec<usize> = Vec::new();
    for o in &sim.configurations {
        if !caps.iter().any(|c| (c - o.bucket_cap_mb).abs() < 1e-9) {
            caps.push(o.bucket_cap_mb);
        }
        if !accs.contains(&o.accumulation) {
            accs.push(o.accumulation);
        }
    }
    if caps.is_empty() {
        return None;
    }
    caps.sort_by(f64::total_cmp);
    accs.sort_unstable();
    let mut values = vec![vec![None; caps.len()]; accs.len()];
    for o in &sim.configurations {
        let x = caps
            .iter()
            .position(|c| (c - o.bucket_cap_mb).abs() < 1e-9)?;
        let y = accs.iter().position(|a| *a == o.accumulation)?;
        let cell: &mut Option<f64> = &mut values[y][x];
        *cell = Some(cell.map_or(o.samples_per_s, |v: f64| v.max(o.samples_per_s)));
    }
    let mut best = None;
    let mut top = f64::NEG_INFINITY;
    for (y, row) in values.iter().enumerate() {
        for (x, v) in row.iter().enumerate() {
            if let Some(v) = v.filter(|v| *v > top) {
                top = v;
                best = Some((x, y));
            }
        }
    }
    Some(Plot {
        name: format!("ddp-{}", safe_stem(file)),
        title: format!("DDP {} on {} GPUs: samples/s", sim.model.name, sim.world_size),
        caption: format!(
            "Modelled samples/s per bucket_cap_mb (columns) and accumulation steps (rows), the better of with and without no_sync() in each cell; framed: the best. One GPU: {:.0} samples/s. Link: {}.",
            sim.one_gpu.samples_per_s, sim.link
        ),
        chart: Chart::Heat(Heatmap {
            title: format!("DDP {} on {} GPUs: samples/s (modelled)", sim.model.name, sim.world_size),
            x_label: "bucket_cap_mb (MiB)".into(),
            y_label: "gradient accumulation steps".into(),
            x_ticks: caps.iter().map(|c| crate::render::table::format_g(*c)).collect(),
            y_ticks: accs.iter().map(|a| a.to_string()).collect(),
            values,
            cell_text: Box::new(|v| format!("{v:.0}")),
            framed: best.map(|(x, y)| (x, y, "best")),
        }),
    })
}

/// A file's stem as a plot's file name may carry it.
fn safe_stem(file: &str) -> String {
    std::path::Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A pair matrix: one-way bandwidth at its largest size, senders by rows, receivers by
/// columns; the slowest pair framed.
fn matrix_heatmap(file: &str, doc: &crate::documents::matrix::MatrixDocument) -> Option<Plot> {
    use crate::documents::matrix::Direction;
    let size = *doc.sizes().last()?;
    let n = doc.endpoints.len();
    let mut values = vec![vec![None; n]; n];
    let mut worst: Option<((usize, usize), f64)> = None;
    for m in doc
        .measurements
        .iter()
        .filter(|m| m.direction == Direction::OneWay && m.size_bytes == size)
    {
        let gbps = m.bw_bytes_per_s / 1e9;
        if let Some(cell) = values.get_mut(m.from).and_then(|r| r.get_mut(m.to)) {
            *cell = Some(gbps);
        }
        if worst.is_none_or(|(_, w)| gbps < w) {
            worst = Some(((m.to, m.from), gbps));
        }
    }
    let labels: Vec<String> = doc.endpoints.iter().map(|e| e.label.clone()).collect();
    let named = if doc.outliers.is_empty() {
        format!("no pair below {:.2}x the median pair", doc.outlier_fraction)
    } else {
        doc.outliers
            .iter()
            .map(|o| crate::documents::matrix::analysis::describe(doc, o))
            .collect::<Vec<_>>()
            .join("; ")
    };
    Some(Plot {
        name: format!("matrix-{}", safe_stem(file)),
        title: format!("One-way bandwidth per pair at {}", format_size(size)),
        caption: format!(
            "Measured GB/s from each {} (rows) to each (columns), {} backend, {}; framed: the slowest pair. {named}.",
            if doc.by == crate::documents::matrix::By::Node { "node" } else { "rank" },
            doc.backend.name,
            match doc.schedule {
                crate::documents::matrix::Schedule::Rounds => "rounds of disjoint pairs",
                crate::documents::matrix::Schedule::OnePairAtATime => "one pair at a time",
            }
        ),
        chart: Chart::Heat(Heatmap {
            title: format!("One-way GB/s per pair at {} (measured)", format_size(size)),
            x_label: "receiver".into(),
            y_label: "sender".into(),
            x_ticks: labels.clone(),
            y_ticks: labels,
            values,
            cell_text: Box::new(|v| format!("{v:.1}")),
            framed: worst.map(|((x, y), _)| (x, y, "slowest")),
        }),
    })
}

/// Every plot the documents support, in reading order.
pub fn figures(docs: &Documents) -> Vec<Plot> {
    let run_labels = docs.run_labels();
    let colls = collectives(docs);
    let mut plots: Vec<Plot> = colls
        .iter()
        .filter_map(|c| busbw(docs, &run_labels, *c))
        .collect();
    plots.extend(latency(docs, &run_labels, &colls));
    plots.extend(ratio(docs));
    plots.extend(spread(docs, &run_labels, &colls));
    plots.extend(docs.ddp.iter().filter_map(|s| ddp_heatmap(&s.file, &s.doc)));
    plots.extend(
        docs.matrices
            .iter()
            .filter_map(|m| matrix_heatmap(&m.file, &m.doc)),
    );
    plots.extend(super::trace_view::plots(&docs.traces));
    // Two documents of one kind from files of the same name still get two files.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for p in &mut plots {
        let n = seen.entry(p.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            p.name = format!("{}-{n}", p.name);
        }
    }
    plots
}
