//! Parsed nccl-tests rows (from the text table or the `-J` JSON) made into a run record: one
//! point per row and placement, the rank count inferred where the output does not state it,
//! rows a restarted run printed twice dropped, and unusable output refused.

use super::infer::{
    infer_collective, nranks_from_ratio, nranks_from_size, nranks_proven_by_ratio,
    nranks_ratio_bounds,
};
use super::table::{Parsed, Row};
use crate::coll::{Collective, Placement};
use crate::dtype::{Dtype, RedOp};
use crate::import::text::InputError;
use crate::model::{
    ImportInfo, IterationTiming, PerIteration, Point, RunRecord, RunStatus, Source,
};
use crate::stats::{summarize, StopReason};

pub const EXPECTED: &str = "nccl-tests output (the *_perf table, or its -J JSON file)";

fn point(
    row: &Row,
    coll: Collective,
    nranks: usize,
    h: usize,
    notes: &mut Vec<String>,
) -> Option<Point> {
    let Some(dtype) = Dtype::parse(&row.dtype) else {
        notes.push(format!(
            "line {}: data type '{}' is not one ncclprobe models; row skipped",
            row.line, row.dtype
        ));
        return None;
    };
    let redop = match row.redop.as_deref() {
        None | Some("none") => None,
        Some(op) => {
            let parsed = RedOp::parse(op);
            if parsed.is_none() {
                notes.push(format!(
                    "line {}: reduction op '{op}' kept as none",
                    row.line
                ));
            }
            parsed
        }
    };
    let half = &row.halves[h];
    let placement = if h == 0 {
        Placement::OutOfPlace
    } else {
        Placement::InPlace
    };
    // nccl-tests prints times to two decimals: a call faster than 5 ns reads 0.00, which is
    // no time a bandwidth can be computed from. The row is dropped and said so, so that every
    // reader takes the record the importer writes.
    if !(half.time_us.is_finite() && half.time_us > 0.0) {
        let why = match half.time_us == 0.0 {
            true => "time printed as 0.00 us (below the printout's resolution)".to_string(),
            false => format!("time {} us is no time a call takes", half.time_us),
        };
        notes.push(format!(
            "line {}: size {} {}: {why}; dropped",
            row.line,
            crate::units::format_size(row.size),
            placement.name(),
        ));
        return None;
    }
    let time_s = half.time_us * 1e-6;
    let mut stats = summarize(&[time_s]);
    // -I: nccl-tests timed each iteration; keep the extremes it printed.
    if let (Some(lo), Some(hi)) = (half.iter_min_us, half.iter_max_us) {
        stats.min_s = lo * 1e-6;
        stats.max_s = hi * 1e-6;
    }
    // -J with -I: every call's time is a sample, so the point gets a real interval (over the
    // calls the summary keeps); the time stays the one nccl-tests reported for the batch.
    // Single calls printed as 0 (below the resolution) are no samples either.
    let iter_times_us: Vec<f64> = half
        .iter_times_us
        .iter()
        .copied()
        .filter(|t| t.is_finite() && *t > 0.0)
        .collect();
    if iter_times_us.len() < half.iter_times_us.len() {
        notes.push(format!(
            "line {}: size {}: {} per-iteration times of 0 or less left out",
            row.line,
            crate::units::format_size(row.size),
            half.iter_times_us.len() - iter_times_us.len()
        ));
    }
    let per_iteration = (!iter_times_us.is_empty()).then(|| PerIteration {
        skipped: half.iter_skipped.min(iter_times_us.len() - 1),
        times_s: iter_times_us.iter().map(|t| t * 1e-6).collect(),
        per_rank_s: Vec::new(),
        timing: IterationTiming::CudaEvents,
    });
    let samples_s = match &per_iteration {
        Some(each) => {
            let kept = each.times_s[each.skipped..].to_vec();
            stats = summarize(&kept);
            kept
        }
        None => vec![time_s],
    };
    Some(Point {
        collective: coll,
        nranks,
        dtype,
        redop,
        root: row.root,
        placement,
        size_bytes: row.size,
        count: row.count,
        time_s,
        algbw_bytes_per_s: half.algbw_gbps * 1e9,
        busbw_bytes_per_s: half.busbw_gbps * 1e9,
        wrong: half.wrong,
        iters_per_sample: if per_iteration.is_some() { 1 } else { 0 },
        samples_s,
        stats,
        stop_reason: StopReason::Fixed,
        per_rank_time_s: Vec::new(),
        arrivals: None,
        nccl_model_time_s: None,
        cost: None,
        per_iteration,
        nccl_algo: None,
    })
}

