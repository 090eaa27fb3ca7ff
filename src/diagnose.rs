//! Diagnosis: facts gathered from files and the live machine, and rules that turn them into
//! findings — each with a stable id, a severity, evidence (values or lines with file and line),
//! an explanation, a fix, and the source the rule rests on.

use crate::coll::{Collective, Placement};
use crate::import::nccl_log::{Evidence, LogFacts};
use crate::import::smi::Smi;
use crate::import::topo::Topology;
use crate::live;
use crate::model::RunRecord;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub title: String,
    pub evidence: Vec<Evidence>,
    pub explanation: String,
    pub fix: String,
    pub source: String,
}

/// Everything diagnosis can look at.
#[derive(Debug, Default)]
pub struct Inputs {
    pub logs: Vec<LogFacts>,
    pub runs: Vec<RunRecord>,
    pub topos: Vec<(String, Topology)>,
    pub smis: Vec<(String, Smi)>,
    pub live: Option<live::Facts>,
    /// (file, kind) of every input read.
    pub files: Vec<(String, String)>,
}

fn ev(file: &str, line: usize, text: impl Into<String>) -> Evidence {
    Evidence {
        file: file.to_string(),
        line,
        text: text.into(),
    }
}

fn value_ev(what: impl Into<String>) -> Evidence {
    ev("(live)", 0, what)
}

const SRC_TROUBLESHOOTING: &str = "NCCL user guide, troubleshooting and env (docs/userguide env.rst); reference/anchors.md §4.2-§4.5, §6.5";

impl Inputs {
    /// NCCL_* variables from the live environment and from "set by environment" log lines.
    fn env(&self) -> BTreeMap<String, (String, Evidence)> {
        let mut env = BTreeMap::new();
        if let Some(l) = &self.live {
            for (k, v) in &l.env {
                env.insert(
                    k.clone(),
                    (v.clone(), value_ev(format!("{k}={v} in this environment"))),
                );
            }
        }
        for log in &self.logs {
            for (k, (v, e)) in &log.env {
                env.insert(k.clone(), (v.clone(), e.clone()));
            }
        }
        env
    }

    fn hosts(&self) -> BTreeSet<String> {
        let mut hosts: BTreeSet<String> = self
            .logs
            .iter()
            .flat_map(|l| l.hosts.iter().cloned())
            .collect();
        for r in &self.runs {
            hosts.extend(r.backend.hosts.iter().cloned());
        }
        hosts
    }

    fn nranks(&self) -> Option<usize> {
        self.logs.iter().filter_map(|l| l.nranks).max().or_else(|| {
            self.runs
                .iter()
                .map(|r| r.backend.nranks)
                .filter(|&n| n > 0)
                .max()
        })
    }

    fn nnodes(&self) -> Option<usize> {
        self.logs.iter().filter_map(|l| l.nnodes).max()
    }

    fn multi_node(&self) -> bool {
        self.nnodes().is_some_and(|n| n > 1) || self.hosts().len() > 1
    }

    /// Transports from channel lines, plus the chosen network when traffic crosses nodes.
    fn transports(&self) -> BTreeMap<String, Vec<Evidence>> {
        let mut out: BTreeMap<String, Vec<Evidence>> = BTreeMap::new();
        for l in &self.logs {
            for (t, e) in &l.transports {
                out.entry(t.clone())
                    .or_default()
                    .extend(e.iter().take(3).cloned());
            }
            if let Some((net, e)) = &l.network {
                if self.multi_node() {
                    out.entry(format!("NET/{net}")).or_default().push(e.clone());
                }
            }
        }
        out
    }

    pub fn facts(&self) -> Value {
        let env: BTreeMap<String, String> =
            self.env().into_iter().map(|(k, (v, _))| (k, v)).collect();
        json!({
            "nccl_version": self.logs.iter().find_map(|l| l.nccl_version.clone())
                .or_else(|| self.runs.iter().find_map(|r| r.backend.library_versions.get("nccl").cloned())),
            "transports": self.transports().keys().collect::<Vec<_>>(),
            "gdrdma": self.logs.iter().any(|l| l.gdrdma),
            "network": self.logs.iter().find_map(|l| l.network.as_ref().map(|(n, _)| n.clone())),
            "env": env,
            "hosts": self.hosts(),
            "ranks": self.nranks(),
            "nodes": self.nnodes(),
            "inputs": self.files.iter().map(|(f, k)| json!({"file": f, "kind": k})).collect::<Vec<_>>(),
            "topology": self.topos.first().map(|(f, t)| json!({"file": f, "devices": t.devices, "links": t.links.len()})),
            "runs": self.runs.iter().map(|r| json!({
                "file": r.import.as_ref().map(|i| i.file.clone()),
                "status": r.status,
                "points": r.points.len(),
                "headlines": r.headlines,
            })).collect::<Vec<_>>(),
            "live": self.live.as_ref().map(|l| json!({
                "nvml": l.nvml.as_ref().map(|g| g.len()).map_err(|e| e.clone()),
                "driver_version": l.driver_version,
                "sysfs_gpus": l.sysfs_gpus,
                "wsl2": !l.wsl2_evidence.is_empty(),
                "kernel": l.kernel,
                "devshm_bytes": l.devshm_bytes,
                "cpu": l.cpu,
                "nics": l.nics,
                "infiniband": l.infiniband,
            })),
        })
    }
}

