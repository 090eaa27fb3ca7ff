//! Which expectation applies to a run: the path NCCL takes, told from the facts a run carries
//! (its topology or one given with `--topo`, the GPU model, rank and node counts, the `NCCL_*`
//! overrides, WSL2, the transports of an `NCCL_DEBUG=INFO` log), then the entry of the table
//! that fits that path best. The slowest GPU pair the ring must cross decides.

use super::cost::{Hw, Link};
pub use super::situation::{Situation, OVERRIDES};
use super::table::{contains_ci, Entry, GpuModel, PathKind, Table};
use crate::coll::Collective;
use crate::import::topo::Topology;
use serde::Serialize;

/// The path NCCL takes and how it was told.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathFacts {
    pub kind: PathKind,
    /// nvswitch, nvlink, pix, pxb, phb, node, sys, ib, roce, socket.
    pub link: String,
    pub pcie_gen: Option<u8>,
    pub nvls: bool,
    pub nics_per_node: Option<usize>,
    pub nic_gbps: Option<f64>,
    /// Inside each node the GPUs talk over NVLink (multi-node SXM systems).
    pub intra_nvlink: bool,
    /// NVLinks between the slowest pair, when the topology shows them.
    pub nv_links: Option<u32>,
    /// NCCL's per-link NVLink constant for the GPU model, GB/s.
    pub nvlink_gbps: Option<f64>,
    /// One clause per decision, in order.
    pub reasons: Vec<String>,
}

/// The chosen expectation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub entry: Entry,
    /// One line: which entry and why.
    pub why: String,
    pub path: PathFacts,
    /// Multiplies the entry's figures (NICs per node × line-rate scaling for per-NIC entries).
    pub scale: f64,
    pub nranks: usize,
    pub nnodes: usize,
    /// Overrides in force (`NCCL_SHM_DISABLE=1`, `WSL2`…) that moved the path.
    pub overrides: Vec<String>,
    /// What the machine would give without those overrides, when that differs.
    pub without_overrides: Option<Box<Choice>>,
}

impl Choice {
    /// The plateau figure for `coll` in bytes/s, and whether it was carried from all_reduce.
    pub fn plateau_bytes_per_s(&self, coll: Collective) -> Option<(f64, bool)> {
        self.entry
            .busbw_for(coll)
            .map(|(gbps, carried)| (gbps * 1e9 * self.scale, carried))
    }

    /// The cost model for `coll`, anchored on this entry's figures.
    pub fn link(&self, coll: Collective) -> Option<Link> {
        let (plateau, _) = self.plateau_bytes_per_s(coll)?;
        let nvls = self.entry.nvls == Some(true) && coll == Collective::AllReduce;
        let ring = if nvls {
            self.entry
                .busbw_gbps
                .get("all_gather")
                .map(|g| g * 1e9 * self.scale)
                .unwrap_or(plateau * 0.77)
        } else {
            plateau
        };
        let intra = match self.path.kind {
            PathKind::Nvlink => Hw::Nvlink,
            PathKind::PcieP2p | PathKind::PcieShm => Hw::Pci,
            PathKind::Net if self.nnodes > 1 && self.path.intra_nvlink => Hw::Nvlink,
            PathKind::Net if self.nnodes > 1 => Hw::Pci,
            PathKind::Net => Hw::Net,
        };
        Some(Link {
            intra,
            nranks: self.nranks.max(2),
            nnodes: self.nnodes.max(1),
            ring_busbw_bytes_per_s: ring,
            nvls_busbw_bytes_per_s: nvls.then_some(plateau),
            hop_latency_us: self.entry.hop_latency_us,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ChooseError {
    /// Nothing tells which GPUs or links the run used.
    NoFacts(String),
    /// The facts are known but no entry covers them.
    NoEntry(String),
}

impl std::fmt::Display for ChooseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChooseError::NoFacts(s) | ChooseError::NoEntry(s) => f.write_str(s),
        }
    }
}

/// The worst GPU-to-GPU link code among the GPUs in use, and the pair.
fn worst_link(topo: &Topology, nranks: usize) -> Option<(String, String)> {
    let gpus = topo.gpus();
    // With fewer ranks than GPUs the run used some of them; which ones is not known, so the
    // first n stand for them (CUDA's default order).
    let used = if nranks >= 2 && nranks < gpus.len() {
        &gpus[..nranks]
    } else {
        &gpus[..]
    };
    let mut worst: Option<(u8, String, String)> = None;
    for (i, a) in used.iter().enumerate() {
        for b in &used[i + 1..] {
            let Some(code) = topo.link(a, b) else {
                continue;
            };
            let r = crate::import::topo::distance(code);
            let nv_fewer =
                |w: &(u8, String, String)| r == 0 && w.0 == 0 && nv_count(code) < nv_count(&w.1);
            if worst.as_ref().is_none_or(|w| r > w.0 || nv_fewer(w)) {
                worst = Some((r, code.to_string(), format!("{a}-{b}")));
            }
        }
    }
    worst.map(|(_, code, pair)| (code, pair))
}

fn nv_count(code: &str) -> u32 {
    code.strip_prefix("NV")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Whether `topo -p2p` (when pasted) says P2P is not supported between GPUs in use.
fn p2p_matrix_says_no(topo: &Topology) -> Option<String> {
    topo.p2p
        .iter()
        .find(|(a, b, v)| {
            a != b && a.starts_with("GPU") && b.starts_with("GPU") && v != "OK" && v != "X"
        })
        .map(|(a, b, v)| format!("`nvidia-smi topo -p2p` says {v} for {a}-{b}"))
}

/// What the facts about a run tell before any path is decided.
struct Clues<'a> {
    s: &'a Situation,
    gpu: Option<&'a GpuModel>,
    /// The GPU name the run printed ("" when none).
    name: &'a str,
    /// An SXM part whose multi-GPU boards are NVSwitch systems.
    sxm: bool,
    /// The log shows NCCL's socket transport.
    log_socket: bool,
}

impl Clues<'_> {
    fn log_has(&self, transport: &str) -> bool {
        self.s
            .log_transports
            .iter()
            .any(|x| x.starts_with(transport))
    }
}