fn empty_record(name: &str, format: &str) -> RunRecord {
    let mut record = RunRecord::blank(Source::Imported, "nccl", format!("imported from {name}"));
    record.import = Some(ImportInfo {
        file: name.to_string(),
        format: format.into(),
        ..Default::default()
    });
    record
}

pub(super) fn build(name: &str, mut p: Parsed) -> Result<RunRecord, InputError> {
    let name = name.to_string();
    refuse_unusable(&name, &p)?;
    if p.notes_suppressed > 0 {
        p.notes
            .push(format!("{} more notes like these", p.notes_suppressed));
    }
    drop_reprinted_rows(&mut p);
    let mut record = empty_record(&name, "nccl-tests-text");
    record.env = std::mem::take(&mut p.env);
    let mut info = record.import.take().unwrap_or_default();
    let (ranks_consistent, top) = rank_lines(&mut p);
    let mut groups: Vec<Option<Collective>> = Vec::new();
    for r in &p.rows {
        if !groups.contains(&r.collective) {
            groups.push(r.collective);
        }
    }
    let mut froms = Vec::new();
    let mut nranks_froms = Vec::new();
    for group in groups {
        let g_rows: Vec<&Row> = p.rows.iter().filter(|r| r.collective == group).collect();
        let (coll, from) = match group {
            Some(c) => (c, "named in the log".to_string()),
            None => infer_collective(&g_rows),
        };
        let (nranks, nfrom, disagreement) = nranks_for(coll, &g_rows, &p, ranks_consistent, top);
        p.notes.extend(disagreement);
        froms.push(format!("{coll}: {from}"));
        nranks_froms.push(nfrom);
        for row in g_rows {
            for h in 0..2 {
                if let Some(pt) = point(row, coll, nranks, h, &mut p.notes) {
                    record.points.push(pt);
                }
            }
        }
        record.backend.nranks = record.backend.nranks.max(nranks);
    }
    if p.rows.iter().any(|r| r.halves[0].old_error) {
        p.notes.push("old nccl-tests format: its 'error' column is a maximum relative error, not a count; #wrong left empty".into());
    }
    if ranks_consistent {
        record.backend.nranks = record.backend.nranks.max(p.ranks.len());
    }
    record.backend.ranks = p.ranks.clone();
    let mut hosts: Vec<String> = p.ranks.iter().map(|r| r.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    if hosts.is_empty() && !p.command_hosts.is_empty() {
        p.notes.push(format!(
            "hosts from the launcher's -H list on the command line: {}",
            p.command_hosts.join(", ")
        ));
        hosts = p.command_hosts.clone();
    }
    record.backend.hosts = hosts;
    if let Some(v) = &p.nccl_version {
        record
            .backend
            .library_versions
            .insert("nccl".into(), v.clone());
    }
    if let Some(v) = &p.tests_version {
        record
            .backend
            .library_versions
            .insert("nccl-tests".into(), v.clone());
    }
    let footer_seen = p.avg_busbw.is_some() || p.out_of_bounds.is_some();
    info.truncated = p.truncated_at.is_some() || !footer_seen;
    if p.truncated_at.is_none() && !footer_seen {
        p.notes.push("no '# Out of bounds' / '# Avg bus bandwidth' footer: the output ends before the run did".into());
    }
    info.nccl_tests_version = p.tests_version.clone();
    info.collective_from = if froms.is_empty() {
        "no rows".into()
    } else {
        froms.join("; ")
    };
    info.nranks_from = nranks_froms
        .first()
        .cloned()
        .unwrap_or_else(|| "no rows".into());
    info.reported_avg_busbw_gbps = p.avg_busbw;
    info.reported_out_of_bounds = p.out_of_bounds;
    info.sizes = p.sizes;
    info.collective = p.named;
    if record.points.is_empty() && p.avg_busbw.is_some() {
        // A paste of the summary lines alone: the run is its average.
        record.backend.nranks = record
            .backend
            .nranks
            .max(p.threads_gpus.unwrap_or(0))
            .max(p.command_ranks.unwrap_or(0))
            .max(p.info_nranks.unwrap_or(0));
        p.notes.push(format!(
            "no table rows, only the summary: nccl-tests' average bus bandwidth {} GB/s{}",
            p.avg_busbw.unwrap_or(0.0),
            match p.sizes {
                Some(r) => format!(
                    " over {} sizes from {} to {}",
                    r.sizes().len(),
                    crate::units::format_size(r.min_bytes),
                    crate::units::format_size(r.max_bytes)
                ),
                None => " (the sizes it averaged are not in the paste)".into(),
            }
        ));
    }
    info.errors = p.errors.clone();
    record.status = if record.points.is_empty() && !info.errors.is_empty() {
        RunStatus::Failed
    } else if info.truncated || record.points.is_empty() {
        // A paste of the footer alone measured nothing anyone can read: never a complete run.
        RunStatus::Truncated
    } else if record.total_wrong() > 0 || p.out_of_bounds.unwrap_or(0) > 0 {
        RunStatus::CheckFailed
    } else {
        RunStatus::Complete
    };
    if !info.errors.is_empty() {
        record.error = info.errors.first().cloned();
    }
    if record.backend.nranks == 0 && !record.points.is_empty() {
        // busbw and every rule need it; a record without it is one no reader takes.
        return Err(InputError::WrongKind {
            path: name.to_string(),
            reason: "its rank count cannot be told: no devices are listed and no row's busbw/algbw ratio says it".into(),
            expected: "nccl-tests output with its '#  Rank' lines or -J JSON with config.devices".into(),
        });
    }
    record.notes = p.notes;
    record.headlines = crate::model::headlines(&record.points);
    record.import = Some(info);
    Ok(record)
}

/// The '# Rank' lines: whether they are one consistent 0..n-1 set, and, when no rank number
/// repeats, one past the highest listed (a cut device list, `# Rank 71 ... device 3` with the
/// rest trimmed, bounds the world from below); what else they say is noted.
fn rank_lines(p: &mut Parsed) -> (bool, Option<usize>) {
    let mut rank_ids: Vec<usize> = p.ranks.iter().map(|r| r.rank).collect();
    rank_ids.sort_unstable();
    rank_ids.dedup();
    let consistent = !rank_ids.is_empty()
        && rank_ids.len() == p.ranks.len()
        && rank_ids.last() == Some(&(rank_ids.len() - 1));
    if !consistent {
        p.notes.extend(rank_lines_note(&rank_ids, p.ranks.len()));
    }
    let top = rank_ids
        .last()
        .filter(|_| rank_ids.len() == p.ranks.len())
        .map(|r| r + 1);
    (consistent, top)
}

/// What '# Rank' lines that are not one 0..n-1 set say: rank numbers repeated (each process
/// printed its own), or a list cut short (`rank_ids` sorted and deduplicated).
fn rank_lines_note(rank_ids: &[usize], lines: usize) -> Option<String> {
    if rank_ids.len() < lines {
        Some("the '# Rank' lines repeat rank numbers: separate processes each printed their own (a non-MPI build under a launcher?)".into())
    } else {
        rank_ids.last().map(|top| {
            format!("the '# Rank' lines list {lines} of the ranks (up to rank {top}): the device list was cut")
        })
    }
}

/// Refuses input that holds nothing of a run, or far more rows than any run prints.
fn refuse_unusable(name: &str, p: &Parsed) -> Result<(), InputError> {
    if p.rows.is_empty()
        && p.headers_seen == 0
        && p.ranks.is_empty()
        && p.errors.is_empty()
        && p.avg_busbw.is_none()
    {
        return Err(InputError::WrongKind {
            path: name.to_string(),
            reason: "no nccl-tests table, header or device lines found".into(),
            expected: EXPECTED.into(),
        });
    }
    if p.too_many_rows {
        return Err(InputError::WrongKind {
            path: name.to_string(),
            reason: format!(
                "more than {} distinct table rows; nccl-tests prints a few hundred per run: split the log into its runs",
                super::table::MAX_ROWS
            ),
            expected: EXPECTED.into(),
        });
    }
    Ok(())
}

/// A second process printing the same table (non-MPI builds under mpirun): keeps the first.
/// Zero-size rows legitimately repeat: small sizes round down to 0 elements per rank.
fn drop_reprinted_rows(p: &mut Parsed) {
    let before = p.rows.len() + p.duplicate_rows;
    if p.headers_seen > 1 {
        let mut seen = std::collections::HashSet::new();
        p.rows.retain(|r| {
            r.size == 0
                || seen.insert((
                    r.collective,
                    r.size,
                    r.dtype.clone(),
                    r.redop.clone(),
                    r.root,
                ))
        });
    }
    if p.rows.len() < before {
        p.notes.push(format!(
            "{} duplicated rows dropped (the table was printed more than once)",
            before - p.rows.len()
        ));
    }
}

/// The world size behind one collective's rows, what it was read from (most direct first),
/// and a note when the '# Rank' lines disagree with what the table itself proves.
fn nranks_for(
    coll: Collective,
    rows: &[&Row],
    p: &Parsed,
    ranks_consistent: bool,
    top: Option<usize>,
) -> (usize, String, Option<String>) {
    let proven = nranks_from_size(coll, rows)
        .map(|n| (n, "size / (count x type size)"))
        .or_else(|| nranks_proven_by_ratio(coll, rows).map(|n| (n, "busbw/algbw")));
    if ranks_consistent {
        let listed = p.ranks.len();
        return match proven {
            // Posts cut long device lists short ("..."): the table cannot lie about its size.
            Some((n, from)) if n > listed => (
                n,
                from.to_string(),
                Some(format!(
                    "the '# Rank' lines list {listed} ranks but {coll}'s {from} proves {n}: the device list was cut short; {n} kept"
                )),
            ),
            Some((n, from)) if n < listed => (
                listed,
                "the '# Rank' lines".to_string(),
                Some(format!(
                    "the '# Rank' lines list {listed} ranks but {coll}'s {from} says {n}; the lines kept (were two runs' logs joined?)"
                )),
            ),
            _ => (listed, "the '# Rank' lines".to_string(), None),
        };
    }
    // Where busbw/algbw cannot settle a large world, the highest listed rank does, if the
    // ratio allows it.
    let top_fits = top.filter(|&t| {
        nranks_ratio_bounds(coll, rows)
            .is_some_and(|(lo, hi)| lo <= t as f64 + 0.5 && t as f64 <= hi + 0.5)
    });
    let note = match (proven, top) {
        (Some((n, from)), Some(t)) if t > n => Some(format!(
            "a '# Rank' line names rank {} but {coll}'s {from} proves {n} ranks: the table kept (was the line from another run?)",
            t - 1
        )),
        _ => None,
    };
    let (n, from) = if let Some((n, from)) = proven {
        (n, from.to_string())
    } else if let Some(t) = top_fits {
        (
            t,
            "the highest '# Rank' line listed, within what busbw/algbw allows".to_string(),
        )
    } else if let Some(n) = nranks_from_ratio(coll, rows) {
        (n, "busbw/algbw of the largest size".to_string())
    } else if let Some(n) = p.info_nranks {
        (n, "NCCL INFO nranks".to_string())
    } else if let Some(n) = p.command_ranks {
        (n, "the command line (-np × -t × -g)".to_string())
    } else if let Some(n) = p.threads_gpus {
        (n, "nThread × nGpus (a lower bound)".to_string())
    } else {
        (0, "unknown".to_string())
    };
    (n, from, note)
}
