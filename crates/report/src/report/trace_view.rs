//! A training job's trace as the report shows it: the verdict, where each step went, each
//! collective against the link, the straggler or the hang, the what-if; its plots (the steps
//! as stacked bars per rank, and achieved against expected busbw per collective); and the
//! verdict's reasons from it.

use super::Named;
use crate::documents::trace::TraceDocument;
use crate::render::plots::{Axis, Chart, LineChart, Plot, Series, StackedBars};
use crate::render::safe;
use crate::units::format_size;
use serde::Serialize;

/// Steps drawn and listed per trace.
const STEPS_SHOWN: usize = 24;

#[derive(Debug, Clone, Serialize)]
pub struct TraceView {
    pub file: String,
    pub verdict: String,
    pub job: String,
    pub steps: Vec<[String; 8]>,
    pub more_steps: usize,
    pub collectives: Vec<[String; 9]>,
    pub straggler: Option<String>,
    pub hang: Option<String>,
    pub what_if: Option<String>,
    pub what_if_rows: Vec<[String; 3]>,
    pub notes: Vec<String>,
}

fn ms(v: f64) -> String {
    format!("{v:.2} ms")
}

pub fn view(file: &str, d: &TraceDocument) -> TraceView {
    let job = d.job_line();
    TraceView {
        file: safe::cap(file, safe::VALUE_CHARS).into_owned(),
        verdict: format!("{}: {}", d.verdict.code, d.verdict.summary),
        job,
        steps: d
            .steps
            .iter()
            .take(STEPS_SHOWN)
            .map(|s| {
                [
                    s.rank.to_string(),
                    s.step.to_string(),
                    ms(s.wall_ms),
                    ms(s.compute_ms),
                    ms(s.exposed_comm_ms),
                    ms(s.loader_wait_ms),
                    ms(s.other_idle_ms),
                    s.critical_collective.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect(),
        more_steps: d.steps.len().saturating_sub(STEPS_SHOWN),
        collectives: d
            .collectives
            .iter()
            .map(|c| {
                [
                    c.collective.name().to_string(),
                    format_size(c.size_bytes),
                    c.nranks.to_string(),
                    c.count.to_string(),
                    ms(c.fabric_ms),
                    format!("{:.2} GB/s", c.busbw_gbs),
                    format!("{:.0}%", 100.0 * c.exposed_fraction),
                    c.expected_ms.map_or("-".into(), ms),
                    c.verdict.clone(),
                ]
            })
            .collect(),
        straggler: d.straggler.as_ref().map(|s| {
            format!(
                "rank {} arrived last in {} of {} matched calls; the others waited a median {:.2} ms for it",
                s.rank, s.last_in, s.of, s.late_ms
            )
        }),
        hang: d.hang.as_ref().map(|h| format!("{} ({})", h.summary, h.cause)),
        what_if: d.what_if.as_ref().map(|w| w.calibration()),
        what_if_rows: d
            .what_if
            .iter()
            .flat_map(|w| &w.rows)
            .map(|r| [r.question.clone(), ms(r.step_ms), format!("{:.2}x", r.speedup)])
            .collect(),
        notes: d.notes.iter().map(|n| safe::cap(n, 400).into_owned()).collect(),
    }
}

pub fn views(traces: &[Named<TraceDocument>]) -> Vec<TraceView> {
    traces.iter().map(|t| view(&t.file, &t.doc)).collect()
}

fn stem(file: &str) -> String {
    let base = std::path::Path::new(file)
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    base.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The steps as stacked bars (compute, exposed communication, loader wait, other idle), and
/// the collectives' achieved busbw beside what the link says, per trace.
pub fn plots(traces: &[Named<TraceDocument>]) -> Vec<Plot> {
    let mut out = Vec::new();
    for t in traces {
        let d = &t.doc;
        let steps: Vec<_> = d.steps.iter().take(STEPS_SHOWN).collect();
        if !steps.is_empty() {
            let part = |f: fn(&crate::documents::trace::StepBreakdown) -> f64| {
                steps.iter().map(|s| f(s)).collect()
            };
            out.push(Plot {
                name: format!("trace-steps-{}", stem(&t.file)),
                title: "Where each step went".into(),
                caption: format!(
                    "{}: each profiler step's wall time split into GPU compute, communication with no compute beside it, the GPU idle while the host waited on the DataLoader, and other idle time (measured from the job's trace)",
                    t.file
                ),
                chart: Chart::Bars(StackedBars {
                    title: "Where each step went (from the job's trace)".into(),
                    x_label: "rank:step".into(),
                    y_label: "ms".into(),
                    labels: steps.iter().map(|s| format!("{}:{}", s.rank, s.step)).collect(),
                    parts: vec![
                        ("compute".into(), 0, part(|s| s.compute_ms)),
                        ("exposed communication".into(), 1, part(|s| s.exposed_comm_ms)),
                        ("DataLoader wait".into(), 2, part(|s| s.loader_wait_ms)),
                        ("other idle".into(), 3, part(|s| s.other_idle_ms)),
                    ],
                }),
            });
        }
        let sized: Vec<_> = d
            .collectives
            .iter()
            .filter(|c| c.nranks > 1 && c.busbw_gbs > 0.0)
            .collect();
        if sized.is_empty() {
            continue;
        }
        let mut series = Vec::new();
        let mut colls: Vec<_> = sized.iter().map(|c| c.collective).collect();
        colls.dedup();
        for (i, coll) in colls.iter().enumerate() {
            let mut pts: Vec<(f64, f64)> = sized
                .iter()
                .filter(|c| c.collective == *coll)
                .map(|c| (c.size_bytes as f64, c.busbw_gbs))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series {
                label: format!("{coll} (traced)"),
                points: pts,
                colour: i,
                dashed: false,
                markers: true,
            });
            let mut exp: Vec<(f64, f64)> = sized
                .iter()
                .filter(|c| c.collective == *coll)
                .filter_map(|c| {
                    let e = c.expected_ms? / 1e3;
                    Some((
                        c.size_bytes as f64,
                        c.size_bytes as f64 * c.collective.busbw_factor(c.nranks) / e / 1e9,
                    ))
                })
                .collect();
            exp.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !exp.is_empty() {
                series.push(Series {
                    label: format!("{coll} (the link given)"),
                    points: exp,
                    colour: i,
                    dashed: true,
                    markers: false,
                });
            }
        }
        out.push(Plot {
            name: format!("trace-collectives-{}", stem(&t.file)),
            title: "The job's collectives against the link".into(),
            caption: format!(
                "{}: busbw each traced collective reached (measured from the job's trace: the fabric's time where every rank's trace was given, else one rank's kernel time, which includes waiting for peers), beside what the link given says (modelled)",
                t.file
            ),
            chart: Chart::Line(LineChart {
                title: "Traced collectives: busbw vs message size".into(),
                x_label: "message size (bytes, log2)".into(),
                y_label: "busbw (GB/s)".into(),
                x_axis: Axis::Log2Bytes,
                y_axis: Axis::Linear,
                y_from_zero: true,
                series,
                bands: Vec::new(),
                hlines: Vec::new(),
                legend_at: plotters::chart::SeriesLabelPosition::UpperLeft,
            }),
        });
    }
    out
}

/// The verdict's reasons a trace gives, by level: (failed, degraded, fine, not judged).
pub fn reasons(traces: &[Named<TraceDocument>]) -> [Vec<String>; 4] {
    let mut levels: [Vec<String>; 4] = Default::default();
    for t in traces {
        let v = &t.doc.verdict;
        let line = format!("the job's trace ({}): {}", t.file, v.summary);
        let level = match v.code.as_str() {
            "hang" => 0,
            "slow-collective" | "data-bound" | "communication-exposed" | "host-bound" => 1,
            "compute-bound" => 2,
            _ => 3,
        };
        levels[level].push(line);
    }
    levels
}
