//! What to do, each with its evidence, ranked by the gain expected where a number exists:
//! measured alternatives (the same box without an override that forces a slower path), the
//! compare model's alternative, gaps to the expectation, the DDP simulation's best
//! configuration, a memory plan's cheapest change that fits, then diagnose's fixes by
//! severity.

use super::label::short;
use super::reading::{finished, forces_slower_path, forcing_overrides, plateau_below, same_file};
use super::{gbps, Documents, Named};
use crate::coll::{Collective, Placement};
use crate::diagnose::Severity;
use crate::documents::DdpSimulation;
use crate::model::RunRecord;
use crate::render::memory::{gib, shortfall, signed, verdict};
use crate::units::format_size;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// What to do.
    pub action: String,
    /// The expected gain in words, with its source (measured / modelled).
    pub gain: Option<String>,
    /// Where it came from: file:line of a log, a measured point, a document.
    pub evidence: Vec<String>,
    /// `measured`, `modelled`, `diagnose`, `simulate`, `simulate memory`, `compare`.
    pub origin: String,
    /// The factor behind `gain` (new / old), for ranking.
    #[serde(skip)]
    pub factor: Option<f64>,
    #[serde(skip)]
    pub severity: Option<Severity>,
}

/// The largest out-of-place size both runs measured for a collective, and each run's busbw there.
fn at_largest_common(a: &RunRecord, b: &RunRecord, coll: Collective) -> Option<(u64, f64, f64)> {
    let at = |r: &RunRecord, size: u64| {
        r.points
            .iter()
            .find(|p| {
                p.collective == coll && p.placement == Placement::OutOfPlace && p.size_bytes == size
            })
            .map(|p| p.busbw_bytes_per_s)
    };
    let mut sizes: Vec<u64> = a
        .points
        .iter()
        .filter(|p| p.collective == coll && p.placement == Placement::OutOfPlace)
        .map(|p| p.size_bytes)
        .collect();
    sizes.sort_unstable();
    sizes
        .into_iter()
        .rev()
        .find_map(|s| Some((s, at(a, s)?, at(b, s)?)))
}

/// What removing the overrides of one run gave another, measured.
pub(super) fn measured_alternatives(docs: &Documents, out: &mut Vec<Recommendation>) {
    for forced in &docs.runs {
        let overrides = forcing_overrides(&forced.doc.env);
        if overrides.is_empty() {
            continue;
        }
        let unset = overrides
            .iter()
            .map(|(k, _)| format!("unset {k}"))
            .collect::<Vec<_>>()
            .join(" and ");
        let was = overrides
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        for free in docs.runs.iter().filter(|r| {
            !std::ptr::eq(*r, forced)
                && overrides.iter().all(|(k, _)| {
                    !r.doc.env.contains_key(k) || { !forces_slower_path(k, &r.doc.env[k]) }
                })
        }) {
            if !finished(&free.doc) {
                let why = free
                    .doc
                    .error
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into());
                out.push(Recommendation {
                    action: format!(
                        "keep {was} for now: without it the run ended {}",
                        free.doc.status.name()
                    ),
                    gain: None,
                    evidence: vec![format!("{}: {why}", free.file)],
                    origin: "measured".into(),
                    factor: None,
                    severity: Some(Severity::Warning),
                });
                continue;
            }
            let mut colls: Vec<Collective> =
                forced.doc.points.iter().map(|p| p.collective).collect();
            colls.dedup();
            for coll in colls {
                let Some((size, slow, fast)) = at_largest_common(&forced.doc, &free.doc, coll)
                else {
                    continue;
                };
                if slow <= 0.0 || fast < slow * 1.05 {
                    continue;
                }
                let mut gain = format!(
                    "{coll} busbw {} → {} at {} ({}x, measured)",
                    gbps(slow),
                    gbps(fast),
                    format_size(size),
                    crate::units::fixed(fast / slow, 1)
                );
                if let Some(ddp) = ddp_gain(docs, forced, free) {
                    gain.push_str(&format!("; {ddp}"));
                }
                out.push(Recommendation {
                    action: format!("{unset} ({was} forces a slower path)"),
                    gain: Some(gain),
                    evidence: vec![
                        format!(
                            "{}: {coll} {} at {} ({was})",
                            forced.file,
                            gbps(slow),
                            format_size(size)
                        ),
                        format!(
                            "{}: {coll} {} at {} (without)",
                            free.file,
                            gbps(fast),
                            format_size(size)
                        ),
                    ],
                    origin: "measured".into(),
                    factor: Some(fast / slow),
                    severity: None,
                });
            }
        }
    }
    for failed in &docs.failed_alternatives {
        out.push(Recommendation {
            action: format!(
                "keep {} for now: the run without it could not be measured",
                failed.overrides.join(" ")
            ),
            gain: None,
            evidence: vec![failed.error.clone()],
            origin: "measured".into(),
            factor: None,
            severity: Some(Severity::Warning),
        });
    }
}

