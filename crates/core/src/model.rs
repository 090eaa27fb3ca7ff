//! The run record: one versioned JSON document per run, SI units with the unit in the name.
//! Measurements and imports produce the same record; readers reject unknown fields.

use crate::coll::{Collective, Placement};
use crate::dtype::{Dtype, RedOp};
use crate::stats::{StopReason, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::buildinfo::ToolInfo;

mod calibration;
pub mod check;
pub mod health;
mod schedule;
pub use calibration::{Calibration, CopyBandwidth};
pub use schedule::{Blocking, GpuMemory, IterationTiming, PerIteration, Schedule};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    pub schema_version: u32,
    /// Always `run` (older records without it read as runs).
    #[serde(default)]
    pub kind: crate::documents::kind::Kind,
    pub tool: ToolInfo,
    pub source: Source,
    pub status: RunStatus,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: Option<String>,
    pub command_line: Vec<String>,
    pub backend: BackendInfo,
    /// `NCCL_*`, `CUDA_*` and the MPI transport selection (`OMPI_MCA_btl`, `OMPI_MCA_pml`,
    /// `OMPI_MCA_mtl`, `UCX_TLS`) only; never the rest of the environment.
    pub env: BTreeMap<String, String>,
    /// How the run was measured; `None` for imports that do not say.
    pub settings: Option<Settings>,
    /// Reference measurements taken in the same run (e.g. single-thread memcpy bandwidth).
    pub calibration: Calibration,
    pub topology: Option<serde_json::Value>,
    /// Why this machine is known to be WSL2 (empty when it is not, or not known): WSL2 has no
    /// CUDA IPC, so NCCL has no P2P, which changes what the run should give.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wsl2_evidence: Vec<String>,
    pub notes: Vec<String>,
    pub points: Vec<Point>,
    pub headlines: Vec<Headline>,
    /// For imported runs: where from and what the importer had to decide.
    pub import: Option<ImportInfo>,
    /// Set when the run ended early: the reason, for readers of a partial record.
    pub error: Option<String>,
    /// Earlier measurements of points that `sweep --retries` measured again (every attempt
    /// is kept; `points` holds the last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retried_points: Vec<Point>,
    /// The gate's verdict when the sweep ran with `--qualify` or rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qualification: Option<crate::documents::qualification::Qualification>,
    /// What NCCL said about the run (nccl backend): network, transports, GPUDirect RDMA,
    /// NVLS, channels, its topology and graph dumps with the rail map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::documents::nccl_dump::NcclObserved>,
    /// The health counters of the GPUs of the machine that wrote the record, read through
    /// NVML as the run started (what `--max-ecc-uncorrected` and `--require-link-width` judge).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_health: Vec<health::GpuState>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Measured,
    Imported,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Running,
    Complete,
    CheckFailed,
    TimedOut,
    Failed,
    /// Ended by SIGINT or SIGTERM; the point in progress was dropped.
    Interrupted,
    /// An imported log that stops before its end (the rows before the cut are kept).
    Truncated,
}

impl Source {
    /// The source as the record writes it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Imported => "imported",
        }
    }
}

impl RunStatus {
    /// The status as the record writes it.
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::CheckFailed => "check-failed",
            RunStatus::TimedOut => "timed-out",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Truncated => "truncated",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImportInfo {
    pub file: String,
    /// `nccl-tests-text` or `nccl-tests-json`.
    pub format: String,
    pub nccl_tests_version: Option<String>,
    /// How the collective was known: `named in the log`, `inferred: ...`, or `unknown`.
    pub collective_from: String,
    /// How the rank count was known.
    pub nranks_from: String,
    /// The log's own footer values, for comparison with ours.
    pub reported_avg_busbw_gbps: Option<f64>,
    pub reported_out_of_bounds: Option<u64>,
    /// Error lines of the log, with line numbers.
    pub errors: Vec<String>,
    pub truncated: bool,
    /// The sizes the run walked, from its banner or command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<SizeRange>,
    /// The collective the log names, also when it has no table rows (a paste of its summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<Collective>,
}

/// The sizes nccl-tests walks: from `min_bytes` to `max_bytes`, times `step_factor` when it is
/// above 1, else plus `step_bytes` (src/common.cu, TimeTest).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SizeRange {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub step_bytes: u64,
}

