//! NCCL's allocator (ncclMemAlloc/Free) and buffer registration: ncclCommRegister and the
//! symmetric windows of ncclCommWindowRegister.

use super::{
    NcclResult, NCCL_INVALID_ARGUMENT, NCCL_SUCCESS, NCCL_SYSTEM_ERROR, NCCL_UNHANDLED_CUDA_ERROR,
};
use crate::cuda::memory::cuMemFree_v2;
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

/// The allocation granularity the double's GPUs report (CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
/// is 2 MiB on NVIDIA data-centre GPUs).
const GRANULARITY: usize = 2 << 20;

/// NCCL's allocations: base → size, as cuMemGetAddressRange would answer for them.
fn mem_allocs() -> &'static Mutex<std::collections::BTreeMap<usize, usize>> {
    static M: OnceLock<Mutex<std::collections::BTreeMap<usize, usize>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// The ncclMemAlloc allocation holding `[p, p + bytes)`: its base and size.
fn allocation_of(p: usize, bytes: usize) -> Option<(usize, usize)> {
    let m = mem_allocs().lock().ok()?;
    let (&base, &size) = m.range(..=p).next_back()?;
    (p.checked_add(bytes)? <= base + size).then_some((base, size))
}

/// NCCL 2.19's allocator (src/allocator.cc, v2.28.9 33-75): cuMem memory, the size rounded up
/// to the recommended granularity (52-53) and the address reserved at it.
#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(p: *mut *mut c_void, bytes: usize) -> NcclResult {
    if p.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    let Some(size) = bytes.max(1).checked_next_multiple_of(GRANULARITY) else {
        return NCCL_SYSTEM_ERROR;
    };
    let Some(d) = crate::cuda::memory::device_alloc_aligned(size, GRANULARITY) else {
        return NCCL_SYSTEM_ERROR;
    };
    if let Ok(mut m) = mem_allocs().lock() {
        m.insert(d, size);
    }
    *p = d as *mut c_void;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(p: *mut c_void) -> NcclResult {
    if let Ok(mut m) = mem_allocs().lock() {
        m.remove(&(p as usize));
    }
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
    match refused_window(version, buf as usize, bytes) {
        Some(Refused::NullWindow) => {
            *win = std::ptr::null_mut();
            NCCL_SUCCESS
        }
        Some(Refused::With(rc)) => rc,
        None => ncclCommRegister(c, buf, bytes, win),
    }
}

#[derive(Debug, PartialEq)]
enum Refused {
    NullWindow,
    With(NcclResult),
}

/// Why NCCL `version` would not make a window of `[buf, buf + bytes)`, if it would not.
fn refused_window(version: c_int, buf: usize, bytes: usize) -> Option<Refused> {
    // A window is cuMem memory: NCCL retains the allocation's handle, which memory from
    // cuMemAlloc has none of (cuMemRetainAllocationHandle fails: ncclUnhandledCudaError).
    let Some((base, size)) = allocation_of(buf, bytes) else {
        return Some(Refused::With(NCCL_UNHANDLED_CUDA_ERROR));
    };
    if version < 22800 {
        // 2.27.7 register.cc 218-222: an allocation off NCCL's 2 MiB page is refused with a
        // warning, ncclSuccess and a NULL window.
        (!base.is_multiple_of(GRANULARITY) || !size.is_multiple_of(GRANULARITY))
            .then_some(Refused::NullWindow)
    } else {
        // 2.28 dev_runtime.cc 606-609: "Window address must be suitably aligned."
        (!(buf - base).is_multiple_of(4096)).then_some(Refused::With(NCCL_INVALID_ARGUMENT))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_made_only_over_nccls_own_allocations_as_each_version_checks() {
        let mut p = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; freed below.
        assert_eq!(unsafe { ncclMemAlloc(&mut p, 1000) }, NCCL_SUCCESS);
        let base = p as usize;
        assert!(base.is_multiple_of(GRANULARITY));
        assert_eq!(allocation_of(base, 1000), Some((base, GRANULARITY)));
        // The whole allocation, and a 4 KiB-aligned part of it: a window on every version.
        for version in [22703, 22803] {
            assert_eq!(refused_window(version, base, GRANULARITY), None);
            assert_eq!(refused_window(version, base + 4096, 4096), None);
        }
        // Misaligned inside the allocation: 2.28 refuses it, 2.27 checks the allocation only.
        assert_eq!(
            refused_window(22803, base + 256, 256),
            Some(Refused::With(NCCL_INVALID_ARGUMENT))
        );
        assert_eq!(refused_window(22703, base + 256, 256), None);
        // Past its end, or memory NCCL did not allocate: no cuMem handle to retain.
        assert_eq!(
            refused_window(22803, base, GRANULARITY + 1),
            Some(Refused::With(NCCL_UNHANDLED_CUDA_ERROR))
        );
        let heap = [0u8; 64];
        assert_eq!(
            refused_window(22803, heap.as_ptr() as usize, 64),
            Some(Refused::With(NCCL_UNHANDLED_CUDA_ERROR))
        );
        // SAFETY: allocated above, freed once.
        assert_eq!(unsafe { ncclMemFree(p) }, NCCL_SUCCESS);
        assert_eq!(allocation_of(base, 1), None);
    }
}
