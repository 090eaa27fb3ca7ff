//! A training job's own records of where its time went, read as streams: PyTorch profiler
//! (Kineto) traces, one per rank or a directory of them; PyTorch Flight Recorder dumps (JSON or
//! pickle); NCCL Inspector's per-collective JSON. Each is told by its content, gzip or not.
//! What is kept is small (kernels, steps, collectives); the rest of a file is read past, so a
//! GB-sized trace costs its kernels' memory, not its own.

pub mod flight;
pub mod inspector;
pub mod job;
pub mod kineto;
pub mod nsys;
pub mod pickle;
pub mod stream;
pub mod types;

pub use job::{files_of, kind_of, open_reader, read_job, sniff, JobRecords, TraceKind};
pub use types::*;
