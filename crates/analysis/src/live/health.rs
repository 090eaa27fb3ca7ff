//! Reading a GPU's health counters through NVML (the counters and what they mean are in
//! `model::health`, where a run's record keeps them), and its PCIe Advanced Error Reporting
//! counters through sysfs, which need no driver.

use serde::Serialize;

pub use crate::model::health::{GpuHealth, NvLinkErrors, RemappedRows, THROTTLE_BAD};
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;

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

/// A device's PCIe Advanced Error Reporting counters since boot, as the kernel keeps them in
/// `aer_dev_correctable`, `aer_dev_nonfatal` and `aer_dev_fatal` (one `Name count` per line,
/// `TOTAL_ERR_*` last). Correctable errors are the link-level ones the hardware retried
/// (`BadTLP`, `BadDLLP`, `Rollover` and `Timeout` of the replay timer, `RxErr`); non-fatal and
/// fatal ones were not recovered by the link.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aer {
    /// Each non-zero correctable counter but the total, by the kernel's name.
    pub correctable: Vec<(String, u64)>,
    pub nonfatal_total: u64,
    pub fatal_total: u64,
}

/// The AER counters of the PCI device at `dir`; `None` when the kernel exposes none (no AER
/// capability, or a kernel before 5.x).
pub fn aer(dir: &std::path::Path) -> Option<Aer> {
    let counts = |file: &str| -> Option<Vec<(String, u64)>> {
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        Some(
            text.lines()
                .filter_map(|l| {
                    let (name, n) = l.trim().rsplit_once(char::is_whitespace)?;
                    Some((name.trim().to_string(), n.parse().ok()?))
                })
                .collect(),
        )
    };
    let total = |v: &[(String, u64)]| {
        v.iter()
            .filter(|(k, _)| k.starts_with("TOTAL_ERR"))
            .map(|(_, n)| *n)
            .sum()
    };
    let correctable = counts("aer_dev_correctable");
    let nonfatal = counts("aer_dev_nonfatal");
    let fatal = counts("aer_dev_fatal");
    if correctable.is_none() && nonfatal.is_none() && fatal.is_none() {
        return None;
    }
    Some(Aer {
        correctable: correctable
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, n)| *n > 0 && !k.starts_with("TOTAL_ERR"))
            .collect(),
        nonfatal_total: total(&nonfatal.unwrap_or_default()),
        fatal_total: total(&fatal.unwrap_or_default()),
    })
}
