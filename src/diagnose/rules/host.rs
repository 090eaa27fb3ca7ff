//! The host around NCCL: /dev/shm, NCCL's own warnings and errors, PyTorch's watchdog.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{ev, value_ev, Evidence, Severity};
use std::collections::BTreeSet;

pub fn devshm_small(inp: &Inputs) -> Vec<Hit> {
    let Some(bytes) = inp
        .live
        .as_ref()
        .and_then(|l| l.devshm_bytes)
        .filter(|&b| b < 512 << 20)
    else {
        return Vec::new();
    };
    vec![Hit::new(
        format!("/dev/shm is only {} MiB", bytes >> 20),
        vec![value_ev(format!("/dev/shm size {bytes} bytes"))],
    )]
}

pub fn devshm_failure(inp: &Inputs) -> Vec<Hit> {
    let shm: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.shm_failures.iter().cloned())
        .take(6)
        .collect();
    if shm.is_empty() {
        return Vec::new();
    }
    vec![Hit::new(
        "NCCL failed to create shared-memory segments in /dev/shm",
        shm,
    )]
}

/// Error lines of logs and of imported runs (`line N: text`), with their line numbers.
fn error_lines(inp: &Inputs) -> Vec<Evidence> {
    let mut errors: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.errors.iter().cloned())
        .collect();
    for info in inp.runs.iter().filter_map(|r| r.import.as_ref()) {
        for e in info.errors.iter().take(5) {
            let (line, text) = e
                .strip_prefix("line ")
                .and_then(|s| s.split_once(": "))
                .map(|(n, t)| (n.parse().unwrap_or(0), t.to_string()))
                .unwrap_or((0, e.clone()));
            errors.push(ev(&info.file, line, text));
        }
    }
    errors
}

/// NCCL errors (an error) or only its warnings (a warning), first one in the title.
pub fn nccl_error(inp: &Inputs) -> Vec<Hit> {
    let errors = error_lines(inp);
    let warnings: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.warnings.iter().cloned())
        .collect();
    let Some(first) = errors.first().or(warnings.first()).map(|x| x.text.clone()) else {
        return Vec::new();
    };
    let (severity, what) = if errors.is_empty() {
        (Severity::Warning, "warnings")
    } else {
        (Severity::Error, "errors")
    };
    let mut evidence: Vec<Evidence> = errors.iter().take(8).cloned().collect();
    evidence.extend(warnings.iter().take(8).cloned());
    evidence.sort();
    evidence.dedup();
    let title = format!(
        "NCCL reported {what}: {}",
        first.chars().take(120).collect::<String>()
    );
    vec![Hit::new(title, evidence).with_severity(severity)]
}

/// A collective PyTorch's watchdog gave up on; the ranks that never reported it come first.
pub fn watchdog_timeout(inp: &Inputs) -> Vec<Hit> {
    let events: Vec<_> = inp.logs.iter().flat_map(|l| l.watchdog.iter()).collect();
    let Some(first) = events.first() else {
        return Vec::new();
    };
    let reported: BTreeSet<usize> = events.iter().map(|e| e.rank).collect();
    let world = inp
        .nranks()
        .or_else(|| reported.iter().max().map(|m| m + 1));
    let missing: Vec<usize> = world
        .map(|w| (0..w).filter(|r| !reported.contains(r)).collect())
        .unwrap_or_default();
    let timeout = first
        .timeout_ms
        .map(|t| format!("{} s", t / 1000))
        .unwrap_or_else(|| "the timeout".into());
    let who = if missing.is_empty() {
        format!("ranks {reported:?} all reported it")
    } else {
        format!("ranks {reported:?} reported it; ranks {missing:?} did not (look at them first: they never reached this collective or died)")
    };
    vec![Hit::new(
        format!(
            "PyTorch watchdog: {} did not finish within {timeout}; {who}",
            first.op
        ),
        events.iter().take(8).map(|e| e.evidence.clone()).collect(),
    )]
}
