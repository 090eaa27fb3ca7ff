//! NCCL (`libnccl.so.2`): result codes, the version and error strings here; `comms` (the
//! communicator, its file exchange, abort/destroy/async error, queries), `init` (unique ids,
//! communicator creation), `faults` (`NCCLPROBE_TEST_DOUBLE_FAULT` and what a fault does),
//! `registration` (ncclMemAlloc, buffer and window registration), `group`
//! (ncclGroupStart/End/SimulateEnd and the send/receive exchange) and `collectives` (the
//! collective and send/receive entry points and the collectives' exchange).

pub(crate) mod collectives;
pub(crate) mod comms;
pub(crate) mod debug;
pub(crate) mod faults;
pub(crate) mod group;
pub(crate) mod init;
pub(crate) mod native;
pub(crate) mod reduce;
pub(crate) mod registration;
#[cfg(test)]
mod tests;

use std::ffi::{c_char, c_int};

type NcclResult = c_int;

const NCCL_SUCCESS: NcclResult = 0;
pub(crate) const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
const NCCL_SYSTEM_ERROR: NcclResult = 2;
const NCCL_INVALID_ARGUMENT: NcclResult = 4;
const NCCL_INVALID_USAGE: NcclResult = 5;
const NCCL_REMOTE_ERROR: NcclResult = 6;
const NCCL_IN_PROGRESS: NcclResult = 7;

/// The NCCL version the double plays (`NCCLPROBE_TEST_DOUBLE_NCCL_VERSION`, else 2.18.5).
pub(crate) fn playing() -> c_int {
    std::env::var("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(21805)
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(v: *mut c_int) -> NcclResult {
    *v = playing();
    NCCL_SUCCESS
}

#[no_mangle]
pub extern "C" fn ncclGetErrorString(rc: NcclResult) -> *const c_char {
    let s: &'static [u8] = match rc {
        0 => b"no error\0",
        1 => b"unhandled cuda error (test double)\0",
        2 => b"unhandled system error (test double)\0",
        3 => b"internal error (test double)\0",
        4 => b"invalid argument (test double)\0",
        5 => b"invalid usage (test double)\0",
        6 => b"remote process exited or there was a network error (test double)\0",
        7 => b"NCCL operation in progress (test double)\0",
        8 => b"timeout (test double)\0",
        _ => b"unknown result code (test double)\0",
    };
    s.as_ptr() as *const c_char
}
