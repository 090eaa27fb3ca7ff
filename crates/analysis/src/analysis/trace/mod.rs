//! A training job judged from its own records: each step's time split into compute,
//! overlapped and exposed communication, DataLoader wait and other idle time; each collective
//! against the fabric; the rank the others waited for; a hang's culprit from Flight Recorder
//! dumps; and one verdict that says which of these the job's time went to.

pub mod collectives;
pub mod hang;
pub mod steps;
pub mod whatif;

use crate::analysis::curve::Curve;
use crate::documents::trace::{InspectorSummary, StepBreakdown, TraceDocument, TraceVerdict};
use crate::documents::{Kind, SCHEMA_VERSION};
use crate::import::trace::JobRecords;
use std::collections::BTreeMap;
use steps::median;

/// A part of the step worth a finding once it takes this share of the wall time.
pub const NOTABLE: f64 = 0.15;
/// Exposed communication is worth a finding from this share.
pub const EXPOSED_NOTABLE: f64 = 0.10;
/// Idle time for other reasons (launch gaps, host work) from this share.
pub const HOST_NOTABLE: f64 = 0.25;

/// The medians over every rank's steps of each part, in ms (wall, compute, exposed, loader,
/// other, overlapped).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Typical {
    pub wall: f64,
    pub compute: f64,
    pub exposed: f64,
    pub loader: f64,
    pub other: f64,
    pub overlapped: f64,
    pub steps: usize,
}

pub fn typical(steps: &[StepBreakdown]) -> Typical {
    let m = |f: fn(&StepBreakdown) -> f64| median(steps.iter().map(f).collect());
    Typical {
        wall: m(|s| s.wall_ms),
        compute: m(|s| s.compute_ms),
        exposed: m(|s| s.exposed_comm_ms),
        loader: m(|s| s.loader_wait_ms),
        other: m(|s| s.other_idle_ms),
        overlapped: m(|s| s.overlapped_comm_ms),
        steps: steps.len(),
    }
}

/// Judge everything read. `curve` is the link the collectives are held against.
pub fn analyse(job: &mut JobRecords, curve: Option<&Curve>, link: Option<String>) -> TraceDocument {
    let mut notes = Vec::new();
    let mut step_rows = Vec::new();
    let mut calls = Vec::new();
    let mut ranks = Vec::new();
    for (i, r) in job.ranks.iter_mut().enumerate() {
        steps::sort(r);
        let rank = r.rank.unwrap_or(i);
        ranks.push(rank);
        step_rows.extend(steps::breakdown(r, rank));
        calls.push(collectives::calls(r));
        notes.extend(rank_notes(r));
    }
    notes.extend(job.skipped.iter().cloned());
    let duplicated = job_notes(job, &ranks, &mut notes);
    // Two traces of one rank cannot be matched against each other.
    let matched = collectives::matched(&calls).filter(|_| !duplicated);
    if job.ranks.len() > 1 && matched.is_none() && !duplicated {
        notes.push("the ranks' NCCL calls do not line up one to one (sampled or cut traces): each collective's time includes waiting for peers, and no straggler is named".into());
    }
    if job.ranks.len() == 1 && calls.first().is_some_and(|c| !c.is_empty()) {
        notes.push("one rank's trace: a collective's kernel time includes waiting for later peers; give every rank's trace (a directory) to separate the fabric's time from the wait".into());
    }
    let straggler = matched
        .as_deref()
        .and_then(|m| collectives::straggler(m, &ranks));
    let table = collectives::table(&calls, matched.as_deref(), curve);
    let (hang, hang_notes) = if job.flight.is_empty() {
        (None, Vec::new())
    } else {
        hang::find(&job.flight)
    };
    notes.extend(hang_notes);
    let inspector = inspector_summary(job, curve);
    let what_if = job.ranks.iter().zip(&ranks).find_map(|(r, &rank)| {
        let rows: Vec<StepBreakdown> = step_rows
            .iter()
            .filter(|s| s.rank == rank)
            .cloned()
            .collect();
        whatif::what_if(r, rank, &rows, curve)
    });
    let first = job.ranks.first();
    let mut doc = TraceDocument {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Trace,
        tool: crate::buildinfo::tool_info(),
        files: job
            .files
            .iter()
            .map(|(p, k)| format!("{p} ({})", k.name()))
            .collect(),
        world_size: first.and_then(|r| r.world_size),
        nccl_version: first.and_then(|r| r.nccl_version.clone()),
        device: first.and_then(|r| r.device.clone()),
        link,
        steps: step_rows,
        collectives: table,
        straggler,
        hang,
        inspector,
        what_if,
        verdict: TraceVerdict {
            code: String::new(),
            summary: String::new(),
        },
        notes,
    };
    doc.verdict = verdict(&doc);
    doc
}

