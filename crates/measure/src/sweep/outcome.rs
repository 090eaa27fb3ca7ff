//! How a finished sweep's judgement ends it: exit 3 when elements came back wrong, when the
//! gate failed, or (as one of nccl-tests' binaries) when the average is under
//! NCCL_TESTS_MIN_BW.

use crate::exit::{ExitCode, Failure};
use crate::model::RunRecord;
use crate::render::perf::{self, PerfStyle};

/// Exit 3 when the check found wrong elements.
fn wrong_elements(record: &RunRecord) -> Result<(), Failure> {
    match record.total_wrong() {
        0 => Ok(()),
        wrong => Err(Failure::new(
            ExitCode::CheckFailed,
            format!("check failed: {wrong} wrong elements (see the #wrong column)"),
        )),
    }
}

/// Exit 3 when elements came back wrong or the gate failed (in that order).
pub fn judged(
    record: &RunRecord,
    verdict: Option<crate::documents::Qualification>,
) -> Result<(), Failure> {
    wrong_elements(record)?;
    match verdict.filter(|q| !q.passed) {
        Some(q) if q.results.is_empty() => Err(Failure::usage(format!("qualify: {}", q.summary))),
        Some(q) => Err(Failure::new(
            ExitCode::CheckFailed,
            format!("qualify: {}", q.summary),
        )),
        None => Ok(()),
    }
}

/// How a `*_perf` run ends: nccl-tests fails it when a check found wrong elements or the
/// average is under NCCL_TESTS_MIN_BW (src/common.cu, run()).
pub fn perf_status(style: &PerfStyle, record: &RunRecord) -> Result<ExitCode, Failure> {
    wrong_elements(record)?;
    match perf::min_bw_culprits(style, &record.points) {
        Some(why) => Err(Failure::new(ExitCode::CheckFailed, why)),
        None => Ok(ExitCode::Ok),
    }
}