/// Decide the path from the facts.
fn path_of(s: &Situation, gpu: Option<&GpuModel>) -> Result<PathFacts, ChooseError> {
    let name = s.gpu_name.as_deref().unwrap_or("");
    let sxm = gpu.is_some_and(|g| g.sxm_nvswitch)
        && !contains_ci(name, "PCIE")
        && !contains_ci(name, "NVL");
    let log_socket = s
        .log_network
        .as_deref()
        .is_some_and(|n| contains_ci(n, "socket"))
        || s.log_transports.iter().any(|x| x.starts_with("NET/Socket"));
    let c = Clues {
        s,
        gpu,
        name,
        sxm,
        log_socket,
    };
    if s.nnodes > 1 {
        return Ok(network_path(&c));
    }
    let mut reasons = Vec::new();
    let pcie_gen = gpu.map(|g| g.pcie_gen);
    let worst = s
        .topology
        .as_ref()
        .and_then(|(src, t)| worst_link(t, s.nranks).map(|(code, pair)| (code, pair, src.clone())));
    let mut link = slowest_link(&c, worst.as_ref(), &mut reasons)?;
    let p2p_off = p2p_blocker(&c, &link, &mut reasons);
    let kind = if let Some(why) = p2p_off {
        reasons.push(why);
        PathKind::PcieShm
    } else if let Some(why) = beyond_p2p_reach(s, &link) {
        reasons.push(why);
        PathKind::PcieShm
    } else if link.starts_with("nv") {
        PathKind::Nvlink
    } else {
        PathKind::PcieP2p
    };
    if kind == PathKind::PcieShm && link.starts_with("nv") {
        // No NVLink P2P either: the ring goes through host memory across the host bridge.
        link = "phb".into();
    }
    let kind = if kind == PathKind::PcieShm && (s.flag_on("NCCL_SHM_DISABLE") || c.log_socket) {
        reasons.push(if s.flag_on("NCCL_SHM_DISABLE") {
            "NCCL_SHM_DISABLE=1 with no P2P leaves NCCL the network: TCP sockets".to_string()
        } else {
            "the log shows NCCL's socket transport inside the node".to_string()
        });
        link = "socket".into();
        PathKind::Net
    } else {
        kind
    };
    let nvls = kind == PathKind::Nvlink
        && link == "nvswitch"
        && gpu.is_some_and(|g| matches!(g.family.as_str(), "hopper" | "blackwell"))
        && s.set("NCCL_NVLS_ENABLE").is_none_or(|v| v.trim() != "0")
        && s.set("NCCL_ALGO")
            .is_none_or(|v| contains_ci(v, "nvls") && !v.contains('^'));
    if kind == PathKind::Nvlink
        && link == "nvswitch"
        && !nvls
        && gpu.is_some_and(|g| g.family == "hopper" || g.family == "blackwell")
    {
        reasons.push("NVLS off (NCCL_NVLS_ENABLE=0 or NCCL_ALGO): ring".into());
    }
    if matches!(kind, PathKind::PcieP2p | PathKind::PcieShm) && link != "sys" {
        match pcie_gen {
            Some(g) => reasons.push(format!("PCIe Gen{g} for this GPU")),
            None => reasons.push("PCIe generation not known: assumed Gen4".into()),
        }
    }
    Ok(PathFacts {
        kind,
        link,
        pcie_gen: pcie_gen.or(Some(4)),
        nvls,
        nics_per_node: None,
        nic_gbps: (kind == PathKind::Net).then_some(10.0),
        intra_nvlink: kind == PathKind::Nvlink,
        nv_links: worst
            .as_ref()
            .map(|(code, _, _)| nv_count(code))
            .filter(|&n| n > 0 && kind == PathKind::Nvlink),
        nvlink_gbps: gpu.and_then(|g| g.nvlink_gbps),
        reasons,
    })
}

