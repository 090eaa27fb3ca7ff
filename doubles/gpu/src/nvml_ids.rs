//! The GPU's identity as NVML gives it: its UUID and its board serial.

use super::{index_of, write_str, NvmlReturn, INVALID_ARGUMENT};
use std::ffi::{c_char, c_uint};

type Device = super::nvmlDevice_t;

/// `GPU-` and a version-4 UUID of the GPU's index, as NVML formats one.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(d: Device, out: *mut c_char, len: c_uint) -> NvmlReturn {
    match index_of(d) {
        Some(i) => write_str(
            out,
            len,
            &format!(
                "GPU-7e57d0b1-e000-4000-8000-{:012x}",
                0x6e63_636c_0000_u64 + i as u64
            ),
        ),
        None => INVALID_ARGUMENT,
    }
}

/// The board serial: data-center boards have an inforom, so NVML answers.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    d: Device,
    out: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    match index_of(d) {
        Some(i) => write_str(out, len, &format!("16520230{i:05}")),
        None => INVALID_ARGUMENT,
    }
}
