//! This machine, read live: NVML (when the driver library is there), sysfs, /proc and /dev.
//! Everything takes its roots as arguments so tests can hand it a fake tree; nothing here
//! panics or fails the command when a source is missing — it records that it is missing.

use crate::import::topo::{DeviceInfo, Topology};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the live sources are (`/` normally).
#[derive(Debug, Clone)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc_: PathBuf,
    pub dev: PathBuf,
}

/// The environment variable naming another sysfs root (a copy of `/sys`, or an empty
/// directory to mean "no PCI devices"), as for the CUDA driver and NVML overrides.
pub const SYSFS_OVERRIDE: &str = "NCCLPROBE_SYSFS_ROOT";

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sys: std::env::var_os(SYSFS_OVERRIDE)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| "/sys".into()),
            proc_: test_root("NCCLPROBE_TEST_PROC_ROOT", "/proc"),
            dev: test_root("NCCLPROBE_TEST_DEV_ROOT", "/dev"),
        }
    }
}

/// `/proc` and `/dev` as diagnosis reads them; in builds with the TEST-ONLY `fault-injection`
/// feature, the directory `var` names, so a test's findings come from a fixture and not from
/// the machine it runs on (no user needs another /proc: sysfs has its own variable above).
fn test_root(var: &str, default: &str) -> PathBuf {
    crate::fault_injection::test_path(var).unwrap_or_else(|| default.into())
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PciGpu {
    pub address: String,
    pub numa_node: Option<i64>,
    pub current_link_speed: Option<String>,
    pub max_link_speed: Option<String>,
    pub current_link_width: Option<u32>,
    pub max_link_width: Option<u32>,
    /// The chain of PCI bridges from the root complex down to the device.
    pub pci_path: Vec<String>,
    /// The device's IOMMU group and how the group's DMA is handled (`identity` =
    /// passthrough; `DMA`/`DMA-FQ` = translated), when an IOMMU is on.
    pub iommu_group: Option<String>,
    pub iommu_type: Option<String>,
    /// CPUs close to the device (`local_cpulist`: nvidia-smi's "CPU Affinity").
    pub local_cpus: Option<String>,
    /// Bridges above the GPU whose ACS redirects peer-to-peer requests or completions up to
    /// the root complex, with their ACS control register.
    pub acs_redirecting: Vec<(String, u16)>,
    /// Bridges above the GPU whose extended config space could not be read (not root).
    pub acs_unreadable: usize,
    /// PCIe Advanced Error Reporting counters since boot, when the kernel exposes them.
    pub aer: Option<health::Aer>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    pub nvml: Result<Vec<NvmlGpu>, String>,
    pub driver_version: Option<String>,
    pub sysfs_gpus: Vec<PciGpu>,
    pub wsl2_evidence: Vec<String>,
    pub kernel: Option<String>,
    pub devshm_bytes: Option<u64>,
    pub cpu: Option<String>,
    pub nics: Vec<(String, Option<u64>)>,
    pub infiniband: Vec<String>,
    /// Every port of those devices: rate, state and link layer as the kernel states them.
    pub ib_ports: Vec<IbPort>,
    /// IOMMU units in sysfs (`dmar0`, `ivhd0`…) and the iommu settings on the kernel command line.
    pub iommu_units: Vec<String>,
    pub iommu_cmdline: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// `RANK` / `LOCAL_RANK` of this process, when a launcher started it as one rank of a job.
    pub job_rank_vars: BTreeMap<String, String>,
    pub topology: Option<Topology>,
    /// The NVIDIA driver's Xid events in the kernel log since boot, or why it was unreadable.
    pub xids: Result<Vec<crate::import::xid::XidEvent>, String>,
}

/// One RDMA port as `/sys/class/infiniband/<dev>/ports/<n>/` states it (what `ibstatus`
/// prints): `rate` `400 Gb/sec (4X NDR)`, `state` `4: ACTIVE`, `phys_state` `5: LinkUp`,
/// `link_layer` `InfiniBand` or `Ethernet` (RoCE).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IbPort {
    pub device: String,
    pub port: u32,
    pub rate: Option<String>,
    pub state: Option<String>,
    pub phys_state: Option<String>,
    pub link_layer: Option<String>,
}

