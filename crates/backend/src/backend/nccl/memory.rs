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
    /// Free memory once the buffers were first allocated, less what later, larger buffers
    /// took beyond the first: where the collectives' share is taken from.
    pub after_buffers: Option<i64>,
    /// What the buffers allocated last took.
    pub last: i64,
}

impl MemoryWatch {
    /// Around one allocation of the buffers (the previous ones already freed): free memory
    /// before and after. A reallocation moves the baseline by its growth only, so memory NCCL
    /// took in between stays counted as the collectives'.
    pub fn allocated(&mut self, before: Option<i64>, after: Option<i64>) {
        if let (Some(b), Some(a)) = (before, after) {
            let size = b - a;
            self.buffers = self.buffers.max(size);
            self.after_buffers = Some(match self.after_buffers {
                None => a,
                Some(base) => base - (size - self.last),
            });
            self.last = size;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reallocation_keeps_what_nccl_took_in_the_collectives_figure() {
        let mut m = MemoryWatch {
            init: Some((1000, 900)),
            ..Default::default()
        };
        // Buffers of 100, NCCL then takes 30 connecting, buffers grow to 150 (the 100 freed).
        m.allocated(Some(900), Some(800));
        m.allocated(Some(870), Some(720));
        let r = m.report(Some(720)).unwrap();
        assert_eq!(
            (
                r.initialization_bytes,
                r.user_allocated_bytes,
                r.collective_bytes
            ),
            (100, 150, 30)
        );
    }
}
