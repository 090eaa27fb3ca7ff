//! MPI backend implementation over rsmpi (control plane) and MPI's C API (data collectives).

use crate::backend::{AlignedBuf, BackendError, Communicator, PairRole, PointSpec};
use crate::coll::traffic::Span;
use crate::coll::{Collective, Placement};
use crate::data::RankBuffers;
use crate::dtype::{
    mulsum_scalar, premul_bytes, premultiplies_avg, scale_avg_bytes, scale_bytes, Dtype, RedOp,
};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::traits::*;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

extern "C" {
    fn ncclprobe_mpi_in_place() -> *mut c_void;
}

/// An initialised MPI world; finalises MPI when the universe is dropped.
pub struct MpiSession {
    universe: mpi::environment::Universe,
    pub comm: MpiComm,
}

impl MpiSession {
    /// The universe stays with the thread that initialised MPI (it must also finalise it);
    /// the communicator goes to the rank thread.
    pub fn split(self) -> (mpi::environment::Universe, MpiComm) {
        (self.universe, self.comm)
    }
}

/// Initialise MPI for one rank thread that is not the main thread: `MPI_THREAD_SERIALIZED`
/// (one thread calls MPI at a time; the main thread only initialises and finalises). The NCCL
/// backend's control plane starts MPI so; the `mpi` backend starts it on its own thread at
/// `MPI_THREAD_SINGLE` (`mpi_thread`).
pub fn start() -> Result<MpiSession, BackendError> {
    start_at(mpi::Threading::Serialized)
}

/// [`start`] at the thread level `level`.
pub(super) fn start_at(level: mpi::Threading) -> Result<MpiSession, BackendError> {
    let (universe, _provided) = mpi::initialize_with_threading(level).ok_or_else(|| {
        BackendError::Unavailable("--backend mpi: MPI was already initialised".into())
    })?;
    let world = universe.world();
    let version = mpi::environment::library_version().unwrap_or_else(|_| "unknown MPI".into());
    let (major, minor) = mpi::environment::version();
    let half_types = HalfTypes::create();
    Ok(MpiSession {
        comm: MpiComm {
            rank: world.rank() as usize,
            nranks: world.size() as usize,
            world,
            send: AlignedBuf::default(),
            recv: AlignedBuf::default(),
            spec: None,
            half_types,
            library: format!(
                "{} (MPI {major}.{minor})",
                version.lines().next().unwrap_or("").trim()
            ),
        },
        universe,
    })
}

#[path = "mpi_half.rs"]
mod half;
use half::HalfTypes;

pub struct MpiComm {
    rank: usize,
    nranks: usize,
    world: SimpleCommunicator,
    send: AlignedBuf,
    recv: AlignedBuf,
    spec: Option<PointSpec>,
    half_types: HalfTypes,
    pub library: String,
}

// SAFETY: a communicator is used by one thread at a time: the thread that initialised MPI
// (`mpi_thread`, MPI_THREAD_SINGLE), or under MPI_THREAD_SERIALIZED the rank thread. Moving or
// dropping it calls no MPI function (the world's handle is predefined, the half types are
// left to MPI_Finalize).
unsafe impl Send for MpiComm {}

impl MpiComm {
    fn datatype(&self, dtype: Dtype) -> ffi::MPI_Datatype {
        // SAFETY: reading MPI's predefined handles after initialisation.
        unsafe {
            match dtype {
                Dtype::Int8 => ffi::RSMPI_INT8_T,
                // fp8 never gets here (prepare refuses it).
                Dtype::Uint8 | Dtype::F8e4m3 | Dtype::F8e5m2 => ffi::RSMPI_UINT8_T,
                Dtype::Int32 => ffi::RSMPI_INT32_T,
                Dtype::Uint32 => ffi::RSMPI_UINT32_T,
                Dtype::Int64 => ffi::RSMPI_INT64_T,
                Dtype::Uint64 => ffi::RSMPI_UINT64_T,
                Dtype::Float => ffi::RSMPI_FLOAT,
                Dtype::Double => ffi::RSMPI_DOUBLE,
                Dtype::Half | Dtype::Bfloat16 => self.half_types.two_bytes,
            }
        }
    }

