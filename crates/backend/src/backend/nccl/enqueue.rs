//! One call of the prepared collective on a rank's stream: the NCCL entry point for each
//! collective, with the buffers and peers nccl-tests gives it.

use super::abort::NCCL_IN_PROGRESS;
use super::api::{
    mulsum_scalar_bytes, nccl_dtype, nccl_op, Api, NcclOpValue, NCCL_SCALAR_HOST_IMMEDIATE,
};
use crate::backend::{BackendError, PointSpec, Transfer};
use crate::coll::{Collective, Placement};
use crate::dtype::Dtype;
use crate::dtype::RedOp;
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
    pub(super) rotation: Rotation,
}

/// nccl-tests' buffer rotation (src/common.cu, startColl: "change offset for each iteration
/// so that we avoid cache effects"): call `i` of a timed batch (`iter × agg + aiter` under
/// -m) uses both buffers `stride × (i mod steps)` bytes past their start, where `stride` is
/// the point's larger buffer (`max(sendBytes, expectedBytes)`) and `steps` how many fit in
/// -e's bytes. Without it a message that fits in the GPU's L2 cache (50 MB on an H100) is
/// read from the cache on every call but the first: 16 MiB measured 1.6x faster than
/// nccl-tests on an H100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rotation {
    pub(super) stride: u64,
    pub(super) steps: u64,
}

impl Default for Rotation {
    fn default() -> Rotation {
        Rotation {
            stride: 0,
            steps: 1,
        }
    }
}

impl Rotation {
    /// For a point whose larger buffer is `stride` bytes and whose calls need `region` bytes
    /// from their start (buffers, in-place offsets and -u's shift), in buffers of `capacity`
    /// bytes, rotating within nccl-tests' `max_bytes` (-e).
    pub(super) fn new(stride: u64, region: u64, capacity: u64, max_bytes: u64) -> Rotation {
        if stride == 0 || region > capacity {
            return Rotation::default();
        }
        let fits = (capacity - region) / stride + 1;
        Rotation {
            stride,
            steps: (max_bytes / stride).min(fits).max(1),
        }
    }

    pub(super) fn offset(&self, call: usize) -> u64 {
        self.stride * (call as u64 % self.steps)
    }
}

impl Target {
    /// This target as call `call` of a batch sees it ([`Rotation`]).
    pub(super) fn at(&self, call: usize) -> Target {
        let off = self.rotation.offset(call);
        Target {
            dev_send: self.dev_send + off,
            dev_recv: self.dev_recv + off,
            ..self.clone()
        }
    }

    /// What this rank is doing, for errors: `all_reduce of 512 bytes on rank 1 (GPU 1)`.
    pub(super) fn doing(&self, work: &str, bytes: usize) -> String {
        format!(
            "{work} of {bytes} bytes on rank {} (GPU {})",
            self.rank, self.device
        )
    }
}

/// How many steps one call of `coll` takes on `n` ranks, each its own NCCL group: hypercube's
/// copy and then one exchange per doubling; one for the others.
pub(super) fn steps(coll: Collective, n: usize) -> usize {
    match coll {
        Collective::Hypercube => 1 + n.max(1).trailing_zeros() as usize,
        _ => 1,
    }
}

/// Enqueue one call of the prepared collective on the stream, step after step.
pub(super) unsafe fn enqueue(
    a: &Api,
    t: &Target,
    spec: &PointSpec,
    placement: Placement,
) -> Result<(), BackendError> {
    (0..steps(spec.coll, t.nranks)).try_for_each(|step| enqueue_step(a, t, spec, placement, step))
}

