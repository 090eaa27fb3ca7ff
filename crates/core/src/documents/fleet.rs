//! `ncclprobe fleet` (`kind: fleet`): every node of a SKU against its peers and its own past,
//! and the drain list an operator acts on.

use super::kind::Kind;
use crate::buildinfo::ToolInfo;
use serde::{Deserialize, Serialize};

/// What the fleet was read with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFilters {
    /// Runs started at or after this time (RFC 3339).
    pub since: Option<String>,
    pub sku: Option<String>,
    pub node: Option<String>,
}

/// The thresholds a node is judged by (the flags of `fleet` and `qualify --against-fleet`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetRules {
    /// Sizes below this are not judged against peers (latency-bound sizes are noisy).
    pub min_size_bytes: u64,
    /// A node is below its peers where its bus bandwidth is under this fraction of theirs…
    pub min_ratio: f64,
    /// …its robust z-score is at or under this…
    pub max_z: f64,
    /// …and the rank test is a discovery at this false-discovery rate over the whole fleet.
    pub fdr: f64,
    /// A node has drifted when it lost more than this fraction of bus bandwidth since its
    /// baseline run (significantly).
    pub max_drift: f64,
    /// Peers needed before a node is judged against them.
    pub min_peers: usize,
}

/// The peers' distribution at one (SKU, collective, size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerStat {
    pub sku: String,
    pub collective: String,
    pub dtype: String,
    pub nranks: usize,
    pub size_bytes: u64,
    /// Nodes with a latest run at this point.
    pub n: usize,
    pub median_busbw_bytes_per_s: f64,
    /// Median absolute deviation of the nodes' bus bandwidth (unscaled).
    pub mad_busbw_bytes_per_s: f64,
}

/// A node at one collective: its worst size among those judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Standing {
    pub collective: String,
    pub size_bytes: u64,
    pub busbw_bytes_per_s: f64,
    /// Its bus bandwidth over the peers' median.
    pub ratio: f64,
    pub z: f64,
    /// One-sided rank-test p-value (run only where ratio and z already fail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<f64>,
}

/// One run's plateau, for a trend line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrendPoint {
    pub at: String,
    pub collective: String,
    pub plateau_busbw_bytes_per_s: f64,
}

/// A node's latest run against its baseline run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    /// `last-passing` (its last run that passed a gate) or `first-seen` (no run of it carries
    /// a gate verdict: its first run in the window).
    pub baseline: String,
    pub baseline_at: String,
    pub collective: String,
    pub size_bytes: u64,
    /// Latest over baseline bus bandwidth (worst size judged).
    pub ratio: f64,
    pub p: Option<f64>,
    /// Mann-Kendall p-value of a decline of the plateau over the node's runs, and Sen's slope
    /// as a fraction of the first plateau per day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slope_per_day: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStanding {
    pub node: String,
    pub sku: String,
    pub runs: usize,
    pub latest_at: String,
    /// Per collective, its worst judged size against peers.
    pub standings: Vec<Standing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// The plateau of each run (kept for drained nodes, and every node of a small fleet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trend: Vec<TrendPoint>,
    pub drain: bool,
}

/// One reason to drain a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    /// `below-peers`, `drift`, `link`, `health`, `gate`.
    pub check: String,
    pub what: String,
    pub evidence: String,
    /// The first run of the streak that still fails (RFC 3339).
    pub since: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainEntry {
    pub node: String,
    pub sku: String,
    pub since: Option<String>,
    pub reasons: Vec<Reason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkuGroup {
    pub sku: String,
    pub nodes: usize,
    pub runs: usize,
}

/// `ncclprobe fleet --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    /// The store, as `--history` named it (no password).
    pub store: String,
    pub generated_at: String,
    pub filters: FleetFilters,
    pub rules: FleetRules,
    pub skus: Vec<SkuGroup>,
    /// Drained nodes first, worst first.
    pub drain: Vec<DrainEntry>,
    pub peers: Vec<PeerStat>,
    pub nodes: Vec<NodeStanding>,
    pub notes: Vec<String>,
}

pub const SCHEMA_VERSION: u32 = 1;

impl super::read::Document for FleetDocument {
    const NAME: &'static str = "fleet";
    fn accepts(head: &super::read::Head) -> bool {
        head.kind == Kind::Fleet
    }
    fn check(&self) -> Result<(), String> {
        if self.schema_version > SCHEMA_VERSION {
            return Err(format!(
                "fleet schema {} is newer than this ncclprobe reads ({SCHEMA_VERSION})",
                self.schema_version
            ));
        }
        Ok(())
    }
}
