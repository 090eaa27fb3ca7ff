//! TEST DOUBLE — not NVML. Answers as `libnvidia-ml.so.1` for a machine described by
//! environment variables, so the live `topo`/`diagnose` paths run on machines without a GPU:
//! - `NCCLPROBE_TEST_DOUBLE_GPUS=N` GPUs (2), bus ids `00000000:{0x18 + 0x10 i}:00.0`;
//! - `NCCLPROBE_TEST_DOUBLE_LINKS=0-1:NV4,0-2:SYS/CNS,...` the link between two GPUs (NVn:
//!   n active NVLinks to the peer; else the PCIe common ancestor PIX/PXB/PHB/NODE/SYS;
//!   unlisted pairs PHB) and, after `/`, the P2P read status as nvidia-smi's code (OK);
//! - `NCCLPROBE_TEST_DOUBLE_PROCS=PID:GPU:BYTES,...` running compute processes;
//! - `NCCLPROBE_TEST_DOUBLE_PCIE_WIDTH=GPU:WIDTH,...` a GPU's current link width (of x16);
//! - `NCCLPROBE_TEST_DOUBLE_NVSWITCH=LINKS[,GPU:LINKS...]` an HGX/DGX machine instead: every
//!   GPU's NVLinks (LINKS active, or as listed per GPU) go to NVSwitches, never to a peer GPU,
//!   and the GPUs are Hopper (compute capability 9.0), whose link state NVML gives through the
//!   field value NVML_FI_DEV_NVLINK_GET_STATE rather than nvmlDeviceGetNvLinkState.
//!
//! Device handles are `index + 1` cast to a pointer.

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlPciInfo_t, nvmlProcessInfo_t};
use std::ffi::{c_char, c_uint};

type NvmlReturn = c_uint;
const SUCCESS: NvmlReturn = 0;
const INVALID_ARGUMENT: NvmlReturn = 2;
const INSUFFICIENT_SIZE: NvmlReturn = 7;
const MAX_NVLINKS: c_uint = 18;

fn gpus() -> usize {
    crate::cuda::device::machine_gpus()
}