/// The DDP step on each run's curve, when a simulation was made from both.
fn ddp_gain(docs: &Documents, slow: &Named<RunRecord>, fast: &Named<RunRecord>) -> Option<String> {
    let on = |run: &Named<RunRecord>| {
        docs.ddp
            .iter()
            .find(|s| s.doc.link.contains(&short(&run.file)))
            .and_then(|s| s.doc.best.as_ref().map(|b| (s, b.iters_per_s)))
    };
    let ((sim, before), (_, after)) = (on(slow)?, on(fast)?);
    Some(format!(
        "DDP {} step {:.2} → {:.2} it/s (modelled)",
        sim.doc.model.name, before, after
    ))
}

fn modelled_alternatives(docs: &Documents, out: &mut Vec<Recommendation>) {
    for c in &docs.comparisons {
        let Some(alt) = &c.doc.without_overrides else {
            continue;
        };
        let Some(run) = docs.runs.iter().find(|r| same_file(&r.file, &c.doc.run)) else {
            continue;
        };
        for h in &run.doc.headlines {
            let Some(expected) = alt.plateau_busbw_bytes_per_s.get(h.collective.name()) else {
                continue;
            };
            let measured = h.plateau_busbw_bytes_per_s;
            if measured <= 0.0 || *expected < measured * 1.05 {
                continue;
            }
            let keys: Vec<&str> = alt
                .overrides
                .iter()
                .map(|o| o.split('=').next().unwrap_or(o))
                .collect();
            let action = format!("unset {}", keys.join(" and "));
            // A measured alternative says more than a modelled one; keep the model as evidence.
            if let Some(m) = out
                .iter_mut()
                .find(|r| r.origin == "measured" && r.action.starts_with(&action))
            {
                m.evidence.push(format!("modelled: {}", alt.sentence));
                continue;
            }
            out.push(Recommendation {
                action,
                gain: Some(format!(
                    "expected {} busbw {} → ~{} at the plateau ({:.1}x, modelled: {})",
                    h.collective,
                    gbps(measured),
                    gbps(*expected),
                    expected / measured,
                    alt.baseline.provenance
                )),
                evidence: vec![
                    alt.sentence.clone(),
                    format!("{}: {}", alt.baseline.id, alt.baseline.citation),
                ],
                origin: "modelled".into(),
                factor: Some(expected / measured),
                severity: None,
            });
        }
    }
}

/// A plateau far from its expectation with no override to blame: look for what slows the link.
fn unexplained_gaps(docs: &Documents, out: &mut Vec<Recommendation>) {
    for c in docs
        .comparisons
        .iter()
        .filter(|c| c.doc.baseline.kind == "expectation" && c.doc.without_overrides.is_none())
    {
        for (coll, ratio) in plateau_below(&c.doc) {
            if ratio <= 0.0 {
                continue;
            }
            out.push(Recommendation {
                action: format!(
                    "find what slows {coll}: check the PCIe link width and generation, the GPUs' placement and the findings below"
                ),
                gain: Some(format!(
                    "up to {:.1}x if the link gave what {} should ({}, {})",
                    1.0 / ratio,
                    c.doc.baseline.title,
                    c.doc.baseline.provenance,
                    c.doc.baseline.citation
                )),
                evidence: vec![c.doc.summary.clone(), c.doc.baseline.why.clone()],
                origin: "compare".into(),
                factor: Some(1.0 / ratio),
                severity: None,
            });
        }
    }
}

fn findings(docs: &Documents, out: &mut Vec<Recommendation>) {
    for d in &docs.diagnoses {
        for f in d
            .doc
            .findings
            .iter()
            .filter(|f| f.severity >= Severity::Warning && !f.fix.is_empty())
        {
            let evidence = f.evidence.iter().take(4).map(|e| e.cited()).collect();
            out.push(Recommendation {
                action: f.fix.clone(),
                gain: None,
                evidence,
                origin: format!("diagnose: {} ({})", f.title, f.id),
                factor: None,
                severity: Some(f.severity),
            });
        }
    }
}

/// " on the host-memory curve" when the simulation's link was measured on host memory (the
/// host or MPI backend): a gain modelled so says nothing about the GPUs' link.
fn host_curve(doc: &DdpSimulation) -> &'static str {
    if doc.link.contains("on the host-memory curve") {
        " on the host-memory curve"
    } else {
        ""
    }
}