/// Across nodes: which network NCCL uses, how many NICs a node has and how fast they are.
fn network_path(c: &Clues) -> PathFacts {
    let (s, gpu) = (c.s, c.gpu);
    let mut reasons = Vec::new();
    let topo_nics = s
        .topology
        .as_ref()
        .map(|(_, t)| t.devices.iter().filter(|d| d.starts_with("NIC")).count())
        .filter(|&n| n > 0);
    let log_nics = (!s.log_nics.is_empty()).then_some(s.log_nics.len());
    let roce = s.log_nics.iter().any(|d| d.ends_with("/RoCE"));
    let nics = topo_nics.or(log_nics);
    let ppn = (s.nranks / s.nnodes).max(1);
    let (link, gbps) = if s.flag_on("NCCL_IB_DISABLE") || c.log_socket {
        reasons.push(if c.log_socket {
            "the log shows NCCL's socket transport".to_string()
        } else {
            "NCCL_IB_DISABLE=1 puts NCCL on TCP sockets".to_string()
        });
        reasons.push("NIC speed not known: NCCL's own 10 Gb/s default assumed".into());
        ("socket", 10.0)
    } else if roce {
        reasons.push(format!(
            "{} nodes over RoCE (the log's NICs: {}; assumed 100 Gb/s)",
            s.nnodes,
            s.log_nics.join(" ")
        ));
        ("roce", 100.0)
    } else {
        let gbps = match gpu.map(|g| g.family.as_str()) {
            Some("hopper" | "blackwell") => 400.0,
            _ => 200.0,
        };
        reasons.push(format!(
            "{} nodes over InfiniBand (assumed {gbps:.0} Gb/s NICs for this GPU generation)",
            s.nnodes
        ));
        ("ib", gbps)
    };
    let nics_per_node = match (nics, link) {
        (Some(n), _) => {
            let from = if topo_nics.is_some() {
                "the topology"
            } else {
                "the log"
            };
            reasons.push(format!("{n} NICs per node in {from}"));
            n
        }
        (None, "ib" | "roce") => {
            reasons.push(format!(
                "NICs per node not known: assumed one per GPU ({ppn})"
            ));
            ppn
        }
        (None, _) => 1,
    };
    PathFacts {
        kind: PathKind::Net,
        link: link.into(),
        pcie_gen: gpu.map(|g| g.pcie_gen),
        nvls: false,
        nics_per_node: Some(nics_per_node),
        nic_gbps: Some(gbps),
        intra_nvlink: c.sxm,
        nv_links: None,
        nvlink_gbps: gpu.and_then(|g| g.nvlink_gbps),
        reasons,
    }
}