    /// MPI's op for `op` on `dtype`; `avg` is summed and scaled afterwards (sum-then-scale).
    fn op(&self, dtype: Dtype, op: RedOp) -> ffi::MPI_Op {
        let idx = match op.combine_op() {
            RedOp::Sum | RedOp::Avg | RedOp::MulSum => 0,
            RedOp::Prod => 1,
            RedOp::Min => 2,
            RedOp::Max => 3,
        };
        // SAFETY: predefined op handles, read after initialisation.
        unsafe {
            match dtype {
                Dtype::Half => self.half_types.ops[0][idx],
                Dtype::Bfloat16 => self.half_types.ops[1][idx],
                _ => [
                    ffi::RSMPI_SUM,
                    ffi::RSMPI_PROD,
                    ffi::RSMPI_MIN,
                    ffi::RSMPI_MAX,
                ][idx],
            }
        }
    }

    /// Everything one call of `spec` needs, resolved once per batch so the timed loop only
    /// issues MPI calls: the layout, MPI's type and op handles and the buffer pointers.
    fn call(&mut self, spec: &PointSpec, placement: Placement) -> Call {
        let n = self.nranks;
        let me = self.rank;
        let layout = spec.layout(n, me);
        let elem = spec.dtype.size_bytes();
        let in_place = placement == Placement::InPlace;
        let send = self.send.as_mut_ptr() as *mut c_void;
        let recv = self.recv.as_mut_ptr() as *mut c_void;
        // SAFETY: MPI_IN_PLACE is a constant of the initialised library.
        let in_place_ptr = unsafe { ncclprobe_mpi_in_place() };
        // Floating avg is pre-multiplied by 1/n and mulsum by the rank's scalar; MPI then sums.
        let premultiply = (premultiplies_avg(spec.dtype, spec.op) || spec.op == RedOp::MulSum)
            && spec.coll.has_op();
        let scale_after = spec.op == RedOp::Avg && spec.coll.has_op() && !premultiply;
        Call {
            coll: spec.coll,
            dtype: spec.dtype,
            nranks: n,
            me,
            root: spec.root as c_int,
            count: layout.param_count as c_int,
            dt: self.datatype(spec.dtype),
            op: self.op(spec.dtype, spec.op),
            comm: self.world.as_raw(),
            send,
            recv,
            // The send argument: MPI_IN_PLACE where the input is already in the receive buffer.
            source: if in_place { in_place_ptr } else { send },
            in_place,
            mulsum: spec.op == RedOp::MulSum,
            // NCCL's floating avg multiplies every input by 1/n before summing: do the same to
            // this rank's input, then let MPI sum (see dtype::premultiplies_avg).
            premultiply: premultiply.then(|| {
                if in_place {
                    (
                        layout.send_inplace_offset * elem,
                        layout.send_count * elem,
                        true,
                    )
                } else {
                    (0, layout.send_count * elem, false)
                }
            }),
            // Integer avg is summed, then divided where the result lands.
            scale: (scale_after && (spec.coll != Collective::Reduce || me == spec.root)).then(
                || {
                    let off = if in_place {
                        layout.recv_inplace_offset * elem
                    } else {
                        0
                    };
                    (off, layout.recv_count * elem)
                },
            ),
            move_result: (spec.coll == Collective::ReduceScatter && in_place)
                .then(|| (layout.param_count * elem, layout.recv_inplace_offset * elem)),
            copy_root_input: (spec.coll == Collective::Broadcast && !in_place && me == spec.root)
                .then_some(layout.param_count * elem),
            // prepare checked that every count and offset fits an int.
            v: (spec.coll == Collective::Alltoallv).then(|| {
                let (send, recv) = spec.traffic.spans(me, n, layout.param_count, elem);
                let ints = |spans: &[Span], f: fn(&Span) -> usize| -> Vec<c_int> {
                    spans.iter().map(|s| f(s) as c_int).collect()
                };
                let sent: usize = send.iter().map(|s| s.count).sum();
                VCounts {
                    send: (ints(&send, |s| s.count), ints(&send, |s| s.offset)),
                    recv: (ints(&recv, |s| s.count), ints(&recv, |s| s.offset)),
                    sent_bytes: sent * elem,
                }
            }),
        }
    }
}

