//! One call of the prepared collective on a rank's stream: the NCCL entry point for each
//! collective, with the buffers and peers nccl-tests gives it.

use super::abort::NCCL_IN_PROGRESS;
use super::api::{nccl_dtype, nccl_op, Api};
use crate::backend::{BackendError, PointSpec, Transfer};
use crate::coll::{Collective, Placement};
use crate::dtype::Dtype;
use std::ffi::{c_int, c_void};

/// What one call on one rank needs: plain handles, so another thread can enqueue it.
#[derive(Clone)]
pub(super) struct Target {
    pub(super) ctx: usize,
    pub(super) comm: std::sync::Arc<super::abort::Handle>,
    pub(super) stream: usize,
    pub(super) dev_send: u64,
    pub(super) dev_recv: u64,
    pub(super) rank: usize,
    pub(super) nranks: usize,
    pub(super) device: c_int,
}

impl Target {
    /// What this rank is doing, for errors: `all_reduce of 512 bytes on rank 1 (GPU 1)`.
    pub(super) fn doing(&self, work: &str, bytes: usize) -> String {
        format!(
            "{work} of {bytes} bytes on rank {} (GPU {})",
            self.rank, self.device
        )
    }
}

/// Enqueue one call of the prepared collective on the stream.
pub(super) unsafe fn enqueue(
    a: &Api,
    t: &Target,
    spec: &PointSpec,
    placement: Placement,
) -> Result<(), BackendError> {
    let layout = spec.layout(t.nranks, t.rank);
    let ts = spec.dtype.size_bytes() as u64;
    let (send, recv) = match placement {
        Placement::OutOfPlace => (t.dev_send, t.dev_recv),
        Placement::InPlace => (
            t.dev_recv + layout.send_inplace_offset as u64 * ts,
            t.dev_recv + layout.recv_inplace_offset as u64 * ts,
        ),
    };
    let (s, r) = (send as *mut c_void, recv as *mut c_void);
    let (dt, op, count) = (nccl_dtype(spec.dtype), nccl_op(spec.op), layout.param_count);
    let stream = t.stream as *mut c_void;
    let comm = t.comm.raw()?;
    let rc = match spec.coll {
        Collective::AllReduce => (a.nccl_all_reduce)(s, r, count, dt, op, comm, stream),
        Collective::AllGather => (a.nccl_all_gather)(s, r, count, dt, comm, stream),
        Collective::ReduceScatter => (a.nccl_reduce_scatter)(s, r, count, dt, op, comm, stream),
        Collective::Broadcast => {
            (a.nccl_broadcast)(s, r, count, dt, spec.root as c_int, comm, stream)
        }
        Collective::Reduce => {
            (a.nccl_reduce)(s, r, count, dt, op, spec.root as c_int, comm, stream)
        }
        Collective::Alltoall | Collective::Sendrecv => {
            // NCCL has no alltoall call: grouped sends and receives, as nccl-tests does.
            (a.nccl_group_start)();
            let n = t.nranks;
            let bytes = count as u64 * ts;
            let mut rc = FirstError::default();
            if spec.coll == Collective::Alltoall {
                for peer in 0..n {
                    let off = peer as u64 * bytes;
                    rc.add((a.nccl_send)(
                        (send + off) as *mut c_void,
                        count,
                        dt,
                        peer as c_int,
                        comm,
                        stream,
                    ));
                    rc.add((a.nccl_recv)(
                        (recv + off) as *mut c_void,
                        count,
                        dt,
                        peer as c_int,
                        comm,
                        stream,
                    ));
                }
            } else {
                rc.add((a.nccl_send)(
                    s,
                    count,
                    dt,
                    ((t.rank + 1) % n) as c_int,
                    comm,
                    stream,
                ));
                rc.add((a.nccl_recv)(
                    r,
                    count,
                    dt,
                    ((t.rank + n - 1) % n) as c_int,
                    comm,
                    stream,
                ));
            }
            rc.add((a.nccl_group_end)());
            rc.0
        }
        Collective::Gather
        | Collective::Scatter
        | Collective::Hypercube
        | Collective::Alltoallv
        | Collective::Unknown => {
            return Err(BackendError::Unsupported(format!(
                "cannot run {}",
                spec.coll
            )))
        }
    };
    let what = || t.doing(spec.coll.name(), spec.count * spec.dtype.size_bytes());
    t.comm.check(&what, rc)
}

/// Enqueue one phase of a pair exchange: its send and receive of `bytes` in one group, as
/// nccl-tests' sendrecv does. A phase with nothing to do enqueues nothing.
pub(super) unsafe fn enqueue_transfer(
    a: &Api,
    t: &Target,
    phase: Transfer,
    bytes: usize,
) -> Result<(), BackendError> {
    if phase == Transfer::default() {
        return Ok(());
    }
    let dt = nccl_dtype(Dtype::Uint8);
    let stream = t.stream as *mut c_void;
    let comm = t.comm.raw()?;
    (a.nccl_group_start)();
    let mut rc = FirstError::default();
    if let Some(to) = phase.send_to {
        rc.add((a.nccl_send)(
            t.dev_send as *mut c_void,
            bytes,
            dt,
            to as c_int,
            comm,
            stream,
        ));
    }
    if let Some(from) = phase.recv_from {
        rc.add((a.nccl_recv)(
            t.dev_recv as *mut c_void,
            bytes,
            dt,
            from as c_int,
            comm,
            stream,
        ));
    }
    rc.add((a.nccl_group_end)());
    let what = || t.doing("ncclSend/ncclRecv", bytes);
    t.comm.check(&what, rc.0)
}

/// The result of several calls: the first that failed, else `ncclInProgress` when any call
/// goes on in the background, else success. NCCL's results are values, not bit flags
/// (nccl.h, `ncclResult_t`): OR-ing two of them names a third error (ncclSystemError 2 |
/// ncclInvalidArgument 4 reads as ncclRemoteError 6).
#[derive(Default)]
pub(super) struct FirstError(pub(super) c_int);

impl FirstError {
    pub(super) fn add(&mut self, rc: c_int) {
        let failed = |rc| rc != 0 && rc != NCCL_IN_PROGRESS;
        if !failed(self.0) && (failed(rc) || rc == NCCL_IN_PROGRESS) {
            self.0 = rc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FirstError;

    #[test]
    fn several_results_keep_the_first_failure_by_value() {
        let mut r = FirstError::default();
        for rc in [0, 2, 4, 0] {
            r.add(rc);
        }
        assert_eq!(r.0, 2, "ncclSystemError, not 2|4 = ncclRemoteError");
        let mut r = FirstError::default();
        for rc in [0, 7, 0] {
            r.add(rc);
        }
        assert_eq!(r.0, 7, "in progress is waited for, not lost");
        let mut r = FirstError::default();
        for rc in [7, 5] {
            r.add(rc);
        }
        assert_eq!(r.0, 5);
    }
}
