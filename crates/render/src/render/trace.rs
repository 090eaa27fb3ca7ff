//! `ncclprobe trace` for people: the verdict first, then where each step's time went, each
//! collective against the link, the straggler or the hang, and the what-if.

use crate::documents::trace::{TraceDocument, WhatIf};
use crate::units::format_size;
use std::fmt::Write;

/// Steps shown per rank before the rest are summed up in one line.
const STEPS_SHOWN: usize = 12;

pub fn table(doc: &TraceDocument) -> String {
    let mut out = String::new();
    for f in &doc.files {
        let _ = writeln!(out, "# input: {f}");
    }
    let job = doc.job_line();
    if !job.is_empty() {
        let _ = writeln!(out, "# {}", job);
    }
    let _ = writeln!(
        out,
        "\nVERDICT {}: {}",
        doc.verdict.code, doc.verdict.summary
    );
    steps(&mut out, doc);
    collectives(&mut out, doc);
    if let Some(s) = &doc.straggler {
        let _ = writeln!(
            out,
            "\nStraggler: rank {} arrived last in {} of {} matched calls; the others waited a median {:.2} ms for it",
            s.rank, s.last_in, s.of, s.late_ms
        );
    }
    if let Some(h) = &doc.hang {
        let _ = writeln!(out, "\nHang: {} ({})", h.summary, h.cause);
        let _ = writeln!(out, "  states: {}", h.states.join("; "));
    }
    if !doc.inspector.is_empty() {
        let _ = writeln!(out, "\nNCCL Inspector (production):");
        let _ = writeln!(
            out,
            "  {:<15} {:>10} {:>6} {:>7} {:>10} {:>10} {:>10}  verdict",
            "collective", "size", "ranks", "calls", "busbw GB/s", "median ms", "expected"
        );
        for r in &doc.inspector {
            let _ = writeln!(
                out,
                "  {:<15} {:>10} {:>6} {:>7} {:>10.1} {:>10.3} {:>10}  {}",
                r.collective.name(),
                format_size(r.size_bytes),
                r.nranks,
                r.count,
                r.median_busbw_gbs,
                r.median_ms,
                r.expected_ms.map_or("-".into(), |e| format!("{e:.3}")),
                r.verdict
            );
        }
    }
    if let Some(w) = &doc.what_if {
        what_if(&mut out, w);
    }
    for n in &doc.notes {
        let _ = writeln!(out, "# note: {n}");
    }
    out
}

fn steps(out: &mut String, doc: &TraceDocument) {
    if doc.steps.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nWhere each step went (ms; compute + exposed comm + loader wait + other idle = wall):"
    );
    let _ = writeln!(
        out,
        "  {:>4} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}  critical collective",
        "rank", "step", "wall", "compute", "exposed", "overlapped", "loader", "other"
    );
    let mut shown = std::collections::BTreeMap::<usize, usize>::new();
    for s in &doc.steps {
        let n = shown.entry(s.rank).or_default();
        *n += 1;
        if *n > STEPS_SHOWN {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:>4} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>9.2} {:>9.2}  {}",
            s.rank,
            s.step,
            s.wall_ms,
            s.compute_ms,
            s.exposed_comm_ms,
            s.overlapped_comm_ms,
            s.loader_wait_ms,
            s.other_idle_ms,
            s.critical_collective.as_deref().unwrap_or("-")
        );
    }
    for (rank, n) in shown.iter().filter(|(_, n)| **n > STEPS_SHOWN) {
        let _ = writeln!(
            out,
            "  (rank {rank}: {} more steps in --format json)",
            n - STEPS_SHOWN
        );
    }
}

fn collectives(out: &mut String, doc: &TraceDocument) {
    if doc.collectives.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nCollectives against the link:");
    let _ = writeln!(
        out,
        "  {:<15} {:>10} {:>6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8}  verdict",
        "collective",
        "size",
        "ranks",
        "calls",
        "median ms",
        "fabric ms",
        "busbw GB/s",
        "exposed",
        "expected",
        "x"
    );
    for c in &doc.collectives {
        let _ = writeln!(
            out,
            "  {:<15} {:>10} {:>6} {:>6} {:>10.3} {:>10.3} {:>10.2} {:>7.0}% {:>10} {:>8}  {}",
            c.collective.name(),
            format_size(c.size_bytes),
            c.nranks,
            c.count,
            c.median_ms,
            c.fabric_ms,
            c.busbw_gbs,
            100.0 * c.exposed_fraction,
            c.expected_ms.map_or("-".into(), |e| format!("{e:.3}")),
            c.slowdown.map_or("-".into(), |s| format!("{s:.2}")),
            c.verdict
        );
    }
}

/// The what-if alone (`simulate ddp --from-trace`).
pub fn what_if_table(w: &WhatIf) -> String {
    let mut out = String::new();
    what_if(&mut out, w);
    out.trim_start().to_string()
}

fn what_if(out: &mut String, w: &WhatIf) {
    let _ = writeln!(out, "\nWhat-if, {}", w.calibration());
    let lag = if w.after_backward_ms < 0.0 {
        " (negative: the GPU finished the step after the host had begun the next)"
    } else {
        ""
    };
    let reduces = match w.buckets {
        0 => "no gradient all-reduce".to_string(),
        n => format!(
            "{n} gradient all-reduces of {} a step",
            format_size(w.gradient_bytes)
        ),
    };
    let _ = writeln!(
        out,
        "  terms: before backward {:.2} ms (loader wait {:.2}), backward {:.2} ms, after {:.2} ms{lag}; {reduces}",
        w.before_backward_ms, w.loader_wait_ms, w.backward_ms, w.after_backward_ms
    );
    let _ = writeln!(
        out,
        "  {:<60} {:>10} {:>8}",
        "what if", "step ms", "speedup"
    );
    for r in &w.rows {
        let _ = writeln!(
            out,
            "  {:<60} {:>10.2} {:>7.2}x",
            r.question, r.step_ms, r.speedup
        );
    }
    for n in &w.notes {
        let _ = writeln!(out, "  # {n}");
    }
}

/// `--format csv`: one row per rank and step.
pub fn steps_csv(doc: &TraceDocument) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "rank",
        "step",
        "wall_ms",
        "compute_ms",
        "overlapped_comm_ms",
        "exposed_comm_ms",
        "loader_wait_ms",
        "other_idle_ms",
        "forward_ms",
        "backward_ms",
        "optimizer_ms",
        "critical_collective",
    ])?;
    for s in &doc.steps {
        let f = |v: f64| format!("{v:.4}");
        w.write_record([
            s.rank.to_string(),
            s.step.to_string(),
            f(s.wall_ms),
            f(s.compute_ms),
            f(s.overlapped_comm_ms),
            f(s.exposed_comm_ms),
            f(s.loader_wait_ms),
            f(s.other_idle_ms),
            f(s.forward_ms),
            f(s.backward_ms),
            f(s.optimizer_ms),
            s.critical_collective.clone().unwrap_or_default(),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
