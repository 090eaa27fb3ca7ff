//! CUDA driver (`libcuda.so.1`): result codes here; `device` (init, devices, contexts, driver
//! version, error strings), `memory` (allocations, copies, host memory) and `streams` (stream
//! worker threads, stream query/sync and the sticky error, events).

pub(crate) mod device;
pub(crate) mod memory;
pub(crate) mod streams;

use std::ffi::c_int;

type CUresult = c_int;
pub(crate) const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
const CUDA_ERROR_NOT_READY: CUresult = 600;
