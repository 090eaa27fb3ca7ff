//! Groups of flags several commands share (backend, outputs, report outputs, rules,
//! expectation), and their conversion into the engines' options.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Where a report goes (`sweep --report`, `report -o`).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Report")]
pub struct ReportOutputs {
    /// Write the Markdown summary (for a GitHub issue comment) here (`-` = stdout).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write every plot here as PNG and SVG (the Markdown links the PNGs).
    #[arg(long, value_name = "DIR")]
    pub png_dir: Option<PathBuf>,
    /// The report's title.
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Expectation")]
pub struct ExpectationArgs {
    /// A pasted `nvidia-smi topo -m` for the run's machine (imported runs carry no topology).
    #[arg(long)]
    pub topo: Option<PathBuf>,
    /// An NCCL_DEBUG=INFO log of the run: its transports and settings tell the path NCCL took.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Use this shipped expectation instead of choosing one (`ncclprobe baselines` lists them).
    #[arg(long)]
    pub profile: Option<String>,
    /// The collective of points whose log did not name it (old nccl-tests output).
    #[arg(long)]
    pub collective: Option<String>,
    /// What the run's output does not say about the machine, e.g. "2 nodes x 8 H100 SXM,
    /// 8x400G IB per node" (nodes, GPUs per node, NICs per node with speed and kind: IB,
    /// EDR/HDR/NDR/XDR, RoCE, EFA, Slingshot, TCP; NVSwitch, NVLink or PCIe). Shown as stated.
    #[arg(long, value_name = "FACTS")]
    pub hardware: Option<String>,
}

#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Rules (completion and #wrong == 0 always apply)")]
pub struct RuleArgs {
    /// Minimum busbw in GB/s, for every collective in the run, at --at-size.
    #[arg(long)]
    pub min_busbw: Option<f64>,
    /// Size --min-busbw is judged at (K/M/G binary) [default: the largest measured].
    #[arg(long, requires = "min_busbw")]
    pub at_size: Option<String>,
    /// Maximum time per call in microseconds at --at-size-small.
    #[arg(long)]
    pub max_latency_us: Option<f64>,
    /// Size --max-latency-us is judged at [default: the smallest non-empty size].
    #[arg(long, requires = "max_latency_us")]
    pub at_size_small: Option<String>,
    /// Maximum slowest/fastest rank median time at any size (needs per-rank times).
    #[arg(long)]
    pub max_skew: Option<f64>,
    /// Minimum measured/expected busbw ratio at the plateau (the expectation as `compare` chooses it).
    #[arg(long)]
    pub min_ratio: Option<f64>,
    /// A TOML rules file a cluster keeps in its repository (`profile = ...`, `[[rule]]` tables).
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Write the verdict as JUnit XML here (one test case per rule and collective).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// What NCCL must have used (repeatable): `gdr` (GPUDirect RDMA), `nvls`, or
    /// `transport=NAME` (NET/IB, IB, P2P, SHM ...), judged on NCCL's own lines and dumps.
    #[arg(long, value_name = "WHAT")]
    pub require: Vec<String>,
    /// A transport or network NCCL must not have used (repeatable), e.g. `--forbid socket`.
    #[arg(long, value_name = "NAME")]
    pub forbid: Vec<String>,
    /// Most uncorrectable ECC errors (since the driver loaded) any GPU may have, and no failed
    /// row remapping: judged on the counters NVML gave as the run started.
    #[arg(long, value_name = "N")]
    pub max_ecc_uncorrected: Option<u64>,
    /// Each GPU's PCIe link at its maximum width, or at least N lanes with
    /// `--require-link-width=N` (the value only after `=`, so a file after the flag stays a file).
    #[arg(
        long,
        value_name = "max|N",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "max"
    )]
    pub require_link_width: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// nccl when a GPU and NCCL are found, mpi under an MPI launcher, else host.
    Auto,
    /// Threads in this process as ranks, data through shared memory.
    Host,
    /// MPI collectives on host memory (build with the `mpi` feature; launch with mpirun/srun).
    Mpi,
    /// NCCL on GPUs.
    Nccl,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Backend")]
