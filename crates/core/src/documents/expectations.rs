//! The shape of the shipped expectations (`data/expectations.toml`) as documents carry them:
//! `baselines --format json` lists the entries, and comparisons cite one. Loading and looking
//! them up is `expect::table`.

use crate::coll::Collective;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a figure comes from, as the table's legend defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provenance {
    Measured,
    ProductionThreshold,
    VendorStatement,
    Derived,
    CostModel,
}

impl Provenance {
    pub fn name(self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::ProductionThreshold => "production-threshold",
            Provenance::VendorStatement => "vendor-statement",
            Provenance::Derived => "derived",
            Provenance::CostModel => "cost-model",
        }
    }
}

/// How NCCL moves the bytes between the GPUs of one node, or between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    Nvlink,
    PcieP2p,
    PcieShm,
    Net,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Nvlink => "nvlink",
            PathKind::PcieP2p => "pcie-p2p",
            PathKind::PcieShm => "pcie-shm",
            PathKind::Net => "net",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    #[serde(rename = "match")]
    pub names: Vec<String>,
    pub family: String,
    pub pcie_gen: u8,
    #[serde(default)]
    pub nvlink_gbps: Option<f64>,
    #[serde(default)]
    pub consumer: bool,
    #[serde(default)]
    pub sxm_nvswitch: bool,
    /// OAM boards of this model link every GPU to every other by xGMI (AMD Instinct).
    #[serde(default)]
    pub xgmi: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub id: String,
    pub title: String,
    pub path: PathKind,
    pub links: Vec<String>,
    #[serde(default)]
    pub gpus: Vec<String>,
    #[serde(default)]
    pub pcie_gen: Option<u8>,
    pub ranks: [usize; 2],
    pub nodes: [usize; 2],
    #[serde(default)]
    pub nvls: Option<bool>,
    #[serde(default)]
    pub wsl2: Option<bool>,
    /// NVLinks between the slowest pair (the `#` of `NV#`), inclusive range.
    #[serde(default)]
    pub nv_links: Option<[u32; 2]>,
    /// The figure is per NVLink at the GPU model's NCCL link constant (`nvlink_gbps`): a
    /// direct NVLink pair gets links x constant x figure.
    #[serde(default)]
    pub per_nvlink: bool,
    /// Net entries: the figure is per NIC at `nic_gbps`.
    #[serde(default)]
    pub per_nic: bool,
    #[serde(default)]
    pub nic_gbps: Option<f64>,
    #[serde(default)]
    pub scales_with_line_rate: bool,
    /// Per-NIC entries: the most one node carries, GB/s, however many NICs and however fast
    /// (NCCL over sockets is bound by the host, not the line).
    #[serde(default)]
    pub node_cap_gbps: Option<f64>,
    /// A per-step latency that replaces NCCL's hardware constant (sockets are slower than IB).
    #[serde(default)]
    pub hop_latency_us: Option<f64>,
    /// Plateau busbw by collective name, GB/s.
    pub busbw_gbps: BTreeMap<String, f64>,
    pub band: [f64; 2],
    /// The size from which the figure applies (the plateau).
    pub plateau_from_bytes: u64,
    pub provenance: Provenance,
    pub citation: String,
    #[serde(default)]
    pub note: Option<String>,
}

impl Entry {
    /// The plateau figure for a collective (GB/s) and whether it was carried over from
    /// all_reduce: ring busbw is the same for all_gather, reduce_scatter, broadcast and
    /// reduce; alltoall and sendrecv are other patterns and get no figure unless named.
    pub fn busbw_for(&self, coll: Collective) -> Option<(f64, bool)> {
        if let Some(&v) = self.busbw_gbps.get(coll.name()) {
            return Some((v, false));
        }
        let carried = matches!(
            coll,
            Collective::AllGather
                | Collective::ReduceScatter
                | Collective::Broadcast
                | Collective::Reduce
        );
        if !carried {
            return None;
        }
        // An NVLS all_reduce figure is not a ring figure; other collectives need their own.
        if self.nvls == Some(true) {
            return None;
        }
        self.busbw_gbps.get("all_reduce").map(|&v| (v, true))
    }

    pub fn covers_ranks(&self, n: usize) -> bool {
        (self.ranks[0]..=self.ranks[1]).contains(&n)
    }

    pub fn covers_nodes(&self, n: usize) -> bool {
        (self.nodes[0]..=self.nodes[1]).contains(&n)
    }

