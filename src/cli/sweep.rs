//! `ncclprobe sweep`'s flags (nccl-tests' letters where it has them), and their one conversion
//! into the sweep engine's options (`sweep::options::Options`).

use super::groups::{BackendArgs, OutputArgs, ReportOutputs, RuleArgs};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    pub what: WhatArgs,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub history: super::history::HistoryArgs,
    /// Render the report (self-contained HTML) here when the sweep ends.
    #[arg(long, value_name = "HTML", help_heading = "Report")]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub report_outputs: ReportOutputs,

    /// Per-rank arrival times: after each point, time single calls on every rank from entering
    /// to leaving, on a common clock, and name a rank that arrives last in most of them.
    #[arg(long, help_heading = "What to run")]
    pub stragglers: bool,

    /// TEST-ONLY hook, in builds with the `fault-injection` feature (the tests' builds, never a
    /// release): inject a fault (`stall:RANK[:SIZE]`, `corrupt:RANK[:SIZE]`, `die:RANK[:SIZE]`,
    /// `slow:A-B:FACTOR`, `late:RANK:MICROSECONDS`, `hosts:NAME,…`; `;`-separated).
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
}

#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Gate (measure, then qualify)")]
pub struct GateArgs {
    /// Gate the run on this shipped expectation's rules after measuring (`ncclprobe baselines`).
    #[arg(long, value_name = "PROFILE")]
    pub qualify: Option<String>,
    /// Re-measure only the points that failed, up to this many times, before failing the gate.
    #[arg(long, default_value_t = 0)]
    pub retries: usize,
    #[command(flatten)]
    pub rules: RuleArgs,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sizes (nccl-tests flags; K/M/G are binary)")]
pub struct SizeArgs {
    /// Smallest message size.
    #[arg(short = 'b', long = "minbytes", default_value = "8")]
    pub minbytes: String,
    /// Largest message size.
    #[arg(short = 'e', long = "maxbytes", default_value = "256M")]
    pub maxbytes: String,
    /// Multiply the size by this factor between points [default: 2; none with -i].
    #[arg(short = 'f', long = "stepfactor")]
    pub stepfactor: Option<String>,
    /// Add this many bytes between points (instead of a factor).
    #[arg(short = 'i', long = "stepbytes", conflicts_with = "stepfactor")]
    pub stepbytes: Option<String>,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "What to run")]
pub struct WhatArgs {
    /// Collectives, comma-separated, or `all`: all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv; nccl-tests' other binaries by name: gather, scatter, hypercube, alltoallv.
    #[arg(long, default_value = "all_reduce")]
    pub collective: String,
    /// Data types, comma-separated, or `all`: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Reduction ops, comma-separated, or `all`: sum prod min max avg.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Root rank of broadcast/reduce, or `all`.
    #[arg(short = 'r', long = "root", default_value = "0")]
    pub root: String,
    /// Correctness-check passes after timing each point (0 = off).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: usize,
    /// alltoallv: how each rank's message is split between its peers, from 0 (evenly) to 1
    /// (in proportion to the distance in rank numbers, nothing to itself); nccl-tests'
    /// NCCL_TESTS_ALLTOALLV_SPREAD.
    #[arg(long, default_value_t = 1.0, value_parser = spread)]
    pub alltoallv_spread: f64,
    /// alltoallv: a square matrix of bytes, row = sender, column = receiver, instead of the
    /// generated split (needs -b = -e, at least the busiest rank's bytes); nccl-tests'
    /// NCCL_TESTS_ALLTOALLV_MATRIX_FILE.
    #[arg(long, value_name = "FILE")]
    pub alltoallv_matrix: Option<PathBuf>,
    /// alltoallv: multiply the matrix's bytes by this; nccl-tests'
    /// NCCL_TESTS_ALLTOALLV_MATRIX_SCALE.
    #[arg(long, default_value_t = 1.0, requires = "alltoallv_matrix", value_parser = scale)]
    pub alltoallv_scale: f64,
}

/// `--alltoallv-spread`: a number from 0 to 1.
fn spread(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| format!("`{text}` is not a number from 0 to 1"))
}

/// `--alltoallv-scale`: a number of at least 0.
fn scale(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| *v >= 0.0)
        .ok_or_else(|| format!("`{text}` is not a number of at least 0"))
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Timing and statistics")]
pub struct TimingArgs {
    /// Iterations per timed sample (default: calibrated so a sample lasts --sample-time).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<usize>,
    /// Warm-up iterations per point.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1)]
    pub warmup_iters: usize,
    /// Warm up for at least this many seconds (warm-up otherwise ends once two batches in a
    /// row agree on the time per call within 10%).
    #[arg(long, default_value_t = 0.0)]
    pub warmup_time: f64,
    /// Target duration of one sample, seconds (when -n is not given).
    #[arg(long, default_value_t = 0.002)]
    pub sample_time: f64,
    /// Stop sampling a point once the 95% interval of its median is within this fraction of it.
    #[arg(long, default_value_t = 0.03, conflicts_with = "samples")]
    pub target_ci: f64,
    /// Take exactly this many samples per point (turns adaptive sampling off).
    #[arg(long)]
    pub samples: Option<usize>,
    /// Fewest samples per point (the 95% interval of the median needs 2, `compare`'s rank
    /// test 4; up to 9 samples the interval takes times as log-normal, from 10 it is
    /// distribution-free).
    #[arg(long, default_value_t = 4)]
    pub min_samples: usize,
    /// Most samples per point.
    #[arg(long, default_value_t = 200)]
    pub max_samples: usize,
    /// Measured seconds one point may spend before sampling stops, converged or not.
    #[arg(long, default_value_t = 0.25, conflicts_with = "time_budget")]
    pub point_budget: f64,
    /// Seconds for the whole sweep, shared among its points: each size gets what its fewest
    /// samples take, and the rest goes where calls are long. Points that stop short of
    /// --target-ci say so (stop reason `budget`).
    #[arg(long, value_name = "SECONDS")]
    pub time_budget: Option<f64>,
    /// nccl backend: time each batch with CUDA events on the stream instead of the host clock.
    #[arg(long)]
    pub cuda_events: bool,
    /// How a sample's time is taken across ranks, as nccl-tests' -a: 0 rank 0's, 1 the
    /// average, 2 the minimum, 3 the maximum. ncclprobe's default is the maximum (the slowest
    /// rank is what a collective costs); nccl-tests' is the average.
    #[arg(short = 'a', long = "average", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,
    /// Seconds a collective may make no progress before the run ends with exit code 4.
    #[arg(long, default_value_t = 300.0)]
    pub timeout: f64,
}

