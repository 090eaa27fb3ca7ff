//! The bottom layer of ncclprobe: the documents it reads and writes and the model they are made
//! of (records, collectives, data types, units, statistics, exit codes, what the binary is).
//! It imports no other ncclprobe crate.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub mod bounded;
pub mod buildinfo;
pub mod coll;
pub mod data;
pub mod documents;
pub mod dtype;
pub mod exit;
pub mod fault_injection;
pub mod flags;
pub mod model;
pub mod secrets;
pub mod stats;
pub mod term;
pub mod units;