/// What one rank's trace lacks or held that could not be read.
fn rank_notes(r: &crate::import::trace::RankTrace) -> Vec<String> {
    let mut notes = Vec::new();
    if r.steps.is_empty() {
        notes.push(format!("{}: no ProfilerStep# spans (profile with torch.profiler's schedule and call prof.step() each step), so its time is not split by step", r.source));
    }
    let timeless = r.steps.iter().filter(|s| s.dur_us <= 0.0).count();
    if timeless > 0 {
        notes.push(format!(
            "{}: {timeless} of {} steps have no duration and are left out",
            r.source,
            r.steps.len()
        ));
    }
    let no_size = r.comms.iter().filter(|c| c.bytes.is_none()).count();
    if no_size > 0 {
        notes.push(format!("{}: {no_size} of {} NCCL kernels carry no size (an Nsight Systems export, or PyTorch before 2.1 without record_shapes=True): they count in the step split but are left out of the collectives table", r.source, r.comms.len()));
    }
    if r.unreadable_events > 0 {
        notes.push(format!(
            "{}: {} of {} events were not events of the trace format (or held no usable time) and were skipped",
            r.source, r.unreadable_events, r.events
        ));
    }
    notes
}

/// What the ranks disagree on: two traces claiming one rank (then `true`: nothing is matched
/// across them), or different world sizes.
fn job_notes(job: &JobRecords, ranks: &[usize], notes: &mut Vec<String>) -> bool {
    let mut seen: BTreeMap<usize, &str> = BTreeMap::new();
    let mut duplicated = false;
    for (r, &rank) in job.ranks.iter().zip(ranks) {
        if let Some(first) = seen.insert(rank, &r.source) {
            notes.push(format!("{} and {first} are both rank {rank} (a copy, or two runs in one directory): their calls are not matched and no straggler is named", r.source));
            seen.insert(rank, first);
            duplicated = true;
        }
    }
    let sizes: std::collections::BTreeSet<usize> =
        job.ranks.iter().filter_map(|r| r.world_size).collect();
    if sizes.len() > 1 {
        let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
        notes.push(format!(
            "the traces disagree on the world size ({}): they may not be of one job",
            list.join(", ")
        ));
    }
    duplicated
}

