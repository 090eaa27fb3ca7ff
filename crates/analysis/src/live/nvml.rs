//! The GPUs as NVML sees them: names, PCIe links, processes, NVLinks (to peers and through
//! NVSwitches) and P2P status, turned into the same link matrix `nvidia-smi topo -m` prints.

use crate::documents::topology::Topology;
use serde::Serialize;
use std::collections::BTreeMap;

/// Drivers ship `libnvidia-ml.so.1`; the unversioned name nvml-wrapper looks for by default
/// comes only with development packages (and is missing in most containers).
const NVML_LIB: &str = "libnvidia-ml.so.1";

/// The NVML library to open: `NCCLPROBE_NVML_LIBRARY` or the driver's versioned name.
fn nvml_lib() -> std::ffi::OsString {
    std::env::var_os(NVML_OVERRIDE)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| NVML_LIB.into())
}

fn nvml_init() -> Result<nvml_wrapper::Nvml, String> {
    let lib = nvml_lib();
    if lib == "none" {
        return Err(format!("disabled by {NVML_OVERRIDE}=none"));
    }
    // When neither loads, the versioned name's error is the one worth reading.
    let first = nvml_wrapper::Nvml::builder().lib_path(&lib).init();
    if std::env::var_os(NVML_OVERRIDE).is_some() {
        return first.map_err(|e| e.to_string());
    }
    first
        .or_else(|first| nvml_wrapper::Nvml::init().map_err(|_| first))
        .map_err(|e| e.to_string())
}

/// NVML's P2P read status between two GPUs as `nvidia-smi topo -p2p r` writes it (`DR`, P2P
/// disabled by a registry key, is ours: nvidia-smi has no code for it). nvml-wrapper has no
/// call for it, so the symbol comes from the library NVML was initialised from (the same
/// loaded instance, so the device handles are valid there).
fn p2p_read_status(
    lib: &nvml_wrapper_sys::bindings::NvmlLib,
    a: &nvml_wrapper::Device,
    b: &nvml_wrapper::Device,
) -> Option<&'static str> {
    let f = lib.nvmlDeviceGetP2PStatus.as_ref().ok()?;
    let mut status = 0;
    // SAFETY: handles of live devices of an initialised NVML; a valid out-pointer.
    let rc = unsafe {
        f(
            a.handle(),
            b.handle(),
            nvml_wrapper_sys::bindings::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_READ,
            &mut status,
        )
    };
    (rc == 0).then_some(match status {
        0 => "OK",
        1 => "CNS",
        2 => "GNS",
        3 => "TNS",
        4 => "DR",
        5 => "NS",
        _ => "U",
    })
}

