//! Readers of what users paste and other tools write: nccl-tests tables and JSON, NCCL's logs,
//! topology and graph dumps, `nvidia-smi topo -m`. Above the documents; it renders nothing.
//!
//! Modules of the crates below are re-exported at the root under their own names, so a path
//! reads `crate::model::…` in every crate whichever crate defines the module.

pub use ncclprobe_core::{
    bounded, buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out,
    outln, secrets, stats, term, units, with_dtype,
};

pub mod import;
