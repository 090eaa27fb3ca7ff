//! Nsight Systems' SQLite export (`nsys export --type sqlite`, `nsys profile --export=sqlite`),
//! read into the same shape as a profiler trace: one rank per profiled process (`globalPid`),
//! its kernels, copies and memsets (`CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY`, `_MEMSET`, names
//! through `StringIds`), its CUDA launches (`CUPTI_ACTIVITY_KIND_RUNTIME`, joined on
//! `correlationId`), and its NVTX ranges (`NVTX_EVENTS` push/pop and start/end ranges, types 59
//! and 60, `COALESCE(text, StringIds.value)`) for the steps (`ProfilerStep#N` with
//! `torch.autograd.profiler.emit_nvtx`, or ranges named step/iteration N), the DataLoader and
//! the optimizer. Times are nanoseconds on the session's clock. Columns are selected by name
//! (nsys inserts new ones mid-table) and tables are optional (nsys creates only those it has
//! data for). NCCL's kernels carry no message size here (NCCL's NVTX payloads are not read),
//! so the step split is complete and the collectives table is not.

use super::kineto::{kernel_collective, link};
use super::types::{bad, CommKernel, Kernel, KernelKind, Phase, RankTrace, Span, TraceError};
use crate::coll::Collective;
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::path::Path;

fn has_table(db: &Connection, name: &str) -> bool {
    db.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|n| n > 0)
}

/// The number a step range's name carries: `ProfilerStep#12`, `step 12`, `iteration_12`.
pub fn step_number(name: &str) -> Option<Option<u64>> {
    let lower = name.trim().to_ascii_lowercase();
    let rest = [
        "profilerstep#",
        "train_step",
        "train step",
        "training step",
        "iteration",
        "step",
        "iter",
    ]
    .iter()
    .find_map(|p| lower.strip_prefix(p))?;
    let digits: String = rest
        .trim_start_matches([' ', '_', '#', ':', '-'])
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    // `step` alone is a step; `stepper` is not.
    if digits.is_empty()
        && rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return None;
    }
    Some(digits.parse().ok())
}

struct Process {
    trace: RankTrace,
    launches: Vec<(u64, u64, f64)>,
}

fn sql_err(name: &str) -> impl Fn(rusqlite::Error) -> TraceError + '_ {
    move |e| bad(name, format!("reading the nsys export: {e}"))
}

/// Every profiled process's trace in an nsys SQLite export.
pub fn read(path: &Path) -> Result<Vec<RankTrace>, TraceError> {
    let name = path.display().to_string();
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err(&name))?;
    if !has_table(&db, "CUPTI_ACTIVITY_KIND_KERNEL") || !has_table(&db, "StringIds") {
        return Err(bad(&name, "is a SQLite database without CUPTI_ACTIVITY_KIND_KERNEL and StringIds: not an Nsight Systems export with CUDA traced (nsys profile --trace=cuda,nvtx, then nsys export --type sqlite)"));
    }
    let mut procs: BTreeMap<i64, Process> = BTreeMap::new();
    kernels(&db, &name, &mut procs)?;
    for table in ["CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
        if has_table(&db, table) {
            let sql =
                format!("SELECT start, \"end\", streamId, correlationId, globalPid FROM {table}");
            let mut st = db.prepare(&sql).map_err(sql_err(&name))?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                    ))
                })
                .map_err(sql_err(&name))?;
            for row in rows {
                let (start, end, stream, corr, pid) = row.map_err(sql_err(&name))?;
                let p = entry(&mut procs, pid.unwrap_or(0));
                p.trace.kernels.push(Kernel {
                    start_us: start as f64 / 1e3,
                    dur_us: end.checked_sub(start).unwrap_or(0).max(0) as f64 / 1e3,
                    stream: stream.unwrap_or(0) as u32,
                    correlation: corr.unwrap_or(0) as u64,
                    launch_us: start as f64 / 1e3,
                    kind: KernelKind::Memory,
                    phase: Phase::Unknown,
                    step: None,
                });
            }
        }
    }
    if has_table(&db, "CUPTI_ACTIVITY_KIND_RUNTIME") {
        let mut st = db
            .prepare("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IS NOT NULL")
            .map_err(sql_err(&name))?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(sql_err(&name))?;
        for row in rows {
            let (corr, tid, start) = row.map_err(sql_err(&name))?;
            let tid = tid.unwrap_or(0);
            // A serialized GlobalId: the process in bits 24-47 (as kernels' globalPid keeps it).
            let pid = tid & !0xFF_FFFF;
            if let Some(p) = procs.get_mut(&pid) {
                p.launches
                    .push((corr as u64, tid as u64, start as f64 / 1e3));
            }
        }
    }
    if has_table(&db, "NVTX_EVENTS") {
        ranges(&db, &name, &mut procs)?;
    }
    let device = has_table(&db, "TARGET_INFO_GPU")
        .then(|| {
            db.query_row("SELECT name FROM TARGET_INFO_GPU LIMIT 1", [], |r| {
                r.get::<_, Option<String>>(0)
            })
            .ok()
            .flatten()
        })
        .flatten();
    let n = procs.len();
    Ok(procs
        .into_values()
        .enumerate()
        .map(|(i, p)| {
            let mut t = link(p.trace, p.launches);
            t.source = if n > 1 {
                format!("{name} (process {})", i + 1)
            } else {
                name.clone()
            };
            t.rank = (n > 1).then_some(i);
            t.device = device.clone();
            t.events = t.kernels.len() as u64;
            t
        })
        .collect())
}