// The one conversion of each group of flags into the engines' options.

impl SweepArgs {
    /// The sweep engine's options: every flag as a plain value.
    pub fn options(&self) -> crate::sweep::options::Options {
        use crate::sweep::options::{Options, Sizes, Timing, What};
        let (s, w, t) = (&self.sizes, &self.what, &self.timing);
        Options {
            sizes: Sizes {
                minbytes: s.minbytes.clone(),
                maxbytes: s.maxbytes.clone(),
                stepfactor: s.stepfactor.clone(),
                stepbytes: s.stepbytes.clone(),
            },
            what: What {
                collective: w.collective.clone(),
                datatype: w.datatype.clone(),
                op: w.op.clone(),
                root: w.root.clone(),
                check: w.check,
                traffic: crate::coll::Traffic::Generated {
                    spread: w.alltoallv_spread,
                },
                traffic_matrix: w
                    .alltoallv_matrix
                    .clone()
                    .map(|path| (path, w.alltoallv_scale)),
            },
            timing: Timing {
                iters: t.iters,
                warmup_iters: t.warmup_iters,
                warmup_time: t.warmup_time,
                sample_time: t.sample_time,
                target_ci: t.target_ci,
                samples: t.samples,
                min_samples: t.min_samples,
                max_samples: t.max_samples,
                point_budget: t.point_budget,
                time_budget: t.time_budget,
                cuda_events: t.cuda_events,
                average: t.average,
                timeout: t.timeout,
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
            gate: crate::expect::options::GateRules {
                qualify: self.gate.qualify.clone(),
                retries: self.gate.retries,
                rules: self.gate.rules.rules(),
            },
            report: self.report_outputs.outputs(self.report.clone()),
            stragglers: self.stragglers,
            #[cfg(feature = "fault-injection")]
            inject_fault: self.inject_fault.clone(),
            #[cfg(not(feature = "fault-injection"))]
            inject_fault: None,
            matrix: None,
            perf: None,
            history: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    fn options(args: &[&str]) -> crate::sweep::options::Options {
        let cli = crate::cli::Cli::try_parse_from(args).unwrap();
        let crate::cli::Command::Sweep(sweep) = cli.command else {
            unreachable!()
        };
        sweep.options()
    }

    #[test]
    fn the_engine_defaults_are_the_flags_defaults() {
        assert_eq!(
            options(&["ncclprobe", "sweep"]),
            crate::sweep::options::Options::default()
        );
    }

    #[test]
    fn every_flag_reaches_the_options() {
        let o = options(&[
            "ncclprobe",
            "sweep",
            "-b",
            "1K",
            "-e",
            "2K",
            "-i",
            "512",
            "-d",
            "half",
            "-o",
            "max",
            "-r",
            "all",
            "-c",
            "0",
            "-n",
            "7",
            "-w",
            "3",
            "--samples",
            "9",
            "-a",
            "1",
            "--timeout",
            "9",
            "--backend",
            "host",
            "--ranks",
            "3",
            "--json",
            "x.json",
            "--format",
            "csv",
            "--qualify",
            "p",
            "--retries",
            "2",
            "--min-busbw",
            "5",
            "--report",
            "r.html",
            "--markdown",
            "m.md",
            "--title",
            "T",
            "--stragglers",
        ]);
        assert_eq!(
            (o.sizes.minbytes.as_str(), o.sizes.stepbytes.as_deref()),
            ("1K", Some("512"))
        );
        assert_eq!(
            (
                o.what.datatype.as_str(),
                o.what.op.as_str(),
                o.what.root.as_str(),
                o.what.check
            ),
            ("half", "max", "all", 0)
        );
        assert_eq!(
            (
                o.timing.iters,
                o.timing.warmup_iters,
                o.timing.samples,
                o.timing.average,
                o.timing.timeout
            ),
            (Some(7), 3, Some(9), 1, 9.0)
        );
        assert_eq!(
            o.backend.backend,
            crate::sweep::options::BackendChoice::Host
        );
        assert_eq!(o.backend.ranks, Some(3));
        assert_eq!(o.output.format, crate::render::record::Format::Csv);
        assert_eq!(
            (
                o.gate.qualify.as_deref(),
                o.gate.retries,
                o.gate.rules.min_busbw
            ),
            (Some("p"), 2, Some(5.0))
        );
        assert_eq!(
            o.report.html.as_deref(),
            Some(std::path::Path::new("r.html"))
        );
        assert_eq!(o.report.title(), "T");
        assert!(o.stragglers && o.matrix.is_none());
    }
}
