//! Initialisation, devices, contexts, the driver version and error strings.

use super::{
    CUresult, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
    CUDA_SUCCESS,
};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

static INITIALISED: AtomicBool = AtomicBool::new(false);

/// The GPUs the machine has, as NVML counts them (NVML ignores CUDA_VISIBLE_DEVICES).
pub(crate) fn machine_gpus() -> usize {
    std::env::var("NCCLPROBE_TEST_DOUBLE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// CUDA's devices: ordinal i is the machine's GPU `visible()[i]` (its index in PCI bus order,
/// NVML's), as `enumerate` reads the environment.
pub(crate) fn visible() -> Vec<usize> {
    let var = |k| std::env::var(k).ok();
    enumerate(
        machine_gpus(),
        var("CUDA_DEVICE_ORDER").as_deref(),
        var("NCCLPROBE_TEST_DOUBLE_FASTEST_FIRST").as_deref(),
        var("CUDA_VISIBLE_DEVICES").as_deref(),
    )
}

/// The devices CUDA shows, as machine GPU indices in CUDA's ordinal order.
/// - The driver's order: with `CUDA_DEVICE_ORDER=PCI_BUS_ID`, bus order; by default
///   (FASTEST_FIRST) the fastest first, and among equals an order of the driver's own, which a
///   test states with `NCCLPROBE_TEST_DOUBLE_FASTEST_FIRST=2,0,1,3` (bus order when unset).
/// - `CUDA_VISIBLE_DEVICES` lists ordinals of that order. As the CUDA programming guide says,
///   an invalid entry hides itself and every entry after it, and set but empty hides all.
///   Entries by UUID (`GPU-…`, `MIG-…`) and an entry given twice are not modelled: a test
///   giving one is stopped.
fn enumerate(
    gpus: usize,
    device_order: Option<&str>,
    fastest_first: Option<&str>,
    visible_devices: Option<&str>,
) -> Vec<usize> {
    let bus_order: Vec<usize> = (0..gpus).collect();
    let order = match (device_order, fastest_first) {
        (Some("PCI_BUS_ID"), _) | (_, None) => bus_order,
        (_, Some(list)) => {
            let order: Vec<usize> = list
                .split(',')
                .filter_map(|i| i.trim().parse().ok())
                .collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            if sorted != bus_order {
                crate::trace::misuse(&format!(
                    "NCCLPROBE_TEST_DOUBLE_FASTEST_FIRST must order all {gpus} GPUs, each once"
                ));
            }
            order
        }
    };
    let Some(list) = visible_devices else {
        return order;
    };
    let mut shown = Vec::new();
    for entry in list.split(',').map(str::trim) {
        if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            crate::trace::misuse("CUDA_VISIBLE_DEVICES by UUID is not modelled");
        }
        match entry.parse::<usize>().ok().and_then(|i| order.get(i)) {
            // What CUDA does with an entry given twice, its documentation does not say.
            Some(gpu) if shown.contains(gpu) => {
                crate::trace::misuse("CUDA_VISIBLE_DEVICES naming a GPU twice is not modelled")
            }
            Some(&gpu) => shown.push(gpu),
            None => break,
        }
    }
    shown
}

/// The number of CUDA devices this process sees.
pub(crate) fn device_count() -> c_int {
    visible().len() as c_int
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
    let gpu = visible()[device as usize];
    format!("0000:{:02X}:00.0", 0x18 + 0x10 * gpu)
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
    let gpu = match visible().get(dev.max(0) as usize) {
        Some(&gpu) => gpu,
        None => return CUDA_ERROR_INVALID_DEVICE,
    };
    let s = format!("ncclprobe test double GPU {gpu}\0");
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

/// cuda.h's `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// The attributes a caller asks of the double: the compute capability, 9.0 (an H100) unless
/// `NCCLPROBE_TEST_DOUBLE_COMPUTE_CAPABILITY` says `MAJOR.MINOR`; any other attribute is
/// refused as one the double does not know (CUDA_ERROR_INVALID_VALUE).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: c_int,
) -> CUresult {
    if dev < 0 || dev >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    let cc = std::env::var("NCCLPROBE_TEST_DOUBLE_COMPUTE_CAPABILITY").unwrap_or_default();
    let (major, minor) = cc
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .unwrap_or((9, 0));
    *pi = match attrib {
        COMPUTE_CAPABILITY_MAJOR => major,
        COMPUTE_CAPABILITY_MINOR => minor,
        _ => return super::CUDA_ERROR_INVALID_VALUE,
    };
    CUDA_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::enumerate;

    #[test]
    fn cuda_numbers_the_gpus_as_its_order_and_visible_devices_say() {
        assert_eq!(enumerate(4, None, None, None), [0, 1, 2, 3]);
        let reversed = Some("3,2,1,0");
        assert_eq!(enumerate(4, None, reversed, None), [3, 2, 1, 0]);
        assert_eq!(
            enumerate(4, Some("PCI_BUS_ID"), reversed, None),
            [0, 1, 2, 3]
        );
        assert_eq!(enumerate(4, None, reversed, Some("1,3")), [2, 0]);
        assert_eq!(
            enumerate(4, Some("PCI_BUS_ID"), reversed, Some("1,3")),
            [1, 3]
        );
        // An invalid entry ends the list; set and empty shows nothing.
        assert_eq!(enumerate(4, None, None, Some("2,9,0")), [2]);
        assert_eq!(enumerate(4, None, None, Some("2,x,0")), [2]);
        assert_eq!(enumerate(4, None, None, Some("")), Vec::<usize>::new());
    }
}
