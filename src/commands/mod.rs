//! One file per command, orchestration only: read the inputs, call the library, hand the
//! result to `render`.

pub mod baselines;
pub mod bundle;
pub mod compare;
pub mod diagnose;
pub mod doctor;
pub mod files;
pub mod fleet;
pub mod history;
pub mod import;
pub mod loader;
pub mod manual;
pub mod matrix;
pub mod memory;
pub mod messages;
pub mod perf;
pub mod qualify;
pub mod report;
pub mod simulate;
pub mod sweep;
pub mod topo;
pub mod trace;
