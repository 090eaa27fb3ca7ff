//! NCCL's allocator (ncclMemAlloc/Free) and buffer registration: ncclCommRegister and the
//! symmetric windows of ncclCommWindowRegister.

use super::{NcclResult, NCCL_INVALID_ARGUMENT, NCCL_SUCCESS, NCCL_SYSTEM_ERROR};
use crate::cuda::memory::{cuMemAlloc_v2, cuMemFree_v2};
use crate::cuda::CUDA_SUCCESS;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A registered buffer: (communicator, start, length, handle).
type Registered = (usize, usize, usize, usize);

fn registrations() -> &'static Mutex<Vec<Registered>> {
    static R: OnceLock<Mutex<Vec<Registered>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

pub(crate) fn is_registered(comm: usize, ptr: usize) -> bool {
    registrations()
        .lock()
        .map(|r| {
            r.iter()
                .any(|&(c, s, l, _)| c == comm && ptr >= s && ptr < s + l.max(1))
        })
        .unwrap_or(false)
}

/// NCCL 2.19's allocator: device memory like cuMemAlloc's.
#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(p: *mut *mut c_void, bytes: usize) -> NcclResult {
    let mut d = 0u64;
    if cuMemAlloc_v2(&mut d, bytes) != CUDA_SUCCESS {
        return NCCL_SYSTEM_ERROR;
    }
    *p = d as *mut c_void;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(p: *mut c_void) -> NcclResult {
    match cuMemFree_v2(p as u64) {
        CUDA_SUCCESS => NCCL_SUCCESS,
        _ => NCCL_INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    c: *mut c_void,
    buf: *mut c_void,
    bytes: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    if c.is_null() || buf.is_null() || handle.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    // NCCL 2.24+ (src/register/register.cc, ncclCommRegister): with NCCL_LOCAL_REGISTER=0, or
    // when P2P copies through cudaMemcpy (NCCL_P2P_USE_CUDA_MEMCPY=1), it "skips registration":
    // a NULL handle and ncclSuccess.
    let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_string());
    let mut version = 0;
    super::ncclGetVersion(&mut version);
    if version >= 22400
        && (var("NCCL_LOCAL_REGISTER").as_deref() == Some("0")
            || var("NCCL_P2P_USE_CUDA_MEMCPY").as_deref() == Some("1"))
    {
        *handle = std::ptr::null_mut();
        return NCCL_SUCCESS;
    }
    let h = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut r) = registrations().lock() {
        r.push((c as usize, buf as usize, bytes, h));
    }
    *handle = h as *mut c_void;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(c: *mut c_void, handle: *mut c_void) -> NcclResult {
    let Ok(mut r) = registrations().lock() else {
        return NCCL_SYSTEM_ERROR;
    };
    let before = r.len();
    r.retain(|&(comm, _, _, h)| !(comm == c as usize && h == handle as usize));
    if r.len() == before {
        NCCL_INVALID_ARGUMENT
    } else {
        NCCL_SUCCESS
    }
}

/// Whether NCCL 2.28+ gives this communicator symmetric support (`comm->symmetricSupport`,
/// src/dev_runtime.cc): not with windows disabled (NCCL_WIN_ENABLE=0) or cuMem off
/// (NCCL_CUMEM_ENABLE=0).
pub(crate) fn symmetric_support() -> bool {
    let off = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "0");
    !(off("NCCL_WIN_ENABLE") || off("NCCL_CUMEM_ENABLE"))
}

/// NCCL 2.27's symmetric windows: registered like ncclCommRegister's buffers here; the flag
/// must be NCCL_WIN_COLL_SYMMETRIC (1) or NCCL_WIN_DEFAULT (0). As register/register.cc does
/// in 2.27, with cuMem or local registration turned off (NCCL_CUMEM_ENABLE=0,
/// NCCL_LOCAL_REGISTER=0) the call succeeds and hands back a NULL window. From 2.28 a
/// communicator without symmetric support (`symmetric_support`) hands back a window that is
/// only local: non-null, and nothing in the call says so (ncclCommQueryProperties, 2.29, does).
#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    c: *mut c_void,
    buf: *mut c_void,
    bytes: usize,
    win: *mut *mut c_void,
    flags: c_int,
) -> NcclResult {
    if !(0..=1).contains(&flags) {
        return NCCL_INVALID_ARGUMENT;
    }
    let off = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "0");
    let mut version = 0;
    super::ncclGetVersion(&mut version);
    if version < 22800 && (off("NCCL_CUMEM_ENABLE") || off("NCCL_LOCAL_REGISTER")) {
        *win = std::ptr::null_mut();
        return NCCL_SUCCESS;
    }
    ncclCommRegister(c, buf, bytes, win)
}

/// `ncclCommProperties_t` (nccl.h, 2.29) up to the fields NCCL 2.29.0 writes.
#[repr(C)]
pub struct CommProperties {
    size: usize,
    magic: u32,
    version: u32,
    rank: c_int,
    n_ranks: c_int,
    cuda_dev: c_int,
    nvml_dev: c_int,
    device_api_support: bool,
    multimem_support: bool,
    gin_type: c_int,
}

/// NCCL 2.29 (src/dev_runtime.cc): the communicator's properties; `deviceApiSupport` is its
/// symmetric support. The struct must come from NCCL_COMM_PROPERTIES_INITIALIZER (its magic).
#[no_mangle]
pub unsafe extern "C" fn ncclCommQueryProperties(
    c: *mut c_void,
    props: *mut CommProperties,
) -> NcclResult {
    let comm = super::comms::live_comm(c, "ncclCommQueryProperties");
    let _in = comm.enter("ncclCommQueryProperties");
    if props.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    let p = &mut *props;
    if p.magic != 0xcafe_beef || p.size < std::mem::size_of::<CommProperties>() {
        return super::NCCL_INVALID_USAGE;
    }
    p.rank = comm.rank as c_int;
    p.n_ranks = comm.nranks as c_int;
    p.cuda_dev = comm.device;
    p.nvml_dev = comm.device;
    p.device_api_support = symmetric_support();
    p.multimem_support = false;
    p.gin_type = 0;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(c: *mut c_void, win: *mut c_void) -> NcclResult {
    if win.is_null() {
        return NCCL_SUCCESS;
    }
    ncclCommDeregister(c, win)
}