impl SizeRange {
    /// Every size of the walk (at most 10,000).
    pub fn sizes(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut size = self.min_bytes;
        while size <= self.max_bytes && out.len() < 10_000 {
            out.push(size);
            let next = match self.step_factor > 1 {
                true => size.saturating_mul(self.step_factor),
                false => size.saturating_add(self.step_bytes.max(1)),
            };
            if next <= size {
                break;
            }
            size = next;
        }
        out
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendInfo {
    pub name: String,
    /// Why this backend was chosen (auto-selection explains itself).
    pub reason: String,
    pub nranks: usize,
    pub hosts: Vec<String>,
    pub ranks: Vec<RankInfo>,
    /// Library name → version string (MPI, NCCL, CUDA driver).
    pub library_versions: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RankInfo {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    pub device: Option<String>,
    /// NCCL_TESTS_SPLIT: the group (color) of the rank's communicator. Absent: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub group: usize,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: Option<u64>,
    pub step_bytes: Option<u64>,
    /// Iterations per sample; `None` = calibrated per point to `sample_target_s`.
    pub iters_per_sample: Option<usize>,
    pub sample_target_s: f64,
    pub warmup_iters: usize,
    pub warmup_min_s: f64,
    pub check_iters: usize,
    pub min_samples: usize,
    pub max_samples: usize,
    pub target_rel_ci: Option<f64>,
    pub point_budget_s: f64,
    /// `--time-budget`: seconds for the whole sweep, shared among its points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget_s: Option<f64>,
    pub timeout_s: f64,
    /// nccl backend: batches timed by CUDA events on the stream rather than the host clock.
    #[serde(default)]
    pub cuda_events: bool,
    /// nccl backend: buffers from ncclMemAlloc registered with the communicator (-R 1:
    /// `local`, -R 2: `symmetric` windows), or plain allocations (`none`).
    #[serde(default)]
    pub registration: Registration,
    /// How a sample's time is taken across ranks (-a).
    #[serde(default)]
    pub across_ranks: AcrossRanks,
    /// `sweep --stragglers`: per-rank arrival times were taken after each point.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stragglers: bool,
    /// How each point's calls were scheduled (absent: adaptive).
    #[serde(default, skip_serializing_if = "Schedule::is_adaptive")]
    pub schedule: Schedule,
    /// nccl-tests' -I: every timed call's time was kept, and this many leading calls are left
    /// out of its summary (-K). Absent: not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_iteration_skip: Option<usize>,
    /// nccl-tests' -m: each timed iteration is this many calls (one NCCL group); times are
    /// per call. Absent: one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agg_iters: Option<usize>,
    /// nccl-tests' -z: how each timed iteration ends. Absent: it does not (the batch is waited
    /// for once, at its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<Blocking>,
    /// nccl-tests' -u: both buffers start this many elements past their aligned allocation.
    /// Absent: aligned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unalign: Option<usize>,
    /// nccl-tests' -x: the CTA policy asked of NCCL (`ncclConfig_t.CTAPolicy`, 2.27 and later).
    /// Absent: NCCL's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cta_policy: Option<i64>,
    /// nccl-tests' -G: each sample's calls were captured into a CUDA graph, launched this many
    /// times; times are per call. Absent: no graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_launches: Option<usize>,
    /// nccl-tests' -y 1: the calls ran on the GPU's legacy default (NULL) stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream_null: bool,
    /// alltoallv: who sent how much to whom (absent when no alltoallv ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alltoallv: Option<crate::coll::Traffic>,
}

/// Per collective and dtype, the largest out-of-place point that carries NCCL's cost-model
/// estimate: where measured and modelled times are compared.
/// Now, as the record writes times: RFC 3339, UTC.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

/// Seconds since the epoch of an RFC 3339 time.
pub fn unix_time(rfc3339: &str) -> Option<f64> {
    let t = time::OffsetDateTime::parse(
        rfc3339.trim(),
        &time::format_description::well_known::Rfc3339,
    )
    .ok()?;
    Some(t.unix_timestamp_nanos() as f64 / 1e9)
}

impl RunRecord {
    /// A record with nothing measured yet: this tool, this command line, started now.
    pub fn blank(source: Source, backend: &str, reason: String) -> RunRecord {
        RunRecord {
            schema_version: SCHEMA_VERSION,
            kind: crate::documents::kind::Kind::Run,
            tool: crate::buildinfo::tool_info(),
            source,
            status: match source {
                Source::Measured => RunStatus::Running,
                Source::Imported => RunStatus::Complete,
            },
            started_at: now_rfc3339(),
            finished_at: None,
            command_line: crate::secrets::command_line(),
            backend: BackendInfo {
                name: backend.into(),
                reason,
                nranks: 0,
                hosts: Vec::new(),
                ranks: Vec::new(),
                library_versions: BTreeMap::new(),
            },
            env: BTreeMap::new(),
            settings: None,
            calibration: Calibration::default(),
            topology: None,
            wsl2_evidence: Vec::new(),
            notes: Vec::new(),
            points: Vec::new(),
            headlines: Vec::new(),
            import: None,
            error: None,
            retried_points: Vec::new(),
            qualification: None,
            gpu_health: Vec::new(),
            nccl: None,
        }
    }
}

pub fn largest_with_nccl_model(points: &[Point]) -> Vec<&Point> {
    let mut largest: BTreeMap<(Collective, Dtype), &Point> = BTreeMap::new();
    for p in points.iter().filter(|p| {
        p.placement == Placement::OutOfPlace && p.nccl_model_time_s.is_some_and(|t| t > 0.0)
    }) {
        let key = (p.collective, p.dtype);
        if largest
            .get(&key)
            .is_none_or(|q| q.size_bytes < p.size_bytes)
        {
            largest.insert(key, p);
        }
    }
    largest.into_values().collect()
}

/// nccl-tests' `-R`: how the nccl backend's buffers are registered.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Registration {
    #[default]
    None,
    Local,
    Symmetric,
}

/// nccl-tests' `-a`: which rank's time a sample is.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AcrossRanks {
    Rank0,
    Average,
    Min,
    #[default]
    Max,
}

impl AcrossRanks {
    pub fn from_flag(a: u8) -> AcrossRanks {
        match a {
            0 => AcrossRanks::Rank0,
            1 => AcrossRanks::Average,
            2 => AcrossRanks::Min,
            _ => AcrossRanks::Max,
        }
    }