/// One node: the link class of the slowest GPU pair the ring must cross, or what the GPU
/// model says when there is no topology.
fn slowest_link(
    c: &Clues,
    worst: Option<&(String, String, String)>,
    reasons: &mut Vec<String>,
) -> Result<String, ChooseError> {
    let (s, name, sxm) = (c.s, c.name, c.sxm);
    let link = match worst {
    Some((code, pair, src)) => {
        reasons.push(format!("slowest GPU pair {pair} is {code} ({src})"));
        if code.starts_with("NV") {
            // An NVSwitch board shows every GPU pair as NV12 (A100) or NV18 (Hopper,
            // Blackwell): all of a GPU's links go to the switches. Fewer links per pair
            // (NV4 on 4-GPU HGX A100 boards, bridges) are direct NVLinks.
            let all_nv = s.topology.as_ref().is_some_and(|(_, t)| {
                let g = t.gpus();
                g.iter().enumerate().all(|(i, a)| {
                    g[i + 1..]
                        .iter()
                        .all(|b| t.link(a, b).is_some_and(|c| nv_count(c) >= 12))
                })
            });
            if all_nv && sxm {
                "nvswitch".to_string()
            } else {
                "nvlink".to_string()
            }
        } else {
            code.to_ascii_lowercase()
        }
    }
    None if sxm => {
        reasons.push(format!(
            "no topology; {name} is an SXM part, whose multi-GPU boards are NVSwitch systems"
        ));
        "nvswitch".to_string()
    }
    None if !name.is_empty() => {
        reasons.push(format!(
            "no topology: {name} assumed on PCIe under one host bridge (give --topo for the real links)"
        ));
        "phb".to_string()
    }
    None => {
        return Err(ChooseError::NoFacts(
            "the run names no GPU and carries no topology: give --topo FILE (a pasted `nvidia-smi topo -m`) or --profile NAME (ncclprobe baselines lists them)".into(),
        ))
    }
};

    Ok(link)
}

/// Why the GPUs cannot reach each other directly (P2P), if they cannot. NCCL_P2P_DISABLE also
/// turns NVLink off.
fn p2p_blocker(c: &Clues, link: &str, reasons: &mut Vec<String>) -> Option<String> {
    let (s, gpu, name) = (c.s, c.gpu, c.name);
    if s.flag_on("NCCL_P2P_DISABLE") {
        Some("NCCL_P2P_DISABLE=1 turns P2P off (NVLink and PCIe)".to_string())
    } else if !s.wsl2.is_empty() {
        Some(format!(
            "WSL2 has no CUDA IPC, so NCCL has no P2P ({})",
            s.wsl2[0]
        ))
    } else if let Some(no) = s.topology.as_ref().and_then(|(_, t)| p2p_matrix_says_no(t)) {
        (!link.starts_with("nv")).then_some(no)
    } else if !link.starts_with("nv") && gpu.is_some_and(|g| g.consumer) {
        if c.log_has("P2P") {
            reasons.push("the log shows P2P in use despite a GeForce card (patched driver)".into());
            None
        } else {
            Some(format!(
            "{name} is a GeForce/consumer card: no GPUDirect P2P over PCIe with the stock driver"
        ))
        }
    } else if c.log_has("SHM") && !c.log_has("P2P") && !link.starts_with("nv") {
        Some("the log shows SHM, not P2P, between the GPUs".to_string())
    } else {
        None
    }
}

/// Why `link` is beyond NCCL's P2P reach, if it is. The reach is PXB unless NCCL_P2P_LEVEL
/// moves it (LOC, NVL, PIX, PXB, PHB, SYS; the old integers 0-5 mean the same; paths.cc,
/// env.rst).
fn beyond_p2p_reach(s: &Situation, link: &str) -> Option<String> {
    let level = s
        .set("NCCL_P2P_LEVEL")
        .map(|v| v.trim().to_ascii_uppercase());
    let reach = match level.as_deref() {
        Some("LOC" | "0") => 0,
        Some("NVL" | "1") => 1,
        Some("PIX" | "2") => 2,
        Some("PHB" | "4") => 4,
        Some("SYS" | "5") => 5,
        _ => 3,
    };
    let link_level = match link {
        l if l.starts_with("nv") => 1,
        "pix" => 2,
        "pxb" => 3,
        "phb" | "node" => 4,
        _ => 5,
    };
    (link_level > reach).then(|| {
        format!(
            "{} is beyond NCCL's P2P reach ({}): host memory (SHM)",
            link.to_ascii_uppercase(),
            level
                .as_deref()
                .map_or("PXB by default".to_string(), |l| format!(
                    "NCCL_P2P_LEVEL={l}"
                ))
        )
    })
}

