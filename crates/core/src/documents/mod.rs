//! Every JSON document a command prints besides the run record (`model`): typed, versioned,
//! and named by `kind`, so `report` and users' scripts can tell them apart and rely on their
//! fields. Readers reject unknown fields, like the run record's.

pub mod arrivals;
pub mod diagnosis;
pub mod expectations;
pub mod fleet;
pub mod kind;
pub mod matrix;
pub mod memory;
pub mod messages;
pub mod nccl_dump;
pub mod qualification;
pub mod read;
pub mod simulation;
pub mod stragglers;
pub mod topology;
pub mod trace;

use crate::model::ToolInfo;
use diagnosis::{Facts, Finding};
pub use kind::Kind;
pub use qualification::{BaselineRef, Qualification, RuleResult};
use serde::{Deserialize, Serialize};
use simulation::{Compute, Estimate, Hook, Outcome, Precision};
use topology::Topology;

/// The version of every document's shape (shared with the run record's `schema_version`).
pub const SCHEMA_VERSION: u32 = crate::model::SCHEMA_VERSION;

/// `ncclprobe diagnose --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiagnosisDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub facts: Facts,
    /// Worst first.
    pub findings: Vec<Finding>,
}

impl DiagnosisDocument {
    pub fn new(facts: Facts, findings: Vec<Finding>) -> Self {
        DiagnosisDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Diagnosis,
            tool: crate::buildinfo::tool_info(),
            facts,
            findings,
        }
    }
}

/// `ncclprobe topo --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    /// Where the matrix came from: a file's name, or `(live)`.
    pub source: String,
    pub topology: Topology,
    /// What NCCL's own dumps said, when the source was one: its system, graphs and rails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<nccl_dump::NcclDump>,
}

impl TopologyDocument {
    pub fn new(source: String, topology: Topology) -> Self {
        TopologyDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Topology,
            tool: crate::buildinfo::tool_info(),
            source,
            topology,
            nccl: None,
        }
    }
}

/// The model a simulation ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSummary {
    pub name: String,
    /// Preset, safetensors header or tensor list, as the user gave it.
    pub source: String,
    pub params: u64,
    pub grad_bytes: u64,
    pub tensors: usize,
}

/// Which simulator produced a simulation document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Simulator {
    Ddp,
    Fsdp,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OneGpu {
    pub iters_per_s: f64,
    pub samples_per_s: f64,
}

/// `ncclprobe simulate ddp --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DdpSimulation {
    pub schema_version: u32,
    pub kind: Kind,
    pub simulator: Simulator,
    pub tool: ToolInfo,
    pub model: ModelSummary,
    pub world_size: usize,
    pub batch_size: usize,
    pub compute: Compute,
    /// The all-reduce curve or model used, in words (with its file when measured).
    pub link: String,
    pub hook: Hook,
    pub gradient_as_bucket_view: bool,
    pub overlap_slowdown: f64,
    pub first_bucket_bytes: u64,
    pub one_gpu: OneGpu,
    pub first_iteration_s: f64,
    /// The configurations shown (all, or only no_sync ones with `--no-sync`).
    pub configurations: Vec<Outcome>,
    /// The fastest of every configuration simulated.
    pub best: Option<Outcome>,
    pub advice: Vec<String>,
    /// The input pipeline, when `--data-ms` or `--sample-ms` modelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader: Option<simulation::LoaderSummary>,
}

/// One sharding strategy: its estimate and whether it fits `--gpu-memory-gb`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsdpRow {
    pub estimate: Estimate,
    pub fits: Option<bool>,
}

/// `ncclprobe simulate fsdp --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsdpSimulation {
    pub schema_version: u32,
    pub kind: Kind,
    pub simulator: Simulator,
    pub tool: ToolInfo,
    pub model: ModelSummary,
    pub world_size: usize,
    pub precision: Precision,
    pub link: String,
    pub compute: Compute,
    /// Micro-batches per optimizer step (1 in documents before it was a choice).
    #[serde(default = "one")]
    pub accumulation: usize,
    /// σ, the compute slowdown beside communication (0 in documents before it was modelled).
    #[serde(default)]
    pub overlap_slowdown: f64,
    pub strategies: Vec<FsdpRow>,
}

fn one() -> usize {
    1
}