/// The default DDP configuration a user starts from: 25 MiB buckets, no accumulation.
fn ddp_default(s: &DdpSimulation) -> Option<&crate::analysis::ddp::Outcome> {
    s.configurations
        .iter()
        .find(|o| o.accumulation == 1 && (o.bucket_cap_mb - 25.0).abs() < 1e-9)
        .or_else(|| s.configurations.iter().find(|o| o.accumulation == 1))
}

fn simulations(docs: &Documents, out: &mut Vec<Recommendation>) {
    for s in &docs.ddp {
        let doc = &s.doc;
        let (Some(best), Some(default)) = (&doc.best, ddp_default(doc)) else {
            continue;
        };
        let mut evidence: Vec<String> = doc.advice.clone();
        evidence.push(format!("{}: {}", s.file, doc.link));
        let one = doc.one_gpu.samples_per_s;
        if best.samples_per_s < one {
            out.push(Recommendation {
                action: format!(
                    "train {} on one GPU: {} GPUs over this link are slower",
                    doc.model.name, doc.world_size
                ),
                gain: Some(format!(
                    "{:.0} → {:.0} samples/s ({:.1}x, modelled{})",
                    default.samples_per_s,
                    one,
                    one / default.samples_per_s,
                    host_curve(doc)
                )),
                evidence,
                origin: "simulate".into(),
                factor: Some(one / default.samples_per_s),
                severity: None,
            });
        } else if doc.world_size > 1 && best.samples_per_s > default.samples_per_s * 1.05 {
            out.push(Recommendation {
                action: format!(
                    "use bucket_cap_mb={} and accumulation {}{}",
                    best.bucket_cap_mb,
                    best.accumulation,
                    if best.no_sync { " with no_sync()" } else { "" }
                ),
                gain: Some(format!(
                    "{:.0} → {:.0} samples/s on {} GPUs ({:.1}x, modelled{}; one GPU: {:.0})",
                    default.samples_per_s,
                    best.samples_per_s,
                    doc.world_size,
                    best.samples_per_s / default.samples_per_s,
                    host_curve(doc),
                    one
                )),
                evidence,
                origin: "simulate".into(),
                factor: Some(best.samples_per_s / default.samples_per_s),
                severity: None,
            });
        }
    }
}

/// A memory plan that does not fit: its cheapest change that does (the plan ranks the changes
/// that fit first, cheapest first). No factor: it makes the job run at all, so it ranks with
/// the warnings.
fn memory_plans(docs: &Documents, out: &mut Vec<Recommendation>) {
    for m in &docs.memory {
        let plan = &m.doc;
        let mut evidence: Vec<String> = [("GPU", &plan.gpu), ("host RAM per node", &plan.host)]
            .into_iter()
            .filter(|(_, b)| b.fits() == Some(false))
            .map(|(what, b)| format!("{}: {what} {} (modelled)", m.file, verdict(b)))
            .collect();
        let Some(change) = plan.changes.iter().find(|c| c.fits) else {
            continue;
        };
        if evidence.is_empty() {
            continue;
        }
        evidence.push(format!("cost: {}", change.cost));
        evidence.push(format!(
            "NCCL {}, PCIe {} per GPU per step (modelled)",
            signed(change.added_bus_bytes_per_gpu),
            signed(change.added_host_device_bytes_per_gpu)
        ));
        if let Some(o) = &plan.observed {
            evidence.push(format!(
                "{}: the out-of-memory error the plan holds ({} unexplained, observed less modelled)",
                o.source,
                gib(o.unexplained_bytes)
            ));
        }
        out.push(Recommendation {
            action: format!(
                "make {} fit in memory: {}, the cheapest change in its memory plan that fits",
                plan.model.name, change.change
            ),
            gain: Some(format!("{} (modelled)", shortfall(change))),
            evidence,
            origin: "simulate memory".into(),
            factor: None,
            severity: Some(Severity::Warning),
        });
    }
}

/// Every recommendation, numbers first (largest gain first), then by severity.
pub fn recommendations(docs: &Documents) -> Vec<Recommendation> {
    let mut out = Vec::new();
    measured_alternatives(docs, &mut out);
    modelled_alternatives(docs, &mut out);
    unexplained_gaps(docs, &mut out);
    simulations(docs, &mut out);
    memory_plans(docs, &mut out);
    findings(docs, &mut out);
    out.sort_by(|a, b| match (a.factor, b.factor) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => b.severity.cmp(&a.severity),
    });
    out
}