pub(super) fn nvml_facts() -> (
    Result<Vec<NvmlGpu>, String>,
    Option<String>,
    Option<Topology>,
) {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    use nvml_wrapper::enums::device::UsedGpuMemory;
    let nvml = match nvml_init() {
        Ok(n) => n,
        Err(e) => {
            return (
                Err(format!(
                    "NVML unavailable (libnvidia-ml.so.1, the NVIDIA driver's library): {e}"
                )),
                None,
                None,
            )
        }
    };
    let driver = nvml.sys_driver_version().ok();
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => return (Err(format!("NVML could not count GPUs: {e}")), driver, None),
    };
    let mut gpus = Vec::new();
    // SAFETY: loading the library NVML already has open (dlopen hands back the same instance).
    let raw = unsafe { nvml_wrapper_sys::bindings::NvmlLib::new(nvml_lib()) }
        .or_else(|_| unsafe { nvml_wrapper_sys::bindings::NvmlLib::new("libnvidia-ml.so") })
        .ok();
    for i in 0..count {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let processes = d
            .running_compute_processes()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p.pid,
                    match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                )
            })
            .collect();
        gpus.push(NvmlGpu {
            index: i,
            name: d.name().unwrap_or_default(),
            bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
            uuid: d.uuid().ok(),
            // NOT_SUPPORTED on boards without an inforom (most GeForce cards).
            serial: d.serial().ok().filter(|s| !s.trim().is_empty()),
            pcie_gen: d
                .current_pcie_link_gen()
                .ok()
                .zip(d.max_pcie_link_gen().ok()),
            pcie_width: d
                .current_pcie_link_width()
                .ok()
                .zip(d.max_pcie_link_width().ok()),
            processes,
            // Counted with the links below.
            nvlinks_active: 0,
            health: super::health::read(&d, raw.as_ref()),
        });
    }
    // Pairwise links: active NVLinks to the peer's bus id, else the PCIe common ancestor.
    let mut topo = Topology {
        legend: "new".into(),
        ..Default::default()
    };
    topo.devices = (0..count).map(|i| format!("GPU{i}")).collect();
    let gpu_buses: Vec<String> = gpus.iter().map(|g| g.bus_id.to_lowercase()).collect();
    let mut links_of: Vec<NvLinks> = Vec::new();
    for i in 0..count {
        let l = nvml
            .device_by_index(i)
            .map(|a| nvlinks_of(raw.as_ref(), &a, &gpu_buses))
            .unwrap_or_default();
        if let Some(g) = gpus.get_mut(i as usize) {
            g.nvlinks_active = l.active;
        }
        links_of.push(l);
    }
    for i in 0..count {
        let Ok(a) = nvml.device_by_index(i) else {
            continue;
        };
        let mine = &links_of[i as usize];

        for j in 0..count {
            if i == j {
                continue;
            }
            let Ok(b) = nvml.device_by_index(j) else {
                continue;
            };
            let p2p = raw.as_ref().and_then(|lib| p2p_read_status(lib, &a, &b));
            let peer_bus = gpus
                .get(j as usize)
                .map(|g| g.bus_id.to_lowercase())
                .unwrap_or_default();
            let theirs = &links_of[j as usize];
            let code = match mine.to_peer(&peer_bus, theirs) {
                n if n > 0 => format!("NV{n}"),
                _ => match a.topology_common_ancestor(b) {
                    Ok(TopologyLevel::Internal) | Ok(TopologyLevel::Single) => "PIX".into(),
                    Ok(TopologyLevel::Multiple) => "PXB".into(),
                    Ok(TopologyLevel::HostBridge) => "PHB".into(),
                    Ok(TopologyLevel::Node) => "NODE".into(),
                    Ok(_) => "SYS".into(),
                    Err(_) => continue,
                },
            };
            topo.links
                .push((format!("GPU{i}"), format!("GPU{j}"), code));
            if let Some(p2p) = p2p {
                topo.p2p
                    .push((format!("GPU{i}"), format!("GPU{j}"), p2p.to_string()));
            }
        }
    }
    (Ok(gpus), driver, Some(topo))
}

/// One GPU's active NVLinks: to each peer GPU directly (by bus id), and to NVSwitches.
#[derive(Debug, Default)]
struct NvLinks {
    active: u32,
    to_gpu: BTreeMap<String, u32>,
    to_switch: u32,
}

impl NvLinks {
    /// Links between this GPU and a peer: direct ones, plus those through the NVSwitches both
    /// reach (as `nvidia-smi topo -m` counts them: NV18 between any two H100 on HGX, whose
    /// every link goes to a switch; NCCL's path through an NVS node is bounded by the fewer).
    fn to_peer(&self, peer_bus: &str, peer: &NvLinks) -> u32 {
        let direct = self.to_gpu.get(peer_bus).copied().unwrap_or(0);
        direct + self.to_switch.min(peer.to_switch)
    }
}

/// NVLink device types (nvml.h `nvmlIntNvLinkDeviceType_t`).
const NVLINK_REMOTE_GPU: u32 = 0;
const NVLINK_REMOTE_SWITCH: u32 = 2;

