//! Unique ids and creating communicators (an init fault refuses here).

use super::comms::{comm_of, Comm, INIT_BYTES};
use super::faults::{fault, FaultKind};
use super::group::{group_depth, GROUP};
use super::{
    ncclGetVersion, NcclResult, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_IN_PROGRESS,
    NCCL_SUCCESS, NCCL_SYSTEM_ERROR, NCCL_UNHANDLED_CUDA_ERROR,
};
use crate::cuda::device::CURRENT_DEVICE;
use crate::trace::trace_line;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
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
    blocking: bool,
) -> Result<*mut c_void, NcclResult> {
    if fault().is_some_and(|f| f.kind == FaultKind::Init && f.rank == rank) {
        return Err(NCCL_SYSTEM_ERROR);
    }
    let dir = std::env::temp_dir().join(token);
    std::fs::create_dir_all(&dir).map_err(|_| NCCL_SYSTEM_ERROR)?;
    // NCCL's own device memory, taken on the communicator's device (a failed cudaMalloc in
    // init is ncclUnhandledCudaError).
    if !crate::cuda::memory::reserve(device as usize, INIT_BYTES) {
        return Err(NCCL_UNHANDLED_CUDA_ERROR);
    }
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
        blocking,
        user: Mutex::new(None),
        held: AtomicUsize::new(INIT_BYTES),
        connected: AtomicBool::new(false),
        premulsums: Mutex::new(Vec::new()),
    });
    let gpu = crate::cuda::device::visible()
        .get(device as usize)
        .copied()
        .unwrap_or(device as usize);
    let bus = crate::cuda::device::pci_bus_id(device);
    super::debug::init_lines(rank, nranks, device, gpu, &bus, super::playing());
    Ok(Box::into_raw(comm) as *mut c_void)
}

/// NCCL_COMM_BLOCKING=0/1 overrides the config's `blocking` (src/init.cc, envConfigOverride:
/// "if (blockingEnv == 0 || blockingEnv == 1) comm->config.blocking = blockingEnv").
fn blocking_after_env(config: bool) -> bool {
    match std::env::var("NCCL_COMM_BLOCKING").ok().as_deref() {
        Some("0") => false,
        Some("1") => true,
        _ => config,
    }
}

/// The `ncclConfig_t` fields the double acts on or reports, read as NCCL reads the struct
/// (src/init.cc, parseCommConfig): `min(size, sizeof(ncclConfig_t))` bytes of the library's
/// own layout, so a field past what this library knows is not read.
struct Config {
    blocking: c_int,
    nvlink_centric_sched: Option<c_int>,
    cta_policy: Option<c_int>,
}

unsafe fn read_config(config: *const u8) -> Result<Config, NcclResult> {
    if config.is_null() {
        return Ok(Config {
            blocking: 1,
            nvlink_centric_sched: None,
            cta_policy: None,
        });
    }
    let size = (config as *const usize).read_unaligned();
    let int_at = |offset: usize| (config.add(offset) as *const c_int).read_unaligned();
    if size < 20 || (config.add(8) as *const u32).read_unaligned() != 0xcafe_beef {
        // "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER"
        return Err(NCCL_INVALID_ARGUMENT);
    }
    let blocking = match int_at(16) {
        c_int::MIN => 1,
        b @ (0 | 1) => b,
        // "Invalid config blocking attribute value"
        _ => return Err(NCCL_INVALID_ARGUMENT),
    };
    let mut version = 0;
    ncclGetVersion(&mut version);
    // nvlinkCentricSched sits at offset 76 of NCCL 2.28's layout (80 bytes).
    let nvlink_centric_sched = (version >= 22800 && size >= 80).then(|| int_at(76));
    // CTAPolicy sits at offset 60 of 2.27's layout (72 bytes). parseCommConfig refuses a value
    // outside NCCL_CTA_POLICY_DEFAULT..EFFICIENCY (2.27), ..ZERO (2.28), or the 0..3 bitmask
    // (2.29 and later): "Invalid CTA policy".
    let cta_policy = (version >= 22700 && size >= 72).then(|| int_at(60));
    let highest = match version {
        ..=22799 => 1,
        22800..=22899 => 2,
        _ => 3,
    };
    if let Some(p) = cta_policy.filter(|&p| p != c_int::MIN) {
        if !(0..=highest).contains(&p) {
            return Err(NCCL_INVALID_ARGUMENT);
        }
    }
    Ok(Config {
        blocking,
        nvlink_centric_sched,
        cta_policy: cta_policy.filter(|&p| p != c_int::MIN),
    })
}

