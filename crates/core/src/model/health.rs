//! A GPU's health counters as NVML keeps them (read by `live::health`), and the state of each
//! GPU a run's record keeps: ECC mode and error counts, row remapping (A100 and later) or page
//! retirement (earlier GPUs), the PCIe replay counter and link, NVLink error counters per link,
//! the clock throttle reasons and persistence mode. A counter the GPU or driver does not
//! support (`NVML_ERROR_NOT_SUPPORTED`) is `None`, never 0.

use serde::{Deserialize, Serialize};

/// Row remapping (`nvmlDeviceGetRemappedRows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remapping waits for the GPU's next reset.
    pub pending: bool,
    /// A remapping failed: the row could not be replaced.
    pub failure: bool,
}

/// One NVLink's error counters (`nvmlDeviceGetNvLinkErrorCounter`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvLinkErrors {
    pub link: u32,
    pub replay: u64,
    pub recovery: u64,
    pub crc_flit: u64,
    pub crc_data: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

/// One GPU of the machine that wrote a record, as the run started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuState {
    /// NVML's index (all GPUs of the machine, whatever `CUDA_VISIBLE_DEVICES` says).
    pub index: u32,
    pub name: String,
    pub bus_id: String,
    /// PCIe (current, maximum) generation and width.
    pub pcie_gen: Option<(u32, u32)>,
    pub pcie_width: Option<(u32, u32)>,
    pub health: GpuHealth,
    /// NVML's UUID (`GPU-…`), what a fleet knows the GPU by when it moves between nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The board's serial number (NVML answers it on boards with an inforom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

impl GpuState {
    /// `GPU0 (00000000:18:00.0)`, as findings and gates name a GPU.
    pub fn label(&self) -> String {
        format!("GPU{} ({})", self.index, self.bus_id)
    }
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
