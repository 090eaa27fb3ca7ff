//! The transports a sweep measures on: host threads and processes, MPI, NCCL through the CUDA
//! driver, the launchers' variables and the TCP rendezvous. Above the documents only.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_core::{
    buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out, outln,
    secrets, stats, term, units, with_dtype,
};

pub mod backend;