/// Create this rank's communicator and run (or defer) its initialisation: the peer exchange
/// that finds two ranks on one GPU. Blocking: at once, in the call. Non-blocking: in a
/// background thread, the communicator saying ncclInProgress meanwhile. Inside a group: at
/// the group's end (ncclGroupEnd), as NCCL does.
unsafe fn init_rank(
    out: *mut *mut c_void,
    nranks: c_int,
    id: &UniqueId,
    rank: c_int,
    blocking: bool,
) -> NcclResult {
    let Some(token) = token_of(&id.internal) else {
        return NCCL_INVALID_ARGUMENT;
    };
    if nranks < 1 || rank < 0 || rank >= nranks {
        return NCCL_INVALID_ARGUMENT;
    }
    // NCCL takes the device from cudaGetDevice, which is 0 on a thread that set none.
    let device = CURRENT_DEVICE.with(|c| c.get()).max(0);
    let c = match new_comm(&token, rank as usize, nranks as usize, device, blocking) {
        Ok(c) => c,
        Err(e) => {
            if group_depth() > 0 {
                super::group::fail_group(e);
            }
            return e;
        }
    };
    let comm = comm_of(c);
    let init = move || match one_gpu_per_rank(comm, device) {
        Ok(()) => {
            let _ = comm.async_error.compare_exchange(
                NCCL_IN_PROGRESS,
                NCCL_SUCCESS,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            NCCL_SUCCESS
        }
        Err(e) => {
            comm.async_error.store(e, Ordering::Release);
            e
        }
    };
    *out = c;
    if group_depth() > 0 {
        comm.async_error.store(NCCL_IN_PROGRESS, Ordering::Release);
        GROUP.with(|g| g.borrow_mut().inits.push((c as usize, Box::new(init))));
        return NCCL_SUCCESS;
    }
    if blocking {
        let rc = init();
        if rc != NCCL_SUCCESS {
            // Freed as ncclCommDestroy frees (poisoned, never reused).
            comm.freed.store(true, Ordering::Release);
        }
        return rc;
    }
    comm.async_error.store(NCCL_IN_PROGRESS, Ordering::Release);
    std::thread::spawn(init);
    NCCL_IN_PROGRESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    out: *mut *mut c_void,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    init_rank(out, nranks, &id, rank, blocking_after_env(true))
}

/// NCCL 2.14+: ncclCommInitRank with a configuration (`ncclConfig_t`, see `read_config`).
/// `NCCLPROBE_TEST_DOUBLE_TRACE` gets one line per call with what the double read.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    out: *mut *mut c_void,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *mut c_void,
) -> NcclResult {
    let config = match read_config(config as *const u8) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let blocking = blocking_after_env(config.blocking == 1);
    trace_line(&format!(
        "call=ncclCommInitRankConfig rank={rank} blocking={} nvlinkCentricSched={} CTAPolicy={}",
        blocking as u8,
        config
            .nvlink_centric_sched
            .map_or("unread".to_string(), |v| v.to_string()),
        config
            .cta_policy
            .map_or("unset".to_string(), |v| v.to_string())
    ));
    init_rank(out, nranks, &id, rank, blocking)
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
        match new_comm(&token, r, ndev as usize, dev, blocking_after_env(true)) {
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
