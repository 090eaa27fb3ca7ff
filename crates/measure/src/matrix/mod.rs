//! `ncclprobe matrix`: every pair of ranks (or of nodes) measured on its own, so one bad link,
//! one slow slot or one node with a bad NIC shows up as the pair (or node) it is, instead of
//! as a whole job that is slow.
//!
//! The document (`kind: matrix`) is written after every step, like a sweep's record; its
//! outliers are judged by [`analysis`], the same code `diagnose --from matrix.json` runs.

pub mod options;
mod out;
pub mod qualify;
mod rank;
mod remeasure;
pub mod run;
pub mod schedule;

pub use crate::documents::matrix::{
    analysis, By, Direction, Endpoint, MatrixDocument, Outlier, PairMeasurement, Schedule,
};
use crate::documents::Kind;
use crate::model::{RunStatus, Settings, SCHEMA_VERSION};
pub use options::Options;
pub use out::MatrixOut;
pub use rank::run_rank;

/// A new document from the sweep's record skeleton (tool, backend, env, settings).
pub fn document_from_record(
    record: crate::model::RunRecord,
    settings: Settings,
    options: &Options,
) -> MatrixDocument {
    MatrixDocument {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Matrix,
        tool: record.tool,
        status: RunStatus::Running,
        started_at: record.started_at,
        finished_at: None,
        command_line: record.command_line,
        backend: record.backend,
        env: record.env,
        settings,
        by: options.by,
        schedule: if options.one_pair_at_a_time {
            Schedule::OnePairAtATime
        } else {
            Schedule::Rounds
        },
        outlier_fraction: options.outlier,
        endpoints: Vec::new(),
        topology: record.topology,
        measurements: Vec::new(),
        outliers: Vec::new(),
        notes: record.notes,
        error: None,
    }
}
