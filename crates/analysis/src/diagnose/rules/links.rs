//! The links between GPUs, NICs and CPUs: NVLink state, P2P, NCCL's transports, the PCIe
//! tree (width, speed, ACS, IOMMU) and the topology matrix.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::Hit;
use crate::diagnose::finding::{ev, value_ev, Evidence, Severity};
use crate::import::topo::Topology;
use crate::live::{NvmlGpu, PciGpu};
use std::collections::BTreeMap;

/// GPUs of one model with fewer active links than their siblings have links down.
pub fn nvlink_down(inp: &Inputs) -> Vec<Hit> {
    let Some(Ok(gpus)) = inp.live.as_ref().map(|l| &l.nvml) else {
        return Vec::new();
    };
    let mut by_model: BTreeMap<&str, Vec<&NvmlGpu>> = BTreeMap::new();
    for g in gpus {
        by_model.entry(g.name.as_str()).or_default().push(g);
    }
    let mut down = Vec::new();
    for same in by_model.values() {
        let most = same.iter().map(|g| g.nvlinks_active).max().unwrap_or(0);
        for g in same.iter().filter(|g| g.nvlinks_active < most) {
            down.push(value_ev(format!(
                "GPU {} {} ({}): {} active NVLinks, {most} on other GPUs of this model",
                g.index, g.name, g.bus_id, g.nvlinks_active
            )));
        }
    }
    if down.is_empty() {
        return Vec::new();
    }
    vec![Hit::new("NVLinks are down on some GPUs", down)]
}

pub fn p2p_unavailable(inp: &Inputs) -> Vec<Hit> {
    let mut p2p: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.p2p_unavailable.iter().cloned())
        .collect();
    for (file, t) in &inp.topos {
        let source = if file == "(live)" {
            "NVML P2P read status"
        } else {
            "topo -p2p"
        };
        for (a, b, code) in t.p2p.iter().filter(|(_, _, c)| c != "OK") {
            p2p.push(ev(file, 0, format!("{source}: {a} -> {b} {code}")));
        }
    }
    if p2p.is_empty() {
        return Vec::new();
    }
    p2p.truncate(10);
    vec![Hit::new(
        "GPU peer-to-peer access is unavailable between the GPUs",
        p2p,
    )]
}

pub fn socket_intranode(inp: &Inputs) -> Vec<Hit> {
    match inp.transports().remove("NET/Socket") {
        Some(sock) if !inp.multi_node() => vec![Hit::new(
            "NCCL uses TCP sockets between GPUs of one machine",
            sock,
        )],
        _ => Vec::new(),
    }
}

pub fn socket_internode(inp: &Inputs) -> Vec<Hit> {
    let Some(mut evidence) = inp.transports().remove("NET/Socket") else {
        return Vec::new();
    };
    if !inp.multi_node() {
        return Vec::new();
    }
    evidence.extend(inp.cross_node().into_iter().take(2));
    evidence.extend(inp.logs.iter().flat_map(|l| {
        l.warnings
            .iter()
            .filter(|w| w.text.contains("ibverbs") || w.text.contains("IB"))
            .take(2)
            .cloned()
    }));
    vec![Hit::new("NCCL uses TCP sockets between hosts", evidence)]
}

pub fn gdr_disabled(inp: &Inputs) -> Vec<Hit> {
    let off: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.gdr_disabled.iter().cloned())
        .take(4)
        .collect();
    if off.is_empty() {
        return Vec::new();
    }
    vec![Hit::new(
        "GPUDirect RDMA is disabled for some GPU/NIC pairs",
        off,
    )]
}

/// GPUs whose nearest NIC is beyond their PCIe switch. GPUDirect RDMA is used by default only
/// for a NIC within the GPU's PCIe switch (NCCL_NET_GDR_LEVEL defaults to PXB).
fn far_nics(file: &str, t: &Topology) -> Vec<Evidence> {
    let nics: Vec<&String> = t.devices.iter().filter(|d| !d.starts_with("GPU")).collect();
    let mut far = Vec::new();
    for g in t.gpus() {
        let nearest = nics
            .iter()
            .filter_map(|n| {
                t.link(g, n)
                    .map(|code| (crate::import::topo::distance(code), code, *n))
            })
            .min_by_key(|(d, _, _)| *d);
        if let Some((_, code, nic)) = nearest.filter(|(d, _, _)| *d >= 3) {
            let name = t
                .nic_names
                .get(nic.as_str())
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            far.push(ev(
                file,
                0,
                format!("{g}: nearest NIC {nic}{name} is {code}"),
            ));
        }
    }
    far
}