    pub fn matches_gpu(&self, name: &str) -> bool {
        self.gpus.is_empty() || self.gpus.iter().any(|g| contains_ci(name, g))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub schema_version: u32,
    #[serde(rename = "gpu")]
    pub gpus: Vec<GpuModel>,
    #[serde(rename = "entry")]
    pub entries: Vec<Entry>,
}

pub fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack
        .to_ascii_lowercase()
        .contains(&needle.to_ascii_lowercase())
}

/// Reading and checking a table (the shipped one, `data/expectations.toml`, is embedded by
/// `expect::table`; a cluster's own is read the same way).
impl Table {
    pub fn parse(text: &str) -> Result<Table, String> {
        let table: Table = toml::from_str(text).map_err(|e| e.to_string())?;
        table.validate()?;
        Ok(table)
    }

    /// What every entry must hold; the build's own table is checked by a test, a cluster's
    /// table would be checked the same way.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.entries {
            let bad = |why: &str| Err(format!("entry {}: {why}", e.id));
            if !seen.insert(e.id.as_str()) {
                return bad("the id appears twice");
            }
            if e.citation.trim().len() < 20 {
                return bad("no citation");
            }
            if !e.busbw_gbps.contains_key("all_reduce") {
                return bad("no all_reduce figure");
            }
            if let Some(k) = e
                .busbw_gbps
                .keys()
                .find(|k| Collective::parse(k).is_none_or(|c| c.name() != k.as_str()))
            {
                return bad(&format!("`{k}` is not a collective name"));
            }
            if e.busbw_gbps.values().any(|v| !(v.is_finite() && *v > 0.0)) {
                return bad("a figure is not a positive number");
            }
            if !(e.band[0] > 0.0 && e.band[0] <= 1.0 && e.band[1] >= 1.0 && e.band[1] < 10.0) {
                return bad("band must be [low <= 1, high >= 1]");
            }
            if e.ranks[0] < 2
                || e.ranks[0] > e.ranks[1]
                || e.nodes[0] < 1
                || e.nodes[0] > e.nodes[1]
            {
                return bad("ranks/nodes ranges are empty");
            }
            if e.links.is_empty() {
                return bad("no link class");
            }
            if e.per_nic && e.nic_gbps.is_none() {
                return bad("per_nic needs nic_gbps");
            }
            if e.node_cap_gbps
                .is_some_and(|c| !(e.per_nic && c.is_finite() && c > 0.0))
            {
                return bad("node_cap_gbps needs per_nic and a positive figure");
            }
        }
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.id.as_str()).collect()
    }

    /// The GPU model a device name belongs to (first row that matches).
    pub fn gpu_model(&self, name: &str) -> Option<&GpuModel> {
        self.gpus
            .iter()
            .find(|g| g.names.iter().any(|n| contains_ci(name, n)))
    }
}

/// A reference design (`data/designs.toml`): what a node of a kind is built with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Design {
    pub id: String,
    pub title: String,
    pub names: Vec<String>,
    pub gpu: String,
    pub gpu_match: Vec<String>,
    pub gpus: usize,
    pub intra: String,
    pub domain: usize,
    pub nics: usize,
    pub nic_gbps: f64,
    pub nic_kind: String,
    #[serde(default)]
    pub usual: bool,
    #[serde(default)]
    pub variants: String,
    pub citation: String,
}

impl Design {
    /// `8 x H100 SXM, 8 x 400G ib per node`.
    pub fn facts(&self) -> String {
        let kind = match self.nic_kind.as_str() {
            "ib" => "InfiniBand",
            "roce" => "RoCE",
            "efa" => "EFA",
            "slingshot" => "Slingshot",
            "tcpx" => "GPUDirect-TCPX",
            "tcpxo" => "GPUDirect-TCPXO",
            _ => "TCP",
        };
        format!(
            "{} x {}, {} x {:.0}G {kind} per node",
            self.gpus, self.gpu, self.nics, self.nic_gbps
        )
    }

    /// Whether a GPU name as the driver printed it (`NVIDIA H100 80GB HBM3`) or as stated
    /// (`H100 SXM`) is this design's GPU.
    pub fn has_gpu(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        let stated = self.gpu.to_ascii_lowercase();
        self.gpu_match
            .iter()
            .any(|m| name.contains(&m.to_ascii_lowercase()))
            || name.split_whitespace().eq(stated.split_whitespace())
    }
}
