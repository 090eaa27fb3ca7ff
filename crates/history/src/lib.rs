//! The store every run can be kept in (SQLite or PostgreSQL) and the fleet judged from it. Above
//! the documents only.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};

pub mod history;
