//! What a reader sees first: healthy / degraded / failed / not judged with the one sentence
//! why (the recommendations that follow it are `recommend`'s). A verdict is earned, never
//! defaulted: HEALTHY needs something that was held against an expectation, a rule, an
//! earlier run or a memory budget and passed; when nothing was, the verdict is NOT JUDGED
//! with the reason (host memory measured, no expectation applies, the NICs are unknown).

use super::reading::{finished, forcing_overrides, plateau_below};
use super::recommend::measured_alternatives;
use super::Documents;
use crate::diagnose::Severity;
use crate::model::{RunRecord, Source};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    Healthy,
    Degraded,
    Failed,
    /// Nothing given was held against anything: no verdict was reached.
    NotJudged,
}

impl State {
    /// The word a reader sees: HEALTHY, DEGRADED, FAILED, NOT JUDGED.
    pub fn word(self) -> &'static str {
        match self {
            State::Healthy => "HEALTHY",
            State::Degraded => "DEGRADED",
            State::Failed => "FAILED",
            State::NotJudged => "NOT JUDGED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub state: State,
    /// `state` as a reader sees it (`NOT JUDGED`, with its space).
    pub word: &'static str,
    /// One sentence: the worst reason, or why all is well.
    pub sentence: String,
    /// Every reason at the verdict's level, worst first.
    pub reasons: Vec<String>,
    /// Which backend measured each run, and why it was the one: the first thing to know
    /// about a figure (host memory between threads says nothing about GPUs).
    pub measured: Vec<String>,
    /// What was given but not judged, and why, beside a verdict reached on the rest (for NOT
    /// JUDGED these are its reasons).
    pub not_judged: Vec<String>,
}

/// Backends that move host memory, not GPU memory: their figures judge nothing about GPUs.
fn host_memory_backend(r: &RunRecord) -> bool {
    r.source == Source::Measured && matches!(r.backend.name.as_str(), "host" | "mpi")
}

/// The line that names a run's backend and why it ran.
fn measured_line(label: &str, r: &RunRecord) -> String {
    let ranks = match r.backend.hosts.len() {
        0 | 1 => format!("{} ranks", r.backend.nranks),
        n => format!("{} ranks on {n} hosts", r.backend.nranks),
    };
    match r.source {
        Source::Imported => format!("{label}: imported, not measured here ({ranks})"),
        Source::Measured if host_memory_backend(r) => format!(
            "{label}: {} backend, {ranks} ({}): host memory between {} was measured; nothing here says anything about the GPUs",
            r.backend.name,
            r.backend.reason,
            if r.backend.name == "host" { "threads" } else { "processes" }
        ),
        Source::Measured => format!(
            "{label}: {} backend, {ranks} ({})",
            r.backend.name, r.backend.reason
        ),
    }
}

/// The reasons found so far, by the level they put the verdict at.
#[derive(Default)]
struct Levels {
    failed: Vec<String>,
    degraded: Vec<String>,
    fine: Vec<String>,
    not_judged: Vec<String>,
}

/// What each run says by itself: how it ended, wrong elements, its gate, and whether anything
/// about GPUs was measured at all.
fn runs(docs: &Documents, run_labels: &[String], levels: &mut Levels) {
    let alternative = |r: &RunRecord| {
        docs.runs.len() > 1 && forcing_overrides(&r.env).is_empty() && r.source == Source::Measured
    };
    for (run, label) in docs.runs.iter().zip(run_labels) {
        let r = &run.doc;
        if !finished(r) {
            let why = r
                .error
                .clone()
                .unwrap_or_else(|| "no reason recorded".into());
            let text = format!("the run ({label}) ended {}: {why}", r.status.name());
            // A run measured only to try the machine without its overrides is information
            // for the recommendation, not a fault of the machine as configured.
            if alternative(r) {
                levels.degraded.push(text);
            } else {
                levels.failed.push(text);
            }
        }
        let wrong = r.total_wrong();
        if wrong > 0 {
            levels.failed.push(format!(
                "{wrong} elements came back wrong in the run ({label}): the data path corrupts data"
            ));
        }
        match r.qualification.as_ref() {
            Some(q) if q.results.is_empty() => levels
                .not_judged
                .push(format!("the gate ({label}): {}", q.summary)),
            Some(q) if !q.passed => levels
                .failed
                .push(format!("qualification failed ({label}): {}", q.summary)),
            Some(q) => levels
                .fine
                .push(format!("qualification passed ({label}): {}", q.summary)),
            None => {}
        }
        let compared = docs.comparisons.iter().any(|c| {
            super::reading::is_of_run(&c.doc.run, c.doc.run_id.as_deref(), &run.file, r)
                && c.doc.baseline.kind != "conditional"
        });
        if host_memory_backend(r) && r.qualification.is_none() && !compared {
            levels.not_judged.push(format!(
                "no GPU was measured ({label}): the {} backend moved host memory ({}); give the GPUs to this machine (a container needs --gpus) or run with --backend nccl",
                r.backend.name, r.backend.reason
            ));
        }
    }
}

/// What each pair matrix says: how it ended, wrong bytes, slow endpoints and pairs.
fn matrices(docs: &Documents, levels: &mut Levels) {
    for m in &docs.matrices {
        let d = &m.doc;
        if d.status != crate::model::RunStatus::Complete {
            levels.failed.push(format!(
                "the pair matrix ({}) ended {}: {}",
                m.file,
                d.status.name(),
                d.error
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into())
            ));
        }
        if d.total_wrong() > 0 {
            levels.failed.push(format!(
                "{} bytes came back wrong between pairs ({})",
                d.total_wrong(),
                m.file
            ));
        }
        for (e, ratio) in crate::documents::matrix::analysis::slow_endpoints(d) {
            levels.degraded.push(format!(
                "{}: its pairs reach {ratio:.2}x the median one-way bandwidth ({})",
                d.endpoints[e].label, m.file
            ));
        }
        for o in &d.outliers {
            levels
                .degraded
                .push(crate::documents::matrix::analysis::describe(d, o));
        }
    }
}