/// One collective call with every argument resolved (see `MpiComm::call`).
struct Call {
    coll: Collective,
    dtype: Dtype,
    nranks: usize,
    me: usize,
    root: c_int,
    count: c_int,
    dt: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
    comm: ffi::MPI_Comm,
    send: *mut c_void,
    recv: *mut c_void,
    source: *mut c_void,
    in_place: bool,
    /// (byte offset, bytes, in the receive buffer?) of the input to scale by 1/n first.
    premultiply: Option<(usize, usize, bool)>,
    /// The pre-multiply is mulsum's scalar, not avg's 1/n.
    mulsum: bool,
    /// (byte offset, bytes) of the result to divide by n afterwards.
    scale: Option<(usize, usize)>,
    /// In-place reduce-scatter: (bytes, destination offset) of the result to move.
    move_result: Option<(usize, usize)>,
    /// Out-of-place broadcast on the root: bytes of input to copy to the receive buffer.
    copy_root_input: Option<usize>,
    /// alltoallv: this rank's counts and displacements.
    v: Option<VCounts>,
}

/// MPI_Alltoallv's arguments for one rank: (counts, displacements) per peer, in elements.
struct VCounts {
    send: (Vec<c_int>, Vec<c_int>),
    recv: (Vec<c_int>, Vec<c_int>),
    /// Bytes this rank sends in all (what in place stages).
    sent_bytes: usize,
}

impl Call {
    /// alltoallv_perf's exchange. In place, NCCL sends from the buffer it receives into
    /// (nccl-tests leaves that result unchecked); MPI forbids the aliasing, so the input is
    /// first copied to the idle send buffer, a copy the time includes.
    ///
    /// # Safety
    /// As `issue`.
    unsafe fn alltoallv(&self, send: *mut c_void, recv: *mut c_void, v: &VCounts) -> c_int {
        if self.in_place {
            std::ptr::copy_nonoverlapping(recv as *const u8, send as *mut u8, v.sent_bytes);
        }
        ffi::MPI_Alltoallv(
            send,
            v.send.0.as_ptr(),
            v.send.1.as_ptr(),
            self.dt,
            recv,
            v.recv.0.as_ptr(),
            v.recv.1.as_ptr(),
            self.dt,
            self.comm,
        )
    }

    /// nccl-tests' hypercube_perf (src/hypercube.cu): the own share into place, then per
    /// step k one exchange with rank ^ 2^k of the 2^k shares each side holds.
    ///
    /// # Safety
    /// As `issue`.
    unsafe fn hypercube(&self, send: *mut c_void, recv: *mut c_void) -> c_int {
        let per = self.count as usize * self.dtype.size_bytes();
        let at = |share: usize| (recv as *mut u8).add(share * per) as *mut c_void;
        if !self.in_place {
            std::ptr::copy_nonoverlapping(send as *const u8, at(self.me) as *mut u8, per);
        }
        let mut mask = 1usize;
        while mask < self.nranks {
            let mine = self.me & !(mask - 1);
            let partner = (self.me ^ mask) as c_int;
            let n = self.count * mask as c_int;
            let rc = ffi::MPI_Sendrecv(
                at(mine),
                n,
                self.dt,
                partner,
                0,
                at(mine ^ mask),
                n,
                self.dt,
                partner,
                0,
                self.comm,
                ffi::RSMPI_STATUS_IGNORE,
            );
            if rc != 0 {
                return rc;
            }
            mask <<= 1;
        }
        0
    }