    /// The sample's time from every rank's.
    pub fn pick(self, per_rank: &[f64]) -> f64 {
        if per_rank.is_empty() {
            return f64::NAN;
        }
        match self {
            AcrossRanks::Rank0 => per_rank[0],
            AcrossRanks::Average => per_rank.iter().sum::<f64>() / per_rank.len() as f64,
            AcrossRanks::Min => per_rank.iter().copied().fold(f64::INFINITY, f64::min),
            AcrossRanks::Max => per_rank.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// One (collective, dtype, op, root, size, placement) measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub collective: Collective,
    pub nranks: usize,
    pub dtype: Dtype,
    /// `None` for collectives without a reduction.
    pub redop: Option<RedOp>,
    /// -1 for collectives without a root, as nccl-tests prints.
    pub root: i64,
    pub placement: Placement,
    pub size_bytes: u64,
    /// Elements each rank passes to the call, as nccl-tests' count column: the whole message
    /// for all_reduce, broadcast, reduce and sendrecv; each rank's share for all_gather,
    /// reduce_scatter and alltoall (size_bytes / nranks / type size, rounded down to 16 bytes).
    pub count: u64,
    /// The headline time per call: the median over samples (each the slowest rank's time, or
    /// as `settings.across_ranks` says).
    pub time_s: f64,
    pub algbw_bytes_per_s: f64,
    pub busbw_bytes_per_s: f64,
    /// Elements that differed from the exact expected result, summed over ranks; `None` = not checked.
    pub wrong: Option<u64>,
    pub iters_per_sample: usize,
    /// Every sample: seconds per call across ranks (the maximum unless `-a` says otherwise).
    pub samples_s: Vec<f64>,
    pub stats: Summary,
    pub stop_reason: StopReason,
    /// Median seconds per call on each rank (skew, stragglers).
    pub per_rank_time_s: Vec<f64>,
    /// What NCCL's own cost model predicts for one call (`ncclGroupSimulateEnd`, NCCL 2.22+):
    /// the time this topology should give, as NCCL sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_model_time_s: Option<f64>,
    /// `sweep --stragglers`: who entered the collective when, over single calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<crate::documents::arrivals::Arrivals>,
    /// Where the point's time went (absent in records of earlier versions and imports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<PointCost>,
    /// `-I` (nccl-tests' per-iteration timing): each timed call of the sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_iteration: Option<PerIteration>,
    /// The algorithm, protocol and channels NCCL's tuner chose at this size (`--show-algo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_algo: Option<crate::documents::nccl_dump::AlgoUsed>,
}

/// Where one point's time went. The parts are the slowest rank's call times, the same on
/// every rank; `wall_s` is rank 0's clock from the first call to the last sample, and the
/// rest of it is the harness (exchanging samples, filling and checking buffers).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PointCost {
    pub wall_s: f64,
    /// The checked calls (also the warm-up's first).
    pub check_s: f64,
    /// The rest of the warm-up.
    pub warmup_s: f64,
    /// The timed samples.
    pub sampling_s: f64,
    /// The measured time the samples were allowed (`--point-budget`, or this point's share of
    /// `--time-budget`).
    pub budget_s: f64,
}

/// The numbers to quote for one collective: large-message plateau and small-message latency.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Headline {
    pub collective: Collective,
    pub dtype: Dtype,
    pub redop: Option<RedOp>,
    /// Median busbw over the largest sizes (out-of-place).
    pub plateau_busbw_bytes_per_s: f64,
    pub plateau_sizes_bytes: Vec<u64>,
    /// Median time of the smallest non-empty size (out-of-place).
    pub small_latency_s: f64,
    pub small_size_bytes: u64,
    /// nccl-tests' "Avg bus bandwidth" for comparison (mean busbw over every row and placement).
    pub avg_busbw_bytes_per_s: f64,
}

/// What tells one point of a run from another: collective, type, op, root, placement, size.
pub type PointKey = (Collective, Dtype, Option<RedOp>, i64, Placement, u64);

impl Point {
    /// busbw from the point's time: nccl-tests prints busbw with two decimals, so an imported
    /// 8-byte point reads 0.00 GB/s while its time is exact enough.
    pub fn busbw_from_time(&self) -> f64 {
        if self.time_s > 0.0 && self.collective != Collective::Unknown {
            self.size_bytes as f64 * self.collective.busbw_factor(self.nranks) / self.time_s
        } else {
            self.busbw_bytes_per_s
        }
    }

