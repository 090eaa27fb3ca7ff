//! `ncclprobe trace`: where a training job's steps went, read from its own records (profiler
//! traces, Flight Recorder dumps, NCCL Inspector output), and each collective held against
//! what the fabric gives.

use super::Kind;
use crate::coll::Collective;
use crate::model::ToolInfo;
use serde::{Deserialize, Serialize};

/// One step of one rank, its wall time split so that the parts add up to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepBreakdown {
    pub rank: usize,
    /// The `ProfilerStep#N` number.
    pub step: u64,
    pub wall_ms: f64,
    /// GPU busy with anything but NCCL (kernels, copies, memsets).
    pub compute_ms: f64,
    /// NCCL kernels running while compute ran too.
    pub overlapped_comm_ms: f64,
    /// NCCL kernels with no compute beside them: what communication added to the step.
    pub exposed_comm_ms: f64,
    /// GPU idle while the host waited on the DataLoader.
    pub loader_wait_ms: f64,
    /// GPU idle for any other reason (launch gaps, host work, synchronisation).
    pub other_idle_ms: f64,
    /// Compute by the part of the step that launched it (forward on the main thread,
    /// backward on autograd's, optimizer inside `Optimizer.step`).
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub optimizer_ms: f64,
    /// The collective with the most exposed time in the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critical_collective: Option<String>,
}

/// Collectives of one kind and size on one rank count, as the trace timed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracedCollective {
    pub collective: Collective,
    pub size_bytes: u64,
    pub nranks: usize,
    pub count: usize,
    /// Median kernel time on the rank(s) read.
    pub median_ms: f64,
    /// The time the fabric took: across ranks, the median of each call's shortest kernel
    /// (the last rank to arrive waits least); on one rank, its median (which includes
    /// waiting for late peers).
    pub fabric_ms: f64,
    /// Bus bandwidth at `fabric_ms`, nccl-tests' formula.
    pub busbw_gbs: f64,
    /// Of its kernel time, the part with no compute beside it.
    pub exposed_fraction: f64,
    /// What the curve given says this collective takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_ms: Option<f64>,
    /// `fabric_ms / expected_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
    /// "slow" (the fabric or configuration, from calls matched across ranks), "slow or
    /// waiting" (one rank's view: its kernel time includes waiting for later peers),
    /// "at speed", or "not judged" (no link given).
    pub verdict: String,
}

/// A rank the others waited for in the collectives of a multi-rank trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceStraggler {
    pub rank: usize,
    /// Calls in which it arrived last, of the calls matched across the ranks read.
    pub last_in: usize,
    pub of: usize,
    /// Median of how much less it waited than the rank that waited most.
    pub late_ms: f64,
}

/// Where a hang stopped, from Flight Recorder dumps matched across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hang {
    pub group: String,
    /// The first collective (by the group's sequence number) not completed on every rank.
    pub collective_seq_id: u64,
    pub profiling_name: String,
    /// `missing ranks`, `collective type mismatch`, `size mismatch`, `dtype mismatch`,
    /// `stuck in NCCL` (every rank entered it and none finished), `not started`.
    pub cause: String,
    /// Ranks that never enqueued it: the ones the others wait for.
    pub missing_ranks: Vec<usize>,
    /// Ranks that disagree with the others about it (type, size or dtype).
    pub mismatched_ranks: Vec<usize>,
    /// Each rank's state of it (`rank: state`).
    pub states: Vec<String>,
    pub summary: String,
}

/// Production busbw Inspector measured, by collective and size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectorSummary {
    pub collective: Collective,
    pub size_bytes: u64,
    pub nranks: usize,
    pub count: usize,
    pub median_busbw_gbs: f64,
    pub median_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_ms: Option<f64>,
    pub verdict: String,
}

/// What the job's time went to, over its ranks and steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceVerdict {
    /// `data-bound`, `communication-exposed`, `slow-collective`, `host-bound`,
    /// `compute-bound`, `hang`, or `not judged`.
    pub code: String,
    pub summary: String,
}

/// `ncclprobe trace --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    /// Files read and what each was.
    pub files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The link the collectives were held against (a curve, a busbw), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    pub steps: Vec<StepBreakdown>,
    pub collectives: Vec<TracedCollective>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub straggler: Option<TraceStraggler>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<Hang>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inspector: Vec<InspectorSummary>,
    /// The DDP what-if calibrated on the trace, where a step can be rebuilt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    pub verdict: TraceVerdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One question the trace-calibrated what-if answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatIfRow {
    pub question: String,
    /// The step (per micro-batch, for accumulation) this would take.
    pub step_ms: f64,
    /// Traced step over this one: 1.25 = 25% more samples per second.
    pub speedup: f64,
}

/// The DDP step rebuilt from one rank's trace, checked against the traced step, then asked
/// what-ifs (`simulate ddp --from-trace`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatIf {
    pub rank: usize,
    pub steps: usize,
    /// Median traced step.
    pub traced_ms: f64,
    /// Median step the model rebuilds from the trace's own terms.
    pub predicted_ms: f64,
    /// `predicted / traced - 1`, in percent. The rebuild differs from the traced step only
    /// where communication is modelled (a curve, or the fit) and runs past backward: with
    /// all-reduces inside backward it is 0 by construction.
    pub error_pct: f64,
    /// Each step predicted from the other steps' rebuilt median, against its traced time:
    /// the median of the absolute errors, in percent (with 3 steps or more). How far one
    /// prediction from this trace can be trusted, the job's own step-to-step spread included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_error_pct: Option<f64>,
    /// Median per step of each term the model is built from.
    pub before_backward_ms: f64,
    pub backward_ms: f64,
    /// Negative where the GPU ran the step's tail after the host had begun the next step.
    pub after_backward_ms: f64,
    pub loader_wait_ms: f64,
    /// Gradient all-reduces per step and their bytes.
    pub buckets: usize,
    pub gradient_bytes: u64,
    pub rows: Vec<WhatIfRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl TraceDocument {
    /// "world size 2; NCCL 2.17.1; NVIDIA A100; link: ..." (what is known of it).
    pub fn job_line(&self) -> String {
        let parts: Vec<String> = [
            self.world_size.map(|w| format!("world size {w}")),
            self.nccl_version.as_ref().map(|v| format!("NCCL {v}")),
            self.device.clone(),
            self.link.as_ref().map(|l| format!("link: {l}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join("; ")
    }
}

impl WhatIf {
    /// "calibrated on rank 0, 6 steps: traced step 176.27 ms, rebuilt ... (self-check ...)".
    pub fn calibration(&self) -> String {
        format!(
            "calibrated on rank {}, {} steps: traced step {:.2} ms, rebuilt {:.2} ms (self-check error {:+.1}%{})",
            self.rank,
            self.steps,
            self.traced_ms,
            self.predicted_ms,
            self.error_pct,
            self.holdout_error_pct
                .map(|h| format!("; each step from the others: {h:.1}%"))
                .unwrap_or_default()
        )
    }
}