/// Whether link `l` is up, read as NCCL does (graph/xml.cc): on sm90 and later through the
/// field value NVML_FI_DEV_NVLINK_GET_STATE (nvmlDeviceGetNvLinkState is not what Hopper
/// answers), before that through nvmlDeviceGetNvLinkState.
fn nvlink_up(
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
    d: &nvml_wrapper::Device,
    l: u32,
    sm_major: i32,
) -> bool {
    use nvml_wrapper_sys::bindings::{field_id::NVML_FI_DEV_NVLINK_GET_STATE, nvmlFieldValue_t};
    if sm_major >= 9 {
        let Some(f) = raw.and_then(|lib| lib.nvmlDeviceGetFieldValues.as_ref().ok()) else {
            return false;
        };
        // SAFETY: a zeroed C struct with its id and scope set; a live device handle.
        let mut fv: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
        fv.fieldId = NVML_FI_DEV_NVLINK_GET_STATE;
        fv.scopeId = l;
        let rc = unsafe { f(d.handle(), 1, &mut fv) };
        // SAFETY: NVML fills `uiVal` for this field (NV_FEATURE_ENABLED or DISABLED).
        return rc == 0 && fv.nvmlReturn == 0 && unsafe { fv.value.uiVal } == 1;
    }
    d.link_wrapper_for(l).is_active().unwrap_or(false)
}

/// What is at the other end of link `l`: a GPU (its bus id) or an NVSwitch. NVML says so
/// where it can (nvmlDeviceGetNvLinkRemoteDeviceType); otherwise, as NCCL reasons from the
/// remote PCI device, a remote that is none of this machine's GPUs is a switch (on HGX/DGX
/// every link's remote PCI info is an NVSwitch, never the peer GPU).
fn nvlink_remote(
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
    d: &nvml_wrapper::Device,
    l: u32,
    gpu_buses: &[String],
) -> Option<Result<String, ()>> {
    let kind = raw
        .and_then(|lib| lib.nvmlDeviceGetNvLinkRemoteDeviceType.as_ref().ok())
        .and_then(|f| {
            let mut kind = 255;
            // SAFETY: a live device handle and a valid out-pointer.
            (unsafe { f(d.handle(), l, &mut kind) } == 0).then_some(kind)
        });
    if kind == Some(NVLINK_REMOTE_SWITCH) {
        return Some(Err(()));
    }
    let remote = d.link_wrapper_for(l).remote_pci_info().ok()?;
    let bus = remote.bus_id.to_lowercase();
    if kind == Some(NVLINK_REMOTE_GPU) || gpu_buses.contains(&bus) {
        Some(Ok(bus))
    } else {
        Some(Err(()))
    }
}

/// Every active NVLink of one GPU, sorted by what it reaches.
fn nvlinks_of(
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
    d: &nvml_wrapper::Device,
    gpu_buses: &[String],
) -> NvLinks {
    let sm_major = d.cuda_compute_capability().map(|c| c.major).unwrap_or(0);
    let mut links = NvLinks::default();
    for l in 0..18 {
        if !nvlink_up(raw, d, l, sm_major) {
            continue;
        }
        links.active += 1;
        match nvlink_remote(raw, d, l, gpu_buses) {
            Some(Ok(bus)) => *links.to_gpu.entry(bus).or_default() += 1,
            Some(Err(())) => links.to_switch += 1,
            None => {}
        }
    }
    links
}

/// The environment variable naming the file to open as NVML instead of `libnvidia-ml.so.1`;
/// `none` means no NVML.
pub const NVML_OVERRIDE: &str = "NCCLPROBE_NVML_LIBRARY";

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NvmlGpu {
    pub index: u32,
    pub name: String,
    pub bus_id: String,
    pub pcie_gen: Option<(u32, u32)>,
    pub pcie_width: Option<(u32, u32)>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    /// (pid, bytes of GPU memory) of running compute processes.
    pub processes: Vec<(u32, Option<u64>)>,
    /// NVLinks NVML reports active.
    pub nvlinks_active: u32,
    /// ECC, row remapping, PCIe replays, NVLink errors, throttling, persistence.
    pub health: super::health::GpuHealth,
}

/// GPU 0's total memory in bytes and its name, as NVML reports them (the memory planner's
/// capacity).
pub fn gpu_memory() -> Result<(u64, String), String> {
    let nvml = nvml_init()?;
    let d = nvml.device_by_index(0).map_err(|e| e.to_string())?;
    let info = d.memory_info().map_err(|e| e.to_string())?;
    Ok((info.total, d.name().unwrap_or_default()))
}
