//! A gate's verdict (`kind: qualification`): what `qualify` prints and what a gated sweep keeps
//! in its run record, with the expectation it cited.

use super::kind::Kind;
use crate::buildinfo::ToolInfo;
use serde::{Deserialize, Serialize};

/// What a run was held against: a shipped expectation or an earlier run.
/// What a profile's `why` says when the run is not what the profile describes (ranks, nodes,
/// GPU): the gate still judges by it, and says so on stderr and in the JUnit.
pub const PROFILE_MISMATCH: &str = "its conditions differ from the run";

impl BaselineRef {
    /// The sentence that says how the run differs from the profile, when it does.
    pub fn mismatch(&self) -> Option<&str> {
        self.why.find(PROFILE_MISMATCH).map(|at| &self.why[at..])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineRef {
    /// `expectation` or `run`.
    pub kind: String,
    /// The entry's id, or the earlier run's file.
    pub id: String,
    pub title: String,
    /// The entry's provenance kind (`measured`, `production-threshold`, `vendor-statement`,
    /// `derived`, `cost-model`); `measured` for a run.
    pub provenance: String,
    pub citation: String,
    /// One line: which entry and why.
    pub why: String,
}

/// One rule of a qualification and how the run fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleResult {
    /// `completed`, `correct`, `min-busbw`, `max-latency`, `max-skew`, `min-ratio`.
    pub rule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<crate::coll::Collective>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    pub measured: Option<f64>,
    pub required: Option<f64>,
    /// Unit of `measured` and `required` (`GB/s`, `us`, `x`, `elements`).
    pub unit: String,
    pub passed: bool,
    pub message: String,
    /// What the result is of when a rule has one per subject: a slow pair, a slow node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// `ncclprobe qualify --format json` (and `sweep --qualify`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qualification {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub run: String,
    /// The run's identity (when and where it started), as in a comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<BaselineRef>,
    pub passed: bool,
    pub results: Vec<RuleResult>,
    /// Measurements taken (1 + retries, for `sweep --qualify --retries`).
    pub attempts: usize,
    /// nccl-tests' "Avg bus bandwidth" per collective, for familiarity; never a rule.
    pub avg_busbw_bytes_per_s: std::collections::BTreeMap<String, f64>,
    pub summary: String,
}