impl IbPort {
    /// The rate in Gb/s (`400 Gb/sec (4X NDR)` → 400; `2.5 Gb/sec (1X SDR)` → 2.5).
    pub fn gbps(&self) -> Option<f64> {
        self.rate
            .as_deref()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Whether the port is up (`4: ACTIVE`).
    pub fn active(&self) -> bool {
        self.state.as_deref().is_some_and(|s| s.contains("ACTIVE"))
    }

    /// `mlx5_0:1`, as NCCL_IB_HCA and NCCL's log name a port.
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }
}

/// Every port of every RDMA device in sysfs, sorted by device and port.
pub fn ib_ports(roots: &Roots) -> Vec<IbPort> {
    let mut out = Vec::new();
    let Ok(devices) = std::fs::read_dir(roots.sys.join("class/infiniband")) else {
        return out;
    };
    for dev in devices.flatten() {
        let Ok(ports) = std::fs::read_dir(dev.path().join("ports")) else {
            continue;
        };
        for port in ports.flatten() {
            let Ok(n) = port.file_name().to_string_lossy().parse() else {
                continue;
            };
            let p = port.path();
            out.push(IbPort {
                device: dev.file_name().to_string_lossy().into_owned(),
                port: n,
                rate: read(&p.join("rate")),
                state: read(&p.join("state")),
                phys_state: read(&p.join("phys_state")),
                link_layer: read(&p.join("link_layer")),
            });
        }
    }
    out.sort_by(|a, b| a.device.cmp(&b.device).then(a.port.cmp(&b.port)));
    out
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// ACS control bits that send peer-to-peer traffic up to the root complex: P2P Request
/// Redirect (bit 2) and P2P Completion Redirect (bit 3).
pub const ACS_P2P_REDIRECT: u16 = 0x000c;

/// What a PCI device's config space says about ACS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acs {
    /// The extended config space is not readable (not root, or no such file).
    Unreadable,
    /// No ACS capability.
    Absent,
    /// The ACS control register.
    Control(u16),
}

/// The ACS control register of a PCI device, from its config space in sysfs.
pub fn acs_control(config: &Path) -> Acs {
    let Ok(bytes) = std::fs::read(config) else {
        return Acs::Unreadable;
    };
    if bytes.len() < 0x104 {
        return Acs::Unreadable;
    }
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    // Extended capabilities: a list from 0x100; id in bits 0-15, next offset in bits 20-31.
    let mut offset = 0x100;
    for _ in 0..64 {
        let Some(header) = u32_at(offset) else {
            return Acs::Absent;
        };
        if header == 0 || header == u32::MAX {
            return Acs::Absent;
        }
        if header & 0xffff == 0x000d {
            return bytes.get(offset + 6..offset + 8).map_or(Acs::Absent, |b| {
                Acs::Control(u16::from_le_bytes([b[0], b[1]]))
            });
        }
        let next = (header >> 20) as usize & 0xffc;
        if next < 0x100 {
            return Acs::Absent;
        }
        offset = next;
    }
    Acs::Absent
}

/// The chain of PCI components (root complex, bridges, the device) of a sysfs device path.
fn pci_path_of(device: &Path) -> Vec<String> {
    let real = std::fs::canonicalize(device).unwrap_or_else(|_| device.to_path_buf());
    real.components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| c.starts_with("pci") || c.chars().filter(|&ch| ch == ':').count() == 2)
        .map(str::to_string)
        .collect()
}

