//! What a trace is read into: kernels, spans and collectives, and the error every reader
//! returns.

use crate::coll::Collective;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
}

pub fn bad(path: &str, reason: impl Into<String>) -> TraceError {
    TraceError::Bad {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// A span of host time: a `ProfilerStep#N`, a DataLoader `__next__`, an optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start_us: f64,
    pub dur_us: f64,
    pub tid: u64,
    /// The step number, for `ProfilerStep#N`.
    pub number: Option<u64>,
}

impl Span {
    pub fn end_us(&self) -> f64 {
        self.start_us + self.dur_us
    }
}

/// What a GPU activity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelKind {
    Compute,
    /// A copy or memset.
    Memory,
    /// An NCCL kernel: its collective, as an index into [`RankTrace::comms`].
    Comm(u32),
}

/// Which part of the step launched a kernel (from the launching thread and span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Forward,
    Backward,
    Optimizer,
    Unknown,
}

/// One GPU activity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kernel {
    pub start_us: f64,
    pub dur_us: f64,
    pub stream: u32,
    pub correlation: u64,
    /// When the host launched it (its start where the launch is not in the trace).
    pub launch_us: f64,
    pub kind: KernelKind,
    pub phase: Phase,
    /// The step whose span holds its launch (index into [`RankTrace::steps`]).
    pub step: Option<u32>,
}

impl Kernel {
    pub fn end_us(&self) -> f64 {
        self.start_us + self.dur_us
    }
}

/// What an NCCL kernel moved.
#[derive(Debug, Clone, PartialEq)]
pub struct CommKernel {
    pub coll: Collective,
    /// nccl-tests' size: the larger buffer for all-gather and reduce-scatter, else the input.
    pub bytes: Option<u64>,
    pub in_bytes: Option<u64>,
    pub out_bytes: Option<u64>,
    pub group_size: Option<usize>,
    /// The process group's description or name.
    pub group: Option<String>,
    /// Whether the size came from the CPU-side `nccl:` call rather than the kernel's args.
    pub from_annotation: bool,
}

/// A c10d call on the host (`nccl:all_reduce` with `record_shapes`, `record_param_comms`).
#[derive(Debug, Clone, PartialEq)]
pub struct CommOp {
    pub span: Span,
    pub coll: Collective,
    pub bytes: Option<u64>,
    pub group_size: Option<usize>,
}

/// One rank's profiler trace, as far as the step analysis needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankTrace {
    pub source: String,
    pub bytes: u64,
    pub events: u64,
    pub unreadable_events: u64,
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub nccl_version: Option<String>,
    pub device: Option<String>,
    pub host: Option<String>,
    pub kernels: Vec<Kernel>,
    pub comms: Vec<CommKernel>,
    pub comm_ops: Vec<CommOp>,
    pub steps: Vec<Span>,
    pub loader: Vec<Span>,
    pub optimizer: Vec<Span>,
    pub backward_tids: Vec<u64>,
    pub main_tid: Option<u64>,
}

/// All of a document that must be held whole, up to the cap every reader shares.
pub fn read_whole(name: &str, reader: impl std::io::Read) -> Result<Vec<u8>, TraceError> {
    let mut buf = Vec::new();
    let all = crate::bounded::read_to_cap(reader, crate::bounded::MAX_DOCUMENT_BYTES, &mut buf)
        .map_err(|e| bad(name, e.to_string()))?;
    if !all {
        let mib = crate::bounded::MAX_DOCUMENT_BYTES >> 20;
        return Err(bad(name, format!("is larger than {mib} MiB")));
    }
    Ok(buf)
}