pub fn verdict(docs: &Documents) -> Verdict {
    let run_labels = docs.run_labels();
    let backends: Vec<String> = docs
        .runs
        .iter()
        .zip(&run_labels)
        .map(|(run, label)| measured_line(label, &run.doc))
        .collect();
    let mut levels = Levels::default();
    runs(docs, &run_labels, &mut levels);
    levels.not_judged.extend(docs.not_judged.iter().cloned());
    matrices(docs, &mut levels);
    let [failed, degraded, fine, not_judged] = super::trace_view::reasons(&docs.traces);
    levels.failed.extend(failed);
    levels.degraded.extend(degraded);
    levels.fine.extend(fine);
    levels.not_judged.extend(not_judged);
    let Levels {
        mut failed,
        mut degraded,
        mut fine,
        mut not_judged,
    } = levels;
    for n in &docs.notes {
        match n.level.as_str() {
            "error" => failed.push(n.text.clone()),
            "warning" => degraded.push(n.text.clone()),
            _ => {}
        }
    }
    for q in &docs.qualifications {
        if q.doc.results.is_empty() {
            not_judged.push(format!("the gate ({}): {}", q.file, q.doc.summary));
        } else if q.doc.passed {
            fine.push(format!("qualification passed: {}", q.doc.summary));
        } else {
            failed.push(format!("qualification failed: {}", q.doc.summary));
        }
    }
    for d in &docs.diagnoses {
        for f in &d.doc.findings {
            match f.severity {
                Severity::Error => failed.push(f.title.clone()),
                Severity::Warning => degraded.push(f.title.clone()),
                Severity::Info => {}
            }
        }
    }
    for c in &docs.comparisons {
        let doc = &c.doc;
        if doc.baseline.kind == "conditional" {
            // The NICs are not known: readings per NIC count, no verdict.
            not_judged.push(format!("{} ({})", doc.summary, doc.baseline.why));
        } else if !doc.judged() {
            not_judged.push(format!("{}: {}", c.file, doc.summary));
        } else if doc.baseline.kind == "expectation" {
            if plateau_below(doc).is_empty() {
                fine.push(doc.summary.clone());
            } else {
                degraded.insert(0, doc.summary.clone());
            }
        } else if doc.points.iter().any(|p| p.verdict == "regression") {
            degraded.push(doc.summary.clone());
        } else {
            fine.push(doc.summary.clone());
        }
    }
    let mut measured = Vec::new();
    measured_alternatives(docs, &mut measured);
    for m in measured
        .iter()
        .filter(|m| m.factor.is_some_and(|f| f >= 1.2))
    {
        if let Some(gain) = &m.gain {
            degraded.push(format!("{}: {gain}", m.action));
        }
    }
    simulations(docs, &mut degraded);
    memory_plans(docs, &mut degraded, &mut fine);
    if docs.runs.is_empty() && docs.matrices.is_empty() && fine.is_empty() {
        // A diagnosis alone is a judgement of what it read.
        for d in docs.diagnoses.iter().filter(|d| d.doc.findings.is_empty()) {
            fine.push(format!(
                "the diagnosis of {} found no known problem",
                d.file
            ));
        }
    }
    let (state, reasons) = if !failed.is_empty() {
        (State::Failed, failed)
    } else if !degraded.is_empty() {
        (State::Degraded, degraded)
    } else if !fine.is_empty() {
        (State::Healthy, fine)
    } else {
        let mut why = std::mem::take(&mut not_judged);
        if why.is_empty() {
            why.push(if docs.is_empty() {
                "nothing was given to judge".to_string()
            } else {
                "nothing given was held against an expectation, a rule or an earlier run: give a run with --collective and --hardware, a rule (--min-busbw) or a run to compare with".to_string()
            });
        }
        (State::NotJudged, why)
    };
    Verdict {
        state,
        word: state.word(),
        sentence: reasons.first().cloned().unwrap_or_default(),
        reasons,
        measured: backends,
        not_judged,
    }
}

