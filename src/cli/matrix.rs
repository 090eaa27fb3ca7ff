//! `ncclprobe matrix`: its flags, and the sweep arguments it runs on (the same backends,
//! launchers, watchdog and record).

use super::groups::{BackendArgs, OutputArgs};
use clap::{Args, ValueEnum};

/// What the ends of a pair are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// Every ordered pair of ranks (of GPUs, with the nccl backend).
    Rank,
    /// Every pair of hosts, all ranks of one sending to the ranks of the other at once.
    Node,
}

#[derive(Debug, Args)]
pub struct MatrixArgs {
    #[command(flatten)]
    pub history: super::history::HistoryArgs,
    /// Smallest message size [default: 8 and 16M only: one small, one large].
    #[arg(short = 'b', long = "minbytes", help_heading = "Sizes")]
    pub minbytes: Option<String>,
    /// Largest message size (with -b: a curve per pair, factor -f).
    #[arg(short = 'e', long = "maxbytes", help_heading = "Sizes")]
    pub maxbytes: Option<String>,
    /// Multiply the size by this factor between points of a curve.
    #[arg(
        short = 'f',
        long = "stepfactor",
        default_value = "2",
        help_heading = "Sizes"
    )]
    pub stepfactor: String,

    /// Pairs of ranks, or pairs of nodes (hosts) with all their ranks at once.
    #[arg(long, value_enum, default_value_t = By::Rank, help_heading = "What to measure")]
    pub by: By,
    /// Measure one pair at a time instead of rounds of disjoint pairs: slower, but free of
    /// interference when pairs share a link (a PCIe switch, a NIC, the memory bus).
    #[arg(long, help_heading = "What to measure")]
    pub one_pair_at_a_time: bool,
    /// Name a pair whose bandwidth is below this fraction of the median pair's (or whose
    /// latency is above the median over this fraction).
    #[arg(long, default_value_t = 0.5, help_heading = "What to measure")]
    pub outlier: f64,
    /// Gate the matrix when it ends and write the verdict as JUnit XML: one test case per
    /// rule, per slow pair and per slow node (exit 3 when one fails).
    #[arg(long, value_name = "FILE", help_heading = "Gate")]
    pub junit: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub pair_rules: PairRuleArgs,

    /// Iterations per timed sample (default: calibrated so a sample lasts --sample-time).
    #[arg(short = 'n', long = "iters", help_heading = "Timing")]
    pub iters: Option<usize>,
    /// Warm-up iterations per pair and size.
    #[arg(
        short = 'w',
        long = "warmup_iters",
        default_value_t = 2,
        help_heading = "Timing"
    )]
    pub warmup_iters: usize,
    /// Target duration of one sample, seconds.
    #[arg(long, default_value_t = 0.001, help_heading = "Timing")]
    pub sample_time: f64,
    /// Stop sampling a step once every pair's 95% median interval is within this fraction.
    #[arg(long, default_value_t = 0.03, help_heading = "Timing")]
    pub target_ci: f64,
    /// Fewest samples per pair.
    #[arg(long, default_value_t = 6, help_heading = "Timing")]
    pub min_samples: usize,
    /// Most samples per pair.
    #[arg(long, default_value_t = 100, help_heading = "Timing")]
    pub max_samples: usize,
    /// Measured seconds one step (a round of pairs, one direction, one size) may spend.
    #[arg(long, default_value_t = 0.03, help_heading = "Timing")]
    pub point_budget: f64,
    /// Seconds a pair may make no progress before the run ends with exit code 4.
    #[arg(long, default_value_t = 300.0, help_heading = "Timing")]
    pub timeout: f64,

    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub output: OutputArgs,

    /// TEST-ONLY hook (builds with the `fault-injection` feature): `slow:A-B:FACTOR`,
    /// `slow:A:FACTOR`, `hosts:NAME,…`, `stall:RANK[:SIZE]`.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
}

impl From<By> for crate::documents::matrix::By {
    fn from(by: By) -> Self {
        match by {
            By::Rank => crate::documents::matrix::By::Rank,
            By::Node => crate::documents::matrix::By::Node,
        }
    }
}

impl MatrixArgs {
    /// The sweep engine's options the backends and the launcher take, carrying the matrix's.
    pub fn options(&self) -> crate::sweep::options::Options {
        use crate::sweep::options::{Options, Sizes, Timing, What};
        let (minbytes, maxbytes, stepfactor) = match (&self.minbytes, &self.maxbytes) {
            // One small and one large size: a factor that jumps from the one to the other.
            (None, None) => ("8".into(), "16M".into(), (2u64 << 20).to_string()),
            (b, e) => (
                b.clone().unwrap_or_else(|| "8".into()),
                e.clone().unwrap_or_else(|| "16M".into()),
                self.stepfactor.clone(),
            ),
        };
        Options {
            sizes: Sizes {
                minbytes,
                maxbytes,
                stepfactor: Some(stepfactor),
                stepbytes: None,
            },
            what: What {
                collective: "sendrecv".into(),
                datatype: "uint8".into(),
                op: "sum".into(),
                root: "0".into(),
                check: 1,
                ..What::default()
            },
            timing: Timing {
                iters: self.iters,
                warmup_iters: self.warmup_iters,
                warmup_time: 0.0,
                sample_time: self.sample_time,
                target_ci: self.target_ci,
                samples: None,
                min_samples: self.min_samples,
                max_samples: self.max_samples,
                point_budget: self.point_budget,
                time_budget: None,
                cuda_events: false,
                average: 3,
                timeout: self.timeout,
                schedule: Default::default(),
                per_iteration_skip: None,
                cycles: 1,
                agg_iters: 1,
                blocking: None,
                unalign: 0,
                graph_launches: 0,
            },
            backend: self.backend.options(),
            output: self.output.outputs(),
            gate: {
                let mut gate = crate::expect::options::GateRules::default();
                gate.rules.junit = self.junit.clone();
                gate
            },
            report: Default::default(),
            stragglers: false,
            #[cfg(feature = "fault-injection")]
            inject_fault: self.inject_fault.clone(),
            #[cfg(not(feature = "fault-injection"))]
            inject_fault: None,
            matrix: Some(std::sync::Arc::new(crate::matrix::options::Options {
                by: self.by.into(),
                one_pair_at_a_time: self.one_pair_at_a_time,
                outlier: self.outlier,
                latency_max_bytes: 64 << 10,
                rules: self.pair_rules.rules(),
            })),
            perf: None,
            history: None,
        }
    }
}

/// Rules on a pair matrix (`ncclprobe matrix --json`); completion, correct bytes and no
/// outlier pair always apply to one.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Rules on a pair matrix")]
pub struct PairRuleArgs {
    /// Minimum one-way bandwidth of every pair at the largest size, GB/s.
    #[arg(long, value_name = "GBPS")]
    pub min_pair_bw: Option<f64>,
    /// Maximum latency (half a round trip) of every pair at the smallest size, microseconds.
    #[arg(long, value_name = "US")]
    pub max_pair_latency_us: Option<f64>,
}

impl PairRuleArgs {
    pub fn rules(&self) -> crate::matrix::options::PairRules {
        crate::matrix::options::PairRules {
            min_pair_bw: self.min_pair_bw,
            max_pair_latency_us: self.max_pair_latency_us,
        }
    }
}
