//! The flags of `report`, `doctor`, `compare`, `qualify`, `baselines`, `topo`, `diagnose`,
//! `import` and `simulate`.

use super::groups::{
    BackendArgs, ExpectationArgs, OutputArgs, OutputFormat, ReportOutputs, RuleArgs,
};
use super::matrix::PairRuleArgs;
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Documents to render: run records, nccl-tests output, and the JSON of diagnose,
    /// simulate, compare, qualify and topo (each told by its `kind`). Several runs are overlaid.
    /// A comparison or qualification must be of a run given (its record's start and host,
    /// or its file name): one of another run is refused (exit 2).
    #[arg(required = true, value_name = "FILE")]
    pub inputs: Vec<PathBuf>,
    /// Write the self-contained HTML report here (without any output flag, the Markdown
    /// summary goes to stdout).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "HTML",
        help_heading = "Report"
    )]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub outputs: ReportOutputs,
    /// Do not hold runs against their shipped expectation when no comparison is given.
    #[arg(long, help_heading = "Expectation")]
    pub no_expect: bool,
    /// The collective of runs whose old nccl-tests log does not name it.
    #[arg(long, help_heading = "Expectation")]
    pub collective: Option<String>,
    /// What the runs' output does not say about the machine, as `compare --hardware` takes it
    /// (e.g. "2 nodes x 8 H100 SXM, 8x400G IB per node").
    #[arg(long, value_name = "FACTS", help_heading = "Expectation")]
    pub hardware: Option<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub history: super::history::HistoryArgs,
    /// The directory for index.html, summary.md, the plots and every JSON behind them. It must
    /// be new, empty, or an earlier doctor run's: a marker file (.ncclprobe-doctor) lists what
    /// each run writes, and the next run removes those files first. A directory holding
    /// anything else (a file of yours, one the marker does not list) is refused (exit 2) and
    /// left as it is. On SIGINT or SIGTERM doctor passes the signal to the sweep it runs,
    /// writes a partial report that says so, and exits 130 or 143.
    #[arg(
        short = 'o',
        long = "output",
        default_value = "ncclprobe-report",
        value_name = "DIR",
        help_heading = "Report"
    )]
    pub output: PathBuf,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// MPI ranks to launch for `--backend mpi` when doctor is not itself under a launcher.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub np: usize,
    /// The MPI launcher for `--backend mpi`, with its arguments (split at spaces), e.g.
    /// `mpirun --oversubscribe`.
    #[arg(long, default_value = "mpirun", value_name = "COMMAND")]
    pub launcher: String,
    /// Smallest size of the short sweep.
    #[arg(short = 'b', long, default_value = "8", help_heading = "Short sweep")]
    pub minbytes: String,
    /// Largest size of the short sweep.
    #[arg(short = 'e', long, default_value = "64M", help_heading = "Short sweep")]
    pub maxbytes: String,
    /// Size factor between points of the short sweep.
    #[arg(short = 'f', long, default_value = "4", help_heading = "Short sweep")]
    pub stepfactor: String,
    /// Measured seconds per point of the short sweep.
    #[arg(long, default_value_t = 0.2, help_heading = "Short sweep")]
    pub point_budget: f64,
    /// Seconds a collective may make no progress before a sweep is ended (each sweep's own
    /// watchdog). Doctor also ends a child sweep, with its launcher and all it started, that
    /// prints nothing for twice this long: SIGTERM to its process group, SIGKILL 5 s later.
    #[arg(long, default_value_t = 60.0, help_heading = "Short sweep")]
    pub timeout: f64,
    /// Do not measure again without the overrides that force a slower path.
    #[arg(long, help_heading = "Short sweep")]
    pub no_alternative: bool,
    /// What the measurement cannot see about the machine, as `compare --hardware` takes it
    /// (e.g. "2 nodes x 8 H100 SXM, 8x400G IB per node"): the comparison uses it, as stated.
    #[arg(long, value_name = "FACTS", help_heading = "Expectation")]
    pub hardware: Option<String>,
    /// Simulate DDP on the measured curve for this model (a preset, .safetensors or tensor list).
    #[arg(
        long,
        requires = "compute_ms",
        help_heading = "DDP simulation (with --model)"
    )]
    pub model: Option<String>,
    /// One GPU's step time in ms at --batch-size (with --model).
    #[arg(long, help_heading = "DDP simulation (with --model)")]
    pub compute_ms: Option<f64>,
    /// Per-GPU micro-batch size (with --model).
    #[arg(
        long,
        default_value_t = 32,
        help_heading = "DDP simulation (with --model)"
    )]
    pub batch_size: usize,
    /// The input pipeline of the DDP simulation (with --model).
    #[command(flatten)]
    pub loader: super::loader::LoaderArgs,
    /// The training job's own records (PyTorch profiler traces, Flight Recorder dumps, NCCL
    /// Inspector output; files or a directory), judged as `ncclprobe trace` judges them with
    /// the collectives held against this run's sweep, in the diagnosis and the report.
    #[arg(long, value_name = "PATH", help_heading = "Training job")]
    pub trace: Vec<PathBuf>,
    /// The report's title.
    #[arg(long, help_heading = "Report")]
    pub title: Option<String>,
}