/// What the DDP simulations say is wrong: a starved input pipeline, GPUs slower than one.
fn simulations(docs: &Documents, degraded: &mut Vec<String>) {
    for s in &docs.ddp {
        if let Some(l) = s
            .doc
            .loader
            .as_ref()
            .filter(|l| l.current.bound_by == crate::documents::simulation::Bound::Data)
        {
            degraded.push(format!(
                "the input pipeline starves the GPUs of {}: {} (modelled)",
                s.doc.model.name, l.verdict
            ));
        }
        if let Some(best) = &s.doc.best {
            if best.samples_per_s < s.doc.one_gpu.samples_per_s {
                degraded.push(format!(
                    "{} GPUs train {} slower than one: {:.0} samples/s at best vs {:.0} on one GPU",
                    s.doc.world_size,
                    s.doc.model.name,
                    best.samples_per_s,
                    s.doc.one_gpu.samples_per_s
                ));
            }
        }
    }
}

/// What the memory plans say: a setup short of its GPU's or its host's memory degrades the
/// report (the job would end out of memory), one that fits is said as such.
fn memory_plans(docs: &Documents, degraded: &mut Vec<String>, fine: &mut Vec<String>) {
    for m in &docs.memory {
        let plan = &m.doc;
        let s = &plan.setup;
        let basis = match &plan.observed {
            Some(o) => format!(
                "modelled with the {} the observed out-of-memory error leaves unexplained",
                crate::render::memory::gib(o.unexplained_bytes)
            ),
            None => "modelled".into(),
        };
        let setup = format!(
            "{} on {} GPU{}, seq {} x micro-batch {}",
            s.strategy.name(),
            s.world_size,
            if s.world_size == 1 { "" } else { "s" },
            s.seq_len,
            s.micro_batch
        );
        let budgets = [("its GPU", &plan.gpu), ("its host's RAM", &plan.host)];
        let mut short = false;
        for (what, budget) in budgets {
            if budget.fits() == Some(false) {
                short = true;
                degraded.push(format!(
                    "the memory plan of {} ({setup}) on {what}: {} ({basis})",
                    plan.model.name,
                    crate::render::memory::verdict(budget)
                ));
            }
        }
        if !short && plan.gpu.fits() == Some(true) {
            fine.push(format!(
                "the memory plan of {} ({setup}) on its GPU: {} ({basis})",
                plan.model.name,
                crate::render::memory::verdict(&plan.gpu)
            ));
        }
    }
}
