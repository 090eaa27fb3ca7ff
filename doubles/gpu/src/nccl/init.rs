//! Unique ids and creating communicators (an init fault refuses here).

use super::comms::{comm_of, Comm};
use super::faults::{fault, FaultKind};
use super::{
    NcclResult, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_SUCCESS, NCCL_SYSTEM_ERROR,
};
use crate::cuda::device::CURRENT_DEVICE;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// `ncclUniqueId`: `struct { char internal[128]; }`, passed by value.
#[repr(C)]
pub struct UniqueId {
    pub(crate) internal: [u8; 128],
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut [u8; 128]) -> NcclResult {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let token = format!(
        "ncclprobe-double-{}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut out = [0u8; 128];
    out[..token.len().min(127)].copy_from_slice(&token.as_bytes()[..token.len().min(127)]);
    *id = out;
    NCCL_SUCCESS
}

fn token_of(id: &[u8; 128]) -> Option<String> {
    let end = id.iter().position(|&b| b == 0).unwrap_or(128);
    let s = std::str::from_utf8(&id[..end]).ok()?;
    s.starts_with("ncclprobe-double-").then(|| s.to_string())
}

fn new_comm(
    token: &str,
    rank: usize,
    nranks: usize,
    device: c_int,
) -> Result<*mut c_void, NcclResult> {
    if fault().is_some_and(|f| f.kind == FaultKind::Init && f.rank == rank) {
        return Err(NCCL_SYSTEM_ERROR);
    }
    let dir = std::env::temp_dir().join(token);
    std::fs::create_dir_all(&dir).map_err(|_| NCCL_SYSTEM_ERROR)?;
    let comm = Box::new(Comm {
        dir,
        rank,
        nranks,
        device,
        seq: AtomicU64::new(0),
        collectives: AtomicU64::new(0),
        async_error: AtomicI32::new(NCCL_SUCCESS),
        stale_p2p: Mutex::new(Vec::new()),
        p2p_counts: Mutex::new(HashMap::new()),
        freed: AtomicBool::new(false),
        aborted: AtomicBool::new(false),
    });
    Ok(Box::into_raw(comm) as *mut c_void)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    out: *mut *mut c_void,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    let Some(token) = token_of(&id.internal) else {
        return NCCL_INVALID_ARGUMENT;
    };
    if nranks < 1 || rank < 0 || rank >= nranks {
        return NCCL_INVALID_ARGUMENT;
    }
    let device = CURRENT_DEVICE.with(|c| c.get());
    match new_comm(&token, rank as usize, nranks as usize, device) {
        Ok(c) => match one_gpu_per_rank(comm_of(c), device) {
            Ok(()) => {
                *out = c;
                NCCL_SUCCESS
            }
            Err(e) => {
                // Freed as ncclCommDestroy frees (poisoned, never reused).
                comm_of(c).freed.store(true, Ordering::Release);
                e
            }
        },
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut c_void,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    let mut id = [0u8; 128];
    ncclGetUniqueId(&mut id);
    let token = token_of(&id).unwrap_or_default();
    for r in 0..ndev.max(0) as usize {
        let dev = if devlist.is_null() {
            r as c_int
        } else {
            *devlist.add(r)
        };
        match new_comm(&token, r, ndev as usize, dev) {
            Ok(c) => *comms.add(r) = c,
            Err(e) => return e,
        }
    }
    NCCL_SUCCESS
}

/// As NCCL's init does once every rank's peer info is gathered (src/init.cc, initTransportsRank:
/// "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx" when two ranks share
/// a host hash and a bus id, then ncclInvalidUsage): every rank publishes its host and GPU in
/// the communicator's exchange, reads every peer's, and all fail when two share one GPU.
fn one_gpu_per_rank(comm: &Comm, device: c_int) -> Result<(), NcclResult> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let me = format!(
        "{}\t{}",
        host.trim(),
        crate::cuda::device::pci_bus_id(device)
    );
    comm.publish(0, &format!("peer{}", comm.rank), me.as_bytes());
    for r in (0..comm.nranks).filter(|&r| r != comm.rank) {
        let peer = comm
            .wait(0, &format!("peer{r}"), true)
            .ok_or(NCCL_SYSTEM_ERROR)?;
        if peer == me.as_bytes() {
            return Err(NCCL_INVALID_USAGE);
        }
    }
    Ok(())
}