/// table for people; json: a typed document; csv: one row per point or rule; markdown: for an issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DocFormat {
    Table,
    Json,
    Csv,
    Markdown,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A run (record or nccl-tests output) to hold against its expectation; or two runs,
    /// BEFORE AFTER, to compare with each other.
    #[arg(required = true, num_args = 1..=2, value_name = "RUN")]
    pub runs: Vec<PathBuf>,
    #[command(flatten)]
    pub expectation: ExpectationArgs,
    /// Run vs run: a change smaller than this fraction is noise whatever the test says.
    #[arg(long, default_value_t = 0.05, help_heading = "Run vs run")]
    pub noise: f64,
    /// table for people; json: a typed document; csv: one row per point; markdown: for an issue or a ticket.
    #[arg(long, value_enum, default_value_t = DocFormat::Table, help_heading = "Output")]
    pub format: DocFormat,
}

#[derive(Debug, Args)]
pub struct QualifyArgs {
    /// The run to gate (record or nccl-tests output).
    pub run: PathBuf,
    #[command(flatten)]
    pub expectation: ExpectationArgs,
    #[command(flatten)]
    pub rules: RuleArgs,
    #[command(flatten)]
    pub pairs: PairRuleArgs,
    /// table for people; json: a typed document; csv: one row per rule; markdown: for an issue or a ticket.
    #[arg(long, value_enum, default_value_t = DocFormat::Table, help_heading = "Output")]
    pub format: DocFormat,
    #[command(flatten)]
    pub history: super::history::HistoryArgs,
    /// Also hold the run against its SKU's other nodes in this history store (a SQLite file or
    /// `postgres://…`): it fails where it is significantly below them (the --fleet-* rules),
    /// and when the store has too few peers to say.
    #[arg(
        long = "against-fleet",
        value_name = "DB",
        help_heading = "Fleet rules"
    )]
    pub against_fleet: Option<String>,
    #[command(flatten)]
    pub fleet_rules: super::history::FleetRuleArgs,
}

#[derive(Debug, Args)]
pub struct BaselinesArgs {
    /// The reference designs (nodes, instances and shapes: their GPUs and NICs) instead of the
    /// expectations; `--format json` carries both.
    #[arg(long)]
    pub designs: bool,
    /// table for people; json: a typed document; csv: one row per entry; markdown: a table.
    #[arg(long, value_enum, default_value_t = DocFormat::Table, help_heading = "Output")]
    pub format: DocFormat,
}