pub fn nic_far_from_gpu(inp: &Inputs) -> Vec<Hit> {
    inp.topos
        .iter()
        .filter_map(|(file, t)| {
            let mut far = far_nics(file, t);
            far.truncate(8);
            (!far.is_empty()).then(|| {
                Hit::new(
                    format!("Some GPUs have no NIC within their PCIe switch ({file})"),
                    far,
                )
            })
        })
        .collect()
}

pub fn cross_numa(inp: &Inputs) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (file, t) in &inp.topos {
        let gpus = t.gpus();
        let mut cross = Vec::new();
        for (i, a) in gpus.iter().enumerate() {
            for b in &gpus[i + 1..] {
                if t.link(a, b) == Some("SYS") {
                    cross.push(ev(file, 0, format!("{a} <-> {b}: SYS")));
                }
            }
        }
        if !cross.is_empty() {
            cross.truncate(8);
            hits.push(Hit::new(
                format!("GPU pairs cross the CPU interconnect between NUMA nodes ({file})"),
                cross,
            ));
        }
    }
    hits
}

/// Narrow links are a warning; a low speed (GPUs lower it when idle) only information.
pub fn pcie_downgraded(inp: &Inputs) -> Vec<Hit> {
    let Some(l) = &inp.live else {
        return Vec::new();
    };
    let mut down = Vec::new();
    let mut severity = Severity::Info;
    for g in &l.sysfs_gpus {
        if let (Some(c), Some(m)) = (g.current_link_width, g.max_link_width) {
            if c < m {
                severity = Severity::Warning;
                down.push(value_ev(format!("{}: PCIe width x{c} of x{m}", g.address)));
            }
        }
        if let (Some(c), Some(m)) = (&g.current_link_speed, &g.max_link_speed) {
            if c != m {
                down.push(value_ev(format!(
                    "{}: PCIe speed {c} of {m} (GPUs lower the speed when idle: check under load)",
                    g.address
                )));
            }
        }
    }
    for g in l.nvml.iter().flatten() {
        if let Some((c, m)) = g.pcie_width.filter(|(c, m)| c < m) {
            severity = Severity::Warning;
            down.push(value_ev(format!(
                "GPU {} {} ({}): PCIe width x{c} of x{m} (NVML)",
                g.index, g.name, g.bus_id
            )));
        }
        if let Some((c, m)) = g.pcie_gen.filter(|(c, m)| c < m) {
            down.push(value_ev(format!(
                "GPU {} {} ({}): PCIe gen {c} of {m} (NVML; idle GPUs lower it: check under load)",
                g.index, g.name, g.bus_id
            )));
        }
    }
    if down.is_empty() {
        return Vec::new();
    }
    vec![Hit::new("A GPU's PCIe link runs below its maximum", down).with_severity(severity)]
}

pub fn acs_enabled(inp: &Inputs) -> Vec<Hit> {
    let Some(l) = &inp.live else {
        return Vec::new();
    };
    let mut redirecting: BTreeMap<&str, (u16, Vec<&str>)> = BTreeMap::new();
    for g in &l.sysfs_gpus {
        for (bridge, ctrl) in &g.acs_redirecting {
            redirecting
                .entry(bridge.as_str())
                .or_insert((*ctrl, Vec::new()))
                .1
                .push(g.address.as_str());
        }
    }
    if l.sysfs_gpus.len() < 2 || redirecting.is_empty() {
        return Vec::new();
    }
    let evidence = redirecting
        .iter()
        .map(|(bridge, (ctrl, gpus))| {
            value_ev(format!(
                "bridge {bridge} above GPU {}: ACS control {ctrl:#06x} (P2P request/completion redirect on)",
                gpus.join(", ")
            ))
        })
        .collect();
    vec![Hit::new(
        "PCIe ACS redirects GPU peer-to-peer traffic to the root complex",
        evidence,
    )]
}

pub fn iommu_translated(inp: &Inputs) -> Vec<Hit> {
    let Some(l) = &inp.live else {
        return Vec::new();
    };
    let translated: Vec<&PciGpu> = l
        .sysfs_gpus
        .iter()
        .filter(|g| matches!(g.iommu_type.as_deref(), Some("DMA" | "DMA-FQ")))
        .collect();
    if translated.len() < 2 {
        return Vec::new();
    }
    let mut evidence: Vec<Evidence> = translated
        .iter()
        .map(|g| {
            value_ev(format!(
                "{}: IOMMU group {}, type {}",
                g.address,
                g.iommu_group.as_deref().unwrap_or("?"),
                g.iommu_type.as_deref().unwrap_or("?")
            ))
        })
        .collect();
    if !l.iommu_cmdline.is_empty() {
        evidence.push(value_ev(format!(
            "kernel command line: {}",
            l.iommu_cmdline.join(" ")
        )));
    }
    vec![Hit::new(
        "The IOMMU translates the GPUs' DMA (not passthrough)",
        evidence,
    )]
}