pub struct BackendArgs {
    /// What moves the bytes: auto (nccl with a GPU, mpi under an MPI launcher, else host), or
    /// one named; a backend asked for by name that cannot run is exit 5, never a silent other.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Ranks (threads) for the host backend [default: 2, or the CPU count if larger].
    #[arg(long)]
    pub ranks: Option<usize>,
    /// GPUs driven by this process for the nccl backend (default: all visible), like nccl-tests' -g.
    #[arg(short = 'g', long = "ngpus")]
    pub ngpus: Option<usize>,
    /// NCCL library to use (else NCCL_LIBRARY, the pip environment ncclprobe is installed in,
    /// NCCL_HOME/lib, LD_LIBRARY_PATH, the loader's
    /// paths, python3's site-packages nvidia/nccl/lib).
    #[arg(long)]
    pub nccl_lib: Option<PathBuf>,
    /// nccl backend, as nccl-tests' -R: 1 allocates buffers with ncclMemAlloc and registers
    /// them with the communicator (zero-copy; NCCL 2.19+), 2 registers them as symmetric
    /// windows (NCCL 2.27+). 0 = plain cuMemAlloc buffers.
    #[arg(short = 'R', long = "register", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub register: u8,
    /// nccl backend: a column with the algorithm, protocol and channels NCCL's tuner chose at
    /// each size (from its NCCL_DEBUG_SUBSYS=TUNING lines, one per call on rank 0; NCCL 2.20
    /// and later print them). On NCCL 2.24+ they are on for each point's untimed first call
    /// only; before, for every call, and the record says the times include that logging.
    #[arg(long)]
    pub show_algo: bool,
    /// nccl backend, several processes: how they exchange NCCL's unique id and results. tcp:
    /// read the launcher's variables (torchrun, Slurm srun, Open MPI mpirun, MPICH mpiexec,
    /// Kubernetes LeaderWorkerSet/JobSet/MPIJob) and meet over TCP; mpi: MPI's collectives
    /// (built with the `mpi` feature); auto: mpi when built with it under an MPI launcher, else tcp.
    #[arg(long, value_enum, default_value_t = BootstrapChoice::Auto)]
    pub bootstrap: BootstrapChoice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BootstrapChoice {
    Auto,
    Tcp,
    Mpi,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Write the JSON run record here (a sweep rewrites it as each point completes; `-` or
    /// /dev/stdout = stdout at the end). A FIFO, device or /dev/fd/N gets it once, at the end,
    /// written in place (by a sweep, within its --timeout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the CSV here (like --json; `-` = stdout at the end).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// What stdout carries.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

impl BackendArgs {
    pub fn options(&self) -> crate::sweep::options::BackendOptions {
        crate::sweep::options::BackendOptions {
            backend: self.backend.into(),
            ranks: self.ranks,
            ngpus: self.ngpus,
            nccl_lib: self.nccl_lib.clone(),
            register: self.register,
            first_device: None,
            cta_policy: None,
            stream_null: false,
            split: None,
            show_algo: self.show_algo,
            bootstrap: match self.bootstrap {
                BootstrapChoice::Auto => crate::sweep::options::Bootstrap::Auto,
                BootstrapChoice::Tcp => crate::sweep::options::Bootstrap::Tcp,
                BootstrapChoice::Mpi => crate::sweep::options::Bootstrap::Mpi,
            },
        }
    }
}

impl OutputArgs {
    pub fn outputs(&self) -> crate::render::record::Outputs {
        use crate::render::record::Format;
        crate::render::record::Outputs {
            json: self.json.clone(),
            csv: self.csv.clone(),
            format: match self.format {
                OutputFormat::Table => Format::Table,
                OutputFormat::Csv => Format::Csv,
                OutputFormat::Json => Format::Json,
            },
        }
    }
}

impl RuleArgs {
    pub fn rules(&self) -> crate::expect::options::Rules {
        crate::expect::options::Rules {
            min_busbw: self.min_busbw,
            at_size: self.at_size.clone(),
            max_latency_us: self.max_latency_us,
            at_size_small: self.at_size_small.clone(),
            max_skew: self.max_skew,
            min_ratio: self.min_ratio,
            rules: self.rules.clone(),
            junit: self.junit.clone(),
            require: self.require.clone(),
            forbid: self.forbid.clone(),
            max_ecc_uncorrected: self.max_ecc_uncorrected,
            require_link_width: self.require_link_width.clone(),
        }
    }
}

impl ExpectationArgs {
    pub fn expectation(&self) -> crate::expect::options::Expectation {
        crate::expect::options::Expectation {
            topo: self.topo.clone(),
            log: self.log.clone(),
            profile: self.profile.clone(),
            collective: self.collective.clone(),
            hardware: self.hardware.clone(),
        }
    }
}

impl ReportOutputs {
    /// The report's outputs, with the HTML page's path (`--report`, `report -o`).
    pub fn outputs(&self, html: Option<PathBuf>) -> crate::report::output::Outputs {
        crate::report::output::Outputs {
            html,
            markdown: self.markdown.clone(),
            png_dir: self.png_dir.clone(),
            title: self.title.clone(),
        }
    }
}

impl From<BackendChoice> for crate::sweep::options::BackendChoice {
    fn from(c: BackendChoice) -> Self {
        use crate::sweep::options::BackendChoice as B;
        match c {
            BackendChoice::Auto => B::Auto,
            BackendChoice::Host => B::Host,
            BackendChoice::Mpi => B::Mpi,
            BackendChoice::Nccl => B::Nccl,
        }
    }
}
