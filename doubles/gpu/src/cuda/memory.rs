//! "Device memory" is host memory: allocations, host memory, and copies that really copy
//! (at once, or when their stream gets to them).

use super::streams::{null_stream, stream_of};
use super::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const MEMORY_PER_DEVICE: usize = 4 << 30;
/// The most devices whose memory is accounted for (`NCCLPROBE_TEST_DOUBLE_GPUS` stays below).
const MAX_DEVICES: usize = 64;

/// Bytes in use on each device: its allocations and what the double's NCCL holds there.
static USED: [AtomicUsize; MAX_DEVICES] = [const { AtomicUsize::new(0) }; MAX_DEVICES];

/// A live allocation: its layout and the device it counts against (`None`: pinned host
/// memory, which takes no device memory).
type Allocation = (std::alloc::Layout, Option<usize>);

/// Every live allocation, by address.
fn allocations() -> &'static Mutex<HashMap<usize, Allocation>> {
    static A: OnceLock<Mutex<HashMap<usize, Allocation>>> = OnceLock::new();
    A.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Take `bytes` of `device`'s memory; false (nothing taken) when it does not fit.
pub(crate) fn reserve(device: usize, bytes: usize) -> bool {
    let Some(used) = USED.get(device) else {
        return false;
    };
    used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
        (u + bytes <= MEMORY_PER_DEVICE).then_some(u + bytes)
    })
    .is_ok()
}

/// Give back what [`reserve`] took.
pub(crate) fn release(device: usize, bytes: usize) {
    if let Some(used) = USED.get(device) {
        let _ = used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            Some(u.saturating_sub(bytes))
        });
    }
}

/// The current context's device, as an index into [`USED`].
fn current() -> Option<usize> {
    super::device::current_device().map(|d| d as usize)
}

/// As the driver answers: free and total memory of the current context's device.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    super::need_context!();
    let used = current()
        .and_then(|d| USED.get(d))
        .map_or(0, |u| u.load(Ordering::Acquire));
    *total = MEMORY_PER_DEVICE;
    *free = MEMORY_PER_DEVICE.saturating_sub(used);
    CUDA_SUCCESS
}

/// Zeroed memory of `bytes`, counted against `device` (`None`: host memory).
unsafe fn alloc(bytes: usize, device: Option<usize>) -> Option<*mut u8> {
    alloc_aligned(bytes, 256, device)
}

/// Device memory of the current context at a multiple of `align`, as a virtual-memory
/// allocation (cuMemCreate + cuMemAddressReserve at the granularity) places it; freed by
/// cuMemFree_v2 here.
pub(crate) unsafe fn device_alloc_aligned(bytes: usize, align: usize) -> Option<usize> {
    alloc_aligned(bytes, align, current()).map(|p| p as usize)
}

unsafe fn alloc_aligned(bytes: usize, align: usize, device: Option<usize>) -> Option<*mut u8> {
    let layout = std::alloc::Layout::from_size_align(bytes.max(1), align).ok()?;
    if let Some(d) = device {
        if !reserve(d, layout.size()) {
            return None;
        }
    }
    let p = std::alloc::alloc_zeroed(layout);
    if p.is_null() {
        if let Some(d) = device {
            release(d, layout.size());
        }
        return None;
    }
    allocations()
        .lock()
        .unwrap()
        .insert(p as usize, (layout, device));
    Some(p)
}

