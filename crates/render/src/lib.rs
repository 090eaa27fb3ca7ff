//! Pure formatting of ncclprobe's documents: terminal tables, CSV, JSON, JUnit, Markdown, the
//! HTML templates and the figures. Above the documents, below everything that measures or judges.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};

pub mod render;
