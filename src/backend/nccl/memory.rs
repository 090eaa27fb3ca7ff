//! nccl-tests' -M: the device memory a rank's communicator took at init, its buffers, and what
//! NCCL took during the collectives, each the drop in `cuMemGetInfo`'s free memory around that
//! stage (src/common.cu, threadInit and threadRunTests; src/util.cu, writeMemInfo).

use super::api::Api;
use std::ffi::c_int;

/// Free memory of `device` now (its context made current on this thread).
pub(super) fn free_on(api: &Api, device: c_int) -> Option<i64> {
    api.use_device(device).ok()?;
    api.free_memory().map(|f| f as i64)
}

/// What one rank's stages took of its GPU's memory.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MemoryWatch {
    /// Free memory before and after the communicator's init.
    pub init: Option<(i64, i64)>,
    /// The most the buffers' allocation took.
    pub buffers: i64,
    /// Free memory once the buffers were allocated: where the collectives' share is taken from.
    pub after_buffers: Option<i64>,
}

impl MemoryWatch {
    /// Around one allocation of the buffers: free memory before and after.
    pub fn allocated(&mut self, before: Option<i64>, after: Option<i64>) {
        if let (Some(b), Some(a)) = (before, after) {
            self.buffers = self.buffers.max(b - a);
            self.after_buffers = Some(a);
        }
    }

    /// Initialization, User-Allocated and Collective bytes, with free memory `now`.
    pub fn report(&self, now: Option<i64>) -> Option<crate::model::GpuMemory> {
        let (before, after) = self.init?;
        Some(crate::model::GpuMemory {
            initialization_bytes: before - after,
            user_allocated_bytes: self.buffers,
            collective_bytes: self.after_buffers.zip(now).map_or(0, |(a, n)| a - n),
        })
    }
}
