//! The path NCCL takes on a run, told from the facts the run carries (its topology or one
//! given with `--topo`, the GPU model, rank and node counts, the `NCCL_*` overrides, WSL2, the
//! transports of an `NCCL_DEBUG=INFO` log). The slowest GPU pair the ring must cross decides.

use super::situation::Situation;
use super::table::{contains_ci, GpuModel, PathKind};
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

/// The topology's GPUs the run's ranks used, and how that was told. By PCI address when every
/// rank printed one and each is a row of the topology: CUDA numbers GPUs as CUDA_VISIBLE_DEVICES
/// and CUDA_DEVICE_ORDER say, NVML and `nvidia-smi topo -m` by PCI bus, so rank i is not GPU i
/// in general. Otherwise the first n stand for them (CUDA's order when nothing reorders it).
fn gpus_in_use<'t>(topo: &'t Topology, s: &Situation) -> (Vec<&'t str>, Option<String>) {
    let gpus = topo.gpus();
    let nranks = s.nranks;
    let by_address: Option<Vec<&str>> = (!s.rank_gpus.is_empty())
        .then(|| {
            s.rank_gpus
                .iter()
                .map(|a| a.as_ref().and_then(|a| topo.gpu_at(a)))
                .collect()
        })
        .flatten();
    if let Some(mut used) = by_address {
        let mut seen = std::collections::BTreeSet::new();
        used.retain(|g| seen.insert(*g));
        let why = format!("the ranks ran on {} (by PCI address)", used.join(", "));
        return (used, Some(why));
    }
    if nranks >= 2 && nranks < gpus.len() {
        let used = gpus[..nranks].to_vec();
        let why = format!(
            "which {nranks} of the {} GPUs the ranks used is not known (no PCI address in the run): {} stand for them",
            gpus.len(),
            used.join(", ")
        );
        return (used, Some(why));
    }
    (gpus, None)
}