/// RDMA NICs (`/sys/class/infiniband`) as PCI devices, named as nvidia-smi's NIC legend does.
pub fn sysfs_nics(roots: &Roots) -> Vec<(String, PciGpu)> {
    let Ok(entries) = std::fs::read_dir(roots.sys.join("class/infiniband")) else {
        return Vec::new();
    };
    let mut nics: Vec<(String, PciGpu)> = entries
        .flatten()
        .filter_map(|e| {
            let device = e.path().join("device");
            let pci_path = pci_path_of(&device);
            let address = pci_path.last().filter(|a| !a.starts_with("pci"))?.clone();
            Some((
                e.file_name().to_string_lossy().into_owned(),
                PciGpu {
                    address,
                    numa_node: read(&device.join("numa_node")).and_then(|s| s.parse().ok()),
                    pci_path,
                    ..Default::default()
                },
            ))
        })
        .collect();
    nics.sort_by(|a, b| a.0.cmp(&b.0));
    nics
}

/// Put the NICs into a GPU topology: each GPU↔NIC pair's code from the PCI tree (GPUs matched
/// to their sysfs devices by bus id), NIC↔NIC likewise, and the NIC legend.
fn add_nics(
    t: &mut Topology,
    gpu_buses: &[(String, String)],
    sysfs: &[PciGpu],
    nics: &[(String, PciGpu)],
) {
    for (i, (name, nic)) in nics.iter().enumerate() {
        let label = format!("NIC{i}");
        t.nic_names.insert(label.clone(), name.clone());
        t.devices.push(label.clone());
        for (gpu, bus) in gpu_buses {
            let address = sysfs_address(bus);
            if let Some(g) = sysfs.iter().find(|g| g.address == address) {
                let code = link_from_paths(g, nic);
                t.links.push((gpu.clone(), label.clone(), code.clone()));
                t.links.push((label.clone(), gpu.clone(), code));
            }
        }
        for (j, (_, other)) in nics.iter().enumerate().filter(|(j, _)| *j != i) {
            t.links.push((
                label.clone(),
                format!("NIC{j}"),
                link_from_paths(nic, other),
            ));
        }
    }
}

/// NVIDIA display/3D controllers in sysfs, with NUMA node, link state and PCI path.
pub fn sysfs_gpus(roots: &Roots) -> Vec<PciGpu> {
    let dir = roots.sys.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<PciGpu> = entries
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let vendor = read(&p.join("vendor"))?;
            let class = read(&p.join("class"))?;
            if vendor != "0x10de" || !(class.starts_with("0x0300") || class.starts_with("0x0302")) {
                return None;
            }
            let pci_path = pci_path_of(&p);
            let iommu_group = std::fs::read_link(p.join("iommu_group"))
                .ok()
                .and_then(|g| g.file_name().map(|n| n.to_string_lossy().into_owned()));
            let iommu_type = iommu_group
                .as_ref()
                .and_then(|g| read(&roots.sys.join("kernel/iommu_groups").join(g).join("type")));
            // The PCI bridges between the root complex and the GPU (the GPU itself is last).
            let mut bridges: Vec<&String> =
                pci_path.iter().filter(|c| !c.starts_with("pci")).collect();
            bridges.pop();
            let mut acs_redirecting = Vec::new();
            let mut acs_unreadable = 0;
            for b in bridges {
                match acs_control(&dir.join(b).join("config")) {
                    Acs::Control(ctrl) if ctrl & ACS_P2P_REDIRECT != 0 => {
                        acs_redirecting.push((b.clone(), ctrl))
                    }
                    Acs::Control(_) | Acs::Absent => {}
                    Acs::Unreadable => acs_unreadable += 1,
                }
            }
            Some(PciGpu {
                iommu_group,
                iommu_type,
                acs_redirecting,
                acs_unreadable,
                local_cpus: read(&p.join("local_cpulist")),
                address: e.file_name().to_string_lossy().into_owned(),
                numa_node: read(&p.join("numa_node")).and_then(|s| s.parse().ok()),
                current_link_speed: read(&p.join("current_link_speed")),
                max_link_speed: read(&p.join("max_link_speed")),
                current_link_width: read(&p.join("current_link_width"))
                    .and_then(|s| s.parse().ok()),
                max_link_width: read(&p.join("max_link_width")).and_then(|s| s.parse().ok()),
                aer: health::aer(&p),
                pci_path,
            })
        })
        .collect();
    out.sort_by(|a, b| a.address.cmp(&b.address));
    out
}