fn entry(procs: &mut BTreeMap<i64, Process>, pid: i64) -> &mut Process {
    procs.entry(pid).or_insert_with(|| Process {
        trace: RankTrace::default(),
        launches: Vec::new(),
    })
}

fn kernels(
    db: &Connection,
    name: &str,
    procs: &mut BTreeMap<i64, Process>,
) -> Result<(), TraceError> {
    let mut st = db
        .prepare("SELECT k.start, k.\"end\", k.streamId, k.correlationId, k.globalPid, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.shortName")
        .map_err(sql_err(name))?;
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<i64>>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .map_err(sql_err(name))?;
    for row in rows {
        let (start, end, stream, corr, pid, kname) = row.map_err(sql_err(name))?;
        let kname = kname.unwrap_or_default();
        let p = entry(procs, pid.unwrap_or(0));
        // NCCL's kernels name their collective; an unparsed `nccl*` one is still NCCL's.
        let coll = kernel_collective(&kname)
            .map(|(c, _)| c)
            .or_else(|| kname.starts_with("nccl").then_some(Collective::Unknown));
        let kind = match coll {
            Some(coll) => {
                p.trace.comms.push(CommKernel {
                    coll,
                    bytes: None,
                    in_bytes: None,
                    out_bytes: None,
                    group_size: None,
                    group: None,
                    from_annotation: false,
                });
                KernelKind::Comm(p.trace.comms.len() as u32 - 1)
            }
            None => KernelKind::Compute,
        };
        p.trace.kernels.push(Kernel {
            start_us: start as f64 / 1e3,
            dur_us: end.checked_sub(start).unwrap_or(0).max(0) as f64 / 1e3,
            stream: stream.unwrap_or(0) as u32,
            correlation: corr.unwrap_or(0) as u64,
            launch_us: start as f64 / 1e3,
            kind,
            phase: Phase::Unknown,
            step: None,
        });
    }
    Ok(())
}

/// NVTX ranges: steps, DataLoader waits, optimizer steps, the backward thread.
fn ranges(
    db: &Connection,
    name: &str,
    procs: &mut BTreeMap<i64, Process>,
) -> Result<(), TraceError> {
    let mut st = db
        .prepare("SELECT e.start, e.\"end\", e.globalTid, COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.\"end\" IS NOT NULL")
        .map_err(sql_err(name))?;
    let rows = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .map_err(sql_err(name))?;
    for row in rows {
        let (start, end, tid, text) = row.map_err(sql_err(name))?;
        let (Some(text), tid) = (text, tid.unwrap_or(0)) else {
            continue;
        };
        let Some(p) = procs.get_mut(&(tid & !0xFF_FFFF)) else {
            continue;
        };
        let span = Span {
            start_us: start as f64 / 1e3,
            dur_us: end.checked_sub(start).unwrap_or(0).max(0) as f64 / 1e3,
            tid: tid as u64,
            number: None,
        };
        // emit_nvtx names ops with their sequence number after a comma: `aten::add, seq = 3`.
        let op = text.split(", seq").next().unwrap_or(&text);
        if let Some(number) = step_number(op) {
            p.trace.steps.push(Span { number, ..span });
        } else if op.contains("DataLoader") {
            p.trace.loader.push(span);
        } else if op.starts_with("Optimizer.step#") {
            p.trace.optimizer.push(span);
        } else if (op.contains("evaluate_function")
            || op.ends_with("Backward0")
            || op.ends_with("Backward"))
            && !p.trace.backward_tids.contains(&span.tid)
        {
            p.trace.backward_tids.push(span.tid);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ranges_are_told_by_their_names() {
        assert_eq!(step_number("ProfilerStep#12"), Some(Some(12)));
        assert_eq!(step_number("step 7"), Some(Some(7)));
        assert_eq!(step_number("train_step"), Some(None));
        assert_eq!(step_number("iteration_3"), Some(Some(3)));
        assert_eq!(step_number("stepper"), None);
        assert_eq!(step_number("aten::mm"), None);
    }
}
