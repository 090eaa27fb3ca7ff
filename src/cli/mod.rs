//! Command-line arguments as typed (clap derive), and their one conversion per command into
//! the engines' own options (`sweep.rs`, `matrix.rs`). Engines never see these types; checks
//! of the values happen in the engines (`plan` for a sweep).

mod args;
pub mod examples;
mod groups;
pub mod history;
mod loader;
mod matrix;
mod memory;
pub mod perf;
mod sweep;
mod trace;

pub use args::{
    BaselinesArgs, BundleArgs, CompareArgs, ComputeArgs, DdpArgs, DiagnoseArgs, DocFormat,
    DoctorArgs, FsdpArgs, ImportArgs, LinkArgs, MessagesArgs, QualifyArgs, ReportArgs, Severity,
    SimulateCommand, Strategy, TopoArgs,
};
use clap::{Parser, Subcommand};
pub use groups::{
    BackendArgs, BackendChoice, ExpectationArgs, OutputArgs, OutputFormat, ReportOutputs, RuleArgs,
};
pub use loader::LoaderArgs;
pub use matrix::{By, MatrixArgs, PairRuleArgs};
pub use memory::{
    CheckpointArg, LogitsArg, MemoryArgs, OffloadArg, OptimizerArg, OptionalLink, QuantizeArg,
};
pub use sweep::{GateArgs, SizeArgs, SweepArgs, TimingArgs, WhatArgs};
pub use trace::TraceArgs;

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
    /// Leave out the banner, the progress bar and the notes on stderr: the results, warnings and
    /// errors stay.
    #[arg(
        short = 'q',
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Terminal"
    )]
    pub quiet: bool,
    /// Say more: the notes a normal run leaves out (the reasons behind each choice).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count, help_heading = "Terminal")]
    pub verbose: u8,
    /// Colour the verdict words (HEALTHY, DEGRADED, FAILED, NOT JUDGED, PASS, FAIL): auto is on
    /// a terminal unless NO_COLOR is set (CLICOLOR_FORCE colours a pipe).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        value_name = "WHEN",
        help_heading = "Terminal"
    )]
    pub color: ColorWhen,
}

/// The `--format` values whose stdout a program reads.
const MACHINE_FORMATS: [&str; 4] = ["json", "csv", "junit", "prometheus"];

/// `--color`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

impl Cli {
    /// What `-q`, `-v` and `--color` ask of the terminal. A command whose stdout is for a
    /// program (`--format json|csv|junit|prometheus`) gets no colour whatever was asked: an
    /// escape sequence inside a JSON string or a CSV cell would corrupt it.
    pub fn configure_terminal(&self, args: &[std::ffi::OsString]) {
        let machine = args
            .windows(2)
            .any(|w| w[0] == "--format" && MACHINE_FORMATS.iter().any(|f| w[1] == *f))
            || args.iter().any(|a| {
                MACHINE_FORMATS
                    .iter()
                    .any(|f| a.to_str() == Some(&format!("--format={f}")))
            });
        let colour = match self.color {
            _ if machine => crate::term::ColourChoice::Never,
            ColorWhen::Auto => crate::term::ColourChoice::Auto,
            ColorWhen::Always => crate::term::ColourChoice::Always,
            ColorWhen::Never => crate::term::ColourChoice::Never,
        };
        crate::term::configure(self.quiet, self.verbose, colour);
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure collectives over a range of message sizes (nccl-tests compatible table).
    #[command(after_help = examples::SWEEP)]
    Sweep(Box<SweepArgs>),
    /// Every pair of ranks, GPUs or nodes: one-way and two-way bandwidth and latency, and the
    /// pairs (or the node) far below the others named.
    #[command(after_help = examples::MATRIX)]
    Matrix(Box<MatrixArgs>),
    /// Show the GPU/NIC link matrix: live (NVML + sysfs) or from a pasted `nvidia-smi topo -m`.
    #[command(after_help = examples::TOPO)]
    Topo(TopoArgs),
    /// Everything a good engineer checks, as findings with evidence and fixes: live, or from files.
    #[command(after_help = examples::DIAGNOSE)]
    Diagnose(DiagnoseArgs),
    /// Read nccl-tests output (text or -J JSON) into a run record and the CSV contract.
    #[command(after_help = examples::IMPORT)]
    Import(ImportArgs),
    /// A training job's own records (PyTorch profiler traces, Flight Recorder dumps, NCCL
    /// Inspector output): where each step went, each collective against the link, the rank
    /// the others waited for, a hang's culprit, and the DDP what-if calibrated on the job.
    #[command(after_help = examples::TRACE)]
    Trace(TraceArgs),
    /// Predict a training step from a measured (or given) collective curve.
    #[command(subcommand)]
    Simulate(SimulateCommand),
    /// Hold a run against what its topology should give (per size), or against an earlier run.
    #[command(after_help = examples::COMPARE)]
    Compare(CompareArgs),
    /// The CI gate: rules on a run (a profile, flags or a rules file); exit 0 pass, 3 fail.
    #[command(after_help = examples::QUALIFY)]
    Qualify(Box<QualifyArgs>),
    /// The message catalogue: what NCCL, RCCL, their network plugins, PyTorch and the MPI
    /// launchers print, from their source, with each message's cause and fix.
    #[command(after_help = examples::MESSAGES)]
    Messages(MessagesArgs),
    /// Every shipped expectation with its conditions, provenance and citation.
    #[command(after_help = examples::BASELINES)]
    Baselines(BaselinesArgs),
    /// One self-contained HTML page, PNG/SVG plots and a Markdown summary from any documents.
    #[command(after_help = examples::REPORT)]
    Report(ReportArgs),
    /// This machine end to end: topology, a short sweep (and one without the overrides that
    /// force a slower path), diagnosis, compare, simulate (with --model), and the report.
    #[command(after_help = examples::DOCTOR)]
    Doctor(Box<DoctorArgs>),
    /// What NCCL's issue template asks for, in one directory and a .tar.gz: a short NCCL run
    /// with NCCL_DEBUG=INFO and its dumps, nvidia-smi, IB ports, versions, environment,
    /// nccl.conf files, ACS/IOMMU, and a summary laid out as the template (--redact to post it).
    #[command(after_help = examples::BUNDLE)]
    Bundle(BundleArgs),
    /// The fleet's history store: add documents to it, check it.
    #[command(subcommand)]
    History(history::HistoryCommand),
    /// Every node of a SKU against its peers and its own past, from the history store: the
    /// drain list (node, what failed, evidence, since when); exit 3 when it is not empty.
    #[command(after_help = examples::FLEET)]
    Fleet(Box<history::FleetArgs>),
    /// Links named as nccl-tests' binaries (all_reduce_perf, ...) to this ncclprobe: called by
    /// one of those names it takes that binary's flags and prints its output.
    #[command(after_help = examples::ALIASES)]
    Aliases(AliasesArgs),
    /// Shell completions on stdout: `ncclprobe completions bash > ~/.local/share/bash-completion/completions/ncclprobe`.
    #[command(after_help = examples::COMPLETIONS)]
    Completions(CompletionsArgs),
    /// The manual page (roff) on stdout, of ncclprobe or of one command: `ncclprobe man sweep | man -l -`.
    #[command(after_help = examples::MAN)]
    Man(ManArgs),
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The command whose page to print (`sweep`, `simulate ddp`); none: ncclprobe's own page,
    /// which lists them.
    #[arg(num_args = 0..=2, value_name = "COMMAND")]
    pub command: Vec<String>,
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