/// Enqueue step `step` of one call of the prepared collective (see [`steps`]).
pub(super) unsafe fn enqueue_step(
    a: &Api,
    t: &Target,
    spec: &PointSpec,
    placement: Placement,
    step: usize,
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
    let what = || t.doing(spec.coll.name(), spec.count * spec.dtype.size_bytes());
    // mulsum: an op made for this call with this rank's scalar, destroyed after it, as
    // nccl-tests' startColl does.
    let premulsum = match spec.op == RedOp::MulSum && spec.coll.has_op() {
        true => {
            let mut made: NcclOpValue = 0;
            let mut scalar = mulsum_scalar_bytes(spec.dtype, t.rank);
            let rc = (a.nccl_premulsum)(
                &mut made,
                scalar.as_mut_ptr() as *mut c_void,
                dt,
                NCCL_SCALAR_HOST_IMMEDIATE,
                comm,
            );
            t.comm.check(&what, rc)?;
            Some(made)
        }
        false => None,
    };
    let op = premulsum.unwrap_or(op);
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
        Collective::Alltoall if a.native_p2p.is_some() => {
            let native = a.native_p2p.as_ref().map(|p| p.alltoall);
            native.map_or(0, |f| f(s, r, count, dt, comm, stream))
        }
        Collective::Alltoall | Collective::Sendrecv => {
            // Before NCCL 2.28 NCCL has no alltoall call: grouped sends and receives, as
            // nccl-tests does.
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
        Collective::Gather | Collective::Scatter if a.native_p2p.is_some() && count > 0 => {
            let root = spec.root as c_int;
            match (&a.native_p2p, spec.coll) {
                (Some(p), Collective::Gather) => (p.gather)(s, r, count, dt, root, comm, stream),
                (Some(p), _) => (p.scatter)(s, r, count, dt, root, comm, stream),
                (None, _) => 0,
            }
        }
        Collective::Gather | Collective::Scatter | Collective::Hypercube => {
            rooted_or_hypercube(a, t, spec, (send, recv), count, comm, step)?
        }
        Collective::Alltoallv => alltoallv(a, t, spec, (send, recv), count, comm),
        Collective::Unknown => {
            return Err(BackendError::Unsupported(format!(
                "cannot run {}",
                spec.coll
            )))
        }
    };
    if let Some(made) = premulsum {
        // Destroyed whatever the call did, then the call's result first.
        let destroyed = (a.nccl_redop_destroy)(made, comm);
        t.comm.check(&what, rc)?;
        return t.comm.check(&what, destroyed);
    }
    t.comm.check(&what, rc)
}

/// alltoallv_perf's call as nccl-tests 2.19.6 issues it (AlltoAllvRunColl, every NCCL
/// version): one group; per peer in rank order a send of this rank's part for it and a
/// receive of the peer's part, each only when not empty, both buffers packed in peer order.
/// The result of the NCCL calls, the first failure first.
unsafe fn alltoallv(
    a: &Api,
    t: &Target,
    spec: &PointSpec,
    (send, recv): (u64, u64),
    param_count: usize,
    comm: *mut c_void,
) -> c_int {
    let elem = spec.dtype.size_bytes();
    let (sends, recvs) = spec.traffic.spans(t.rank, t.nranks, param_count, elem);
    let (dt, stream) = (nccl_dtype(spec.dtype), t.stream as *mut c_void);
    let at = |base: u64, offset: usize| (base + (offset * elem) as u64) as *mut c_void;
    let mut rc = FirstError::default();
    (a.nccl_group_start)();
    for (peer, (out, into)) in sends.iter().zip(&recvs).enumerate() {
        if out.count > 0 {
            let buf = at(send, out.offset);
            rc.add((a.nccl_send)(
                buf,
                out.count,
                dt,
                peer as c_int,
                comm,
                stream,
            ));
        }
        if into.count > 0 {
            let buf = at(recv, into.offset);
            rc.add((a.nccl_recv)(
                buf,
                into.count,
                dt,
                peer as c_int,
                comm,
                stream,
            ));
        }
    }
    rc.add((a.nccl_group_end)());
    rc.0
}