/// How well an entry fits; `None` when it does not apply at all.
fn fit(e: &Entry, s: &Situation, p: &PathFacts) -> Option<u32> {
    let name = s.gpu_name.as_deref().unwrap_or("");
    let applies = e.path == p.kind
        && e.links.contains(&p.link)
        && (e.gpus.is_empty() || e.matches_gpu(name))
        && e.covers_ranks(s.nranks.max(2))
        && e.covers_nodes(s.nnodes.max(1))
        && e.pcie_gen.is_none_or(|g| p.pcie_gen == Some(g))
        && e.nvls.is_none_or(|v| v == p.nvls)
        && (e.wsl2 != Some(true) || !s.wsl2.is_empty())
        && e.nv_links
            .is_none_or(|[lo, hi]| p.nv_links.is_some_and(|n| (lo..=hi).contains(&n)))
        && (!e.per_nvlink || (p.nv_links.is_some() && p.nvlink_gbps.is_some()))
        && (e.scales_with_line_rate || !e.per_nic || e.nic_gbps == p.nic_gbps);
    applies.then(|| {
        let mut score = 0;
        if !e.gpus.is_empty() {
            score += 4;
        }
        if e.wsl2 == Some(true) {
            score += 2;
        }
        if e.nvls.is_some() || e.nv_links.is_some() {
            score += 1;
        }
        score
    })
}

fn choose_once(table: &Table, s: &Situation) -> Result<Choice, ChooseError> {
    let gpu = s.gpu_name.as_deref().and_then(|n| table.gpu_model(n));
    let path = path_of(s, gpu)?;
    let mut best: Option<(u32, &Entry)> = None;
    for e in &table.entries {
        if let Some(score) = fit(e, s, &path) {
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, e));
            }
        }
    }
    let Some((_, entry)) = best else {
        return Err(ChooseError::NoEntry(format!(
            "no shipped expectation covers {} ranks on {} node(s) over {} ({}){}: give --profile NAME (ncclprobe baselines lists them)",
            s.nranks,
            s.nnodes,
            path.link,
            path.kind.name(),
            s.gpu_name.as_deref().map(|g| format!(", {g}")).unwrap_or_default()
        )));
    };
    let scale = match (entry.per_nic, path.nics_per_node) {
        (true, nics) => {
            let nics = nics.unwrap_or(1) as f64;
            let rate = match (entry.scales_with_line_rate, path.nic_gbps, entry.nic_gbps) {
                (true, Some(have), Some(base)) => have / base,
                _ => 1.0,
            };
            nics * rate
        }
        (false, _) if entry.per_nvlink => {
            path.nv_links.unwrap_or(1) as f64 * path.nvlink_gbps.unwrap_or(20.0)
        }
        (false, _) => 1.0,
    };
    let mut path = path;
    if entry.per_nvlink {
        path.reasons.push(format!(
            "{} NVLinks x {} GB/s (NCCL's constant for this GPU)",
            path.nv_links.unwrap_or(1),
            path.nvlink_gbps.unwrap_or(20.0)
        ));
    }
    let why = format!(
        "{} ({}): {}",
        entry.id,
        entry.provenance.name(),
        path.reasons.join("; ")
    );
    Ok(Choice {
        entry: entry.clone(),
        why,
        path,
        scale,
        nranks: s.nranks,
        nnodes: s.nnodes,
        overrides: Vec::new(),
        without_overrides: None,
    })
}

