//! Building a sweep's record: what ran, where, with which libraries, and the reference
//! measurements taken beside the sweep; closing it with the run's outcome.

use super::select::Selection;
use crate::backend::host::memcpy_bandwidth;
use crate::backend::nccl::Api;
use crate::exit::{ExitCode, Failure};
use crate::model::{self, Calibration, CopyBandwidth, RunRecord, RunStatus, Source};
use crate::plan::Plan;
use std::collections::BTreeMap;
use std::ffi::c_int;

/// A new record for a measured run, status `running` until `close`.
pub fn new_record(
    plan: &Plan,
    selection: &Selection,
    libraries: BTreeMap<String, String>,
    calibration: Calibration,
) -> RunRecord {
    let mut record = RunRecord::blank(
        Source::Measured,
        selection.backend.name(),
        selection.reason.clone(),
    );
    record.backend.library_versions = libraries;
    record.env = model::relevant_env();
    record.settings = Some(plan.settings.clone());
    record.calibration = calibration;
    // What this machine's GPUs look like (NVML, else sysfs); none on machines without GPUs.
    let facts = crate::live::collect(&crate::live::Roots::default(), true);
    record.wsl2_evidence = facts.wsl2_evidence.clone();
    record.topology = facts.topology.and_then(|t| serde_json::to_value(t).ok());
    // Each GPU's health as the run starts, for the gates judged on the record later.
    record.gpu_health = facts
        .nvml
        .iter()
        .flatten()
        .map(|g| model::health::GpuState {
            index: g.index,
            name: g.name.clone(),
            bus_id: g.bus_id.clone(),
            pcie_gen: g.pcie_gen,
            pcie_width: g.pcie_width,
            health: g.health.clone(),
            uuid: g.uuid.clone(),
            serial: g.serial.clone(),
        })
        .collect();
    record.notes = plan.notes.clone();
    record
}

/// The status a run ends with.
pub fn status(record: &RunRecord, result: &Result<(), Failure>) -> RunStatus {
    match result {
        Err(f) if f.code == ExitCode::Timeout => RunStatus::TimedOut,
        Err(f) if matches!(f.code, ExitCode::Interrupted | ExitCode::Terminated) => {
            RunStatus::Interrupted
        }
        Err(_) => RunStatus::Failed,
        Ok(()) if record.total_wrong() > 0 => RunStatus::CheckFailed,
        Ok(()) => RunStatus::Complete,
    }
}

/// End the record: status, end time, headlines, and the reason when it ended early.
pub fn close(record: &mut RunRecord, status: RunStatus, error: Option<&str>) {
    record.status = status;
    record.finished_at = Some(model::now_rfc3339());
    record.headlines = model::headlines(&record.points);
    record.error = error.map(str::to_string);
}

/// The size reference copies use: 64 MiB, or less when the sweep stops below it.
fn reference_copy_bytes(plan: &Plan) -> usize {
    (64usize << 20).min(plan.settings.max_bytes.max(1 << 20) as usize)
}

/// Single-thread memcpy bandwidth of this machine, the yardstick of the host backend.
pub fn memcpy_calibration(plan: &Plan) -> Calibration {
    let size = reference_copy_bytes(plan);
    match memcpy_bandwidth(size) {
        Ok(bw) => Calibration {
            memcpy_bytes_per_s: Some(bw),
            memcpy_size_bytes: Some(size as u64),
            copy_bandwidth: Vec::new(),
        },
        Err(_) => Calibration::default(),
    }
}

/// Host-device copy bandwidth per GPU, both directions, pageable and pinned; a copy that
/// fails is left out.
pub fn copy_calibration(api: &Api, devices: &[c_int], plan: &Plan) -> Calibration {
    let size = reference_copy_bytes(plan);
    let mut copies = Vec::new();
    for &d in devices {
        let name = api.device_name(d);
        for (pinned, to_device) in [(false, true), (true, true), (false, false), (true, false)] {
            let measured = api
                .use_device(d)
                .and_then(|_| api.copy_bandwidth(size, pinned, to_device));
            if let Ok(bw) = measured {
                copies.push(CopyBandwidth {
                    device: d as usize,
                    name: name.clone(),
                    direction: if to_device {
                        "host-to-device"
                    } else {
                        "device-to-host"
                    }
                    .into(),
                    pinned,
                    size_bytes: size as u64,
                    bytes_per_s: bw,
                });
            }
        }
    }
    Calibration {
        copy_bandwidth: copies,
        ..Calibration::default()
    }
}

/// NCCL and the CUDA driver as the record names them: version and file.
pub fn nccl_libraries(api: &Api) -> BTreeMap<String, String> {
    let (driver_path, driver_version) = &api.driver;
    [
        (
            "nccl".to_string(),
            format!("{} ({})", api.nccl.version(), api.nccl.path.display()),
        ),
        (
            "cuda-driver".to_string(),
            format!(
                "{}.{} ({})",
                driver_version / 1000,
                driver_version % 1000 / 10,
                driver_path.display()
            ),
        ),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcome_decides_the_status() {
        let mut r = RunRecord::blank(Source::Measured, "host", "test".into());
        assert_eq!(status(&r, &Ok(())), RunStatus::Complete);
        let timeout = Failure::new(ExitCode::Timeout, "timeout: x");
        assert_eq!(status(&r, &Err(timeout)), RunStatus::TimedOut);
        assert_eq!(status(&r, &Err(Failure::internal("x"))), RunStatus::Failed);
        close(&mut r, RunStatus::Failed, Some("rank 1 failed"));
        assert_eq!(r.error.as_deref(), Some("rank 1 failed"));
        assert!(r.finished_at.is_some());
    }
}