/// One (collective, size, placement) held against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComparedPoint {
    pub collective: crate::coll::Collective,
    pub dtype: crate::dtype::Dtype,
    pub size_bytes: u64,
    pub placement: crate::coll::Placement,
    pub measured_busbw_bytes_per_s: f64,
    /// The expectation at this size, or the earlier run's busbw.
    pub expected_busbw_bytes_per_s: f64,
    pub expected_low_bytes_per_s: f64,
    pub expected_high_bytes_per_s: f64,
    /// measured / expected.
    pub ratio: f64,
    /// `ok`, `below`, `far-below`, `above-expectation` (against an expectation);
    /// `regression`, `improvement`, `within-noise` (against a run).
    pub verdict: String,
    /// Where the expected number came from: the entry's published plateau, the cost model
    /// (with the algorithm and protocol it picked), or the earlier run.
    pub layer: String,
    /// NCCL's own estimate for this call (ncclGroupSimulateEnd), as busbw, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_model_busbw_bytes_per_s: Option<f64>,
    /// Run vs run: the two-sided p-value of the test named in the document, when both runs
    /// have samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
}

/// What the machine would give without the overrides in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alternative {
    pub overrides: Vec<String>,
    pub baseline: BaselineRef,
    /// Plateau busbw per collective on that path, bytes/s.
    pub plateau_busbw_bytes_per_s: std::collections::BTreeMap<String, f64>,
    pub sentence: String,
}

/// `ncclprobe compare --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    /// The run judged (its file).
    pub run: String,
    /// The run's identity (when and where it started): what ties this document to its run
    /// record whatever the file is called (`report` refuses a document of another run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub baseline: BaselineRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without_overrides: Option<Alternative>,
    pub points: Vec<ComparedPoint>,
    /// What was not compared, and why (collectives or sizes in one run only, other rank
    /// counts or dtypes, collectives the entry has no figure for).
    pub not_compared: Vec<String>,
    /// How changes were judged (run vs run) or how the band was set (expectation).
    pub method: String,
    pub warnings: Vec<String>,
    pub summary: String,
    /// Hardware the user stated (`--hardware`), each fact marked as stated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stated: Vec<String>,
    /// A run across nodes with its NICs unknown: the per-NIC figure for each plausible NIC
    /// count and the line rate it matches (the verdict is conditional on them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nic_readings: Vec<NicReading>,
    /// The same run under the reference design a maintainer assumes of its nodes (their GPU
    /// model and count), stated as an assumption: only where nothing gives the NICs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assumed: Option<AssumedDesign>,
    /// Where the curve's shape is wrong whatever the baseline: busbw falling over a range of
    /// sizes, a plateau reached far later than the model says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shape: Vec<ShapeFinding>,
}

/// A range of sizes where a run's busbw curve has the wrong shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeFinding {
    pub collective: crate::coll::Collective,
    /// falls | falls-at-end | late-plateau
    pub kind: String,
    /// The sizes it covers (late-plateau: where the model's plateau starts and where the run's
    /// does).
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub sentence: String,
}

/// A run judged under the design its nodes usually have (`hgx-h100-8`: 8 x 400G per node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssumedDesign {
    pub design: String,
    pub title: String,
    /// `8 x H100 SXM, 8 x 400G InfiniBand per node`.
    pub facts: String,
    pub citation: String,
    pub collective: crate::coll::Collective,
    /// The run's plateau and what the design's NICs carry, GB/s busbw.
    pub measured_gbps: f64,
    pub expected_gbps: f64,
    /// far-below | below | consistent | above-two-nodes | above; below-if-rdma where no design
    /// is assumed and the run is slower than one 100G RDMA NIC per node
    pub verdict: String,
    /// The NIC count per node (at the design's line rate) the run is consistent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_with_nics: Option<usize>,
    pub sentence: String,
}

impl Comparison {
    /// Whether a verdict was reached: points held against the baseline, or nccl-tests'
    /// average against the expectation's mean over the same sizes (a pasted summary). The
    /// readings per NIC count, and a comparison that found nothing to compare, are not one.
    pub fn judged(&self) -> bool {
        self.baseline.kind != "conditional"
            && (!self.points.is_empty()
                || (self.not_compared.is_empty()
                    && !self.summary.starts_with("nothing to compare")))
    }
}

/// The run's plateau as one NIC's share, for one NIC count per node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicReading {
    pub collective: crate::coll::Collective,
    pub nics_per_node: usize,
    /// GB/s (1e9 B/s) busbw per NIC.
    pub per_nic_gbps: f64,
    /// The line rate it matches, in words.
    pub matches: String,
}

/// `ncclprobe baselines --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselinesDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub entries: Vec<expectations::Entry>,
    /// The reference designs (`data/designs.toml`) runs across nodes are judged under.
    #[serde(default)]
    pub designs: Vec<expectations::Design>,
}
