//! The report as the templates see it: every figure already formatted with its unit, and every
//! number beside the word that says where it came from (measured, imported, published with its
//! citation, modelled). Strings from machines and logs are cut to `safe::VALUE_CHARS` here
//! (one environment value cannot swell the page); the templates' formatter escapes them for
//! each format and strips control characters and bidi overrides.

use super::memory::{memory_view, MemoryView};
use super::recommend::{recommendations, Recommendation};
use super::topology_view::{topology_view, TopologyView};
use super::verdict::{verdict, Verdict};
use super::{gbps, Documents, Named, Note, Timing};
use crate::model::RunRecord;
use crate::render::plots::draw::colour;
use crate::render::report::PlotView;
use crate::render::safe;
use crate::units::{fixed, format_size};

/// A value from an input (a name, an environment value, an error), at most
/// `safe::VALUE_CHARS` characters.
fn input(text: &str) -> String {
    safe::cap(text, safe::VALUE_CHARS).into_owned()
}
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub title: String,
    pub tool: String,
    pub verdict: Verdict,
    pub recommendations: Vec<Recommendation>,
    pub runs: Vec<RunView>,
    pub headline: Vec<HeadlineRow>,
    pub comparisons: Vec<ComparisonView>,
    pub qualifications: Vec<QualificationView>,
    pub findings: Vec<FindingView>,
    pub simulations: Vec<SimulationView>,
    pub fsdp: Vec<FsdpView>,
    pub memory: Vec<MemoryView>,
    pub topologies: Vec<TopologyView>,
    pub traces: Vec<super::trace_view::TraceView>,
    pub plots: Vec<PlotView>,
    pub timings: Vec<Timing>,
    pub notes: Vec<Note>,
    pub inputs: Vec<InputView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputView {
    pub file: String,
    pub kind: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub label: String,
    pub file: String,
    /// The run's colour in every plot (`#rrggbb`).
    pub colour: String,
    /// `measured` or `imported`.
    pub source: String,
    pub status: String,
    pub error: Option<String>,
    pub backend: String,
    pub backend_reason: String,
    pub nranks: usize,
    pub hosts: String,
    pub devices: Vec<String>,
    pub env: Vec<(String, String)>,
    pub libraries: Vec<(String, String)>,
    pub started_at: String,
    pub notes: Vec<String>,
    pub wrong: u64,
    pub points: Vec<PointRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PointRow {
    pub collective: String,
    pub dtype: String,
    pub size: String,
    pub placement: String,
    pub time_us: String,
    pub algbw: String,
    pub busbw: String,
    /// ± half-width of the median's 95% interval, or `-` for imported rows.
    pub interval: String,
    pub samples: usize,
    pub wrong: String,
}

/// One collective across every run, side by side.
#[derive(Debug, Clone, Serialize)]
pub struct HeadlineRow {
    pub collective: String,
    pub cells: Vec<HeadlineCell>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeadlineCell {
    pub run: String,
    pub source: String,
    pub plateau: String,
    pub latency: String,
    /// measured / expected at the plateau, with what the expectation is.
    pub vs_expected: String,
    pub expected_from: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComparisonView {
    pub file: String,
    pub run: String,
    pub against: String,
    pub provenance: String,
    pub citation: String,
    pub why: String,
    pub summary: String,
    pub method: String,
    pub without_overrides: Option<String>,
    pub not_compared: Vec<String>,
    pub warnings: Vec<String>,
    pub points: Vec<ComparedRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComparedRow {
    pub collective: String,
    pub size: String,
    pub placement: String,
    pub measured: String,
    pub expected: String,
    pub band: String,
    pub ratio: String,
    pub verdict: String,
    pub layer: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct QualificationView {
    pub file: String,
    pub passed: bool,
    pub summary: String,
    pub attempts: usize,
    pub rules: Vec<RuleRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    pub rule: String,
    pub at: String,
    pub measured: String,
    pub required: String,
    pub passed: bool,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingView {
    pub severity: String,
    pub id: String,
    pub title: String,
    pub evidence: Vec<String>,
    pub explanation: String,
    pub fix: String,
    pub source: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SimulationView {
    pub file: String,
    pub model: String,
    pub world_size: usize,
    pub batch_size: usize,
    pub link: String,
    pub one_gpu: String,
    pub best: String,
    pub advice: Vec<String>,
    /// The input pipeline's verdict, then its advice (modelled), when it was simulated.
    pub loader: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FsdpView {
    pub file: String,
    pub model: String,
    pub world_size: usize,
    pub link: String,
    pub rows: Vec<(String, String, String, String)>,
}

pub fn hex(index: usize) -> String {
    let c = colour(index);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn run_view(file: &str, label: &str, index: usize, r: &RunRecord) -> RunView {
    let mut devices: Vec<String> = r
        .backend
        .ranks
        .iter()
        .map(|k| match &k.device {
            Some(d) => format!("rank {} on {}: {}", k.rank, input(&k.host), input(d)),
            None => format!("rank {} on {}", k.rank, input(&k.host)),
        })
        .collect();
    devices.truncate(64);
    RunView {
        label: input(label),
        file: input(file),
        colour: hex(index),
        source: r.source.name().into(),
        status: r.status.name().into(),
        error: r
            .error
            .as_deref()
            .map(|e| safe::cap(e, safe::TEXT_CHARS).into_owned()),
        backend: input(&r.backend.name),
        backend_reason: input(&r.backend.reason),
        nranks: r.backend.nranks,
        hosts: r
            .backend
            .hosts
            .iter()
            .take(64)
            .map(|h| input(h))
            .collect::<Vec<_>>()
            .join(", "),
        devices,
        env: r.env.iter().map(|(k, v)| (input(k), input(v))).collect(),
        libraries: r
            .backend
            .library_versions
            .iter()
            .map(|(k, v)| (input(k), input(v)))
            .collect(),
        started_at: input(&r.started_at),
        // The record's notes, then what NCCL said and chose (the lines after a sweep's table).
        notes: r
            .notes
            .iter()
            .map(|n| safe::cap(n, safe::TEXT_CHARS).into_owned())
            .chain(
                crate::render::table::algo_ranges(&r.points)
                    .into_iter()
                    .chain(crate::render::table::nccl_said(r))
                    .map(|l| input(l.trim_start_matches("# "))),
            )
            .collect(),
        wrong: r.total_wrong(),
        points: r
            .points
            .iter()
            .map(|p| PointRow {
                collective: p.collective.to_string(),
                dtype: p.dtype.to_string(),
                size: format_size(p.size_bytes),
                placement: p.placement.name().into(),
                time_us: fixed(p.time_s * 1e6, 2),
                algbw: gbps(p.algbw_bytes_per_s),
                busbw: gbps(p.busbw_bytes_per_s),
                interval: if p.samples_s.len() > 1 && p.stats.ci_rel_half_width.is_finite() {
                    format!("±{}%", fixed(p.stats.ci_rel_half_width * 100.0, 1))
                } else {
                    "-".into()
                },
                samples: p.samples_s.len(),
                wrong: p.wrong.map(|w| w.to_string()).unwrap_or_else(|| "-".into()),
            })
            .collect(),
    }
}

fn headline(docs: &Documents, run_labels: &[String]) -> Vec<HeadlineRow> {
    let mut colls = Vec::new();
    for run in &docs.runs {
        for h in &run.doc.headlines {
            if !colls.contains(&h.collective) {
                colls.push(h.collective);
            }
        }
    }
    colls
        .into_iter()
        .map(|coll| HeadlineRow {
            collective: coll.to_string(),
            cells: docs
                .runs
                .iter()
                .zip(run_labels)
                .map(|(run, label)| {
                    let h = run.doc.headlines.iter().find(|h| h.collective == coll);
                    let cmp = docs.expectation_of(&run.file);
                    // The plateau's ratio as the summary sentence gives it (one figure per
                    // page), and the verdict and layer of the plateau's largest point.
                    let ratio = cmp.and_then(|c| {
                        let (r, floor) = crate::expect::compare::plateau_ratio_of(c, coll)?;
                        let top = c
                            .points
                            .iter()
                            .filter(|p| p.collective == coll && p.size_bytes >= floor)
                            .max_by_key(|p| p.size_bytes)?;
                        Some((r, top.verdict.clone(), top.layer.clone(), floor))
                    });
                    HeadlineCell {
                        run: label.clone(),
                        source: run.doc.source.name().into(),
                        plateau: h
                            .map(|h| {
                                format!(
                                    "{} ({}–{})",
                                    gbps(h.plateau_busbw_bytes_per_s),
                                    format_size(
                                        h.plateau_sizes_bytes.iter().copied().min().unwrap_or(0)
                                    ),
                                    format_size(
                                        h.plateau_sizes_bytes.iter().copied().max().unwrap_or(0)
                                    )
                                )
                            })
                            .unwrap_or_else(|| "-".into()),
                        latency: h
                            .map(|h| {
                                format!(
                                    "{} µs at {}",
                                    fixed(h.small_latency_s * 1e6, 1),
                                    format_size(h.small_size_bytes)
                                )
                            })
                            .unwrap_or_else(|| "-".into()),
                        vs_expected: ratio
                            .as_ref()
                            .map(|(r, v, _, floor)| {
                                format!(
                                    "{} at {} and above ({v})",
                                    crate::units::ratio(*r),
                                    format_size(*floor)
                                )
                            })
                            .unwrap_or_else(|| "-".into()),
                        expected_from: match (cmp, ratio) {
                            (Some(c), Some((_, _, layer, _))) => format!(
                                "{layer}; {} ({}): {}",
                                c.baseline.title, c.baseline.provenance, c.baseline.citation
                            ),
                            _ => "no expectation for this run".into(),
                        },
                    }
                })
                .collect(),
        })
        .collect()
}

fn comparison_view(file: &str, c: &crate::documents::Comparison) -> ComparisonView {
    ComparisonView {
        file: file.to_string(),
        run: c.run.clone(),
        against: format!("{} ({})", c.baseline.title, c.baseline.id),
        provenance: c.baseline.provenance.clone(),
        citation: c.baseline.citation.clone(),
        why: c.baseline.why.clone(),
        summary: c.summary.clone(),
        method: c.method.clone(),
        without_overrides: c.without_overrides.as_ref().map(|a| a.sentence.clone()),
        not_compared: c.not_compared.clone(),
        // The curve's shape findings read beside the warnings: both qualify the verdicts below.
        warnings: c
            .warnings
            .iter()
            .cloned()
            .chain(c.shape.iter().map(|f| format!("shape: {}", f.sentence)))
            .collect(),
        points: c
            .points
            .iter()
            .map(|p| ComparedRow {
                collective: p.collective.to_string(),
                size: format_size(p.size_bytes),
                placement: p.placement.name().into(),
                measured: gbps(p.measured_busbw_bytes_per_s),
                expected: gbps(p.expected_busbw_bytes_per_s),
                band: format!(
                    "{}–{}",
                    fixed(p.expected_low_bytes_per_s / 1e9, 2),
                    fixed(p.expected_high_bytes_per_s / 1e9, 2)
                ),
                ratio: crate::units::ratio(p.ratio),
                verdict: p.verdict.clone(),
                layer: p.layer.clone(),
            })
            .collect(),
    }
}

fn value(v: Option<f64>, unit: &str) -> String {
    v.map(|v| format!("{} {unit}", crate::render::table::format_g(v)))
        .unwrap_or_else(|| "-".into())
}

fn others(docs: &Documents) -> (Vec<QualificationView>, Vec<FindingView>) {
    let mut quals: Vec<(&str, &crate::documents::Qualification)> = docs
        .qualifications
        .iter()
        .map(|q| (q.file.as_str(), &q.doc))
        .collect();
    for run in &docs.runs {
        if let Some(q) = &run.doc.qualification {
            quals.push((run.file.as_str(), q));
        }
    }
    let qualifications = quals
        .into_iter()
        .map(|(file, q)| QualificationView {
            file: file.to_string(),
            passed: q.passed,
            summary: q.summary.clone(),
            attempts: q.attempts,
            rules: q
                .results
                .iter()
                .map(|r| RuleRow {
                    rule: r.rule.clone(),
                    at: match (r.collective, r.size_bytes) {
                        (Some(c), Some(s)) => format!("{c} {}", format_size(s)),
                        (Some(c), None) => c.to_string(),
                        _ => String::new(),
                    },
                    measured: value(r.measured, &r.unit),
                    required: value(r.required, &r.unit),
                    passed: r.passed,
                    message: r.message.clone(),
                })
                .collect(),
        })
        .collect();
    let findings = docs
        .diagnoses
        .iter()
        .flat_map(|d| d.doc.findings.iter())
        .map(|f| FindingView {
            severity: format!("{:?}", f.severity).to_lowercase(),
            id: f.id.clone(),
            title: f.title.clone(),
            evidence: f.evidence.iter().map(|e| e.cited()).collect(),
            explanation: f.explanation.clone(),
            fix: f.fix.clone(),
            source: f.source.clone(),
        })
        .collect();
    (qualifications, findings)
}

fn simulations(docs: &Documents) -> (Vec<SimulationView>, Vec<FsdpView>) {
    let ddp = docs
        .ddp
        .iter()
        .map(|s| {
            let d = &s.doc;
            SimulationView {
                file: s.file.clone(),
                model: format!("{} ({:.1} M parameters, {})", d.model.name, d.model.params as f64 / 1e6, d.model.source),
                world_size: d.world_size,
                batch_size: d.batch_size,
                link: d.link.clone(),
                one_gpu: format!(
                    "{:.0} samples/s, {:.2} it/s (modelled from the compute time given)",
                    d.one_gpu.samples_per_s, d.one_gpu.iters_per_s
                ),
                best: d
                    .best
                    .as_ref()
                    .map(|b| {
                        // With the loader modelled, the whole step's rates.
                        let (samples, iters) = b.loader.map_or((b.samples_per_s, b.iters_per_s), |l| {
                            (l.samples_per_s, b.accumulation as f64 / l.step_time_s)
                        });
                        format!(
                            "bucket_cap_mb={} accumulation {}{}: {:.0} samples/s, {:.2} it/s, scaling efficiency {:.0}% (modelled)",
                            b.bucket_cap_mb,
                            b.accumulation,
                            if b.no_sync { " with no_sync()" } else { "" },
                            samples,
                            iters,
                            b.scaling_efficiency * 100.0
                        )
                    })
                    .unwrap_or_else(|| "-".into()),
                advice: d.advice.clone(),
                loader: d
                    .loader
                    .iter()
                    .flat_map(|l| {
                        std::iter::once(format!("{} (modelled)", l.verdict)).chain(l.advice.iter().cloned())
                    })
                    .collect(),
            }
        })
        .collect();
    let fsdp = docs
        .fsdp
        .iter()
        .map(|s| FsdpView {
            file: s.file.clone(),
            model: s.doc.model.name.clone(),
            world_size: s.doc.world_size,
            link: s.doc.link.clone(),
            rows: s
                .doc
                .strategies
                .iter()
                .map(|r| {
                    (
                        format!("{:?}", r.estimate.strategy),
                        format!("{:.1} ms", r.estimate.step_time_s * 1e3),
                        format!(
                            "{:.1} GiB",
                            r.estimate.total_bytes_per_gpu / (1u64 << 30) as f64
                        ),
                        match r.fits {
                            Some(true) => "fits".into(),
                            Some(false) => "does not fit".into(),
                            None => "-".into(),
                        },
                    )
                })
                .collect(),
        })
        .collect();
    (ddp, fsdp)
}

/// The report's input list: each document's file and what it is.
fn listed<'a, T>(docs: &'a [Named<T>], kind: &'a str) -> impl Iterator<Item = InputView> + 'a {
    docs.iter().map(move |d| InputView {
        file: d.file.clone(),
        kind: kind.to_string(),
    })
}

/// The whole report but its plots (added by the renderer once drawn).
pub fn build(docs: &Documents, title: &str) -> Report {
    let run_labels = docs.run_labels();
    let (qualifications, findings) = others(docs);
    let (simulations, fsdp) = simulations(docs);
    let tool = crate::buildinfo::tool_info();
    let inputs = listed(&docs.runs, "run")
        .chain(listed(&docs.diagnoses, "diagnosis"))
        .chain(listed(&docs.ddp, "simulation (ddp)"))
        .chain(listed(&docs.fsdp, "simulation (fsdp)"))
        .chain(listed(&docs.memory, "memory plan"))
        .chain(listed(&docs.comparisons, "comparison"))
        .chain(listed(&docs.qualifications, "qualification"))
        .chain(listed(&docs.topologies, "topology"))
        .chain(listed(&docs.traces, "trace"))
        .collect();
    Report {
        title: title.to_string(),
        tool: format!("{} {}", tool.name, tool.version),
        verdict: verdict(docs),
        recommendations: recommendations(docs),
        runs: docs
            .runs
            .iter()
            .zip(&run_labels)
            .enumerate()
            .map(|(i, (r, l))| run_view(&r.file, l, i, &r.doc))
            .collect(),
        headline: headline(docs, &run_labels),
        comparisons: docs
            .comparisons
            .iter()
            .map(|c| comparison_view(&c.file, &c.doc))
            .collect(),
        qualifications,
        findings,
        simulations,
        fsdp,
        memory: docs
            .memory
            .iter()
            .map(|m| memory_view(&m.file, &m.doc))
            .collect(),
        topologies: docs
            .topologies
            .iter()
            .map(|t| topology_view(&t.doc))
            .collect(),
        traces: super::trace_view::views(&docs.traces),
        plots: Vec::new(),
        timings: docs.timings.clone(),
        notes: docs.notes.clone(),
        inputs,
    }
}