/// The link code NVML would give, from two PCI paths and NUMA nodes (no NVLink knowledge):
/// different root complexes are NODE within a NUMA node and SYS across; under one root, a
/// shared switch is PIX (one level) or PXB (more), only the root port shared is PHB.
pub fn link_from_paths(a: &PciGpu, b: &PciGpu) -> String {
    let (pa, pb) = (&a.pci_path, &b.pci_path);
    if pa.first() != pb.first() || pa.is_empty() {
        return if a.numa_node.is_some() && a.numa_node == b.numa_node {
            "NODE".into()
        } else {
            "SYS".into()
        };
    }
    // Shared prefix, not counting the device itself.
    let shared = pa.iter().zip(pb.iter()).take_while(|(x, y)| x == y).count();
    let below_root = shared.saturating_sub(1);
    match below_root {
        0 => "PHB".into(),
        1 | 2 => "PIX".into(),
        _ => "PXB".into(),
    }
}

pub mod health;
mod kmsg;
mod nvml;
use nvml::nvml_facts;
pub use nvml::{gpu_memory, NvmlGpu, NVML_OVERRIDE};

/// nvidia-smi's affinity columns for a GPU, from sysfs.
fn affinity(g: &PciGpu) -> DeviceInfo {
    DeviceInfo {
        cpu_affinity: g.local_cpus.clone(),
        numa_affinity: g.numa_node.filter(|&n| n >= 0).map(|n| n.to_string()),
        gpu_numa_id: None,
        pci_bus_id: Some(g.address.clone()),
    }
}

/// NVML's bus id (`00000000:18:00.0`, 8-digit domain, upper case) as sysfs names the device
/// (`0000:18:00.0`).
fn sysfs_address(nvml_bus_id: &str) -> String {
    let id = nvml_bus_id.to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    }
}

/// Give NVML's topology each GPU's PCI address and the CPU and NUMA affinity sysfs knows.
fn add_affinity(t: &mut Topology, gpus: &[NvmlGpu], sysfs: &[PciGpu]) {
    for g in gpus {
        let address = sysfs_address(&g.bus_id);
        let info = match sysfs.iter().find(|p| p.address == address) {
            Some(p) => affinity(p),
            None => DeviceInfo::default(),
        };
        let info = DeviceInfo {
            pci_bus_id: Some(address),
            ..info
        };
        t.info.insert(format!("GPU{}", g.index), info);
    }
}

/// `/dev/shm` capacity in bytes.
pub fn devshm_bytes(dev: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(&dev.join("shm")).ok()?;
    Some(st.blocks() as u64 * st.fragment_size() as u64)
}

