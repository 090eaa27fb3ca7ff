//! `ncclprobe sweep` as a pipeline: `select` the backend, describe how its ranks start
//! (`worlds`), and run them through the one skeleton (`launch`): every rank runs the same loop
//! (`rank`), rank 0 prints and records (`report`, `record`).

mod after_table;
mod banner;
pub mod budget;
mod entry;
mod gate_checks;
pub mod launch;
pub mod observe;
mod one_gpu;
pub mod options;
mod orphan;
mod outcome;
pub mod rank;
pub mod record;
pub mod report;
pub mod select;
pub mod split;
pub mod worlds;

pub use entry::run;
pub use select::{select_backend, Backend, Environment, Selection};