#[derive(Debug, Args)]
pub struct TopoArgs {
    /// A pasted `nvidia-smi topo -m` output, or NCCL's dumps (NCCL_TOPO_DUMP_FILE and/or
    /// NCCL_GRAPH_DUMP_FILE, repeat --from for the second), instead of this machine.
    #[arg(long)]
    pub from: Vec<PathBuf>,
    /// table: the matrix and what it means; csv: `from,to,link` per ordered pair; json: everything.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The directory to collect into (new, or empty and yours alone); DIR.tar.gz is written
    /// beside it.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// Replace host names, IP and MAC addresses, mail addresses and user names consistently in
    /// every file, for a bundle that gets posted publicly.
    #[arg(long)]
    pub redact: bool,
    /// Leave out the short NCCL run (collect the machine's state only).
    #[arg(long)]
    pub no_run: bool,
    /// Seconds the short run's collectives may make no progress (the sweep's --timeout).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    /// Files to read instead of this machine (repeatable): NCCL_DEBUG logs, nccl-tests output,
    /// `nvidia-smi topo -m`, `nvidia-smi`, ncclprobe run records. The kind is detected.
    #[arg(long)]
    pub from: Vec<PathBuf>,
    /// Also look at this machine when --from is given.
    #[arg(long)]
    pub live: bool,
    /// table for people; json: {"facts": {...}, "findings": [...]}.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// Exit with code 3 when a finding of this severity or worse is present.
    #[arg(long, value_enum)]
    pub fail_on: Option<Severity>,
    /// Print the message catalogue's entry for one pasted line (NCCL, PyTorch, MPI, UCX ...):
    /// the source that prints it, when, in which releases, what it means and what to do.
    /// Reads nothing else.
    #[arg(long, value_name = "LINE", conflicts_with_all = ["from", "live", "fail_on"])]
    pub explain: Option<String>,
}

#[derive(Debug, Args)]
pub struct MessagesArgs {
    /// Only this project's messages (nccl, rccl, aws-ofi-nccl, pytorch, ...).
    #[arg(long)]
    pub project: Option<String>,
    /// Only this level (WARN, INFO, ERROR, RESULT).
    #[arg(long)]
    pub level: Option<String>,
    /// Only this class (the finding id diagnosis raises, e.g. nccl.net-ib).
    #[arg(long)]
    pub class: Option<String>,
    /// Only formats containing this text (case-insensitive).
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// Only what this release prints (2.21.5).
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// How much of each release's messages the catalogue holds: formats in the source against
    /// entries, recognisable, classified and noted ones.
    #[arg(long)]
    pub coverage: bool,
    /// table for people; json: a typed document; csv: one row per entry; markdown: a table.
    #[arg(long, value_enum, default_value_t = DocFormat::Table, help_heading = "Output")]
    pub format: DocFormat,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// nccl-tests output as posted (text, tagged or prefixed lines are fine) or its -J JSON file.
    pub file: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum SimulateCommand {
    /// PyTorch DistributedDataParallel: bucket caps × gradient accumulation, with and without no_sync().
    #[command(after_help = super::examples::DDP)]
    Ddp(DdpArgs),
    /// FSDP / DeepSpeed ZeRO: communication and memory per GPU by sharding strategy.
    #[command(alias = "zero")]
    #[command(after_help = super::examples::FSDP)]
    Fsdp(FsdpArgs),
    /// Whether a training setup fits its GPU and host (ZeRO/FSDP, offload, LoRA, activations),
    /// term by term, and the cheapest changes that make it fit.
    #[command(after_help = super::examples::MEMORY)]
    Memory(Box<super::memory::MemoryArgs>),
}

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Link (one of)")]
pub struct LinkArgs {
    /// A run record (JSON) or sweep CSV; its out-of-place all_reduce points give the curve.
    #[arg(long, conflicts_with = "busbw")]
    pub curve: Option<PathBuf>,
    /// Bus bandwidth in GB/s (nccl-tests' busbw), for an alpha-beta model instead of a curve.
    #[arg(long)]
    pub busbw: Option<f64>,
    /// Per-call latency in microseconds for the alpha-beta model.
    #[arg(long, default_value_t = LinkArgs::DEFAULT_LATENCY_US, requires = "busbw")]
    pub latency_us: f64,
    /// Use a --curve that is incomplete (its run did not complete, or it stops far below the
    /// messages simulated) or measured on another rank count than --world-size (rescaled by
    /// the collective's busbw factor). Without it such a curve is refused (exit 2); with it,
    /// what was used is said on stderr and in the document's `link`.
    #[arg(long, requires = "curve")]
    pub allow_partial: bool,
}

impl LinkArgs {
    /// `--latency-us` when it is not given.
    pub const DEFAULT_LATENCY_US: f64 = 20.0;