fn env_list(key: &str) -> Vec<String> {
    std::env::var(key)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// (link code, P2P code) between two GPUs.
fn link(a: usize, b: usize) -> (String, String) {
    for entry in env_list("NCCLPROBE_TEST_DOUBLE_LINKS") {
        let Some((pair, what)) = entry.split_once(':') else {
            continue;
        };
        let Some((x, y)) = pair.split_once('-') else {
            continue;
        };
        let (Ok(x), Ok(y)) = (x.parse::<usize>(), y.parse::<usize>()) else {
            continue;
        };
        if (x, y) == (a, b) || (y, x) == (a, b) {
            let (code, p2p) = what.split_once('/').unwrap_or((what, "OK"));
            return (code.to_string(), p2p.to_string());
        }
    }
    ("PHB".into(), "OK".into())
}

fn nvlinks(a: usize, b: usize) -> usize {
    link(a, b)
        .0
        .strip_prefix("NV")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The peer at the other end of GPU `a`'s NVLink `l`: links are numbered peer by peer.
fn nvlink_peer(a: usize, l: usize) -> Option<usize> {
    let mut next = 0;
    for b in (0..gpus()).filter(|&b| b != a) {
        next += nvlinks(a, b);
        if l < next {
            return Some(b);
        }
    }
    None
}

/// Active NVLinks of GPU `i` to NVSwitches, on an NVSwitch machine (None otherwise).
fn switch_links(i: usize) -> Option<usize> {
    let spec = env_list("NCCLPROBE_TEST_DOUBLE_NVSWITCH");
    let all = spec.first()?.parse::<usize>().ok()?;
    let own = spec[1..].iter().find_map(|e| {
        let (g, n) = e.split_once(':')?;
        (g.parse::<usize>().ok()? == i).then(|| n.parse().ok())?
    });
    Some(own.unwrap_or(all))
}

const NOT_SUPPORTED: NvmlReturn = 3;
const NVLINK_DEVICE_TYPE_GPU: c_uint = 0;
const NVLINK_DEVICE_TYPE_SWITCH: c_uint = 2;

fn index_of(d: nvmlDevice_t) -> Option<usize> {
    let i = (d as usize).checked_sub(1)?;
    (i < gpus()).then_some(i)
}

fn bus_id(i: usize) -> String {
    format!("00000000:{:02X}:00.0", 0x18 + 0x10 * i)
}

unsafe fn write_str(out: *mut c_char, len: c_uint, s: &str) -> NvmlReturn {
    if out.is_null() || (len as usize) <= s.len() {
        return INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, out, s.len());
    *out.add(s.len()) = 0;
    SUCCESS
}

unsafe fn pci_info(i: usize, out: *mut nvmlPciInfo_t) -> NvmlReturn {
    let mut info: nvmlPciInfo_t = std::mem::zeroed();
    let id = bus_id(i);
    for (dst, src) in info.busId.iter_mut().zip(id.bytes()) {
        *dst = src as c_char;
    }
    info.bus = (0x18 + 0x10 * i) as c_uint;
    info.pciDeviceId = 0x20b0_10de;
    *out = info;
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, len: c_uint) -> NvmlReturn {
    write_str(out, len, "535.00 (test double)")
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(n: *mut c_uint) -> NvmlReturn {
    *n = gpus() as c_uint;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    i: c_uint,
    d: *mut nvmlDevice_t,
) -> NvmlReturn {
    if i as usize >= gpus() {
        return INVALID_ARGUMENT;
    }
    *d = (i as usize + 1) as nvmlDevice_t;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    d: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    match index_of(d) {
        // One model name for all, as on a real node.
        Some(_) => write_str(out, len, "ncclprobe test double GPU"),
        None => INVALID_ARGUMENT,
    }
}

#[path = "nvml_ids.rs"]
mod ids;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    d: nvmlDevice_t,
    out: *mut nvmlPciInfo_t,
) -> NvmlReturn {
    match index_of(d) {
        Some(i) => pci_info(i, out),
        None => INVALID_ARGUMENT,
    }
}

unsafe fn pcie(d: nvmlDevice_t, out: *mut c_uint, value: impl Fn(usize) -> c_uint) -> NvmlReturn {
    match index_of(d) {
        Some(i) => {
            *out = value(i);
            SUCCESS
        }
        None => INVALID_ARGUMENT,
    }
}

fn current_width(i: usize) -> c_uint {
    env_list("NCCLPROBE_TEST_DOUBLE_PCIE_WIDTH")
        .iter()
        .filter_map(|e| e.split_once(':'))
        .find(|(g, _)| g.parse() == Ok(i))
        .and_then(|(_, w)| w.parse().ok())
        .unwrap_or(16)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    pcie(d, out, |_| 4)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    pcie(d, out, |_| 4)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    pcie(d, out, current_width)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    pcie(d, out, |_| 16)
}

/// As NVML: with too small a buffer, the count and INSUFFICIENT_SIZE.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    d: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    let mine: Vec<(c_uint, u64)> = env_list("NCCLPROBE_TEST_DOUBLE_PROCS")
        .iter()
        .filter_map(|e| {
            let mut it = e.split(':');
            let pid = it.next()?.parse().ok()?;
            let gpu: usize = it.next()?.parse().ok()?;
            let bytes = it.next()?.parse().ok()?;
            (gpu == i).then_some((pid, bytes))
        })
        .collect();
    let room = *count as usize;
    *count = mine.len() as c_uint;
    if room < mine.len() || (infos.is_null() && !mine.is_empty()) {
        return INSUFFICIENT_SIZE;
    }
    for (k, (pid, bytes)) in mine.into_iter().enumerate() {
        *infos.add(k) = nvmlProcessInfo_t {
            pid,
            usedGpuMemory: bytes,
            gpuInstanceId: u32::MAX,
            computeInstanceId: u32::MAX,
        };
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    if l >= MAX_NVLINKS {
        return INVALID_ARGUMENT;
    }
    if switch_links(i).is_some() {
        // Hopper: the state comes from the NVML_FI_DEV_NVLINK_GET_STATE field.
        return NOT_SUPPORTED;
    }
    *out = nvlink_peer(i, l as usize).is_some() as c_uint;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    d: nvmlDevice_t,
    major: *mut std::ffi::c_int,
    minor: *mut std::ffi::c_int,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    *major = if switch_links(i).is_some() { 9 } else { 8 };
    *minor = 0;
    SUCCESS
}

/// Field values: only NVML_FI_DEV_NVLINK_GET_STATE (165), answered on Hopper.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    d: nvmlDevice_t,
    count: std::ffi::c_int,
    values: *mut nvml_wrapper_sys::bindings::nvmlFieldValue_t,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    for k in 0..count.max(0) as usize {
        let v = &mut *values.add(k);
        match (v.fieldId, switch_links(i)) {
            (165, Some(n)) => {
                v.nvmlReturn = SUCCESS;
                v.value.uiVal = ((v.scopeId as usize) < n) as c_uint;
            }
            _ => v.nvmlReturn = NOT_SUPPORTED,
        }
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    match switch_links(i) {
        Some(n) if (l as usize) < n => *out = NVLINK_DEVICE_TYPE_SWITCH,
        Some(_) => return INVALID_ARGUMENT,
        None if nvlink_peer(i, l as usize).is_some() => *out = NVLINK_DEVICE_TYPE_GPU,
        None => return INVALID_ARGUMENT,
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    d: nvmlDevice_t,
    l: c_uint,
    out: *mut nvmlPciInfo_t,
) -> NvmlReturn {
    if let Some(n) = index_of(d).and_then(switch_links) {
        // Each link reaches one of four NVSwitches: their PCI info, never a GPU's.
        if (l as usize) >= n {
            return INVALID_ARGUMENT;
        }
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        let id = format!("00000000:{:02X}:00.0", 0xC5 + (l % 4));
        for (dst, src) in info.busId.iter_mut().zip(id.bytes()) {
            *dst = src as c_char;
        }
        info.bus = 0xC5 + (l % 4);
        info.pciDeviceId = 0x22a3_10de;
        *out = info;
        return SUCCESS;
    }
    match index_of(d).and_then(|i| nvlink_peer(i, l as usize)) {
        Some(peer) => pci_info(peer, out),
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    a: nvmlDevice_t,
    b: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    let (Some(a), Some(b)) = (index_of(a), index_of(b)) else {
        return INVALID_ARGUMENT;
    };
    *out = match link(a, b).0.as_str() {
        "PIX" => 10,
        "PXB" => 20,
        "PHB" => 30,
        "SYS" => 50,
        // NVLink pairs sit under one CPU in this double.
        _ => 40,
    };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    a: nvmlDevice_t,
    b: nvmlDevice_t,
    _caps: c_uint,
    out: *mut c_uint,
) -> NvmlReturn {
    let (Some(a), Some(b)) = (index_of(a), index_of(b)) else {
        return INVALID_ARGUMENT;
    };
    *out = match link(a, b).1.as_str() {
        "OK" => 0,
        "CNS" => 1,
        "GNS" => 2,
        "TNS" => 3,
        "DR" => 4,
        "NS" => 5,
        _ => 6,
    };
    SUCCESS
}

/// A GPU's health counters as `NCCLPROBE_TEST_DOUBLE_HEALTH=GPU:key=value,...;GPU:...` states
/// them (`ecc_unc`, `ecc_unc_agg`, `ecc_corr`, `remap_unc`, `remap_corr`, `remap_pending`,
/// `remap_failure`, `replay`, `throttle` (hex or decimal bits), `persistence`, `nvlink_crc`,
/// `nvlink_replay`, `nvlink_recovery`); unstated counters are those of a healthy GPU: ECC on, no
/// errors, nothing remapped, idle clocks (`GpuIdle`), persistence on.
fn health(i: usize, key: &str) -> u64 {
    let spec = std::env::var("NCCLPROBE_TEST_DOUBLE_HEALTH").unwrap_or_default();
    for gpu in spec.split(';') {
        let Some((g, kvs)) = gpu.split_once(':') else {
            continue;
        };
        if g.trim().parse::<usize>().ok() != Some(i) {
            continue;
        }
        for kv in kvs.split(',') {
            if let Some((k, v)) = kv.split_once('=') {
                if k.trim() == key {
                    let v = v.trim();
                    return match v.strip_prefix("0x") {
                        Some(hex) => u64::from_str_radix(hex, 16).unwrap_or(0),
                        None => v.parse().unwrap_or(0),
                    };
                }
            }
        }
    }
    match key {
        "throttle" => 0x1,
        "persistence" => 1,
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    d: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    if index_of(d).is_none() || current.is_null() || pending.is_null() {
        return INVALID_ARGUMENT;
    }
    *current = 1;
    *pending = 1;
    SUCCESS
}

/// `errorType` 0 corrected, 1 uncorrected; `counterType` 0 volatile, 1 aggregate.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    d: nvmlDevice_t,
    error_type: c_uint,
    counter_type: c_uint,
    out: *mut u64,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    if out.is_null() || error_type > 1 || counter_type > 1 {
        return INVALID_ARGUMENT;
    }
    *out = match (error_type, counter_type) {
        (1, 0) => health(i, "ecc_unc"),
        // The lifetime count includes this boot's.
        (1, _) => health(i, "ecc_unc_agg").max(health(i, "ecc_unc")),
        (_, _) => health(i, "ecc_corr"),
    };
    SUCCESS
}

/// Page retirement is for GPUs before Ampere; the double's GPUs (compute capability 8.0 and
/// 9.0) remap rows instead, and NVML says so.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    d: nvmlDevice_t,
    _out: *mut c_uint,
) -> NvmlReturn {
    if index_of(d).is_none() {
        return INVALID_ARGUMENT;
    }
    NOT_SUPPORTED
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    d: nvmlDevice_t,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    if corr.is_null() || unc.is_null() || pending.is_null() || failure.is_null() {
        return INVALID_ARGUMENT;
    }
    *corr = health(i, "remap_corr") as c_uint;
    *unc = health(i, "remap_unc") as c_uint;
    *pending = health(i, "remap_pending") as c_uint;
    *failure = health(i, "remap_failure") as c_uint;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    *out = health(i, "replay") as c_uint;
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    d: nvmlDevice_t,
    out: *mut u64,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    *out = health(i, "throttle");
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    *out = health(i, "persistence") as c_uint;
    SUCCESS
}

/// `counter`: 0 DL replay, 1 DL recovery, 2 DL CRC flit, 3 DL CRC data. Links that are not
/// there answer INVALID_ARGUMENT; the stated counts land on link 0.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    d: nvmlDevice_t,
    l: c_uint,
    counter: c_uint,
    out: *mut u64,
) -> NvmlReturn {
    let Some(i) = index_of(d) else {
        return INVALID_ARGUMENT;
    };
    let links = switch_links(i)
        .unwrap_or_else(|| (0..gpus()).filter(|&b| b != i).map(|b| nvlinks(i, b)).sum());
    if l as usize >= links || counter > 3 || out.is_null() {
        return INVALID_ARGUMENT;
    }
    let key = [
        "nvlink_replay",
        "nvlink_recovery",
        "nvlink_crc",
        "nvlink_crc_data",
    ][counter as usize];
    *out = if l == 0 { health(i, key) } else { 0 };
    SUCCESS
}