/// The expectation for a situation, and, when overrides moved the path, the one without them.
pub fn choose(table: &Table, s: &Situation) -> Result<Choice, ChooseError> {
    if s.nranks < 2 {
        return Err(ChooseError::NoFacts(one_rank()));
    }
    let mut choice = choose_once(table, s)?;
    // WSL2 is not an override a user can drop; it stays in both situations.
    let overrides: Vec<String> = OVERRIDES
        .iter()
        .filter_map(|k| s.env.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    if !overrides.is_empty() || !s.log_transports.is_empty() {
        let free = s.without_overrides();
        if let Ok(alt) = choose_once(table, &free) {
            if alt.entry.id != choice.entry.id {
                choice.without_overrides = Some(Box::new(alt));
            }
        }
    }
    if !overrides.is_empty() {
        choice
            .why
            .push_str(&format!("; in force: {}", overrides.join(" ")));
    }
    choice.overrides = overrides;
    Ok(choice)
}

fn one_rank() -> String {
    "the run has one rank: no data crossed a link between GPUs, so no interconnect expectation applies (its busbw is 0 by nccl-tests' definition)".into()
}

/// An entry named by the user (`--profile`), applied to the run's rank and node counts.
pub fn named(table: &Table, id: &str, s: &Situation) -> Result<Choice, String> {
    let entry = table.get(id).ok_or_else(|| {
        format!(
            "unknown profile `{id}`; valid names: {}",
            table.ids().join(", ")
        )
    })?;
    if s.nranks < 2 {
        return Err(one_rank());
    }
    let gpu = s.gpu_name.as_deref().and_then(|n| table.gpu_model(n));
    let nics = if entry.per_nic {
        Some(if s.nnodes > 1 {
            (s.nranks / s.nnodes).max(1)
        } else {
            1
        })
    } else {
        None
    };
    let path = PathFacts {
        kind: entry.path,
        link: entry.links[0].clone(),
        pcie_gen: entry.pcie_gen.or(gpu.map(|g| g.pcie_gen)),
        nvls: entry.nvls == Some(true),
        nics_per_node: nics,
        nic_gbps: entry.nic_gbps,
        intra_nvlink: entry.path == PathKind::Nvlink || gpu.is_some_and(|g| g.sxm_nvswitch),
        nv_links: None,
        nvlink_gbps: gpu.and_then(|g| g.nvlink_gbps),
        reasons: vec!["given with --profile".into()],
    };
    Ok(Choice {
        entry: entry.clone(),
        why: format!(
            "{} ({}): given with --profile",
            entry.id,
            entry.provenance.name()
        ),
        path,
        scale: nics.unwrap_or(1) as f64,
        nranks: s.nranks,
        nnodes: s.nnodes,
        overrides: Vec::new(),
        without_overrides: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::shipped;

    fn topo(text: &str) -> Option<(String, Topology)> {
        Some(("t".into(), crate::import::topo::parse_str(text).unwrap()))
    }

    fn situation(gpu: &str, nranks: usize, t: Option<(String, Topology)>) -> Situation {
        Situation {
            nranks,
            nnodes: 1,
            gpu_name: (!gpu.is_empty()).then(|| gpu.to_string()),
            topology: t,
            ..Default::default()
        }
    }

    const NV_PAIRS_SYS: &str = "        GPU0    GPU1    GPU2    GPU3\nGPU0     X      NV12    SYS     SYS\nGPU1    NV12     X      SYS     SYS\nGPU2    SYS     SYS      X      NV12\nGPU3    SYS     SYS     NV12     X\n";

    #[test]
    fn the_slowest_pair_decides() {
        // A100 PCIe cards bridged in pairs, the pairs on different sockets: the ring crosses SYS.
        let s = situation("NVIDIA A100 80GB PCIe", 4, topo(NV_PAIRS_SYS));
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(c.entry.id, "sys-cross-socket-shm", "{}", c.why);
        assert!(c.why.contains("GPU0-GPU2 is SYS"), "{}", c.why);
        // Two ranks use the first pair only: NVLink.
        let two = choose(
            shipped(),
            &situation("NVIDIA A100 80GB PCIe", 2, topo(NV_PAIRS_SYS)),
        )
        .unwrap();
        assert_eq!(two.entry.id, "a100-nvlink-pair", "{}", two.why);
    }

    #[test]
    fn overrides_move_the_path_and_the_free_path_is_reported() {
        let nv8 = {
            let mut t = String::from("\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\n");
            for i in 0..8 {
                t.push_str(&format!("GPU{i}"));
                for j in 0..8 {
                    t.push_str(if i == j { "\t X " } else { "\tNV18" });
                }
                t.push('\n');
            }
            t
        };
        let mut s = situation("NVIDIA H100 80GB HBM3", 8, topo(&nv8));
        assert_eq!(
            choose(shipped(), &s).unwrap().entry.id,
            "h100-sxm-nvswitch-8"
        );
        s.env.insert("NCCL_NVLS_ENABLE".into(), "0".into());
        let ring = choose(shipped(), &s).unwrap();
        assert_eq!(ring.entry.id, "h100-sxm-nvswitch-ring");
        assert_eq!(
            ring.without_overrides.as_ref().unwrap().entry.id,
            "h100-sxm-nvswitch-8"
        );
        s.env.clear();
        s.env.insert("NCCL_P2P_DISABLE".into(), "1".into());
        let shm = choose(shipped(), &s).unwrap();
        assert_eq!(shm.path.kind, PathKind::PcieShm, "{}", shm.why);
        assert!(shm.why.contains("NCCL_P2P_DISABLE=1"));
    }

    #[test]
    fn p2p_level_raises_nccl_s_reach_through_the_host_bridge() {
        let phb = "        GPU0    GPU1\nGPU0     X      PHB\nGPU1    PHB      X\n";
        let mut s = situation("NVIDIA RTX A6000", 2, topo(phb));
        assert_eq!(choose(shipped(), &s).unwrap().entry.id, "pcie-gen4-x16-shm");
        s.env.insert("NCCL_P2P_LEVEL".into(), "SYS".into());
        assert_eq!(
            choose(shipped(), &s).unwrap().entry.id,
            "pcie-gen4-x16-p2p-hostbridge"
        );
    }

    #[test]
    fn a_log_s_socket_transport_and_nodes_choose_the_network() {
        let mut s = situation("NVIDIA GeForce RTX 3090", 2, None);
        s.log_transports = vec!["NET/Socket".into()];
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(c.entry.id, "socket-tcp", "{}", c.why);
        assert!(c.why.contains("socket transport"));
        let mut multi = situation("NVIDIA A100-SXM4-80GB", 16, None);
        multi.nnodes = 2;
        let ib = choose(shipped(), &multi).unwrap();
        assert_eq!((ib.entry.id.as_str(), ib.scale), ("ib-hdr-200", 8.0));
        multi.env.insert("NCCL_IB_DISABLE".into(), "1".into());
        let tcp = choose(shipped(), &multi).unwrap();
        assert_eq!(tcp.entry.id, "socket-tcp");
        assert_eq!(tcp.without_overrides.unwrap().entry.id, "ib-hdr-200");
    }

    #[test]
    fn direct_nvlinks_are_counted_and_switch_boards_are_told_apart() {
        // Leonardo's 4-GPU HGX A100: NV4 between every pair, no NVSwitch.
        let nv4 = "        GPU0    GPU1    GPU2    GPU3\nGPU0     X      NV4     NV4     NV4\nGPU1    NV4      X      NV4     NV4\nGPU2    NV4     NV4      X      NV4\nGPU3    NV4     NV4     NV4      X\n";
        let c = choose(shipped(), &situation("NVIDIA A100-SXM-64GB", 4, topo(nv4))).unwrap();
        assert_eq!(c.entry.id, "nvlink-direct", "{}", c.why);
        let (plateau, _) = c.plateau_bytes_per_s(Collective::AllReduce).unwrap();
        assert!((plateau / 1e9 - 74.4).abs() < 0.01, "{plateau}");
        // The same GPUs on an NVSwitch board show NV12 between every pair.
        let nv12 = nv4.replace("NV4", "NV12");
        let c = choose(
            shipped(),
            &situation("NVIDIA A100-SXM4-80GB", 4, topo(&nv12)),
        )
        .unwrap();
        assert_eq!(c.entry.id, "a100-sxm4-nvswitch-8", "{}", c.why);
    }

    #[test]
    fn the_log_s_nics_tell_roce_and_how_many() {
        let mut s = situation("NVIDIA A100-SXM4-40GB", 16, None);
        s.nnodes = 2;
        s.log_nics = vec!["mlx5_0:1/RoCE".into(), "mlx5_1:1/RoCE".into()];
        let c = choose(shipped(), &s).unwrap();
        assert_eq!(
            (c.entry.id.as_str(), c.scale),
            ("roce-100", 2.0),
            "{}",
            c.why
        );
        assert!(c.why.contains("2 NICs per node in the log"), "{}", c.why);
        let mut log = crate::import::nccl_log::LogFacts::default();
        let line = "lrdn2296:4063850:4063871 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:10.0.0.1<0>";
        let input = crate::import::text::Input::from_reader(
            "log",
            Box::new(std::io::Cursor::new(line.as_bytes().to_vec())),
        )
        .unwrap();
        input.lines("a log", |l| log.feed("log", &l)).unwrap();
        assert_eq!(log.net_devices.len(), 4);
        assert_eq!(log.net_devices[0], "mlx5_0:1/IB");
    }

    #[test]
    fn nothing_known_is_an_error_that_says_what_to_give() {
        let e = choose(shipped(), &situation("", 2, None)).unwrap_err();
        assert!(e.to_string().contains("--topo") && e.to_string().contains("--profile"));
        let e = named(shipped(), "no-such", &situation("", 2, None)).unwrap_err();
        assert!(e.contains("valid names") && e.contains("pcie-gen4-x16-p2p"));
    }
}