pub fn collect(roots: &Roots, with_nvml: bool) -> Facts {
    let (nvml, driver_version, nvml_topo) = if with_nvml {
        nvml_facts()
    } else {
        (Err("NVML not queried".into()), None, None)
    };
    let sysfs_gpus = sysfs_gpus(roots);
    let kernel = read(&roots.proc_.join("version"));
    let mut wsl2_evidence = Vec::new();
    if let Some(k) = &kernel {
        if k.to_ascii_lowercase().contains("microsoft") || k.contains("WSL") {
            wsl2_evidence.push(format!("{}: {k}", roots.proc_.join("version").display()));
        }
    }
    if roots.dev.join("dxg").exists() {
        wsl2_evidence.push(format!(
            "{} exists (the WSL2 GPU paravirtualisation device)",
            roots.dev.join("dxg").display()
        ));
    }
    let cpu = read(&roots.proc_.join("cpuinfo")).and_then(|c| {
        let get = |k: &str| {
            c.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        match (get("vendor_id"), get("model name")) {
            (Some(v), Some(m)) => Some(format!("{v}: {m}")),
            (v, m) => v.or(m),
        }
    });
    let mut nics: Vec<(String, Option<u64>)> = std::fs::read_dir(roots.sys.join("class/net"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let speed = read(&e.path().join("speed"))
                        .and_then(|s| s.parse::<i64>().ok())
                        .filter(|&s| s > 0)
                        .map(|s| s as u64);
                    (name, speed)
                })
                .filter(|(n, _)| n != "lo")
                .collect()
        })
        .unwrap_or_default();
    nics.sort();
    let mut infiniband: Vec<String> = std::fs::read_dir(roots.sys.join("class/infiniband"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    infiniband.sort();
    let mut iommu_units: Vec<String> = std::fs::read_dir(roots.sys.join("class/iommu"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    iommu_units.sort();
    let iommu_cmdline = read(&roots.proc_.join("cmdline"))
        .map(|c| {
            c.split_whitespace()
                .filter(|t| t.contains("iommu"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let rdma_nics = sysfs_nics(roots);
    let nvml_topo = nvml_topo.map(|mut t| {
        if let Ok(gpus) = &nvml {
            add_affinity(&mut t, gpus, &sysfs_gpus);
            let buses: Vec<(String, String)> = gpus
                .iter()
                .map(|g| (format!("GPU{}", g.index), g.bus_id.clone()))
                .collect();
            add_nics(&mut t, &buses, &sysfs_gpus, &rdma_nics);
        }
        t
    });
    let topology = nvml_topo.or_else(|| {
        (!sysfs_gpus.is_empty()).then(|| {
            let mut t = Topology { legend: "new".into(), ..Default::default() };
            for (i, g) in sysfs_gpus.iter().enumerate() {
                let name = format!("GPU{i}");
                t.devices.push(name.clone());
                t.info.insert(name, affinity(g));
                for (j, h) in sysfs_gpus.iter().enumerate() {
                    if i != j {
                        t.links.push((format!("GPU{i}"), format!("GPU{j}"), link_from_paths(g, h)));
                    }
                }
            }
            let buses: Vec<(String, String)> = sysfs_gpus
                .iter()
                .enumerate()
                .map(|(i, g)| (format!("GPU{i}"), g.address.clone()))
                .collect();
            add_nics(&mut t, &buses, &sysfs_gpus, &rdma_nics);
            t.problems.push("links derived from the PCI tree in sysfs (NVML unavailable): NVLink is not visible this way".into());
            t
        })
    });
    Facts {
        nvml,
        driver_version,
        sysfs_gpus,
        wsl2_evidence,
        kernel,
        devshm_bytes: devshm_bytes(&roots.dev),
        cpu,
        nics,
        infiniband,
        ib_ports: ib_ports(roots),
        iommu_units,
        iommu_cmdline,
        env: crate::model::relevant_env(),
        job_rank_vars: ["RANK", "LOCAL_RANK"]
            .iter()
            .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
            .collect(),
        topology,
        xids: kmsg::xids(&roots.dev),
    }
}

/// `ncclprobe topo` without `--from`.
pub fn topology() -> Result<Topology, String> {
    let facts = collect(&Roots::default(), true);
    facts.topology.ok_or_else(|| {
        let nvml = facts.nvml.err().unwrap_or_default();
        format!(
            "no NVIDIA GPU found on this machine: {nvml}; sysfs lists no PCI device of vendor 0x10de. NICs: {}",
            if facts.nics.is_empty() { "none".to_string() } else { facts.nics.iter().map(|(n, s)| match s { Some(s) => format!("{n} ({s} Mb/s)"), None => n.clone() }).collect::<Vec<_>>().join(", ") }
        )
    })
}

#[cfg(test)]
mod tests;
