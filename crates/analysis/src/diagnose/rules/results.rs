//! What measured or imported runs say: wrong data, cut-off output, and results far below what
//! NCCL's cost model or the topology lead one to expect.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{ev, Evidence};
use crate::model::{RunRecord, RunStatus};
use crate::units::fixed;

/// The name a run's evidence carries: its imported file, else "(run)".
fn file_of(r: &RunRecord) -> String {
    r.import
        .as_ref()
        .map(|i| i.file.clone())
        .unwrap_or_else(|| "(run)".into())
}

pub fn wrong(inp: &Inputs) -> Vec<Hit> {
    let mut hits = Vec::new();
    for r in &inp.runs {
        let file = file_of(r);
        let mut evidence: Vec<Evidence> = r
            .points
            .iter()
            .filter(|p| p.wrong.unwrap_or(0) > 0)
            .map(|p| {
                let text = format!(
                    "{} {} {}: #wrong {}",
                    p.collective,
                    p.size_bytes,
                    p.placement.name(),
                    p.wrong.unwrap_or(0)
                );
                ev(&file, 0, text)
            })
            .take(8)
            .collect();
        let oob = r
            .import
            .as_ref()
            .and_then(|i| i.reported_out_of_bounds)
            .filter(|&n| n > 0);
        if let Some(n) = oob {
            evidence.push(ev(&file, 0, format!("# Out of bounds values : {n} FAILED")));
        }
        if !evidence.is_empty() {
            hits.push(Hit::new("Collectives returned wrong data", evidence));
        }
    }
    hits
}

/// A run that did not end `complete`: what it measured is only part of what was asked for,
/// and why it stopped is the first thing to know. A failed, timed-out or killed run (its
/// record left `running`) is an error; one stopped by a signal a warning. Cut-off tables
/// (`result.truncated`) and wrong data (`result.wrong`) have rules of their own, as do the
/// errors an imported log quotes (`nccl.error`, `watchdog.timeout`, ...): an import that
/// names its errors is left to them.
pub fn incomplete(inp: &Inputs) -> Vec<Hit> {
    use crate::diagnose::finding::Severity;
    inp.runs
        .iter()
        .filter(|r| r.import.as_ref().is_none_or(|i| i.errors.is_empty()))
        .filter_map(|r| {
            let (what, severity) = match r.status {
                RunStatus::Failed => ("failed", Severity::Error),
                RunStatus::TimedOut => ("timed out", Severity::Error),
                RunStatus::Running => (
                    "never finished: its record is still `running` (the process was killed, or is still running)",
                    Severity::Error,
                ),
                RunStatus::Interrupted => ("was interrupted (SIGINT or SIGTERM)", Severity::Warning),
                RunStatus::Complete | RunStatus::CheckFailed | RunStatus::Truncated => return None,
            };
            let file = file_of(r);
            let mut evidence = vec![ev(&file, 0, format!("status {}", r.status.name()))];
            evidence.push(ev(
                &file,
                0,
                match r.points.iter().max_by_key(|p| p.size_bytes) {
                    Some(p) => format!(
                        "last size measured: {} {} ({} points)",
                        p.collective,
                        crate::units::format_size(p.size_bytes),
                        r.points.len()
                    ),
                    None => "no size measured".into(),
                },
            ));
            if let Some(e) = &r.error {
                evidence.push(ev(&file, 0, format!("error: {e}")));
            }
            Some(Hit::new(format!("The run {what}"), evidence).with_severity(severity))
        })
        .collect()
}

pub fn straggler(inp: &Inputs) -> Vec<Hit> {
    inp.runs
        .iter()
        .filter_map(|r| {
            let s = crate::documents::stragglers::straggler(&r.points)?;
            let text = crate::documents::stragglers::describe(&s, &r.backend.ranks);
            Some(Hit::new(
                format!("Rank {} holds the collectives up", s.rank),
                vec![ev(&file_of(r), 0, text)],
            ))
        })
        .collect()
}

