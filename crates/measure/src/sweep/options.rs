//! What a sweep is asked to do, as plain values: the engine's own options. The command line
//! builds them once (`cli`), a test or a library user builds them directly; `plan` checks them
//! and turns them into what to run. This file sits in the harness layer (README, Layers) so the
//! plan can take it.

use crate::expect::options::GateRules;
use crate::matrix::options::Options as MatrixOptions;
use crate::render::record::Outputs;
use crate::report::output::Outputs as ReportOutputs;
use std::path::PathBuf;
use std::sync::Arc;

/// Which backend runs: `Auto` is resolved against the machine by `sweep::select`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// nccl when a GPU and NCCL are found, mpi under an MPI launcher, else host.
    #[default]
    Auto,
    Host,
    Mpi,
    Nccl,
}

/// The message sizes, as nccl-tests' -b/-e/-f/-i give them (K/M/G binary suffixes).
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    pub minbytes: String,
    pub maxbytes: String,
    pub stepfactor: Option<String>,
    pub stepbytes: Option<String>,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            minbytes: "8".into(),
            maxbytes: "256M".into(),
            stepfactor: None,
            stepbytes: None,
        }
    }
}

/// What to run: comma-separated lists or `all`, as the flags take them.
#[derive(Debug, Clone, PartialEq)]
pub struct What {
    pub collective: String,
    pub datatype: String,
    pub op: String,
    pub root: String,
    /// Correctness-check passes per point (0 = off).
    pub check: usize,
    /// alltoallv: who sends how much to whom (nccl-tests' NCCL_TESTS_ALLTOALLV_* settings).
    pub traffic: crate::coll::Traffic,
    /// alltoallv: a traffic matrix to read, and the factor its bytes are scaled by; it
    /// replaces `traffic` when the plan is made.
    pub traffic_matrix: Option<(PathBuf, f64)>,
}

impl Default for What {
    fn default() -> Self {
        What {
            collective: "all_reduce".into(),
            datatype: "float".into(),
            op: "sum".into(),
            root: "0".into(),
            check: 1,
            traffic: crate::coll::Traffic::default(),
            traffic_matrix: None,
        }
    }
}

/// Timing and statistics (see `sweep --help` for each).
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub iters: Option<usize>,
    pub warmup_iters: usize,
    pub warmup_time: f64,
    pub sample_time: f64,
    pub target_ci: f64,
    pub samples: Option<usize>,
    pub min_samples: usize,
    pub max_samples: usize,
    pub point_budget: f64,
    pub time_budget: Option<f64>,
    pub cuda_events: bool,
    /// nccl-tests' -a: 0 rank 0's time, 1 the average, 2 the minimum, 3 the maximum.
    pub average: u8,
    pub timeout: f64,
    /// Adaptive, or nccl-tests' fixed schedule (its `*_perf` names).
    pub schedule: crate::model::Schedule,
    /// -I: keep every timed call's time, leaving this many leading ones out of the summary.
    pub per_iteration_skip: Option<usize>,
    /// nccl-tests' -N: the sizes of each series walked this many times, each printed.
    pub cycles: usize,
    /// nccl-tests' -m: calls per timed iteration, grouped.
    pub agg_iters: usize,
    /// nccl-tests' -z: each timed iteration waited for (and the ranks met) before the next.
    pub blocking: Option<crate::model::Blocking>,
    /// nccl-tests' -u: buffers misaligned by this many elements.
    pub unalign: usize,
    /// nccl-tests' -G: each sample captured into a CUDA graph, launched this many times.
    pub graph_launches: usize,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            iters: None,
            warmup_iters: 1,
            warmup_time: 0.0,
            sample_time: 0.002,
            target_ci: 0.03,
            samples: None,
            min_samples: 4,
            max_samples: 200,
            point_budget: 0.25,
            time_budget: None,
            cuda_events: false,
            average: 3,
            timeout: 300.0,
            schedule: crate::model::Schedule::Adaptive,
            per_iteration_skip: None,
            cycles: 1,
            agg_iters: 1,
            blocking: None,
            unalign: 0,
            graph_launches: 0,
        }
    }
}

/// Which backend, how many ranks or GPUs, which NCCL, and buffer registration (-R).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendOptions {
    pub backend: BackendChoice,
    pub ranks: Option<usize>,
    pub ngpus: Option<usize>,
    pub nccl_lib: Option<PathBuf>,
    pub register: u8,
    /// nccl-tests' NCCL_TESTS_DEVICE: the CUDA device of the first GPU (else 0, or the local
    /// rank's under a launcher).
    pub first_device: Option<usize>,
    /// nccl-tests' -x: `ncclConfig_t.CTAPolicy` of every communicator (NCCL 2.27 and later).
    pub cta_policy: Option<i64>,
    /// nccl-tests' -y 1: the NCCL backend's calls on the legacy default (NULL) stream.
    pub stream_null: bool,
    /// NCCL_TESTS_SPLIT / _MASK: processes grouped by color, a communicator per group.
    pub split: Option<super::split::Split>,
    /// `--show-algo`: NCCL's tuner lines on, and a column with its choice per size.
    pub show_algo: bool,
    /// How the processes of a launched NCCL job exchange the unique id and results.
    pub bootstrap: Bootstrap,
}

/// `--bootstrap`: MPI's collectives (an MPI build under an MPI launcher), or the launcher's
/// variables and a TCP rendezvous (any build, any launcher).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Bootstrap {
    /// MPI when built with it and launched by an MPI launcher, else TCP.
    #[default]
    Auto,
    Tcp,
    Mpi,
}

/// Everything a sweep (or the matrix, which runs on the sweep's launch) takes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub sizes: Sizes,
    pub what: What,
    pub timing: Timing,
    pub backend: BackendOptions,
    pub output: Outputs,
    pub gate: GateRules,
    /// The report rendered when the sweep ends (`--report`, `--markdown`, `--png-dir`).
    pub report: ReportOutputs,
    /// Per-rank arrival times after each point.
    pub stragglers: bool,
    /// TEST-ONLY faults (`--inject-fault`, in builds with the `fault-injection` feature).
    pub inject_fault: Option<String>,
    /// Set by `ncclprobe matrix`: pairs, not collectives.
    pub matrix: Option<Arc<MatrixOptions>>,
    /// Called by one of nccl-tests' `*_perf` names: its stdout, line for line.
    pub perf: Option<Arc<PerfStyle>>,
    /// `--history`: the store rank 0 keeps the finished record (or matrix) in.
    pub history: Option<crate::history::keep::Target>,
}

pub use crate::render::perf::PerfStyle;
