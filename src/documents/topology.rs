//! The GPU/NIC link matrix as a topology document holds it (read from `nvidia-smi topo -m` by
//! `import::topo`, or from this machine by `live`), and what each link class means.

use serde::Serialize;
use std::collections::BTreeMap;

/// A link code as the legend defines it; `SOC` (old drivers) is read as `SYS`.
pub fn normalise_link(code: &str) -> Option<String> {
    let c = code.trim();
    match c {
        "X" | "PIX" | "PXB" | "PHB" | "NODE" | "SYS" => Some(c.to_string()),
        "SOC" => Some("SYS".to_string()),
        _ if c.len() > 2 && c.starts_with("NV") && c[2..].chars().all(|d| d.is_ascii_digit()) => {
            Some(c.to_string())
        }
        _ => None,
    }
}

/// How far a link code reaches, nearest first (NVLink, one switch, ..., across sockets).
pub fn distance(code: &str) -> u8 {
    match code {
        c if c.starts_with("NV") => 0,
        "PIX" => 1,
        "PXB" => 2,
        "PHB" => 3,
        "NODE" => 4,
        _ => 5,
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub cpu_affinity: Option<String>,
    pub numa_affinity: Option<String>,
    pub gpu_numa_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Topology {
    /// Devices in the matrix's column order.
    pub devices: Vec<String>,
    /// (from, to, link code) for every ordered pair the matrix states.
    pub links: Vec<(String, String, String)>,
    pub info: BTreeMap<String, DeviceInfo>,
    /// NIC legend: `NIC0` → `mlx5_0`.
    pub nic_names: BTreeMap<String, String>,
    /// `topo -p2p` matrix cells, when present: (from, to, OK/NS/...).
    pub p2p: Vec<(String, String, String)>,
    /// What could not be read, with line numbers.
    pub problems: Vec<String>,
    /// How the matrix was read when it needed more than its header (e.g. run-together labels).
    #[serde(default)]
    pub notes: Vec<String>,
    /// `old` when the legend or cells use SOC, else `new`.
    pub legend: String,
}

impl Topology {
    pub fn link(&self, a: &str, b: &str) -> Option<&str> {
        self.links
            .iter()
            .find(|(f, t, _)| f == a && t == b)
            .map(|(_, _, l)| l.as_str())
    }
    pub fn gpus(&self) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|d| d.starts_with("GPU"))
            .map(String::as_str)
            .collect()
    }
}

/// What a link code means for NCCL traffic between two GPUs.
pub fn describe_link(code: &str) -> &'static str {
    match code {
        c if c.starts_with("NV") => "NVLink",
        "PIX" => "one PCIe switch (P2P possible)",
        "PXB" => "several PCIe switches (P2P possible)",
        "PHB" => "through the CPU's PCIe host bridge",
        "NODE" => "between host bridges of one NUMA node",
        "SYS" => "across the CPU interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
        _ => "unknown",
    }
}
