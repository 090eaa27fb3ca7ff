//! The pair matrix document (`kind: matrix`) that `ncclprobe matrix` writes after every step,
//! and what it says (`analysis`): which pairs, and which node, are far below the others.

pub mod analysis;

use crate::documents::topology::{PciAddress, Topology};
use crate::documents::Kind;
use crate::model::{BackendInfo, RunStatus, Settings, ToolInfo};
use crate::stats::StopReason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the ends of a pair are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum By {
    /// Every ordered pair of ranks (of GPUs, with the nccl backend).
    Rank,
    /// Every pair of hosts, all ranks of one sending to the ranks of the other at once.
    Node,
}

/// What was timed between the two ends of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// `from` sends, `to` receives: time per message, bandwidth = size / time.
    OneWay,
    /// Both send and receive at once: bandwidth counts both directions (2 x size / time).
    TwoWay,
    /// A message there and its answer back: time is half the round trip (as osu_latency).
    Latency,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::OneWay => "one-way",
            Direction::TwoWay => "two-way",
            Direction::Latency => "latency",
        }
    }
}

/// How the pairs were scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Rounds of disjoint pairs measured at the same time (round-robin tournament).
    Rounds,
    /// One pair at a time: nothing else moves while a pair is timed.
    OnePairAtATime,
}

/// One end of a pair: a rank, or a node with its ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// What the tables call it: `rank 3`, `GPU3`, or the host name.
    pub label: String,
    pub host: String,
    pub ranks: Vec<usize>,
    /// The GPU a rank drives (nccl backend), as the record's rank table shows it.
    pub device: Option<String>,
}

impl Endpoint {
    /// The row of `topology` (taken on `topology_host`) that is this one-rank endpoint's GPU:
    /// found by the PCI address its device text carries, since CUDA's ordinal follows
    /// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER while the rows follow the PCI bus. By the
    /// ordinal only where neither side has addresses (documents written before they were kept).
    pub fn gpu_row(&self, topology: &Topology, topology_host: &str) -> Option<String> {
        if self.host != topology_host || self.ranks.len() != 1 {
            return None;
        }
        let device = self.device.as_deref()?;
        if let Some(address) = PciAddress::in_device_text(device) {
            return topology.gpu_at(&address).map(str::to_string);
        }
        let has_addresses = topology.info.values().any(|i| i.pci_bus_id.is_some());
        let ordinal: usize = device.split_whitespace().next()?.parse().ok()?;
        let row = format!("GPU{ordinal}");
        (!has_addresses && topology.gpus().contains(&row.as_str())).then_some(row)
    }
}

/// One measured cell: a pair (ordered for one-way), a size, a direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairMeasurement {
    /// Indexes into `endpoints`; for two-way and latency `from < to`.
    pub from: usize,
    pub to: usize,
    pub size_bytes: u64,
    pub direction: Direction,
    /// The round of the schedule it was measured in, and how many pairs moved at once.
    pub round: usize,
    pub concurrent_pairs: usize,
    /// Rank pairs that carried it at once (more than one for a pair of nodes).
    pub rank_pairs: usize,
    /// Median seconds per message (latency: half the round trip).
    pub time_s: f64,
    /// Bytes per second through the pair: all its rank pairs, both ways for two-way.
    pub bw_bytes_per_s: f64,
    pub iters_per_sample: usize,
    pub samples: usize,
    /// Half-width of the median's 95% interval over the median.
    pub ci_rel_half_width: f64,
    pub stop_reason: StopReason,
    /// Received bytes that differ from what the sender sent.
    pub wrong_bytes: u64,
    /// Far from the median in the first pass, so measured again alone (this is that second
    /// measurement): an outlier is named only if it stays one without interference.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remeasured: bool,
}

/// A cell far from the median of its kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outlier {
    pub from: usize,
    pub to: usize,
    pub size_bytes: u64,
    pub direction: Direction,
    /// Bandwidth (one-way, two-way) or time (latency) over the median cell's.
    pub ratio_to_median: f64,
    /// What lies between the two ends, as far as this machine can tell.
    pub link: String,
}

/// `ncclprobe matrix --format json` and `--json FILE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub status: RunStatus,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub command_line: Vec<String>,
    pub backend: BackendInfo,
    pub env: BTreeMap<String, String>,
    pub settings: Settings,
    pub by: By,
    pub schedule: Schedule,
    /// `--outlier`: the fraction of the median below which a pair is named.
    pub outlier_fraction: f64,
    pub endpoints: Vec<Endpoint>,
    /// This machine's GPU link matrix when there is one (the link class of a pair).
    pub topology: Option<serde_json::Value>,
    pub measurements: Vec<PairMeasurement>,
    /// Judged when the run ends (`analysis::outliers`).
    pub outliers: Vec<Outlier>,
    pub notes: Vec<String>,
    pub error: Option<String>,
}

impl MatrixDocument {
    pub fn sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = self.measurements.iter().map(|m| m.size_bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    pub fn total_wrong(&self) -> u64 {
        self.measurements.iter().map(|m| m.wrong_bytes).sum()
    }

    /// `from -> to` in the tables' words.
    pub fn pair_label(&self, from: usize, to: usize, direction: Direction) -> String {
        let name = |i: usize| {
            self.endpoints
                .get(i)
                .map_or_else(|| format!("#{i}"), |e| e.label.clone())
        };
        let arrow = if direction == Direction::OneWay {
            "->"
        } else {
            "<->"
        };
        format!("{} {arrow} {}", name(from), name(to))
    }
}