    pub fn key(&self) -> PointKey {
        (
            self.collective,
            self.dtype,
            self.redop,
            self.root,
            self.placement,
            self.size_bytes,
        )
    }
}

impl RunRecord {
    pub fn total_wrong(&self) -> u64 {
        self.points.iter().filter_map(|p| p.wrong).sum()
    }
}

/// Plateau busbw and latency per (collective, dtype, op) group, in first-seen order.
pub fn headlines(points: &[Point]) -> Vec<Headline> {
    let mut groups: Vec<(Collective, Dtype, Option<RedOp>)> = Vec::new();
    for p in points {
        let key = (p.collective, p.dtype, p.redop);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    groups
        .into_iter()
        .filter_map(|(coll, dtype, redop)| {
            let all: Vec<&Point> = points
                .iter()
                .filter(|p| p.collective == coll && p.dtype == dtype && p.redop == redop)
                .collect();
            let mut oop: Vec<&Point> = all
                .iter()
                .copied()
                .filter(|p| p.placement == Placement::OutOfPlace && p.size_bytes > 0)
                .collect();
            if oop.is_empty() {
                return None;
            }
            oop.sort_by_key(|p| p.size_bytes);
            let largest = oop.last().map(|p| p.size_bytes).unwrap_or(0);
            // The plateau: sizes within 8x of the largest (the top four of a factor-2 sweep).
            let plateau: Vec<&Point> = oop
                .iter()
                .copied()
                .filter(|p| p.size_bytes * 8 > largest)
                .collect();
            let mut busbw: Vec<f64> = plateau.iter().map(|p| p.busbw_bytes_per_s).collect();
            busbw.sort_by(f64::total_cmp);
            let avg = all.iter().map(|p| p.busbw_bytes_per_s).sum::<f64>() / all.len() as f64;
            Some(Headline {
                collective: coll,
                dtype,
                redop,
                plateau_busbw_bytes_per_s: crate::stats::quantile_sorted(&busbw, 0.5),
                plateau_sizes_bytes: plateau.iter().map(|p| p.size_bytes).collect(),
                small_latency_s: oop[0].time_s,
                small_size_bytes: oop[0].size_bytes,
                avg_busbw_bytes_per_s: avg,
            })
        })
        .collect()
}

pub use crate::secrets::{relevant_env, MPI_TRANSPORT_ENV};

#[cfg(test)]
mod across_ranks_tests {
    use super::AcrossRanks;

    #[test]
    fn status_names_are_what_the_record_writes() {
        use super::RunStatus;
        for s in [
            RunStatus::Running,
            RunStatus::Complete,
            RunStatus::CheckFailed,
            RunStatus::TimedOut,
            RunStatus::Failed,
            RunStatus::Interrupted,
            RunStatus::Truncated,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
    }

    #[test]
    fn each_choice_picks_its_rank_time() {
        let t = [3.0, 1.0, 2.0, 6.0];
        assert_eq!(AcrossRanks::from_flag(0).pick(&t), 3.0);
        assert_eq!(AcrossRanks::from_flag(1).pick(&t), 3.0);
        assert_eq!(AcrossRanks::from_flag(2).pick(&t), 1.0);
        assert_eq!(AcrossRanks::from_flag(3).pick(&t), 6.0);
        assert!(AcrossRanks::Max.pick(&[]).is_nan());
        assert_eq!(AcrossRanks::default(), AcrossRanks::Max);
    }
}