    /// No link: what is measured is shown but not held against a curve or a busbw.
    pub fn none() -> LinkArgs {
        LinkArgs {
            curve: None,
            busbw: None,
            latency_us: Self::DEFAULT_LATENCY_US,
            allow_partial: false,
        }
    }
}

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Compute (single GPU, one micro-batch)")]
pub struct ComputeArgs {
    /// One GPU's time per training step at --batch-size, in ms (e.g. 1000 / it/s); or give
    /// --forward-ms and --backward-ms.
    #[arg(long)]
    pub compute_ms: Option<f64>,
    /// Forward time in ms (with --backward-ms instead of --compute-ms).
    #[arg(long, requires = "backward_ms")]
    pub forward_ms: Option<f64>,
    /// Backward time in ms.
    #[arg(long, requires = "forward_ms")]
    pub backward_ms: Option<f64>,
    /// Optimizer step time in ms (part of --compute-ms when that is given), on one GPU holding
    /// every state; ZeRO-1/2/3 divide it by the GPUs.
    #[arg(long, default_value_t = 0.0)]
    pub optimizer_ms: f64,
    /// The GPU (e.g. h100, a100-40gb, rtx-4090, titan-rtx): without --optimizer-ms, the
    /// optimizer step is estimated from its memory bandwidth and the bytes AdamW moves per
    /// parameter (and taken out of --compute-ms, or added to --forward-ms/--backward-ms).
    #[arg(long)]
    pub gpu: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct DdpArgs {
    /// A preset (the model list `simulate fsdp` and `memory` share), a .safetensors file, or a
    /// JSON list of {name, numel, dtype}.
    #[arg(long, required_unless_present = "from_trace", long_help = super::examples::model_help("A preset, a .safetensors file (its header gives the tensors), or a JSON list of {name, numel, dtype}, in registration order."), help_heading = "Model and step")]
    pub model: Option<String>,
    /// GPUs (ranks) in the DDP job: every one all-reduces the gradients.
    #[arg(
        long,
        required_unless_present = "from_trace",
        help_heading = "Model and step"
    )]
    pub world_size: Option<usize>,
    /// The job's own PyTorch profiler trace (a file, or a directory of every rank's) instead of
    /// a model and timings: the step rebuilt from its forward, backward, buckets and DataLoader
    /// wait, checked against the traced step, then asked the same what-ifs (as `ncclprobe
    /// trace` prints them).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["model", "world_size", "compute_ms", "forward_ms", "backward_ms"], help_heading = "Model and step")]
    pub from_trace: Option<PathBuf>,
    /// Per-GPU micro-batch size.
    #[arg(long, default_value_t = 32, help_heading = "Model and step")]
    pub batch_size: usize,
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub link: LinkArgs,
    /// bucket_cap_mb values to try (MiB, comma-separated).
    #[arg(
        long,
        default_value = "1,5,10,25,50,100,200",
        help_heading = "DDP (what to try)"
    )]
    pub bucket_cap_mb: String,
    /// Gradient accumulation steps to try (comma-separated).
    #[arg(long, default_value = "1,2,4,8", help_heading = "DDP (what to try)")]
    pub accumulation: String,
    /// Show only configurations that use no_sync() (both are always simulated for the advice).
    #[arg(long, help_heading = "DDP (what to try)")]
    pub no_sync: bool,
    /// The Reducer's first bucket in MiB (1 by default; PyTorch 2.x uses bucket_cap_mb when you pass it).
    #[arg(long, default_value_t = 1.0, help_heading = "DDP (what to try)")]
    pub first_bucket_mb: f64,
    /// Gradient element type (default: the model's own).
    #[arg(long, value_parser = ["fp32", "bf16", "fp16"], help_heading = "DDP (what to try)")]
    pub grad_dtype: Option<String>,
    /// DDP communication hook.
    #[arg(long, value_parser = ["none", "fp16", "bf16"], default_value = "none", help_heading = "DDP (what to try)")]
    pub hook: String,
    /// Model DDP(gradient_as_bucket_view=True).
    #[arg(long, help_heading = "DDP (what to try)")]
    pub gradient_as_bucket_view: bool,
    /// Compute slowdown while all-reduces overlap backward (σ, 0 to 1): backward stretches by
    /// σ × the communication time inside it. NCCL kernels take SMs and memory bandwidth from
    /// the backward kernels: overlapped compute ran 18.9% slower on average (up to 40%) on
    /// A100, H100, MI250 and MI210 (arXiv 2507.03114), hence 0.19; 0 is free overlap.
    /// --measured-step-ms fits it to the job instead.
    #[arg(long, default_value_t = crate::analysis::ddp::OVERLAP_SLOWDOWN, help_heading = "DDP (what to try)")]
    pub overlap_slowdown: f64,
    /// One measured DDP step of this job on its GPUs and link, in ms (at the first
    /// --accumulation and bucket_cap_mb 25, with no_sync): fits --overlap-slowdown to it, so
    /// the grid answers from the job's own overlap. Say which, when none fits.
    #[arg(
        long,
        help_heading = "DDP (what to try)",
        conflicts_with = "overlap_slowdown"
    )]
    pub measured_step_ms: Option<f64>,
    /// Boxed: the group is large beside the other simulators' flags.
    #[command(flatten)]
    pub loader: Box<super::loader::LoaderArgs>,
    /// table for people; csv: one row per configuration; json: the typed document.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = "Output")]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct FsdpArgs {
    /// A preset, a .safetensors file, or a JSON tensor list (as for `simulate ddp`).
    #[arg(long, long_help = super::examples::model_help("A preset, a .safetensors file, or a JSON tensor list (as for `simulate ddp`)."), help_heading = "Model and step")]
    pub model: String,
    /// GPUs (ranks) the model is sharded over.
    #[arg(long, help_heading = "Model and step")]
    pub world_size: usize,
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Strategies to estimate (default: all).
    #[arg(long, value_enum, value_delimiter = ',', help_heading = "Sharding")]
    pub strategy: Vec<Strategy>,
    /// mixed: bf16/fp16 weights and gradients, fp32 Adam states (2+2+12 bytes per parameter); fp32: 4+4+8.
    #[arg(long, value_parser = ["mixed", "fp32"], default_value = "mixed", help_heading = "Sharding")]
    pub precision: String,
    /// Activation memory per GPU in GB (not modelled: measure or estimate it).
    #[arg(long, default_value_t = 0.0, help_heading = "Sharding")]
    pub activations_gb: f64,
    /// GPU memory in GB, to say which strategies fit.
    #[arg(long, help_heading = "Sharding")]
    pub gpu_memory_gb: Option<f64>,
    /// Micro-batches per optimizer step: FULL_SHARD gathers the weights again for each, and
    /// gradients are reduced each (--compute-ms is one micro-batch's).
    #[arg(long, default_value_t = 1, help_heading = "Sharding")]
    pub accumulation: usize,
    /// Compute slowdown beside communication (σ, as for `simulate ddp`).
    #[arg(long, default_value_t = crate::analysis::ddp::OVERLAP_SLOWDOWN, help_heading = "Sharding")]
    pub overlap_slowdown: f64,
    /// table for people; csv: one row per strategy; json: the typed document.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = "Output")]
    pub format: OutputFormat,
}

/// `diagnose --fail-on`: how bad a finding must be to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

/// `simulate fsdp --strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    /// Plain data parallel: gradients all-reduced (DDP, FSDP NO_SHARD).
    NoShard,
    /// ZeRO-1: optimizer states sharded.
    Zero1,
    /// ZeRO-2 / FSDP SHARD_GRAD_OP: optimizer states and gradients sharded.
    ShardGradOp,
    /// ZeRO-3 / FSDP FULL_SHARD: parameters too.
    FullShard,
}

impl From<Severity> for crate::documents::diagnosis::Severity {
    fn from(s: Severity) -> Self {
        use crate::documents::diagnosis::Severity as S;
        match s {
            Severity::Info => S::Info,
            Severity::Warning => S::Warning,
            Severity::Error => S::Error,
        }
    }
}

impl From<Strategy> for crate::documents::simulation::Strategy {
    fn from(s: Strategy) -> Self {
        use crate::documents::simulation::Strategy as S;
        match s {
            Strategy::NoShard => S::NoShard,
            Strategy::Zero1 => S::Zero1,
            Strategy::ShardGradOp => S::ShardGradOp,
            Strategy::FullShard => S::FullShard,
        }
    }
}
