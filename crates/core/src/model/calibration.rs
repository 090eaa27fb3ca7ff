//! Reference measurements a run takes beside the sweep: host memcpy, host-device copies.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub memcpy_bytes_per_s: Option<f64>,
    pub memcpy_size_bytes: Option<u64>,
    /// Host↔device copy bandwidth per GPU, both directions, pageable and pinned (nccl backend):
    /// the evidence behind "turn on pin_memory".
    #[serde(default)]
    pub copy_bandwidth: Vec<CopyBandwidth>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CopyBandwidth {
    pub device: usize,
    pub name: String,
    /// `host-to-device` or `device-to-host`.
    pub direction: String,
    pub pinned: bool,
    pub size_bytes: u64,
    pub bytes_per_s: f64,
}
