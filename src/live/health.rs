//! A GPU's health counters as NVML keeps them: ECC mode and error counts, row remapping (A100
//! and later) or page retirement (earlier GPUs), the PCIe replay counter, NVLink error counters
//! per link, the clock throttle reasons and persistence mode. A counter the GPU or driver does
//! not support (`NVML_ERROR_NOT_SUPPORTED`) is `None`, never 0.

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use serde::Serialize;

/// Row remapping (`nvmlDeviceGetRemappedRows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remapping waits for the GPU's next reset.
    pub pending: bool,
    /// A remapping failed: the row could not be replaced.
    pub failure: bool,
}

/// One NVLink's error counters (`nvmlDeviceGetNvLinkErrorCounter`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NvLinkErrors {
    pub link: u32,
    pub replay: u64,
    pub recovery: u64,
    pub crc_flit: u64,
    pub crc_data: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuHealth {
    pub ecc_enabled: Option<bool>,
    /// Uncorrectable (double-bit) ECC errors since the driver loaded, and over the GPU's life.
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub ecc_corrected_volatile: Option<u64>,
    /// Pages retired and waiting for a reset (GPUs before A100).
    pub retired_pages_pending: Option<bool>,
    pub remapped_rows: Option<RemappedRows>,
    /// PCIe link-level retries since the driver loaded.
    pub pcie_replays: Option<u32>,
    /// `nvmlClocksThrottleReasons` bits.
    pub throttle_reasons: Option<u64>,
    pub persistence: Option<bool>,
    /// Active links' error counters.
    pub nvlink_errors: Vec<NvLinkErrors>,
}

/// Read every counter NVML answers for device `d`; `raw` (NVML's library) for the calls the
/// wrapper lacks (row remapping).
pub fn read(
    d: &nvml_wrapper::Device,
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
) -> GpuHealth {
    let ecc = |kind, counter| d.total_ecc_errors(kind, counter).ok();
    let mut h = GpuHealth {
        ecc_enabled: d.is_ecc_enabled().ok().map(|m| m.currently_enabled),
        ecc_uncorrected_volatile: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
        ecc_uncorrected_aggregate: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        ecc_corrected_volatile: ecc(MemoryError::Corrected, EccCounter::Volatile),
        retired_pages_pending: d.are_pages_pending_retired().ok(),
        remapped_rows: raw.and_then(|lib| remapped_rows(lib, d)),
        pcie_replays: d.pcie_replay_counter().ok(),
        throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
        persistence: d.is_in_persistent_mode().ok(),
        nvlink_errors: Vec::new(),
    };
    for link in 0..18 {
        let l = d.link_wrapper_for(link);
        // Hopper answers the link state through a field value only: an error here is not
        // "inactive", and the counters decide.
        if matches!(l.is_active(), Ok(false)) {
            continue;
        }
        let Ok(replay) = l.error_counter(ErrorCounter::DlReplay) else {
            continue;
        };
        let count = |c| l.error_counter(c).unwrap_or(0);
        h.nvlink_errors.push(NvLinkErrors {
            link,
            replay,
            recovery: count(ErrorCounter::DlRecovery),
            crc_flit: count(ErrorCounter::DlCrcFlit),
            crc_data: count(ErrorCounter::DlCrcData),
        });
    }
    h
}

fn remapped_rows(
    lib: &nvml_wrapper_sys::bindings::NvmlLib,
    d: &nvml_wrapper::Device,
) -> Option<RemappedRows> {
    let f = lib.nvmlDeviceGetRemappedRows.as_ref().ok()?;
    let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
    // SAFETY: the handle of a live device of an initialised NVML; valid out-pointers.
    let rc = unsafe { f(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
    (rc == 0).then_some(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
    })
}

/// The throttle reasons that slow a GPU down against its will, by NVML's bit
/// (`nvmlClocksThrottleReasons*`): hardware slowdown, software and hardware thermal slowdown,
/// the power brake. Idle, the application clock setting and the software power cap are not.
pub const THROTTLE_BAD: &[(u64, &str)] = &[
    (0x8, "HW slowdown (thermal or power brake assertion)"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
];
