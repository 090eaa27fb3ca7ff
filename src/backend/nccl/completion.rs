//! Waiting for a rank's stream: completion polling and NCCL's async errors (an async error
//! aborts the communicator and fails the run, naming the collective, size and rank).

use super::abort::Handle;
use super::api::Api;
use crate::backend::cuda::drv;
use crate::backend::{BackendError, PointSpec};
use cudarc::driver::sys as cu;
use std::ffi::c_int;
use std::time::Instant;

/// What a rank sees once its communicator was aborted (by a timeout or a signal).
pub(super) fn aborted_error() -> BackendError {
    BackendError::Failed("the NCCL communicator was aborted (timeout or signal)".into())
}

/// `ncclRemoteError` in nccl.h's `ncclResult_t`.
const NCCL_REMOTE_ERROR: c_int = 6;

/// Wait for the stream, watching for NCCL async errors (abort and fail on one).
/// Polling does not sleep while a batch could still be timed: a sleep's granularity
/// (50-100 µs on Linux) would land in the measured time. Like nccl-tests it yields the CPU
/// between polls (NCCL's proxy threads need it); only waits past 100 ms, long enough that
/// 50 µs is noise, sleep between polls.
pub(super) fn wait(
    a: &Api,
    comm: &Handle,
    stream: usize,
    rank: usize,
    device: c_int,
    spec: &PointSpec,
) -> Result<(), BackendError> {
    let mut spins = 0u32;
    let since = Instant::now();
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
        let mut async_rc = 0;
        // SAFETY: a valid out-pointer; `quick` keeps the communicator alive meanwhile.
        comm.quick(|c| unsafe { (a.nccl_async_error)(c, &mut async_rc) })
            .map_err(|_| aborted_error())?;
        if async_rc != 0 {
            // Abort makes the stream's NCCL work return.
            comm.abort();
            let message = format!(
                "NCCL async error on rank {} (GPU {}) during {} of {} bytes: {}; communicator aborted",
                rank,
                device,
                spec.coll,
                spec.count * spec.dtype.size_bytes(),
                a.nccl.error_string(async_rc)
            );
            // nccl.h: ncclRemoteError (6) "A call failed possibly due to a network error
            // or a remote process exiting prematurely" (NCCL 2.14+): a peer is gone.
            return Err(if async_rc == NCCL_REMOTE_ERROR {
                BackendError::PeerLost(message)
            } else {
                BackendError::Failed(message)
            });
        }
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
        } else if since.elapsed() < std::time::Duration::from_millis(100) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}
