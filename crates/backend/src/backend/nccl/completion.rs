//! Waiting for a rank's stream: completion polling and NCCL's async errors (an async error
//! aborts the communicator and fails the run, naming the collective, size and rank).

use super::abort::{aborted_error, Backoff, Handle, NCCL_IN_PROGRESS};
use crate::backend::cuda::drv;
use crate::backend::{BackendError, PointSpec};
use cudarc::driver::sys as cu;
use std::ffi::c_int;

/// Wait for the stream, watching for NCCL async errors (abort and fail on one), as nccl-tests'
/// `testStreamSynchronize` does (src/common.cu): the thread that polls is the one that aborts.
/// Polling does not sleep while a batch could still be timed: a sleep's granularity
/// (50-100 µs on Linux) would land in the measured time. Like nccl-tests it yields the CPU
/// between polls (NCCL's proxy threads need it); only waits past 100 ms, long enough that
/// 50 µs is noise, sleep between polls.
pub(super) fn wait(
    comm: &Handle,
    stream: usize,
    rank: usize,
    device: c_int,
    spec: &PointSpec,
) -> Result<(), BackendError> {
    let mut backoff = Backoff::default();
    loop {
        // SAFETY: the stream belongs to this rank.
        let rc = unsafe { drv::cuStreamQuery(stream as cu::CUstream) };
        if rc == drv::SUCCESS {
            return Ok(());
        }
        if rc != drv::ERROR_NOT_READY {
            return Err(BackendError::Failed(format!(
                "cuStreamQuery failed with {} ({rc}) during {} on rank {}",
                drv::name(rc),
                spec.coll,
                rank
            )));
        }
        // Another thread (a timeout, a signal) asked for an abort: the owner does it.
        if comm.abort_requested() {
            comm.abort();
            return Err(aborted_error());
        }
        let async_rc = comm.state()?;
        // A non-blocking communicator may still be finishing a call in the background.
        if async_rc != 0 && async_rc != NCCL_IN_PROGRESS {
            // Abort makes the stream's NCCL work return.
            comm.abort();
            let what = format!(
                "{} of {} bytes on rank {rank} (GPU {device})",
                spec.coll,
                spec.count * spec.dtype.size_bytes(),
            );
            return Err(comm.async_error(async_rc, &what));
        }
        backoff.pause();
    }
}