/// Inspector's records grouped by collective, size and rank count.
fn inspector_summary(job: &JobRecords, curve: Option<&Curve>) -> Vec<InspectorSummary> {
    let mut by: BTreeMap<(crate::coll::Collective, u64, usize), Vec<(f64, f64)>> = BTreeMap::new();
    for r in &job.inspector {
        by.entry((r.coll, r.size_bytes, r.nranks))
            .or_default()
            .push((r.busbw_gbs.unwrap_or(0.0), r.time_us / 1e3));
    }
    by.into_iter()
        .map(|((coll, size, n), v)| {
            let median_ms = median(v.iter().map(|x| x.1).collect());
            let expected_ms = curve
                .filter(|_| n > 1)
                .map(|c| c.time_s(coll, size as f64, n) * 1e3);
            let verdict = match expected_ms {
                Some(e) if e > 0.0 && median_ms / e > collectives::SLOW_RATIO => "slow",
                Some(_) => "at speed",
                None => "not judged",
            };
            InspectorSummary {
                collective: coll,
                size_bytes: size,
                nranks: n,
                count: v.len(),
                median_busbw_gbs: median(v.iter().map(|x| x.0).collect()),
                median_ms,
                expected_ms,
                verdict: verdict.to_string(),
            }
        })
        .collect()
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// Which part the job's time went to: the first of hang, data loader, exposed communication
/// (a slow fabric told from an overlap problem), host gaps; else compute.
pub fn verdict(doc: &TraceDocument) -> TraceVerdict {
    let v = |code: &str, summary: String| TraceVerdict {
        code: code.to_string(),
        summary,
    };
    if let Some(h) = &doc.hang {
        return v("hang", h.summary.clone());
    }
    let t = typical(&doc.steps);
    let slow: Vec<_> = doc
        .collectives
        .iter()
        .filter(|c| c.verdict == "slow")
        .collect();
    // The worst of the calls one rank's view cannot judge.
    let mut waiting: Vec<_> = doc
        .collectives
        .iter()
        .filter(|c| c.verdict == "slow or waiting")
        .collect();
    waiting.sort_by(|a, b| {
        b.slowdown
            .unwrap_or(0.0)
            .total_cmp(&a.slowdown.unwrap_or(0.0))
    });
    if t.steps == 0 || t.wall <= 0.0 {
        if let Some(c) = slow.first() {
            return v("slow-collective", slow_text(c));
        }
        if let Some(i) = doc.inspector.iter().find(|i| i.verdict == "slow") {
            return v("slow-collective", format!(
                "the fabric is slow in production: NCCL Inspector timed {} of {} on {} ranks at a median {:.2} ms ({:.1} GB/s busbw) where the link given says {:.2} ms",
                i.collective, crate::units::format_size(i.size_bytes), i.nranks, i.median_ms, i.median_busbw_gbs, i.expected_ms.unwrap_or(0.0)
            ));
        }
        let what = if doc.steps.is_empty() && doc.collectives.is_empty() && doc.inspector.is_empty()
        {
            "the inputs hold no profiler steps and no collective to judge"
        } else if doc.inspector.is_empty() {
            "no profiler step to split (no ProfilerStep# spans with a duration): only the collectives are shown"
        } else {
            "NCCL Inspector's records hold no steps to split; its collectives are shown (give --curve or --busbw to judge them)"
        };
        return v("not judged", what.into());
    }
    let head = format!("median step {:.1} ms over {} steps", t.wall, t.steps);
    if t.loader >= NOTABLE * t.wall && t.loader >= t.exposed {
        return v("data-bound", format!(
            "{head}: the GPU waited {:.1} ms ({:.0}%) of each step on the DataLoader; raise DataLoader num_workers (with pin_memory=True, persistent_workers=True), or move decoding/augmentation off the training process",
            t.loader, pct(t.loader, t.wall)
        ));
    }
    if t.exposed >= EXPOSED_NOTABLE * t.wall {
        let straggler = doc
            .straggler
            .as_ref()
            .map(|s| {
                format!(
                    "; rank {} arrived last in {} of {} calls, {:.2} ms after the first",
                    s.rank, s.last_in, s.of, s.late_ms
                )
            })
            .unwrap_or_default();
        if let Some(c) = slow.first() {
            return v("slow-collective", format!("{head}: {:.1} ms ({:.0}%) of communication ran with no compute beside it, and {}{straggler}", t.exposed, pct(t.exposed, t.wall), slow_text(c)));
        }
        if let Some(c) = waiting.first() {
            return v("communication-exposed", format!(
                "{head}: {:.1} ms ({:.0}%) of communication ran with no compute beside it; {} of {} on {} ranks took {:.2} ms where the link given says {:.2} ms, but one rank's trace cannot tell a slow fabric from waiting for late peers: give every rank's trace (a directory) to tell which",
                t.exposed, pct(t.exposed, t.wall), c.collective, crate::units::format_size(c.size_bytes), c.nranks, c.fabric_ms, c.expected_ms.unwrap_or(0.0)
            ));
        }
        let judged = if doc.collectives.iter().any(|c| c.verdict == "at speed") {
            "the collectives ran at the speed the link given allows, so this is an overlap problem: "
        } else {
            "(no link given to judge the collectives' speed: give --curve) "
        };
        return v("communication-exposed", format!(
            "{head}: {:.1} ms ({:.0}%) of communication ran with no compute beside it; {judged}smaller or earlier buckets (DDP bucket_cap_mb), gradient accumulation with no_sync(), or overlapping FSDP prefetch hide more of it{straggler}",
            t.exposed, pct(t.exposed, t.wall)
        ));
    }
    if t.other >= HOST_NOTABLE * t.wall {
        return v("host-bound", format!(
            "{head}: the GPU sat idle {:.1} ms ({:.0}%) of each step for reasons other than the DataLoader (kernel launch gaps, host-side Python, synchronisations such as .item() or cuda.synchronize()); CUDA graphs or torch.compile cut launch overhead",
            t.other, pct(t.other, t.wall)
        ));
    }
    v("compute-bound", format!(
        "{head}: the GPU computed {:.0}% of it; exposed communication {:.0}%, DataLoader wait {:.0}%: the step is limited by its compute",
        pct(t.compute, t.wall), pct(t.exposed, t.wall), pct(t.loader, t.wall)
    ))
}

fn slow_text(c: &crate::documents::trace::TracedCollective) -> String {
    format!(
        "the fabric is slow: {} of {} on {} ranks took {:.2} ms where the link given says {:.2} ms ({:.1}x, {:.1} GB/s busbw)",
        c.collective,
        crate::units::format_size(c.size_bytes),
        c.nranks,
        c.fabric_ms,
        c.expected_ms.unwrap_or(0.0),
        c.slowdown.unwrap_or(0.0),
        c.busbw_gbs
    )
}