    /// Issues the call once. Returns MPI's error code (non-zero is a failure).
    ///
    /// # Safety
    /// The buffers must be the ones `MpiComm::call` read, sized by `prepare` for this spec in
    /// both placements; MPI's collectives are blocking, so nothing outlives the call.
    unsafe fn issue(&self) -> c_int {
        let (send, recv, s, count, dt, op, comm) = (
            self.send,
            self.recv,
            self.source,
            self.count,
            self.dt,
            self.op,
            self.comm,
        );
        if let Some((offset, bytes, in_recv)) = self.premultiply {
            let base = if in_recv { recv } else { send } as *mut u8;
            let input = std::slice::from_raw_parts_mut(base.add(offset), bytes);
            match self.mulsum {
                true => scale_bytes(self.dtype, input, mulsum_scalar(self.me)),
                false => premul_bytes(self.dtype, input, self.nranks),
            }
        }
        let share = |rank: usize| {
            (recv as *mut u8).add(rank * count as usize * self.dtype.size_bytes()) as *mut c_void
        };
        let me_root = self.me as c_int == self.root;
        let rc = match self.coll {
            // `prepare` refused it (PointSpec::runnable).
            Collective::Unknown => 0,
            Collective::Alltoallv => match &self.v {
                Some(v) => self.alltoallv(send, recv, v),
                None => 0,
            },
            Collective::Gather => {
                // In place, each rank's share already sits at its place in the receive buffer.
                let s = match (self.in_place, me_root) {
                    (true, true) => s,
                    (true, false) => share(self.me),
                    (false, _) => send,
                };
                ffi::MPI_Gather(s, count, dt, recv, count, dt, self.root, comm)
            }
            Collective::Scatter => {
                // In place, the root's input is the receive buffer and its own share stays.
                let (from, to) = match (self.in_place, me_root) {
                    (true, true) => (recv, s),
                    (true, false) => (recv, share(self.me)),
                    (false, _) => (send, recv),
                };
                ffi::MPI_Scatter(from, count, dt, to, count, dt, self.root, comm)
            }
            Collective::Hypercube => self.hypercube(send, recv),
            Collective::AllReduce => ffi::MPI_Allreduce(s, recv, count, dt, op, comm),
            Collective::AllGather => ffi::MPI_Allgather(s, count, dt, recv, count, dt, comm),
            Collective::ReduceScatter => {
                let rc = ffi::MPI_Reduce_scatter_block(s, recv, count, dt, op, comm);
                if let Some((bytes, to)) = self.move_result {
                    // MPI's in-place reduce-scatter leaves the result at the buffer's start;
                    // move it to where NCCL's in-place layout puts it (rank * count).
                    let base = recv as *mut u8;
                    std::ptr::copy(base, base.add(to), bytes);
                }
                rc
            }
            Collective::Broadcast => {
                if let Some(bytes) = self.copy_root_input {
                    std::ptr::copy_nonoverlapping(send as *const u8, recv as *mut u8, bytes);
                }
                ffi::MPI_Bcast(recv, count, dt, self.root, comm)
            }
            Collective::Reduce => {
                let s = match (self.in_place, self.me as c_int == self.root) {
                    (true, true) => s,
                    (true, false) => recv,
                    (false, _) => send,
                };
                ffi::MPI_Reduce(s, recv, count, dt, op, self.root, comm)
            }
            Collective::Alltoall => ffi::MPI_Alltoall(s, count, dt, recv, count, dt, comm),
            Collective::Sendrecv => {
                let n = self.nranks;
                let next = ((self.me + 1) % n) as c_int;
                let prev = ((self.me + n - 1) % n) as c_int;
                let status = ffi::RSMPI_STATUS_IGNORE;
                if self.in_place {
                    ffi::MPI_Sendrecv_replace(recv, count, dt, next, 0, prev, 0, comm, status)
                } else {
                    ffi::MPI_Sendrecv(
                        send, count, dt, next, 0, recv, count, dt, prev, 0, comm, status,
                    )
                }
            }
        };
        if let Some((offset, bytes)) = self.scale {
            let out = std::slice::from_raw_parts_mut((recv as *mut u8).add(offset), bytes);
            scale_avg_bytes(self.dtype, out, self.nranks);
        }
        rc
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
    }