unsafe fn free(p: usize) -> CUresult {
    // Freeing synchronises the device: pending copies land before the memory goes.
    flush_legacy();
    match allocations().lock().unwrap().remove(&p) {
        Some((layout, device)) => {
            if let Some(d) = device {
                release(d, layout.size());
            }
            std::alloc::dealloc(p as *mut u8, layout);
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> CUresult {
    super::need_context!();
    if !super::graphs::unsafe_call_allowed() {
        return super::graphs::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    match alloc(bytes, current()) {
        Some(p) => {
            *dptr = p as u64;
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CUresult {
    if !super::graphs::unsafe_call_allowed() {
        return super::graphs::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    free(dptr as usize)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize) -> CUresult {
    super::need_context!();
    if !super::graphs::unsafe_call_allowed() {
        return super::graphs::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    match alloc(bytes, None) {
        Some(ptr) => {
            *p = ptr as *mut c_void;
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    free(p as usize)
}

#[derive(Clone, Copy)]
struct SendPtr(usize);

/// When the DMA of the last pageable host-to-device copy finishes (see cuMemcpyHtoD_v2).
fn pageable_dma_until() -> &'static Mutex<Option<Instant>> {
    static T: OnceLock<Mutex<Option<Instant>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(None))
}

/// Pageable host-to-device copies whose DMA has not landed yet: (destination, staged bytes).
type Pending = Mutex<Vec<(usize, Vec<u8>)>>;

fn pending_dma() -> &'static Pending {
    static P: OnceLock<Pending> = OnceLock::new();
    P.get_or_init(|| Mutex::new(Vec::new()))
}

/// Land every pending pageable copy, in order: what a synchronisation with the legacy default
/// stream guarantees (cuCtxSynchronize, a synchronous copy back, a blocking stream's next job,
/// freeing memory).
pub(crate) fn flush_legacy() {
    let pending = std::mem::take(&mut *pending_dma().lock().unwrap());
    for (dst, bytes) in pending {
        // SAFETY: the destination was a live allocation when the copy was issued, and memory
        // is freed only after flushing (cuMemFree_v2).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
    }
}

/// As the CUDA driver documents (API synchronization behavior): "For transfers from pageable
/// host memory to device memory ... the function will return once the pageable buffer has
/// been copied to the staging memory for DMA transfer to device memory, but the DMA to final
/// destination may not have completed." The copy is issued on the legacy default stream. So
/// here a pageable source is staged at once and lands only when something synchronises with
/// the legacy stream (`flush_legacy`): never for a `CU_STREAM_NON_BLOCKING` stream's work,
/// which is ordered after it only by an explicit synchronisation. A pinned source is copied at
/// once ("synchronous with respect to the host"). With `NCCLPROBE_TEST_DOUBLE_PAGEABLE_GBPS`
/// the DMA of a pageable source also takes n / rate after the call returns; cuCtxSynchronize
/// waits for it.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CUresult {
    super::need_context!();
    null_stream().synchronize();
    let pinned = allocations().lock().unwrap().contains_key(&(src as usize));
    if pinned {
        std::ptr::copy(src as *const u8, dst as *mut u8, n);
        return CUDA_SUCCESS;
    }
    let staged = std::slice::from_raw_parts(src as *const u8, n).to_vec();
    pending_dma().lock().unwrap().push((dst as usize, staged));
    let rate = std::env::var("NCCLPROBE_TEST_DOUBLE_PAGEABLE_GBPS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok());
    if let Some(gbps) = rate {
        let dma = Duration::from_secs_f64(n as f64 / (gbps * 1e9));
        *pageable_dma_until().lock().unwrap() = Some(Instant::now() + dma);
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    super::need_context!();
    null_stream().synchronize();
    flush_legacy();
    let until = pageable_dma_until().lock().unwrap().take();
    if let Some(t) = until {
        std::thread::sleep(t.saturating_duration_since(Instant::now()));
    }
    CUDA_SUCCESS
}

/// Synchronous, on the legacy stream: pending pageable copies land first.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CUresult {
    super::need_context!();
    null_stream().synchronize();
    flush_legacy();
    std::ptr::copy(src as *const u8, dst as *mut u8, n);
    CUDA_SUCCESS
}

/// An asynchronous copy: `n` bytes from `src` to `dst` when the stream gets to it.
unsafe fn copy_on_stream(dst: usize, src: usize, n: usize, stream: *mut c_void) -> CUresult {
    let (d, s) = (SendPtr(dst), SendPtr(src));
    stream_of(stream).submit(std::sync::Arc::new(move || {
        Box::new(move || {
            let (d, s) = (d, s);
            std::ptr::copy(s.0 as *const u8, d.0 as *mut u8, n)
        })
    }));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    super::need_context!();
    copy_on_stream(dst as usize, src as usize, n, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    super::need_context!();
    copy_on_stream(dst as usize, src as usize, n, stream)
}

/// Device to device on the stream (both ends must be live device allocations, as the driver
/// would fault on anything else).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    super::need_context!();
    let inside = |p: u64| {
        allocations()
            .lock()
            .unwrap()
            .iter()
            .any(|(&base, (layout, device))| {
                device.is_some()
                    && base as u64 <= p
                    && p + n as u64 <= (base + layout.size()) as u64
            })
    };
    if !inside(dst) || !inside(src) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    copy_on_stream(dst as usize, src as usize, n, stream)
}
