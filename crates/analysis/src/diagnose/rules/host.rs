//! The host around NCCL: /dev/shm, NCCL's own warnings and errors, PyTorch's watchdog.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{ev, value_ev, Evidence, Severity};
use crate::import::nccl_log::{WatchdogEvent, WorkProgress};
use std::collections::{BTreeMap, BTreeSet};

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

/// NCCL errors (an error) or only its warnings (a warning) that the message catalogue does not
/// know, first one in the title: the catalogue's findings (`messages`) explain the rest, and a
/// line it knows as context (an INFO that older releases printed as a WARN) is no error.
pub fn nccl_error(inp: &Inputs) -> Vec<Hit> {
    let explained: BTreeSet<(&str, usize)> = inp
        .logs
        .iter()
        .flat_map(|l| l.messages.lines.iter())
        .map(|l| (l.evidence.file.as_str(), l.evidence.line))
        .collect();
    let unexplained = |e: &Evidence| !explained.contains(&(e.file.as_str(), e.line));
    let errors: Vec<Evidence> = error_lines(inp).into_iter().filter(unexplained).collect();
    let warnings: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.warnings.iter().cloned())
        .filter(unexplained)
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
        "NCCL reported {what} the message catalogue does not know: {}",
        first.chars().take(120).collect::<String>()
    );
    vec![Hit::new(title, evidence).with_severity(severity)]
}

/// A collective PyTorch's watchdog gave up on: the ranks that never reported it come first,
/// then what the ranks' queues say (PyTorch 2.2+ prints each rank's last enqueued and last
/// completed work: a rank whose last enqueued work is below the one the others time out in
/// never reached it; a rank whose last completed is below its last enqueued waits inside NCCL).
pub fn watchdog_timeout(inp: &Inputs) -> Vec<Hit> {
    let events: Vec<&WatchdogEvent> = inp.logs.iter().flat_map(|l| l.watchdog.iter()).collect();
    let progress: Vec<&WorkProgress> = inp.logs.iter().flat_map(|l| l.progress.iter()).collect();
    let failed: Vec<&&WorkProgress> = progress.iter().filter(|p| p.failed_seq.is_some()).collect();
    if events.is_empty() && failed.is_empty() {
        return Vec::new();
    }
    let reported: BTreeSet<usize> = events
        .iter()
        .map(|e| e.rank)
        .chain(failed.iter().map(|p| p.rank))
        .collect();
    let heard: BTreeSet<usize> = reported
        .iter()
        .copied()
        .chain(progress.iter().map(|p| p.rank))
        .collect();
    let world = inp.nranks().or_else(|| heard.iter().max().map(|m| m + 1));
    let missing: Vec<usize> = world
        .map(|w| (0..w).filter(|r| !heard.contains(r)).collect())
        .unwrap_or_default();
    let timeout = events
        .iter()
        .find_map(|e| e.timeout_ms)
        .map(|t| format!("{} s", t / 1000))
        .unwrap_or_else(|| "the timeout".into());
    let seq = events
        .iter()
        .find_map(|e| e.seq.and_then(|s| i64::try_from(s).ok()))
        .or_else(|| failed.iter().filter_map(|p| p.failed_seq).min());
    // The op first, as the watchdog names it; the work's sequence number after the timeout.
    let (what, work) = match (events.iter().find(|e| e.op != "unknown"), seq) {
        (Some(e), Some(s)) => (e.op.clone(), format!(" (work {s})")),
        (Some(e), None) => (e.op.clone(), String::new()),
        (None, Some(s)) => (format!("work {s}"), String::new()),
        (None, None) => ("a collective".to_string(), String::new()),
    };
    let who = if missing.is_empty() {
        format!("ranks {reported:?} reported it")
    } else {
        format!("ranks {reported:?} reported it; ranks {missing:?} did not (look at them first: they never reached this collective or died)")
    };
    let queues = queue_summary(&progress, missing.is_empty())
        .map(|q| format!("; {q}"))
        .unwrap_or_default();
    let mut evidence: Vec<Evidence> = events.iter().take(8).map(|e| e.evidence.clone()).collect();
    evidence.extend(progress.iter().take(8).map(|p| p.evidence.clone()));
    vec![Hit::new(
        format!("PyTorch watchdog: {what} did not finish within {timeout}{work}; {who}{queues}"),
        evidence,
    )]
}

/// What the ranks' queues say, for the process group of the first failure: each rank's last
/// enqueued and completed work, the ranks behind, the ranks waiting, and whether every rank
/// reached the collective (then NCCL itself, not a rank, is stuck).
fn queue_summary(progress: &[&WorkProgress], nobody_missing: bool) -> Option<String> {
    let failed = progress.iter().find(|p| p.failed_seq.is_some());
    let group = failed.map_or_else(
        || progress.first().and_then(|p| p.process_group.clone()),
        |p| p.process_group.clone(),
    );
    // A rank's latest report in this group, the failure's over its state.
    let mut by_rank: BTreeMap<usize, &WorkProgress> = BTreeMap::new();
    for p in progress.iter().filter(|p| p.process_group == group) {
        let keep = by_rank
            .get(&p.rank)
            .is_none_or(|q| q.failed_seq.is_none() || p.failed_seq.is_some());
        if keep {
            by_rank.insert(p.rank, p);
        }
    }
    let queues: Vec<(usize, i64, Option<i64>)> = by_rank
        .values()
        .filter_map(|p| p.last_enqueued.map(|e| (p.rank, e, p.last_completed)))
        .collect();
    if queues.is_empty() {
        return None;
    }
    let stuck_at = by_rank.values().filter_map(|p| p.failed_seq).min();
    let max_enqueued = queues.iter().map(|q| q.1).max().unwrap_or(-1);
    let reach = stuck_at.unwrap_or(max_enqueued);
    let cell = |(r, e, d): &(usize, i64, Option<i64>)| match d {
        Some(d) => format!("rank {r} {e}/{d}"),
        None => format!("rank {r} {e}/?"),
    };
    let shown: Vec<String> = queues.iter().take(8).map(cell).collect();
    let mut out = format!(
        "last enqueued/last completed NCCL work: {}{}",
        shown.join(", "),
        if queues.len() > 8 { ", ..." } else { "" }
    );
    let behind: Vec<usize> = queues.iter().filter(|q| q.1 < reach).map(|q| q.0).collect();
    let waiting: Vec<usize> = queues
        .iter()
        .filter(|q| q.2.is_some_and(|d| d < q.1))
        .map(|q| q.0)
        .collect();
    let idle: Vec<usize> = queues.iter().filter(|q| q.1 < 0).map(|q| q.0).collect();
    if !behind.is_empty() {
        out += &format!(
            "; ranks {behind:?} are behind: they never enqueued work {reach} that the others wait in (look at them first)"
        );
    }
    if !waiting.is_empty() {
        out += &format!("; ranks {waiting:?} wait inside NCCL (last completed < last enqueued)");
    }
    if behind.is_empty() && nobody_missing && waiting.len() == queues.len() && queues.len() > 1 {
        out += &format!("; every rank enqueued work {reach} and none completed it: all reached the collective, so NCCL itself is stuck (network, a peer's GPU, or collectives that differ in size or order)");
    }
    if !idle.is_empty() {
        out += &format!(
            "; ranks {idle:?} had enqueued no NCCL work at all (-1): frozen before their first collective"
        );
    }
    Some(out)
}
