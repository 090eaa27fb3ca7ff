//! CUDA driver (`libcuda.so.1`): result codes here; `device` (init, devices, contexts, driver
//! version, error strings), `memory` (allocations, copies, host memory) and `streams` (stream
//! worker threads, stream query/sync and the sticky error, events).

pub(crate) mod device;
pub(crate) mod graphs;
pub(crate) mod memory;
pub(crate) mod streams;

use std::ffi::c_int;

type CUresult = c_int;
pub(crate) const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
/// cuda.h: "there is no context bound to the current thread".
const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;

/// Calls that work on "the current context" fail without one, as the driver's do; a thread
/// has none until cuCtxSetCurrent (the runtime would make device 0's primary context current
/// behind the caller's back; the driver API the product uses does not).
macro_rules! need_context {
    () => {
        if crate::cuda::device::current_device().is_none() {
            return crate::cuda::CUDA_ERROR_INVALID_CONTEXT;
        }
    };
}
pub(crate) use need_context;
const CUDA_ERROR_NOT_READY: CUresult = 600;
