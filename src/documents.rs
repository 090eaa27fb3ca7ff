//! Every JSON document a command prints besides the run record (`model`): typed, versioned,
//! and named by `kind`, so `report` and users' scripts can tell them apart and rely on their
//! fields. Readers reject unknown fields, like the run record's.

use crate::analysis::ddp::{Compute, Hook, Outcome};
use crate::analysis::fsdp::{Estimate, Precision};
use crate::diagnose::{Facts, Finding};
use crate::import::topo::Topology;
use crate::model::ToolInfo;
use serde::{Deserialize, Serialize};

/// The version of every document's shape (shared with the run record's `schema_version`).
pub const SCHEMA_VERSION: u32 = crate::model::SCHEMA_VERSION;

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Run,
    Diagnosis,
    Simulation,
    Topology,
}

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
}

impl TopologyDocument {
    pub fn new(source: String, topology: Topology) -> Self {
        TopologyDocument {
            schema_version: SCHEMA_VERSION,
            kind: Kind::Topology,
            tool: crate::buildinfo::tool_info(),
            source,
            topology,
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

impl ModelSummary {
    pub fn of(model: &crate::analysis::models::Model) -> Self {
        ModelSummary {
            name: model.name.clone(),
            source: model.source.clone(),
            params: model.num_params(),
            grad_bytes: model.grad_bytes(),
            tensors: model.tensors.len(),
        }
    }
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
    pub strategies: Vec<FsdpRow>,
}
