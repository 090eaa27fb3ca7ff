//! A record whose writer is gone. Rank 0 alone writes the run record; when it is killed
//! outright (SIGKILL, the OOM killer) its record would stay `running` for ever, although the
//! other ranks learn the run is over moments later (the launcher's SIGTERM, a lost peer). A
//! rank on rank 0's host, ending early, closes such a record for it: status `failed`, an error
//! that says rank 0 ended without closing it, every point rank 0 recorded kept.

use crate::exit::Failure;
use crate::model::{RunRecord, RunStatus};
use crate::render::record::paths::{target, Target};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long rank 0 gets to close its record itself before another rank does.
const RANK0_GRACE: Duration = Duration::from_secs(2);

/// Whether process `pid` is gone (on this host).
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// A rank other than 0 ended with `failure`: close the record at `json` when rank 0 ran on
/// this host and ended without closing it. Anything unreadable, another host's record, a
/// closed one or a live rank 0 is left alone.
pub fn close_if_rank0_gone(json: Option<&Path>, failure: &Failure) {
    let Ok(host) = hostname::get() else { return };
    let host = host.to_string_lossy();
    let me = std::process::id();
    let Some(path) = json.filter(|p| target(p) == Target::Regular && p.as_os_str() != "-") else {
        return;
    };
    let read = || -> Option<RunRecord> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    };
    let Some(record) = read() else { return };
    let Some(rank0) = record.backend.ranks.iter().find(|r| r.rank == 0) else {
        return;
    };
    if record.status != RunStatus::Running
        || rank0.host != host
        || rank0.pid == std::process::id()
        || rank0.pid == 0
    {
        return;
    }
    let (pid, deadline) = (rank0.pid, Instant::now() + RANK0_GRACE);
    while !gone(pid) {
        if Instant::now() > deadline {
            return; // rank 0 lives: closing the record is its job
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Rank 0 may have closed the record on its way out.
    let Some(mut record) = read().filter(|r| r.status == RunStatus::Running) else {
        return;
    };
    let error = format!(
        "rank 0 (pid {pid} on {host}) ended without closing the record (killed?); closed by the rank of pid {me}, which ended with: {}",
        failure.message
    );
    crate::sweep::record::close(&mut record, RunStatus::Failed, Some(&error));
    if let Ok(json) = serde_json::to_vec_pretty(&record) {
        if crate::render::record::write_atomic(path, &json).is_ok() {
            eprintln!("ncclprobe: {error}");
        }
    }
}
