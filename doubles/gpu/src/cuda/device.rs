//! Initialisation, devices, contexts, the driver version and error strings.

use super::{
    CUresult, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
    CUDA_SUCCESS,
};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

static INITIALISED: AtomicBool = AtomicBool::new(false);

pub(crate) fn device_count() -> c_int {
    std::env::var("NCCLPROBE_TEST_DOUBLE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

std::thread_local! {
    /// The device of this thread's current context; -1 while it has none.
    pub(crate) static CURRENT_DEVICE: std::cell::Cell<c_int> = const { std::cell::Cell::new(-1) };
}

/// The device of this thread's current context, if it has one.
pub(crate) fn current_device() -> Option<c_int> {
    let d = CURRENT_DEVICE.with(|c| c.get());
    (d >= 0).then_some(d)
}

#[no_mangle]
pub extern "C" fn cuInit(_flags: u32) -> CUresult {
    INITIALISED.store(true, Ordering::Release);
    CUDA_SUCCESS
}

fn ready() -> CUresult {
    if INITIALISED.load(Ordering::Acquire) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_INITIALIZED
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    if v.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *v = 12040;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    if ready() != 0 {
        return ready();
    }
    *n = device_count();
    CUDA_SUCCESS
}

/// The PCI address of a device, as CUDA writes it (`%04x:%02x:%02x.%x`), on the buses the NVML
/// part of the double reports for the same GPUs (`nvml.rs`, `bus_id`).
pub(crate) fn pci_bus_id(device: c_int) -> String {
    format!("0000:{:02X}:00.0", 0x18 + 0x10 * device)
}

/// cuda.h: `cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)`; the string and its NUL
/// must fit in `len`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(out: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    if ready() != 0 {
        return ready();
    }
    if dev < 0 || dev >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    let id = pci_bus_id(dev);
    if out.is_null() || len <= id.len() as c_int {
        return CUDA_ERROR_INVALID_VALUE;
    }
    std::ptr::copy_nonoverlapping(id.as_ptr() as *const c_char, out, id.len());
    *out.add(id.len()) = 0;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult {
    if ordinal < 0 || ordinal >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *dev = ordinal;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    let s = format!("ncclprobe test double GPU {dev}\0");
    let n = (len.max(1) as usize - 1).min(s.len() - 1);
    std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, name, n);
    *name.add(n) = 0;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> CUresult {
    if dev < 0 || dev >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *ctx = (dev as usize + 1) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(_dev: c_int) -> CUresult {
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> CUresult {
    CURRENT_DEVICE.with(|c| c.set(ctx as usize as c_int - 1));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(rc: CUresult, out: *mut *const c_char) -> CUresult {
    let s: &'static [u8] = match rc {
        0 => b"no error (test double)\0",
        2 => b"out of memory (test double)\0",
        600 => b"device not ready (test double)\0",
        _ => b"error (test double)\0",
    };
    *out = s.as_ptr() as *const c_char;
    CUDA_SUCCESS
}
