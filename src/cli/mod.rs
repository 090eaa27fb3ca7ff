//! Command-line arguments as typed (clap derive), and their one conversion per command into
//! the engines' own options (`sweep.rs`, `matrix.rs`). Engines never see these types; checks
//! of the values happen in the engines (`plan` for a sweep).

mod args;
mod groups;
pub mod history;
mod loader;
mod matrix;
mod memory;
pub mod perf;
mod sweep;

pub use args::{
    BaselinesArgs, BundleArgs, CompareArgs, ComputeArgs, DdpArgs, DiagnoseArgs, DocFormat,
    DoctorArgs, FsdpArgs, ImportArgs, LinkArgs, QualifyArgs, ReportArgs, Severity, SimulateCommand,
    Strategy, TopoArgs,
};
use clap::{Parser, Subcommand};
pub use groups::{
    BackendArgs, BackendChoice, ExpectationArgs, OutputArgs, OutputFormat, ReportOutputs, RuleArgs,
};
pub use loader::LoaderArgs;
pub use matrix::{By, MatrixArgs, PairRuleArgs};
pub use memory::{CheckpointArg, LogitsArg, MemoryArgs, OffloadArg, OptionalLink};
pub use sweep::{GateArgs, SizeArgs, SweepArgs, TimingArgs, WhatArgs};

/// `--version`: the version, then what build.rs read of this binary.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NCCLPROBE_GIT_COMMIT"),
    ", features: ",
    env!("NCCLPROBE_FEATURES"),
    ", ",
    env!("NCCLPROBE_PROFILE"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "ncclprobe",
    version = VERSION_LINE,
    about = "Benchmark and diagnose collective communication (NCCL, MPI, host) and the interconnect beneath it",
    after_help = crate::exit::help_text()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure collectives over a range of message sizes (nccl-tests compatible table).
    Sweep(Box<SweepArgs>),
    /// Every pair of ranks, GPUs or nodes: one-way and two-way bandwidth and latency, and the
    /// pairs (or the node) far below the others named.
    Matrix(Box<MatrixArgs>),
    /// Show the GPU/NIC link matrix: live (NVML + sysfs) or from a pasted `nvidia-smi topo -m`.
    Topo(TopoArgs),
    /// Everything a good engineer checks, as findings with evidence and fixes: live, or from files.
    Diagnose(DiagnoseArgs),
    /// Read nccl-tests output (text or -J JSON) into a run record and the CSV contract.
    Import(ImportArgs),
    /// Predict a training step from a measured (or given) collective curve.
    #[command(subcommand)]
    Simulate(SimulateCommand),
    /// Hold a run against what its topology should give (per size), or against an earlier run.
    Compare(CompareArgs),
    /// The CI gate: rules on a run (a profile, flags or a rules file); exit 0 pass, 3 fail.
    Qualify(Box<QualifyArgs>),
    /// Every shipped expectation with its conditions, provenance and citation.
    Baselines(BaselinesArgs),
    /// One self-contained HTML page, PNG/SVG plots and a Markdown summary from any documents.
    Report(ReportArgs),
    /// This machine end to end: topology, a short sweep (and one without the overrides that
    /// force a slower path), diagnosis, compare, simulate (with --model), and the report.
    Doctor(Box<DoctorArgs>),
    /// What NCCL's issue template asks for, in one directory and a .tar.gz: a short NCCL run
    /// with NCCL_DEBUG=INFO and its dumps, nvidia-smi, IB ports, versions, environment,
    /// nccl.conf files, ACS/IOMMU, and a summary laid out as the template (--redact to post it).
    Bundle(BundleArgs),
    /// The fleet's history store: add documents to it, check it.
    #[command(subcommand)]
    History(history::HistoryCommand),
    /// Every node of a SKU against its peers and its own past, from the history store: the
    /// drain list (node, what failed, evidence, since when); exit 3 when it is not empty.
    Fleet(Box<history::FleetArgs>),
    /// Links named as nccl-tests' binaries (all_reduce_perf, ...) to this ncclprobe: called by
    /// one of those names it takes that binary's flags and prints its output.
    Aliases(AliasesArgs),
}

#[derive(Debug, clap::Args)]
pub struct AliasesArgs {
    /// Directory for the links (created if missing); names already there are left alone.
    #[arg(default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Name them as nccl-tests' MPI build does (all_reduce_perf_mpi, ...).
    #[arg(long)]
    pub mpi: bool,
}