pub fn truncated(inp: &Inputs) -> Vec<Hit> {
    let mut hits = Vec::new();
    for r in &inp.runs {
        let file = file_of(r);
        let cut_row = r
            .notes
            .iter()
            .any(|n| n.contains("interrupted") || n.contains("cut off"));
        let truncated = r.import.as_ref().is_some_and(|i| i.truncated);
        // A run that failed during start-up is an error, not a cut-off table.
        if !truncated || !(r.status == RunStatus::Truncated || cut_row || !r.points.is_empty()) {
            continue;
        }
        let last = r
            .points
            .last()
            .map(|p| format!("last complete row: {} bytes", p.size_bytes))
            .unwrap_or_else(|| "no complete row".into());
        let mut evidence = vec![ev(&file, 0, last)];
        evidence.extend(
            r.notes
                .iter()
                .filter(|n| n.contains("cut") || n.contains("interrupted") || n.contains("footer"))
                .map(|n| ev(&file, 0, n.clone())),
        );
        hits.push(Hit::new(
            "The benchmark output stops before the end of the run",
            evidence,
        ));
    }
    hits
}

/// The largest out-of-place size of each collective and type whose measured time exceeds 1.5x
/// what NCCL's cost model predicted for it.
fn slower_than_model(r: &RunRecord) -> Vec<String> {
    crate::model::largest_with_nccl_model(&r.points)
        .into_iter()
        .filter_map(|p| {
            let model = p.nccl_model_time_s?;
            (p.time_s > 1.5 * model).then(|| {
                format!(
                    "{} {} {} bytes: measured {} us, NCCL's model {} us ({}x)",
                    p.collective,
                    p.dtype,
                    p.size_bytes,
                    fixed(p.time_s * 1e6, 1),
                    fixed(model * 1e6, 1),
                    fixed(p.time_s / model, 1)
                )
            })
        })
        .collect()
}

pub fn slower_than_nccl_model(inp: &Inputs) -> Vec<Hit> {
    inp.runs
        .iter()
        .filter_map(|r| {
            let slow = slower_than_model(r);
            let file = file_of(r);
            (!slow.is_empty()).then(|| {
                Hit::new(
                    "Collectives take far longer than NCCL's own cost model predicts for this machine",
                    slow.into_iter().map(|line| ev(&file, 0, line)).collect(),
                )
            })
        })
        .collect()
}

/// A run's plateau held against the expectation `compare` chooses for it (the same engine):
/// far below it (under half), something slows the path the facts say NCCL takes.
pub fn below_expectation(inp: &Inputs) -> Vec<Hit> {
    let topo = inp.topos.first().cloned();
    let log = inp.logs.first();
    let mut hits = Vec::new();
    for r in &inp.runs {
        if r.points.iter().all(|p| p.nranks < 2) {
            continue;
        }
        let s = crate::expect::Situation::of_record(r, topo.clone(), log);
        let Ok(choice) = crate::expect::choose(crate::expect::shipped(), &s) else {
            continue;
        };
        let file = file_of(r);
        let doc = crate::expect::compare::against_expectation(&file, r, &choice);
        for (coll, ratio, top) in crate::expect::compare::plateau_ratios(&doc, &choice) {
            if ratio >= 0.5 {
                continue;
            }
            let measured = top
                .iter()
                .map(|p| p.measured_busbw_bytes_per_s)
                .fold(0.0, f64::max)
                / 1e9;
            let mut evidence: Vec<Evidence> = top
                .iter()
                .rev()
                .take(2)
                .map(|p| {
                    ev(
                        &file,
                        0,
                        format!(
                            "{coll} {} busbw {} GB/s, expected {} GB/s ({}x)",
                            crate::units::format_size(p.size_bytes),
                            fixed(p.measured_busbw_bytes_per_s / 1e9, 2),
                            fixed(p.expected_busbw_bytes_per_s / 1e9, 2),
                            fixed(p.ratio, 2)
                        ),
                    )
                })
                .collect();
            evidence.push(ev(
                "(expectation)",
                0,
                format!("{}; {}", choice.why, choice.entry.citation),
            ));
            // Without a topology the link was assumed; only a gap no link explains is a warning.
            let assumed = s.topology.is_none() && s.nnodes <= 1;
            let mut hit = Hit::new(
                format!(
                    "{coll} plateau busbw {measured:.2} GB/s is {ratio:.2}x of what this path should give ({})",
                    choice.entry.title
                ),
                evidence,
            );
            if assumed && ratio >= 0.25 {
                hit.severity = Some(crate::diagnose::finding::Severity::Info);
                hit.title
                    .push_str(" (links assumed: give the `nvidia-smi topo -m` output)");
            }
            hits.push(hit);
        }
    }
    hits
}
