//! A paste of nccl-tests' summary lines alone (`# Avg bus bandwidth : N`, no table): the run is
//! its average, judged against the expectation's mean over the same sizes (nccl-tests averages
//! every size's busbw, both placements, src/common.cu) when the banner or the command line says
//! which sizes those were; otherwise the answer says what it needs.

use super::choose::Choice;
use super::compare::{baseline_ref, expected_at, record_warnings, verdict};
use crate::coll::Collective;
use crate::documents::{Comparison, Kind, SCHEMA_VERSION};
use crate::model::RunRecord;
use crate::units::format_size;

/// Whether the run is a summary without rows.
pub fn is_summary_only(r: &RunRecord) -> bool {
    r.points.is_empty()
        && r.import
            .as_ref()
            .is_some_and(|i| i.reported_avg_busbw_gbps.is_some())
}

/// The average against `choice`'s mean over the run's sizes.
pub fn comparison(run_name: &str, r: &RunRecord, choice: &Choice) -> Comparison {
    let info = r.import.clone().unwrap_or_default();
    let avg = info.reported_avg_busbw_gbps.unwrap_or(0.0);
    let coll = info.collective.filter(|c| c.is_measured());
    let judged = match (coll, info.sizes) {
        (None, _) => Err("the paste names no collective: give --collective NAME".to_string()),
        (_, None) => Err("judging it needs the sizes it averaged: paste the banner line (`# nThread ... minBytes ... maxBytes ... step: ...`) or the command line (`-b`, `-e`, `-f`) with it".to_string()),
        (Some(c), Some(range)) => judge(avg, c, &range.sizes(), choice, r.backend.nranks),
    };
    let (summary, not_compared) = match judged {
        Ok(sentence) => (sentence, Vec::new()),
        Err(need) => (
            format!("nccl-tests' average bus bandwidth {avg} GB/s, not judged: {need}"),
            vec![format!("the average: {need}")],
        ),
    };
    Comparison {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Comparison,
        tool: crate::buildinfo::tool_info(),
        run: run_name.into(),
        run_id: Some(crate::model::check::identity(r)),
        baseline: baseline_ref(choice),
        without_overrides: None,
        points: Vec::new(),
        not_compared,
        method: "nccl-tests' average (every size's busbw, both placements) against the mean of the expectation and its band over the same sizes".into(),
        warnings: record_warnings(r),
        summary,
        stated: choice.stated.clone(),
        nic_readings: Vec::new(),
        assumed: None,
        shape: Vec::new(),
    }
}

/// One sentence: the average, the expected mean and band over `sizes`, the verdict.
fn judge(
    avg_gbps: f64,
    coll: Collective,
    sizes: &[u64],
    choice: &Choice,
    nranks: usize,
) -> Result<String, String> {
    let expected: Vec<_> = sizes
        .iter()
        .filter_map(|&s| expected_at(choice, coll, s))
        .collect();
    if expected.is_empty() {
        return Err(format!("{} has no figure for {coll}", choice.entry.id));
    }
    let n = expected.len() as f64;
    let mean =
        |f: &dyn Fn(&super::compare::Expected) -> f64| expected.iter().map(f).sum::<f64>() / n;
    let e = super::compare::Expected {
        busbw_bytes_per_s: mean(&|e| e.busbw_bytes_per_s),
        low_bytes_per_s: mean(&|e| e.low_bytes_per_s),
        high_bytes_per_s: mean(&|e| e.high_bytes_per_s),
        time_s: 0.0,
        latency_share: 0.0,
        layer: String::new(),
    };
    let measured = avg_gbps * 1e9;
    let (first, last) = (sizes[0], sizes[sizes.len() - 1]);
    Ok(format!(
        "nccl-tests' average bus bandwidth {avg_gbps} GB/s over {} sizes from {} to {} ({coll}, {nranks} ranks) against {:.2} GB/s expected as the mean over the same sizes (band {:.2}-{:.2}): {} ({:.2}x). An average mixes latency-bound and bandwidth-bound sizes: a table (the rows) says which sizes are off.",
        sizes.len(),
        format_size(first),
        format_size(last),
        e.busbw_bytes_per_s / 1e9,
        e.low_bytes_per_s / 1e9,
        e.high_bytes_per_s / 1e9,
        verdict(measured, &e),
        measured / e.busbw_bytes_per_s
    ))
}
