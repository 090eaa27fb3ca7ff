//! What a reader sees first: healthy / degraded / failed with the one sentence why (the
//! recommendations that follow it are `recommend`'s).

use super::reading::{finished, forcing_overrides, plateau_below};
use super::recommend::measured_alternatives;
use super::Documents;
use crate::diagnose::Severity;
use crate::model::{RunRecord, Source};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Healthy,
    Degraded,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub state: State,
    /// One sentence: the worst reason, or why all is well.
    pub sentence: String,
    /// Every reason at the verdict's level, worst first.
    pub reasons: Vec<String>,
}

pub fn verdict(docs: &Documents) -> Verdict {
    let mut failed = Vec::new();
    let mut degraded = Vec::new();
    let mut fine = Vec::new();
    let run_labels = docs.run_labels();
    let alternative = |r: &RunRecord| {
        docs.runs.len() > 1 && forcing_overrides(&r.env).is_empty() && r.source == Source::Measured
    };
    for (run, label) in docs.runs.iter().zip(&run_labels) {
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
                degraded.push(text);
            } else {
                failed.push(text);
            }
        }
        let wrong = r.total_wrong();
        if wrong > 0 {
            failed.push(format!(
                "{wrong} elements came back wrong in the run ({label}): the data path corrupts data"
            ));
        }
        if let Some(q) = r.qualification.as_ref().filter(|q| !q.passed) {
            failed.push(format!("qualification failed ({label}): {}", q.summary));
        }
    }
    for m in &docs.matrices {
        let d = &m.doc;
        if d.status != crate::model::RunStatus::Complete {
            failed.push(format!(
                "the pair matrix ({}) ended {}: {}",
                m.file,
                d.status.name(),
                d.error
                    .clone()
                    .unwrap_or_else(|| "no reason recorded".into())
            ));
        }
        if d.total_wrong() > 0 {
            failed.push(format!(
                "{} bytes came back wrong between pairs ({})",
                d.total_wrong(),
                m.file
            ));
        }
        for (e, ratio) in crate::documents::matrix::analysis::slow_endpoints(d) {
            degraded.push(format!(
                "{}: its pairs reach {ratio:.2}x the median one-way bandwidth ({})",
                d.endpoints[e].label, m.file
            ));
        }
        for o in &d.outliers {
            degraded.push(crate::documents::matrix::analysis::describe(d, o));
        }
    }
    for n in &docs.notes {
        match n.level.as_str() {
            "error" => failed.push(n.text.clone()),
            "warning" => degraded.push(n.text.clone()),
            _ => {}
        }
    }
    for q in docs.qualifications.iter().filter(|q| !q.doc.passed) {
        failed.push(format!("qualification failed: {}", q.doc.summary));
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
        if doc.baseline.kind == "expectation" {
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
    let (state, reasons) = if !failed.is_empty() {
        (State::Failed, failed)
    } else if !degraded.is_empty() {
        (State::Degraded, degraded)
    } else {
        if fine.is_empty() {
            fine.push(match docs.runs.len() {
                0 => "nothing in the documents given points to a problem".to_string(),
                n => format!(
                    "{n} run{} complete, no finding above info",
                    if n == 1 { "" } else { "s" }
                ),
            });
        }
        (State::Healthy, fine)
    };
    Verdict {
        state,
        sentence: reasons.first().cloned().unwrap_or_default(),
        reasons,
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
