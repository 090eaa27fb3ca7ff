//! The measuring engines: the harness (`measure`, `plan`, `arrivals`, `watchdog`), the pair
//! matrix (`matrix`) and the sweep (`sweep`), which `doctor` and the commands drive. Above every
//! other library crate.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_analysis::{analysis, diagnose, expect, live};
pub use ncclprobe_backend::backend;
pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};
pub use ncclprobe_history::history;
pub use ncclprobe_import::import;
pub use ncclprobe_render::render;
pub use ncclprobe_report::report;

pub mod arrivals;
pub mod matrix;
pub mod measure;
pub mod plan;
pub mod sweep;
pub mod watchdog;