    fn prepare(&mut self, spec: &PointSpec) -> Result<(), BackendError> {
        spec.runnable(self.nranks())?;
        if Dtype::FP8.contains(&spec.dtype) {
            return Err(BackendError::Unsupported(format!(
                "--backend mpi: MPI has no {} type (fp8 runs on the nccl and host backends)",
                spec.dtype
            )));
        }
        let layout = spec.layout(self.nranks, self.rank);
        if layout.buffer_count() > c_int::MAX as usize {
            return Err(BackendError::Unsupported(format!(
                "--backend mpi: {} elements exceed MPI's int count limit; use a smaller -e/--maxbytes or a wider -d/--datatype",
                layout.buffer_count()
            )));
        }
        let bytes = layout.buffer_count() * spec.dtype.size_bytes();
        self.send.ensure_at(bytes, spec.shift_bytes())?;
        self.recv.ensure_at(bytes, spec.shift_bytes())?;
        self.spec = Some(spec.clone());
        Ok(())
    }

    fn buffers(&mut self) -> RankBuffers<'_> {
        RankBuffers {
            send: self.send.bytes_mut(),
            recv: self.recv.bytes_mut(),
        }
    }

    fn run(&mut self, placement: Placement, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("run() before prepare()".into()))?;
        let call = self.call(&spec, placement);
        let start = Instant::now();
        for _ in 0..iters {
            // SAFETY: `call` was resolved just now from this spec and these buffers.
            let rc = unsafe { call.issue() };
            if rc != 0 {
                return Err(BackendError::Failed(format!(
                    "MPI call for {} failed with error code {rc}",
                    spec.coll
                )));
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Blocking point-to-point calls, as osu_bw/osu_bibw/osu_latency make them: MPI_Send and
    /// MPI_Recv one way, MPI_Sendrecv both ways, a send then a receive for a round trip.
    fn exchange(&mut self, role: PairRole, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("exchange() before prepare()".into()))?;
        let count = spec.count as c_int;
        let comm = self.world.as_raw();
        let send = self.send.as_mut_ptr() as *mut c_void;
        let recv = self.recv.as_mut_ptr() as *mut c_void;
        let phases = role.phases();
        let start = Instant::now();
        for _ in 0..iters {
            for phase in &phases {
                // SAFETY: both buffers hold `count` bytes (prepare of the pair spec); the calls
                // are blocking, so nothing outlives them.
                let rc = unsafe {
                    let dt = ffi::RSMPI_UINT8_T;
                    match (phase.send_to, phase.recv_from) {
                        (Some(to), Some(from)) => ffi::MPI_Sendrecv(
                            send,
                            count,
                            dt,
                            to as c_int,
                            1,
                            recv,
                            count,
                            dt,
                            from as c_int,
                            1,
                            comm,
                            ffi::RSMPI_STATUS_IGNORE,
                        ),
                        (Some(to), None) => ffi::MPI_Send(send, count, dt, to as c_int, 1, comm),
                        (None, Some(from)) => ffi::MPI_Recv(
                            recv,
                            count,
                            dt,
                            from as c_int,
                            1,
                            comm,
                            ffi::RSMPI_STATUS_IGNORE,
                        ),
                        (None, None) => 0,
                    }
                };
                if rc != 0 {
                    return Err(BackendError::Failed(format!(
                        "MPI point-to-point call of rank {} ({role:?}) failed with error code {rc}",
                        self.rank
                    )));
                }
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let len = data.len() as i32;
        let mut lens = vec![0i32; self.nranks];
        self.world.all_gather_into(&len, &mut lens[..]);
        let total: i32 = lens.iter().sum();
        if total == 0 {
            // Nothing to move (a pure barrier); MPI rejects the empty receive buffer.
            return Ok(vec![Vec::new(); self.nranks]);
        }
        let mut displs = Vec::with_capacity(self.nranks);
        let mut acc = 0;
        for l in &lens {
            displs.push(acc);
            acc += l;
        }
        let mut flat = vec![0u8; total as usize];
        {
            let mut partition =
                mpi::datatype::PartitionMut::new(&mut flat[..], &lens[..], &displs[..]);
            self.world.all_gather_varcount_into(data, &mut partition);
        }
        Ok(lens
            .iter()
            .zip(&displs)
            .map(|(&l, &d)| flat[d as usize..(d + l) as usize].to_vec())
            .collect())
    }
}
