//! Judgement: the expectations a run is held to and the gate (`expect`), the diagnosis rules
//! (`diagnose`), what the live machine says (`live`) and the training-step and memory models
//! (`analysis`). Above the documents and the importers.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};
pub use ncclprobe_import::import;

pub mod analysis;
pub mod diagnose;
pub mod expect;
pub mod live;
