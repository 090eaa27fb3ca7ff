//! One file per command, orchestration only: read the inputs, call the library, hand the
//! result to `render`. Shared here: how input files are read and recognised (`input`).

pub mod baselines;
pub mod compare;
pub mod diagnose;
pub mod doctor;
pub mod expectation;
pub mod import;
pub mod input;
pub mod matrix;
pub mod qualify;
pub mod report;
pub mod simulate;
pub mod sweep;
pub mod topo;