fn truthy(v: &str) -> bool {
    matches!(v.trim(), "1" | "true" | "TRUE" | "yes")
}

/// Conservative expected plateau busbw (bytes/s) for the slowest GPU pair of a topology:
/// NCCL's own link model (anchors.md §5.3) at the oldest generation that link type exists in,
/// NVLink at 20 GB/s per link (SM80), PCIe Gen3 x16 at 12 GB/s, host-bridge paths at 0.75 of it,
/// cross-socket at 6 GB/s (the lowest SYS constant).
pub fn expected_busbw(topo: &Topology) -> Option<(f64, String)> {
    let gpus = topo.gpus();
    let mut worst: Option<(f64, String)> = None;
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            let Some(code) = topo.link(a, b) else {
                continue;
            };
            let bw = if let Some(n) = code.strip_prefix("NV").and_then(|n| n.parse::<f64>().ok()) {
                n * 20e9
            } else {
                match code {
                    "PIX" | "PXB" => 12e9,
                    "PHB" | "NODE" => 9e9,
                    _ => 6e9,
                }
            };
            if worst.as_ref().is_none_or(|(w, _)| bw < *w) {
                worst = Some((bw, format!("{a}-{b} {code}")));
            }
        }
    }
    worst
}

pub fn rules(inp: &Inputs) -> Vec<Finding> {
    let mut out = Vec::new();
    let env = inp.env();
    let mut push = |id: &str,
                    severity: Severity,
                    title: String,
                    evidence: Vec<Evidence>,
                    explanation: &str,
                    fix: &str,
                    source: &str| {
        out.push(Finding {
            id: id.into(),
            severity,
            title,
            evidence,
            explanation: explanation.into(),
            fix: fix.into(),
            source: source.into(),
        })
    };

    // Processes and GPU pinning (seeds/000).
    let mut multi: Vec<Evidence> = Vec::new();
    for (file, smi) in &inp.smis {
        for (pid, gpus) in smi.multi_gpu_processes() {
            for p in smi.processes.iter().filter(|p| p.pid == pid) {
                multi.push(ev(
                    file,
                    p.line,
                    format!(
                        "GPU {} PID {} {} {} MiB (PID {pid} is on GPUs {gpus:?})",
                        p.gpu,
                        p.pid,
                        p.name,
                        p.memory_mib.map(|m| m.to_string()).unwrap_or("?".into())
                    ),
                ));
            }
        }
    }
    if let Some(Ok(gpus)) = inp.live.as_ref().map(|l| &l.nvml) {
        let mut by_pid: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for g in gpus {
            for (pid, _) in &g.processes {
                by_pid.entry(*pid).or_default().push(g.index);
            }
        }
        for (pid, g) in by_pid.into_iter().filter(|(_, g)| g.len() > 1) {
            multi.push(value_ev(format!("PID {pid} holds memory on GPUs {g:?}")));
        }
    }
    if !multi.is_empty() {
        push("gpu.process-on-multiple-gpus", Severity::Error,
            "One process holds memory on several GPUs".into(), multi.clone(),
            "A training process that should own one GPU also has a context (and memory, and kernels) on another. Its peers then share that GPU: one GPU sits at low utilisation while the other is oversubscribed, and steps get many times slower.",
            "Give each process exactly one GPU: export CUDA_VISIBLE_DEVICES=<its GPU> before starting it (torchrun does this per LOCAL_RANK only if the script calls torch.cuda.set_device(local_rank) before any CUDA work).",
            "seeds/000 (nvidia-smi process list); PyTorch DDP docs: one process per GPU");
    }
    // NVLink: GPUs of one model with fewer active links than their siblings have links down.
    if let Some(Ok(gpus)) = inp.live.as_ref().map(|l| &l.nvml) {
        let mut by_model: BTreeMap<&str, Vec<&live::NvmlGpu>> = BTreeMap::new();
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
        if !down.is_empty() {
            push("nvlink.down", Severity::Error,
                "NVLinks are down on some GPUs".into(), down,
                "A GPU with fewer active NVLinks than its identical siblings has lost links (a bad bridge, cable tray or NVSwitch port, or a link disabled after errors); NCCL routes around them over fewer links or PCIe, and every collective that includes the GPU slows down.",
                "Check `nvidia-smi nvlink -s` and the error counters (`nvidia-smi nvlink -e`), reseat bridges, run DCGM diagnostics (`dcgmi diag -r 2`), and keep the node out of the job pool until all links are up.",
                "reference/anchors.md §6.5 (NVLink down; DCGM gpu_nvlinks_expected_up)");
        }
    }
    let cvd_unset_live = inp.live.as_ref().is_some_and(|l| {
        let gpus = l
            .nvml
            .as_ref()
            .map(|g| g.len())
            .unwrap_or(l.sysfs_gpus.len());
        !l.env.contains_key("CUDA_VISIBLE_DEVICES")
            && gpus > 1
            && (std::env::var_os("LOCAL_RANK").is_some() || std::env::var_os("RANK").is_some())
    });
    if cvd_unset_live || !multi.is_empty() {
        let mut e = multi.clone();
        if cvd_unset_live {
            e.push(value_ev("CUDA_VISIBLE_DEVICES is not set, several GPUs are visible and RANK/LOCAL_RANK say this is one rank of a job"));
        }
        push("env.cuda-visible-devices-unset", Severity::Warning,
            "CUDA_VISIBLE_DEVICES is not restricting processes to their GPU".into(), e,
            "Without CUDA_VISIBLE_DEVICES (or an early torch.cuda.set_device), every process sees every GPU and libraries may create contexts on GPU 0 or on all GPUs.",
            "Set CUDA_VISIBLE_DEVICES per process, or call torch.cuda.set_device(local_rank) first thing.",
            "seeds/000");
    }

    // Environment switches.
    for (var, id, what) in [
        (
            "NCCL_SHM_DISABLE",
            "env.shm-disabled",
            "shared-memory transport",
        ),
        (
            "NCCL_P2P_DISABLE",
            "env.p2p-disabled",
            "GPU peer-to-peer transport",
        ),
        (
            "NCCL_IB_DISABLE",
            "env.ib-disabled",
            "InfiniBand/RoCE transport",
        ),
    ] {
        if let Some((v, e)) = env.get(var).filter(|(v, _)| truthy(v)) {
            let explanation = match id {
                "env.shm-disabled" => "With SHM off, GPUs without P2P fall back to the network transport (sockets) even inside one machine: ~1 GB/s instead of PCIe speeds. Often set to work around /dev/shm errors on WSL2 or in containers.",
                "env.p2p-disabled" => "With P2P off, NCCL bounces GPU-to-GPU traffic through host memory (SHM), costing bandwidth and latency on PCIe and far more on NVLink systems.",
                _ => "With IB off, multi-node traffic uses TCP sockets, typically ≤60% of the NIC's line rate and a fraction of RDMA.",
            };
            let fix = match id {
                "env.shm-disabled" => "Unset NCCL_SHM_DISABLE and fix the cause instead: give the container a larger /dev/shm (docker --shm-size=8g or --ipc=host).",
                "env.p2p-disabled" => "Unset NCCL_P2P_DISABLE unless P2P is known broken on this platform (then fix ACS/IOMMU settings).",
                _ => "Unset NCCL_IB_DISABLE on hosts with IB/RoCE, and check that libibverbs and the NICs are visible in the container.",
            };
            push(
                id,
                Severity::Warning,
                format!("{var}={v}: the {what} is disabled"),
                vec![e.clone()],
                explanation,
                fix,
                SRC_TROUBLESHOOTING,
            );
        }
    }

    // P2P.
    let mut p2p: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.p2p_unavailable.iter().cloned())
        .collect();
    for (file, t) in &inp.topos {
        for (a, b, code) in t.p2p.iter().filter(|(_, _, c)| c != "OK") {
            let source = if file == "(live)" {
                "NVML P2P read status"
            } else {
                "topo -p2p"
            };
            p2p.push(ev(file, 0, format!("{source}: {a} -> {b} {code}")));
        }
    }
    if !p2p.is_empty() {
        p2p.truncate(10);
        push("p2p.unavailable", Severity::Warning, "GPU peer-to-peer access is unavailable between the GPUs".into(), p2p,
            "NCCL cannot use P2P/IPC, so intra-node traffic goes through host memory (SHM) or, with SHM off, sockets. GeForce cards do not support P2P; WSL2 lacks legacy CUDA IPC; ACS/IOMMU settings or virtualisation can also block it.",
            "Expect SHM-level bandwidth (≈0.75 of the PCIe link at best); on servers check ACS/IOMMU (disable ACS on PCIe switches, iommu=pt); do not set NCCL_SHM_DISABLE on such machines.",
            "reference/anchors.md §4.2 (GeForce P2P, sjeaugey in nccl-tests#287) and §4.3 (WSL legacy IPC, nccl src/transport/p2p.cc)");
    }

    // WSL2.
    let mut wsl: Vec<Evidence> = inp
        .live
        .as_ref()
        .map(|l| {
            l.wsl2_evidence
                .iter()
                .map(|e| value_ev(e.clone()))
                .collect()
        })
        .unwrap_or_default();
    wsl.extend(inp.logs.iter().flat_map(|l| l.wsl_hints.iter().cloned()));
    for log in &inp.logs {
        for h in log
            .hosts
            .iter()
            .filter(|h| h.starts_with("DESKTOP-") || h.starts_with("LAPTOP-"))
        {
            if let Some(b) = log.bootstrap.first() {
                wsl.push(Evidence {
                    text: format!("Windows-style host name {h}; {}", b.text),
                    ..b.clone()
                });
            }
        }
    }
    if !wsl.is_empty() {
        wsl.truncate(6);
        push("wsl2", Severity::Warning, "Running under WSL2".into(), wsl,
            "WSL2 has no CUDA legacy IPC (no NCCL P2P) and multi-GPU jobs often fail creating /dev/shm segments; the usual workaround NCCL_SHM_DISABLE=1 leaves only sockets (~1 GB/s, seeds/002). No published WSL2 baseline exists.",
            "Prefer native Linux for multi-GPU training; under WSL2 use gradient accumulation with no_sync() to all-reduce less often, or train on one GPU (see `ncclprobe simulate ddp`).",
            "reference/anchors.md §4.3; seeds/002; microsoft/WSL#12467");
    }

    // Transports.
    let transports = inp.transports();
    if let Some(sock) = transports.get("NET/Socket") {
        if !inp.multi_node() {
            push("transport.socket-intranode", Severity::Error, "NCCL uses TCP sockets between GPUs of one machine".into(), sock.clone(),
                "Inside one host NCCL should use P2P or SHM; sockets mean both were unavailable or disabled (NCCL_P2P_DISABLE/NCCL_SHM_DISABLE, WSL2, containers with tiny /dev/shm, or ranks in separate containers). Expect ~1 GB/s.",
                "Re-enable SHM (unset NCCL_SHM_DISABLE, enlarge /dev/shm) and P2P where supported; run ranks in one container/pod with --ipc=host.",
                "reference/anchors.md §4.3 and §4.5");
        } else {
            let mut e = sock.clone();
            e.extend(inp.logs.iter().flat_map(|l| {
                l.warnings
                    .iter()
                    .filter(|w| w.text.contains("ibverbs") || w.text.contains("IB"))
                    .take(2)
                    .cloned()
            }));
            push("transport.socket-internode", Severity::Warning, "NCCL uses TCP sockets between hosts".into(), e,
                "Multi-host traffic is on TCP. On clusters with InfiniBand/RoCE/EFA this means the fabric is not used (missing libibverbs or plugin, NCCL_IB_DISABLE, wrong HCA). If the 'hosts' are containers on one machine, this is intra-node traffic over sockets.",
                "Check `ibv_devinfo` inside the job, mount /dev/infiniband, install the NCCL net plugin (aws-ofi-nccl for EFA), unset NCCL_IB_DISABLE; for pods on one node use hostIPC / one pod.",
                "reference/anchors.md §4.4 and §4.5 (nccl#209: TCP ≤60% of line rate)");
        }
    }
    let gdr_off: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.gdr_disabled.iter().cloned())
        .take(4)
        .collect();
    if !gdr_off.is_empty() {
        push("transport.gdr-disabled", Severity::Info, "GPUDirect RDMA is disabled for some GPU/NIC pairs".into(), gdr_off,
            "NCCL stages network traffic through host memory when the GPU and NIC are too far apart in the PCIe tree or nv_peer_mem / dma-buf is missing.",
            "Load nvidia-peermem (or use dma-buf), and check NCCL_NET_GDR_LEVEL against the topology.",
            "reference/anchors.md §6.5");
    }

    // Topology.
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
        // GPUDirect RDMA: NCCL uses it by default only for a NIC within the GPU's PCIe switch
        // (NCCL_NET_GDR_LEVEL defaults to PXB).
        let nics: Vec<&String> = t.devices.iter().filter(|d| !d.starts_with("GPU")).collect();
        let rank = |code: &str| match code {
            c if c.starts_with("NV") => 0,
            "PIX" => 1,
            "PXB" => 2,
            "PHB" => 3,
            "NODE" => 4,
            _ => 5,
        };
        let mut far = Vec::new();
        for g in &gpus {
            let nearest = nics
                .iter()
                .filter_map(|n| t.link(g, n).map(|code| (rank(code), code, *n)))
                .min_by_key(|(r, _, _)| *r);
            if let Some((r, code, nic)) = nearest {
                if r >= 3 {
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
        }
        if !far.is_empty() {
            far.truncate(8);
            push("topo.nic-far-from-gpu", Severity::Info, format!("Some GPUs have no NIC within their PCIe switch ({file})"), far,
                "NCCL reads and writes GPU memory directly from the NIC (GPUDirect RDMA) only when the NIC is close to the GPU (NCCL_NET_GDR_LEVEL defaults to PXB); for these GPUs inter-node traffic is staged through host memory, costing bandwidth and CPU.",
                "For multi-node jobs, prefer GPUs with a PIX/PXB NIC, or raise NCCL_NET_GDR_LEVEL (e.g. PHB) after checking with a sweep that it helps; confirm in NCCL_DEBUG=INFO logs (`via NET/IB/…/GDRDMA`).",
                "reference/anchors.md §6.5 (missing GDRDMA); NCCL environment variables: NCCL_NET_GDR_LEVEL");
        }
        if !cross.is_empty() {
            cross.truncate(8);
            push("topo.cross-numa", Severity::Warning, format!("GPU pairs cross the CPU interconnect between NUMA nodes ({file})"), cross,
                "Traffic between these GPUs crosses QPI/UPI/Infinity Fabric; NCCL disables P2P across it on most CPUs and bandwidth is bounded by the inter-socket link (NCCL models 6-40 GB/s).",
                "Place communicating ranks on GPUs of one NUMA node (CUDA_VISIBLE_DEVICES), bind processes to the GPU's NUMA node (numactl), and expect lower busbw for jobs spanning sockets.",
                "reference/anchors.md §4.2 (NCCL SYS bandwidth constants, paths.cc P2P cut-off)");
        }
    }
    if let Some(l) = &inp.live {
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
                    down.push(value_ev(format!("{}: PCIe speed {c} of {m} (GPUs lower the speed when idle: check under load)", g.address)));
                }
            }
        }
        if let Ok(gpus) = &l.nvml {
            for g in gpus {
                if let Some((c, m)) = g.pcie_width.filter(|(c, m)| c < m) {
                    severity = Severity::Warning;
                    down.push(value_ev(format!(
                        "GPU {} {} ({}): PCIe width x{c} of x{m} (NVML)",
                        g.index, g.name, g.bus_id
                    )));
                }
                if let Some((c, m)) = g.pcie_gen.filter(|(c, m)| c < m) {
                    down.push(value_ev(format!("GPU {} {} ({}): PCIe gen {c} of {m} (NVML; idle GPUs lower it: check under load)", g.index, g.name, g.bus_id)));
                }
            }
        }
        if !down.is_empty() {
            push("pcie.downgraded", severity, "A GPU's PCIe link runs below its maximum".into(), down,
                "A narrower link (fewer lanes) caps every transfer to and from the GPU; a lower speed at idle is normal power saving, under load it means a bad riser, slot or BIOS setting.",
                "Re-seat the card or riser, check the slot's lane wiring and BIOS PCIe settings; compare with `nvidia-smi -q -d PCI` under load.",
                "DCGM diag PCIe checks (reference/anchors.md §3.2, §6.5)");
        }
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
        if l.sysfs_gpus.len() >= 2 && !redirecting.is_empty() {
            let evidence = redirecting
                .iter()
                .map(|(bridge, (ctrl, gpus))| {
                    value_ev(format!(
                        "bridge {bridge} above GPU {}: ACS control {ctrl:#06x} (P2P request/completion redirect on)",
                        gpus.join(", ")
                    ))
                })
                .collect();
            push("pcie.acs-enabled", Severity::Warning, "PCIe ACS redirects GPU peer-to-peer traffic to the root complex".into(), evidence,
                "With Access Control Services redirecting peer-to-peer requests on the bridges between GPUs, P2P that should stay inside a PCIe switch goes up to the root complex (and through the IOMMU): bandwidth drops, and NCCL can hang or report errors on P2P.",
                "On bare metal disable ACS on the switch ports (BIOS setting, or `setpci -s <bridge> ECAP_ACS+0x6.w=0000` for each bridge listed, re-applied at every boot); in VMs keep ACS and expect no P2P between these GPUs.",
                "NCCL user guide, troubleshooting: PCI Access Control Services (ACS); nccl#1086 (reference/anchors.md §4.2)");
        }
        let translated: Vec<&crate::live::PciGpu> = l
            .sysfs_gpus
            .iter()
            .filter(|g| matches!(g.iommu_type.as_deref(), Some("DMA" | "DMA-FQ")))
            .collect();
        if translated.len() >= 2 {
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
            push("pcie.iommu-translated", Severity::Warning, "The IOMMU translates the GPUs' DMA (not passthrough)".into(), evidence,
                "With the IOMMU translating, GPU peer-to-peer traffic is redirected through the root complex (or blocked with ACS on the switches): P2P through PCIe switches gets slow or hangs, and users report all-reduce bandwidth recovering only after IOMMU passthrough or off.",
                "Boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt) or disable the IOMMU in the BIOS on bare metal, and disable ACS on the PCIe switches; then re-run ncclprobe sweep.",
                "NCCL user guide, troubleshooting: PCI Access Control Services (ACS) and IOMMU; nccl#841, nccl#1285, nccl#1086 (reference/anchors.md §4.2)");
        }
        if let Some(bytes) = l.devshm_bytes.filter(|&b| b < 512 << 20) {
            push("devshm.small", Severity::Warning, format!("/dev/shm is only {} MiB", bytes >> 20), vec![value_ev(format!("/dev/shm size {bytes} bytes"))],
                "NCCL's SHM transport and PyTorch's DataLoader workers allocate in /dev/shm; Docker's default 64 MB makes NCCL fail creating segments or forces users to disable SHM.",
                "Run the container with --shm-size=8g (or --ipc=host); on Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
                "nccl#342, nccl#1518 (reference/anchors.md §2.12)");
        }
    }
    let shm: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.shm_failures.iter().cloned())
        .take(6)
        .collect();
    if !shm.is_empty() {
        push("devshm.failure", Severity::Error, "NCCL failed to create shared-memory segments in /dev/shm".into(), shm,
            "/dev/shm is too small or not shared between the ranks' containers.",
            "Enlarge /dev/shm (docker --shm-size=8g / --ipc=host); do not paper over it with NCCL_SHM_DISABLE=1, which drops intra-node traffic to sockets.",
            "nccl#342, nccl#525, nccl#1518, microsoft/WSL#12467 (reference/anchors.md §2.12)");
    }

    // Errors.
    let mut errors: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.errors.iter().cloned())
        .collect();
    for r in &inp.runs {
        if let Some(info) = &r.import {
            for e in info.errors.iter().take(5) {
                let (line, text) = e
                    .strip_prefix("line ")
                    .and_then(|s| s.split_once(": "))
                    .map(|(n, t)| (n.parse().unwrap_or(0), t.to_string()))
                    .unwrap_or((0, e.clone()));
                errors.push(ev(&info.file, line, text));
            }
        }
    }
    let warnings: Vec<Evidence> = inp
        .logs
        .iter()
        .flat_map(|l| l.warnings.iter().cloned())
        .collect();
    if !errors.is_empty() || !warnings.is_empty() {
        let severity = if errors.is_empty() {
            Severity::Warning
        } else {
            Severity::Error
        };
        let mut e: Vec<Evidence> = errors.iter().take(8).cloned().collect();
        e.extend(warnings.iter().take(8).cloned());
        e.sort();
        e.dedup();
        let first = errors
            .first()
            .or(warnings.first())
            .map(|x| x.text.clone())
            .unwrap_or_default();
        push("nccl.error", severity, format!("NCCL reported {}: {}", if errors.is_empty() { "warnings" } else { "errors" }, first.chars().take(120).collect::<String>()), e,
            "'unhandled system error' is usually the environment (missing libnvidia-ml/libibverbs, /sys paths absent in containers or WSL, sockets refused); 'unhandled cuda error' a driver/device problem (busy or exclusive-process GPUs, illegal memory access); NCCL WARN lines just before the error name the cause.",
            "Read the first NCCL WARN line; rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH for the failing rank.",
            "NCCL troubleshooting guide (reference/anchors.md §2.7, §2.12)");
    }

    // PyTorch watchdog.
    let events: Vec<_> = inp.logs.iter().flat_map(|l| l.watchdog.iter()).collect();
    if !events.is_empty() {
        let reported: BTreeSet<usize> = events.iter().map(|e| e.rank).collect();
        let world = inp
            .nranks()
            .or_else(|| reported.iter().max().map(|m| m + 1));
        let missing: Vec<usize> = world
            .map(|w| (0..w).filter(|r| !reported.contains(r)).collect())
            .unwrap_or_default();
        let op = &events[0].op;
        let timeout = events[0]
            .timeout_ms
            .map(|t| format!("{} s", t / 1000))
            .unwrap_or_else(|| "the timeout".into());
        let who = if missing.is_empty() {
            format!("ranks {reported:?} all reported it")
        } else {
            format!("ranks {reported:?} reported it; ranks {missing:?} did not (look at them first: they never reached this collective or died)")
        };
        push("watchdog.timeout", Severity::Error, format!("PyTorch watchdog: {op} did not finish within {timeout}; {who}"),
            events.iter().take(8).map(|e| e.evidence.clone()).collect(),
            "The collective started on some ranks and never completed. Ranks that did not report are usually the culprits (crashed, stuck in data loading or in a different collective); if every rank reported, NCCL itself is hung (network, P2P, or mismatched collectives).",
            "Find what the silent ranks were doing (py-spy dump, their logs); set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_DEBUG=INFO; check that every rank calls the same collectives in the same order.",
            "PyTorch ProcessGroupNCCL watchdog (reference/anchors.md §2.7)");
    }

    // Results.
    for r in &inp.runs {
        let file = r
            .import
            .as_ref()
            .map(|i| i.file.clone())
            .unwrap_or_else(|| "(run)".into());
        let wrong: Vec<Evidence> = r
            .points
            .iter()
            .filter(|p| p.wrong.unwrap_or(0) > 0)
            .map(|p| {
                ev(
                    &file,
                    0,
                    format!(
                        "{} {} {}: #wrong {}",
                        p.collective,
                        p.size_bytes,
                        p.placement.name(),
                        p.wrong.unwrap_or(0)
                    ),
                )
            })
            .take(8)
            .collect();
        let oob = r
            .import
            .as_ref()
            .and_then(|i| i.reported_out_of_bounds)
            .filter(|&n| n > 0);
        if !wrong.is_empty() || oob.is_some() {
            let mut e = wrong;
            if let Some(n) = oob {
                e.push(ev(&file, 0, format!("# Out of bounds values : {n} FAILED")));
            }
            push("result.wrong", Severity::Error, "Collectives returned wrong data".into(), e,
                "nccl-tests compares every element with its exact expected value; wrong elements mean corruption (hardware, driver, a bad link) or a bug, never noise.",
                "Rerun with -c 10 to see whether it is intermittent; isolate GPUs/links pairwise; check dmesg for Xid errors and PCIe AER.",
                "reference/anchors.md §1.6 and §2.11");
        }
        let cut_row = r
            .notes
            .iter()
            .any(|n| n.contains("interrupted") || n.contains("cut off"));
        let truncated = r.import.as_ref().is_some_and(|i| i.truncated);
        // A run that failed during start-up is an error, not a cut-off table.
        if truncated
            && (r.status == crate::model::RunStatus::Truncated || cut_row || !r.points.is_empty())
        {
            let last = r
                .points
                .last()
                .map(|p| format!("last complete row: {} bytes", p.size_bytes))
                .unwrap_or_else(|| "no complete row".into());
            let mut e = vec![ev(&file, 0, last)];
            e.extend(
                r.notes
                    .iter()
                    .filter(|n| {
                        n.contains("cut") || n.contains("interrupted") || n.contains("footer")
                    })
                    .map(|n| ev(&file, 0, n.clone())),
            );
            push("result.truncated", Severity::Warning, "The benchmark output stops before the end of the run".into(), e,
                "The table has no footer: the run crashed, was killed, hung, or the paste was cut. The rows before the cut are kept.",
                "Look at the errors after the last row; rerun with --timeout so a hang ends with a message.",
                "nccl-tests output format (reference/anchors.md §1.4)");
        }
        let slow = slower_than_nccl_model(r);
        if !slow.is_empty() {
            push("result.below-expected", Severity::Warning,
                "Collectives take far longer than NCCL's own cost model predicts for this machine".into(),
                slow.into_iter().map(|line| ev(&file, 0, line)).collect(),
                "NCCL estimated these calls (ncclGroupSimulateEnd) from the topology it detected; measuring more than 1.5x its estimate at the largest size means something outside its model slows them: other traffic on the GPUs or links, thermal or power throttling, a link running below its speed, ACS/IOMMU redirecting P2P, or a slow rank.",
                "Rerun on an idle machine; check pcie.downgraded, nvlink.down and pcie.iommu-translated (ncclprobe diagnose), clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE), and the per-rank times in the record for a straggler.",
                "NCCL ncclGroupSimulateEnd (NCCL 2.22+), recorded per point as nccl_model_time_s");
        }
        if let Some((file_t, topo)) = inp.topos.first() {
            if let Some((expected, pair)) = expected_busbw(topo) {
                for h in r.headlines.iter().filter(|h| {
                    matches!(
                        h.collective,
                        Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter
                    )
                }) {
                    let n = r
                        .points
                        .iter()
                        .find(|p| p.collective == h.collective)
                        .map(|p| p.nranks)
                        .unwrap_or(0);
                    if n < 2
                        || r.backend.hosts.len() > 1
                        || !r
                            .points
                            .iter()
                            .any(|p| p.placement == Placement::OutOfPlace)
                    {
                        continue;
                    }
                    if h.plateau_busbw_bytes_per_s < 0.5 * expected {
                        push("result.below-expected", Severity::Warning,
                            format!("{} plateau busbw {:.2} GB/s is below half of what the slowest GPU link should give ({:.0} GB/s)", h.collective, h.plateau_busbw_bytes_per_s / 1e9, expected / 1e9),
                            vec![ev(&file, 0, format!("plateau busbw {:.2} GB/s over {:?} bytes", h.plateau_busbw_bytes_per_s / 1e9, h.plateau_sizes_bytes)), ev(file_t, 0, format!("slowest pair {pair}"))],
                            "The expectation is NCCL's own link model at the oldest generation of that link type (NVLink 20 GB/s per link, PCIe Gen3 x16 12 GB/s, host-bridge paths 9 GB/s, cross-socket 6 GB/s); far below it, something forces a slower path: no P2P (GeForce, ACS/IOMMU), SHM through a PCIe switch uplink, sockets, or a downgraded link.",
                            "Look at the transports in an NCCL_DEBUG=INFO log (ncclprobe diagnose --from it) and at p2p.unavailable / transport.* findings.",
                            "reference/anchors.md §4.1-§4.2 and §5.3");
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.id.cmp(&b.id)));
    out
}

/// The largest out-of-place size of each collective and type whose measured time exceeds 1.5x
/// what NCCL's cost model predicted for it.
fn slower_than_nccl_model(r: &RunRecord) -> Vec<String> {
    crate::model::largest_with_nccl_model(&r.points)
        .into_iter()
        .filter_map(|p| {
            let model = p.nccl_model_time_s?;
            (p.time_s > 1.5 * model).then(|| {
                format!(
                    "{} {} {} bytes: measured {:.1} us, NCCL's model {:.1} us ({:.1}x)",
                    p.collective,
                    p.dtype,
                    p.size_bytes,
                    p.time_s * 1e6,
                    model * 1e6,
                    p.time_s / model
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{Facts, PciGpu};

    fn live(gpus: Vec<PciGpu>, devshm: Option<u64>) -> Facts {
        Facts {
            nvml: Err("no driver".into()),
            driver_version: None,
            sysfs_gpus: gpus,
            wsl2_evidence: Vec::new(),
            kernel: None,
            devshm_bytes: devshm,
            cpu: None,
            nics: Vec::new(),
            infiniband: Vec::new(),
            iommu_units: Vec::new(),
            iommu_cmdline: Vec::new(),
            env: BTreeMap::new(),
            topology: None,
        }
    }

    fn ids(inputs: &Inputs) -> Vec<String> {
        rules(inputs).into_iter().map(|f| f.id).collect()
    }

    #[test]
    fn acs_redirect_on_bridges_between_gpus_is_a_warning_once_per_bridge() {
        let gpu = |address: &str, acs: Vec<(String, u16)>| PciGpu {
            address: address.into(),
            acs_redirecting: acs,
            ..Default::default()
        };
        let shared = vec![("0000:01:00.0".to_string(), 0x001d)];
        let facts = live(
            vec![
                gpu("0000:03:00.0", shared.clone()),
                gpu("0000:04:00.0", shared),
            ],
            Some(8 << 30),
        );
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        let acs = f
            .iter()
            .find(|f| f.id == "pcie.acs-enabled")
            .expect("finding");
        assert_eq!(acs.severity, Severity::Warning);
        assert_eq!(acs.evidence.len(), 1);
        assert!(acs.evidence[0].text.contains(
            "bridge 0000:01:00.0 above GPU 0000:03:00.0, 0000:04:00.0: ACS control 0x001d"
        ));
        let clean = live(
            vec![
                gpu("0000:03:00.0", Vec::new()),
                gpu("0000:04:00.0", Vec::new()),
            ],
            None,
        );
        assert!(!ids(&Inputs {
            live: Some(clean),
            ..Default::default()
        })
        .contains(&"pcie.acs-enabled".to_string()));
    }

    #[test]
    fn translated_iommu_on_several_gpus_is_a_warning_and_passthrough_is_not() {
        let gpu = |address: &str, kind: &str| PciGpu {
            address: address.into(),
            iommu_group: Some("7".into()),
            iommu_type: Some(kind.into()),
            ..Default::default()
        };
        let mut facts = live(
            vec![gpu("0000:3b:00.0", "DMA-FQ"), gpu("0000:5e:00.0", "DMA")],
            Some(8 << 30),
        );
        facts.iommu_cmdline = vec!["intel_iommu=on".into()];
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        let iommu = f
            .iter()
            .find(|f| f.id == "pcie.iommu-translated")
            .expect("finding");
        assert_eq!(iommu.severity, Severity::Warning);
        assert_eq!(iommu.evidence.len(), 3);
        assert!(iommu.evidence[0]
            .text
            .contains("0000:3b:00.0: IOMMU group 7, type DMA-FQ"));
        assert!(iommu.evidence[2].text.contains("intel_iommu=on"));

        let passthrough = live(
            vec![
                gpu("0000:3b:00.0", "identity"),
                gpu("0000:5e:00.0", "identity"),
            ],
            Some(8 << 30),
        );
        assert!(!ids(&Inputs {
            live: Some(passthrough),
            ..Default::default()
        })
        .contains(&"pcie.iommu-translated".to_string()));
        let one = live(vec![gpu("0000:3b:00.0", "DMA")], Some(8 << 30));
        assert!(!ids(&Inputs {
            live: Some(one),
            ..Default::default()
        })
        .contains(&"pcie.iommu-translated".to_string()));
    }

    #[test]
    fn pcie_width_downgrade_is_a_warning_and_idle_speed_is_info() {
        let narrow = PciGpu {
            address: "0000:3b:00.0".into(),
            current_link_width: Some(8),
            max_link_width: Some(16),
            current_link_speed: Some("16.0 GT/s PCIe".into()),
            max_link_speed: Some("16.0 GT/s PCIe".into()),
            ..Default::default()
        };
        let inputs = Inputs {
            live: Some(live(vec![narrow], Some(8 << 30))),
            ..Default::default()
        };
        let f = rules(&inputs);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("pcie.downgraded", Severity::Warning)
        );
        assert!(f[0].evidence[0].text.contains("x8 of x16"));
        let idle = PciGpu {
            current_link_speed: Some("2.5 GT/s PCIe".into()),
            max_link_speed: Some("16.0 GT/s PCIe".into()),
            ..Default::default()
        };
        let f = rules(&Inputs {
            live: Some(live(vec![idle], None)),
            ..Default::default()
        });
        assert_eq!(f[0].severity, Severity::Info);
    }

    #[test]
    fn nvlinks_are_compared_within_one_gpu_model_only() {
        let gpu = |index: u32, name: &str, links: u32| crate::live::NvmlGpu {
            index,
            name: name.into(),
            nvlinks_active: links,
            ..Default::default()
        };
        let with = |gpus: Vec<crate::live::NvmlGpu>| {
            let mut facts = live(Vec::new(), Some(8 << 30));
            facts.nvml = Ok(gpus);
            ids(&Inputs {
                live: Some(facts),
                ..Default::default()
            })
        };
        // A PCIe card beside NVLinked ones is not a down link; all links up is healthy.
        let mixed = with(vec![
            gpu(0, "H100 SXM", 18),
            gpu(1, "H100 SXM", 18),
            gpu(2, "L4", 0),
        ]);
        assert!(!mixed.contains(&"nvlink.down".to_string()));
        let degraded = with(vec![gpu(0, "H100 SXM", 18), gpu(1, "H100 SXM", 16)]);
        assert!(degraded.contains(&"nvlink.down".to_string()));
    }

    #[test]
    fn nvml_link_width_counts_too() {
        let mut facts = live(Vec::new(), None);
        facts.nvml = Ok(vec![crate::live::NvmlGpu {
            index: 1,
            name: "GPU".into(),
            bus_id: "00000000:3B:00.0".into(),
            pcie_gen: Some((4, 4)),
            pcie_width: Some((4, 16)),
            processes: Vec::new(),
            nvlinks_active: 0,
        }]);
        let f = rules(&Inputs {
            live: Some(facts),
            ..Default::default()
        });
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("pcie.downgraded", Severity::Warning)
        );
        assert!(f[0].evidence[0].text.contains("x4 of x16 (NVML)"));
    }

    #[test]
    fn docker_default_devshm_is_small() {
        let inputs = Inputs {
            live: Some(live(Vec::new(), Some(64 << 20))),
            ..Default::default()
        };
        assert_eq!(ids(&inputs), vec!["devshm.small"]);
        let inputs = Inputs {
            live: Some(live(Vec::new(), Some(16 << 30))),
            ..Default::default()
        };
        assert!(ids(&inputs).is_empty());
    }

    #[test]
    fn expected_busbw_takes_the_slowest_gpu_pair() {
        let t = crate::import::topo::parse_str("        GPU0    GPU1    GPU2\nGPU0     X      NV4     SYS\nGPU1    NV4      X      SYS\nGPU2    SYS     SYS      X\n").unwrap();
        let (bw, pair) = expected_busbw(&t).unwrap();
        assert_eq!(bw, 6e9);
        assert!(pair.ends_with("SYS"));
    }
}