/// gather_perf, scatter_perf and hypercube_perf as nccl-tests 2.19.6 issues them when built
/// with NCCL before 2.28 (src/gather.cu, scatter.cu, hypercube.cu): sends and receives in a
/// group; hypercube's step 0 copies the own share into place and step k >= 1 exchanges
/// 2^(k-1) shares with rank ^ 2^(k-1), one group each. The result of the NCCL calls, the first
/// failure first.
unsafe fn rooted_or_hypercube(
    a: &Api,
    t: &Target,
    spec: &PointSpec,
    (send, recv): (u64, u64),
    count: usize,
    comm: *mut c_void,
    step: usize,
) -> Result<c_int, BackendError> {
    let dt = nccl_dtype(spec.dtype);
    let stream = t.stream as *mut c_void;
    let share = (count * spec.dtype.size_bytes()) as u64;
    let (n, me, root) = (t.nranks, t.rank, spec.root);
    let ptr = |p: u64| p as *mut c_void;
    if count == 0 || (spec.coll == Collective::Hypercube && step >= steps(spec.coll, n)) {
        // `if (count == 0) return testSuccess;` (gather and scatter).
        return Ok(0);
    }
    let mut rc = FirstError::default();
    match spec.coll {
        Collective::Gather => {
            (a.nccl_group_start)();
            rc.add((a.nccl_send)(
                ptr(send),
                count,
                dt,
                root as c_int,
                comm,
                stream,
            ));
            if me == root {
                for r in 0..n {
                    let to = ptr(recv + r as u64 * share);
                    rc.add((a.nccl_recv)(to, count, dt, r as c_int, comm, stream));
                }
            }
            rc.add((a.nccl_group_end)());
        }
        Collective::Scatter => {
            (a.nccl_group_start)();
            if me == root {
                for r in 0..n {
                    let from = ptr(send + r as u64 * share);
                    rc.add((a.nccl_send)(from, count, dt, r as c_int, comm, stream));
                }
            }
            rc.add((a.nccl_recv)(
                ptr(recv),
                count,
                dt,
                root as c_int,
                comm,
                stream,
            ));
            rc.add((a.nccl_group_end)());
        }
        _ if step == 0 => {
            let mine = recv + me as u64 * share;
            if mine != send {
                a.cuda(
                    "cuMemcpyDtoDAsync",
                    crate::backend::cuda::drv::cuMemcpyDtoDAsync_v2(
                        mine,
                        send,
                        share as usize,
                        stream as _,
                    ),
                )?;
            }
        }
        _ => {
            let mask = 1usize << (step - 1);
            let s = (me & !(mask - 1)) as u64;
            let r = s ^ mask as u64;
            let peer = (me ^ mask) as c_int;
            let len = count * mask;
            (a.nccl_group_start)();
            rc.add((a.nccl_send)(
                ptr(recv + s * share),
                len,
                dt,
                peer,
                comm,
                stream,
            ));
            rc.add((a.nccl_recv)(
                ptr(recv + r * share),
                len,
                dt,
                peer,
                comm,
                stream,
            ));
            rc.add((a.nccl_group_end)());
        }
    }
    Ok(rc.0)
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
    use super::{FirstError, Rotation};

    #[test]
    fn rotation_follows_nccl_tests_shift() {
        // all_reduce 16 MiB in buffers of 128 MiB (-e 128M): eight places, then round again.
        let mib = 1u64 << 20;
        let r = Rotation::new(16 * mib, 16 * mib, 128 * mib, 128 * mib);
        assert_eq!(r.steps, 8);
        assert_eq!(r.offset(0), 0);
        assert_eq!(r.offset(7), 112 * mib);
        assert_eq!(r.offset(8), 0);
        // The largest size, or -e off the size grid (100 B, 8 B calls: 12 places as
        // nccl-tests' maxBytes / totalnbytes), and never past the buffers.
        assert_eq!(
            Rotation::new(128 * mib, 128 * mib, 128 * mib, 128 * mib).steps,
            1
        );
        assert_eq!(Rotation::new(8, 8, 100, 100).steps, 12);
        let tight = Rotation::new(8, 24, 100, 100);
        assert!(tight.offset(tight.steps as usize - 1) + 24 <= 100);
        // Nothing to rotate: a matrix exchange (no -e), or an empty message.
        assert_eq!(Rotation::new(8, 8, 8, 0).steps, 1);
        assert_eq!(Rotation::new(0, 0, 64, 64).offset(5), 0);
    }

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