/// The worst GPU-to-GPU link code among the GPUs in use, and the pair.
fn worst_link(topo: &Topology, used: &[&str]) -> Option<(String, String)> {
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
pub(super) fn path_of(s: &Situation, gpu: Option<&GpuModel>) -> Result<PathFacts, ChooseError> {
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
    let worst = s.topology.as_ref().and_then(|(src, t)| {
        let (used, how) = gpus_in_use(t, s);
        reasons.extend(how);
        worst_link(t, &used).map(|(code, pair)| (code, pair, src.clone()))
    });
    let mut link = slowest_link(&c, worst.as_ref(), &mut reasons)?;
    let p2p_off = p2p_blocker(&c, &link, &mut reasons);
    let kind = if let Some(why) = p2p_off {
        reasons.push(why);
        PathKind::PcieShm
    } else if let Some(why) = beyond_p2p_reach(s, &link) {
        reasons.push(why);
        PathKind::PcieShm
    } else if gpu_fabric(&link) {
        PathKind::Nvlink
    } else {
        PathKind::PcieP2p
    };
    if kind == PathKind::PcieShm && gpu_fabric(&link) {
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

/// Links between GPUs that are not PCIe: NVLink (`nvswitch`, `nvlink`, `nv12`) and xGMI.
fn gpu_fabric(link: &str) -> bool {
    link.starts_with("nv") || link == "xgmi"
}

/// Across nodes: which network NCCL uses, how many NICs a node has and how fast they are.
fn network_path(c: &Clues) -> PathFacts {
    let (s, gpu) = (c.s, c.gpu);
    if let Some(p) = mnnvl_path(s, gpu) {
        return p;
    }
    let mut reasons = Vec::new();
    let topo_nics = s
        .topology
        .as_ref()
        .map(|(_, t)| t.devices.iter().filter(|d| d.starts_with("NIC")).count())
        .filter(|&n| n > 0);
    let log_nics = (!s.log_nics.is_empty()).then_some(s.log_nics.len());
    let roce = s.log_nics.iter().any(|d| d.ends_with("/RoCE"));
    let nics = s.stated.nics_per_node.or(topo_nics).or(log_nics);
    let ppn = (s.nranks / s.nnodes).max(1);
    let stated = s.stated.nic_kind.zip(s.stated.nic_gbps);
    let (link, gbps) = if let Some((kind, gbps)) = stated {
        reasons.push(format!(
            "{} nodes over {gbps:.0} Gb/s {} (stated)",
            s.nnodes,
            kind.name()
        ));
        (kind.link(), gbps)
    } else if s.flag_on("NCCL_IB_DISABLE") || c.log_socket {
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
            let from = if s.stated.nics_per_node.is_some() {
                "the statement"
            } else if topo_nics.is_some() {
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

/// The design whose NVLink domains span nodes that a run across nodes ran on, and whether it
/// was stated (else assumed: the design its GPU comes in); `None` when NCCL_MNNVL_ENABLE=0.
pub(super) fn nvlink_domains(s: &Situation) -> Option<(&'static super::designs::Design, bool)> {
    use super::designs;
    if s.nnodes < 2 || s.set("NCCL_MNNVL_ENABLE").is_some_and(|v| v.trim() == "0") {
        return None;
    }
    let ppn = s.nranks.div_ceil(s.nnodes).max(1);
    let (design, stated) = match s.stated.design.as_deref().and_then(designs::by_id) {
        Some(d) => (d, true),
        // Stated NICs, or a log whose channels cross nodes over the network inside what would
        // be one domain, say the nodes are not trays of one (GB200 NVL4 nodes, trays without
        // an IMEX channel).
        None if s.stated.nic_kind.is_some() => return None,
        None => {
            let d = designs::usual_for(s.gpu_name.as_deref()?, ppn)?;
            let net = s.log_transports.iter().any(|t| t.starts_with("NET/"));
            if net && s.nranks <= d.domain {
                return None;
            }
            (d, false)
        }
    };
    (design.domain > design.gpus).then_some((design, stated))
}

/// A run whose nodes are trays of NVLink domains larger than a node (GB200/GB300 NVL72): the
/// domain the statement's design gives, or the one the GPU's usual design has. Inside one domain
/// NCCL crosses trays over NVLink (MNNVL), not the NICs; across domains the NICs join them.
fn mnnvl_path(s: &Situation, gpu: Option<&GpuModel>) -> Option<PathFacts> {
    let (design, stated) = nvlink_domains(s)?;
    let how = if stated {
        "stated"
    } else {
        "assumed: the design this GPU comes in"
    };
    let ppn = s.nranks.div_ceil(s.nnodes).max(1);
    let nvls = s.set("NCCL_NVLS_ENABLE").is_none_or(|v| v.trim() != "0");
    let domains = s.nranks.div_ceil(design.domain);
    let mut reasons = vec![format!(
        "{} nodes of {ppn} GPUs in {} ({how}): NVLink domains of {} GPUs",
        s.nnodes, design.title, design.domain
    )];
    let within = domains <= 1;
    if within {
        reasons.push(format!(
            "all {} ranks in one domain: multi-node NVLink (MNNVL), not the NICs{}",
            s.nranks,
            if nvls { ", NVLS" } else { ", NVLS off" }
        ));
        if !stated {
            reasons.push(format!(
                "if MNNVL is not in use (no IMEX channel or ComputeDomain, trays of different racks, NCCL_MNNVL_ENABLE=0) the trays talk over their {} x {:.0}G NICs, about {:.0} GB/s: state the NICs with --hardware to judge that",
                design.nics,
                design.nic_gbps,
                design.nics as f64 * design.nic_gbps * 0.12
            ));
        }
    } else {
        reasons.push(format!(
            "{domains} domains joined by {} x {:.0}G NICs per node; NCCL reduces inside each domain first",
            design.nics, design.nic_gbps
        ));
    }
    Some(PathFacts {
        kind: if within {
            PathKind::Nvlink
        } else {
            PathKind::Net
        },
        link: "mnnvl".into(),
        pcie_gen: gpu.map(|g| g.pcie_gen),
        nvls: within && nvls,
        nics_per_node: (!within).then_some(design.nics),
        nic_gbps: (!within).then_some(design.nic_gbps),
        intra_nvlink: true,
        nv_links: None,
        nvlink_gbps: gpu.and_then(|g| g.nvlink_gbps),
        reasons,
    })
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
    None if s.stated.intra.is_some() => {
        use super::hardware::Intra;
        let (link, words) = match s.stated.intra {
            Some(Intra::Nvswitch) => ("nvswitch", "NVSwitch"),
            Some(Intra::Nvlink) => ("nvlink", "NVLink"),
            Some(Intra::Xgmi) => ("xgmi", "xGMI"),
            _ => ("phb", "PCIe, taken as under one host bridge"),
        };
        reasons.push(format!("no topology; {words} inside the node (stated)"));
        link.to_string()
    }
    None if sxm => {
        reasons.push(format!(
            "no topology; {name} is an SXM part, whose multi-GPU boards are NVSwitch systems"
        ));
        "nvswitch".to_string()
    }
    None if c.gpu.is_some_and(|g| g.xgmi) => {
        reasons.push(format!(
            "no topology; {name} OAM boards link every GPU to every other by xGMI"
        ));
        "xgmi".to_string()
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
        (!gpu_fabric(link)).then_some(no)
    } else if !gpu_fabric(link) && gpu.is_some_and(|g| g.consumer) {
        if c.log_has("P2P") {
            reasons.push("the log shows P2P in use despite a GeForce card (patched driver)".into());
            None
        } else {
            Some(format!(
            "{name} is a GeForce/consumer card: no GPUDirect P2P over PCIe with the stock driver"
        ))
        }
    } else if c.log_has("SHM") && !c.log_has("P2P") && !gpu_fabric(link) {
        Some("the log shows SHM, not P2P, between the GPUs".to_string())
    } else {
        None
    }
}

/// Why `link` is beyond NCCL's P2P reach, if it is. The reach is PXB unless NCCL_P2P_LEVEL
/// moves it: a name (LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS) or one of the old integers, which
/// paths.cc maps through `levelsOldToNew` (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and up SYS).
fn beyond_p2p_reach(s: &Situation, link: &str) -> Option<String> {
    let level = s
        .set("NCCL_P2P_LEVEL")
        .map(|v| v.trim().to_ascii_uppercase());
    let reach = match level.as_deref() {
        Some("LOC" | "0") => 0,
        Some("NVL" | "NVB") => 1,
        Some("PIX" | "1") => 2,
        Some("PHB" | "3") => 4,
        Some("SYS") => 5,
        Some(n) if n.parse::<u32>().is_ok_and(|n| n >= 4) => 5,
        _ => 3,
    };
    let link_level = match link {
        l if gpu_fabric(l) => 1,
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
