//! The report a run is attached to issues with: HTML, Markdown and PNG figures built from the
//! records, the findings and the expectations. Above the judgement crates and the renderers.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_analysis::{analysis, diagnose, expect, live};
pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};
pub use ncclprobe_import::import;
pub use ncclprobe_render::render;

pub mod report;
