//! One rank on one GPU: buffers, stream, timing of a batch, completion polling, async errors.
//!
//! Timing is nccl-tests': host wall clock from the first enqueue of a batch to the stream's
//! completion, polling `cuStreamQuery` and `ncclCommGetAsyncError` (an async error aborts the
//! communicator and fails the run, naming the collective, size and rank).

use super::abort::{
    initialised, non_blocking_by_env, Handle, NCCL_IN_PROGRESS, NO_SIMULATION_NON_BLOCKING,
};
use super::api::{Api, NcclConfig, Registration, RegistrationMode};
use super::completion;
use super::enqueue::{enqueue, enqueue_transfer, FirstError, Rotation, Target};
use super::group::{GroupLauncher, Work};
use super::memory::{free_on, MemoryWatch};
use crate::backend::cuda::drv;
use crate::backend::rendezvous::{ControlPlane, InProcess};
use crate::backend::{AlignedBuf, BackendError, Communicator, PairRole, PointSpec};
use crate::coll::{Collective, Placement};
use crate::data::RankBuffers;
use crate::documents::topology::PciAddress;
use crate::model::IterationTiming;
use cudarc::driver::sys as cu;
use cudarc::nccl::sys::{ncclSimInfo_t, ncclUniqueId};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::Instant;

/// One rank on one GPU.
pub struct NcclComm {
    pub(super) api: Arc<Api>,
    pub(super) rank: usize,
    pub(super) nranks: usize,
    pub(super) device: c_int,
    pub(super) ctx: usize,
    pub(super) comm: Arc<Handle>,
    pub(super) stream: usize,
    pub(super) dev_send: u64,
    pub(super) dev_recv: u64,
    /// -u: how far past `dev_send` and `dev_recv` the prepared point's buffers begin.
    pub(super) shift: u64,
    /// How successive calls of a batch move through the buffers (nccl-tests' rotation).
    pub(super) rotation: Rotation,
    pub(super) capacity: usize,
    pub(super) host_send: AlignedBuf,
    pub(super) host_recv: AlignedBuf,
    pub(super) spec: Option<PointSpec>,
    pub(super) control: Box<dyn ControlPlane>,
    /// Time batches with CUDA events on the stream instead of the host clock.
    pub(super) events: Option<(usize, usize)>,
    /// `-g N`: the launcher that enqueues every GPU's calls from one thread, grouped.
    pub(super) group: Option<Arc<GroupLauncher>>,
    /// `-R 1|2`: buffers from ncclMemAlloc, registered; the two registration handles.
    pub(super) registered: Option<(Registration, RegistrationMode, [usize; 2])>,
    /// What the run record should say about this communicator (`Communicator::notes`).
    pub(super) notes: Vec<String>,
    /// -M: what init and the buffers took of the GPU's memory.
    pub(super) memory: MemoryWatch,
    /// NCCL_TESTS_SPLIT: the group this rank's communicator belongs to.
    pub(super) color: usize,
}

/// Which communicator a process joins under NCCL_TESTS_SPLIT: its group's color, and the rank
/// (over the whole job's control plane) whose unique id the group uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Group {
    pub color: usize,
    pub leader: usize,
}

// SAFETY: the raw handles are only used by the thread that owns this rank; the CUDA context
// is made current on that thread before every call (`use_device`).
unsafe impl Send for NcclComm {}

impl NcclComm {
    /// Build the rank's communicator: rank 0's unique id goes to every rank over `control`.
    pub fn new(
        api: Arc<Api>,
        rank: usize,
        nranks: usize,
        device: c_int,
        mut control: Box<dyn ControlPlane>,
        cta_policy: Option<c_int>,
        group: Group,
    ) -> Result<NcclComm, BackendError> {
        let ctx = api.use_device(device)?;
        let id = if rank == 0 {
            api.unique_id()?.to_vec()
        } else {
            Vec::new()
        };
        // The control plane spans every process; the id is the group's first rank's.
        let ids = control.allgather(&id)?;
        let root = ids
            .get(group.leader)
            .filter(|b| b.len() == 128)
            .ok_or_else(|| BackendError::Failed("rank 0 sent no NCCL unique id".into()))?;
        let what = || format!("ncclCommInitRankConfig (rank {rank} of {nranks}, GPU {device})");
        let free = |api: &Api| api.free_memory().map(|f| f as i64);
        let free_before = free(&api);
        let mut comm = std::ptr::null_mut();
        let mut config = NcclConfig::nccl_tests(api.nccl.version_code, cta_policy);
        // SAFETY: valid out-pointer and config; the id by value as the call takes it.
        let rc = unsafe {
            (api.nccl_comm_init_rank_config)(
                &mut comm,
                nranks as c_int,
                unique_id(root),
                rank as c_int,
                &mut config,
            )
        };
        let comm = initialised(&api, &what, rc, &[comm])?.remove(0);
        let free_after = free(&api);
        let mut c = Self::finish(api, rank, nranks, device, ctx, comm, control)?;
        c.memory.init = free_before.zip(free_after);
        c.color = group.color;
        Ok(c)
    }

    /// `-g N` in one process: one communicator per GPU, created as nccl-tests creates them
    /// (src/common.cu, initComms): `ncclCommInitRankConfig` for each GPU inside one group,
    /// from this thread, each then handed to its rank's thread.
    pub fn init_all(
        api: Arc<Api>,
        devices: &[c_int],
        cta_policy: Option<c_int>,
    ) -> Result<Vec<NcclComm>, BackendError> {
        let n = devices.len();
        let id = api.unique_id()?;
        let mut comms = vec![std::ptr::null_mut(); n];
        let mut config = NcclConfig::nccl_tests(api.nccl.version_code, cta_policy);
        let mut rc = FirstError::default();
        let free_before: Vec<Option<i64>> = devices.iter().map(|&d| free_on(&api, d)).collect();
        // SAFETY: no arguments; closed below whatever happens in between.
        unsafe { (api.nccl_group_start)() };
        for (rank, (&device, comm)) in devices.iter().zip(comms.iter_mut()).enumerate() {
            let current = api.use_device(device);
            // SAFETY: valid out-pointer and config; the device's context is current.
            rc.add(match current {
                Ok(_) => unsafe {
                    (api.nccl_comm_init_rank_config)(
                        comm,
                        n as c_int,
                        unique_id(&id),
                        rank as c_int,
                        &mut config,
                    )
                },
                Err(_) => 1,
            });
        }
        // SAFETY: closes the group opened above.
        rc.add(unsafe { (api.nccl_group_end)() });
        let what = || format!("ncclCommInitRankConfig of {n} GPUs in a group");
        let handles = initialised(&api, &what, rc.0, &comms)?;
        let planes = InProcess::group(n);
        let launcher = Arc::new(GroupLauncher::new(n));
        handles
            .into_iter()
            .zip(planes)
            .enumerate()
            .map(|(rank, (comm, plane))| {
                let free_after = free_on(&api, devices[rank]);
                let ctx = api.use_device(devices[rank])?;
                let mut c = Self::finish(
                    Arc::clone(&api),
                    rank,
                    n,
                    devices[rank],
                    ctx,
                    comm,
                    Box::new(plane),
                )?;
                // One GPU needs no group: nccl-tests groups its calls only with several
                // (src/common.cu, startColl: `if (args->nGpus > 1) ncclGroupStart()`).
                c.group = (n > 1).then(|| Arc::clone(&launcher));
                c.memory.init = free_before[rank].zip(free_after);
                Ok(c)
            })
            .collect()
    }

    fn finish(
        api: Arc<Api>,
        rank: usize,
        nranks: usize,
        device: c_int,
        ctx: usize,
        comm: Arc<Handle>,
        control: Box<dyn ControlPlane>,
    ) -> Result<NcclComm, BackendError> {
        let mut stream = std::ptr::null_mut();
        // As nccl-tests creates its streams (src/common.cu: cudaStreamCreateWithFlags(...,
        // cudaStreamNonBlocking)): the stream does not synchronise with the legacy default
        // stream, so every copy the collectives depend on is made on this stream (`upload`).
        // SAFETY: out-pointer valid; context current.
        let created = api.cuda("cuStreamCreate", unsafe {
            drv::cuStreamCreate(&mut stream, CU_STREAM_NON_BLOCKING)
        });
        if let Err(e) = created {
            comm.destroy();
            return Err(e);
        }
        let notes = (api.simulate.is_some() && non_blocking_by_env())
            .then(|| NO_SIMULATION_NON_BLOCKING.to_string())
            .into_iter()
            .collect();
        Ok(NcclComm {
            api,
            rank,
            nranks,
            device,
            ctx,
            comm,
            stream: stream as usize,
            dev_send: 0,
            dev_recv: 0,
            shift: 0,
            rotation: Rotation::default(),
            capacity: 0,
            host_send: AlignedBuf::default(),
            host_recv: AlignedBuf::default(),
            spec: None,
            control,
            events: None,
            group: None,
            registered: None,
            notes,
            memory: MemoryWatch::default(),
            color: 0,
        })
    }

    /// Time with CUDA events recorded on the stream around each batch (device time, without
    /// the host's enqueue and polling), instead of nccl-tests' host wall clock.
    pub fn use_cuda_events(&mut self) -> Result<(), BackendError> {
        self.current()?;
        let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers; default flags (timing enabled).
        unsafe {
            self.api
                .cuda("cuEventCreate", drv::cuEventCreate(&mut a, 0))?;
            self.api
                .cuda("cuEventCreate", drv::cuEventCreate(&mut b, 0))?;
        }
        self.events = Some((a as usize, b as usize));
        Ok(())
    }

    /// nccl-tests' -y 1 (src/common.cu: `streams[i] = NULL`): every call on the device's
    /// legacy default stream instead of a stream of the rank's own.
    pub fn use_null_stream(&mut self) -> Result<(), BackendError> {
        self.current()?;
        if self.stream != 0 {
            // SAFETY: the stream this rank created, idle (nothing was issued on it yet).
            self.api.cuda("cuStreamDestroy", unsafe {
                drv::cuStreamDestroy_v2(self.stream as cu::CUstream)
            })?;
        }
        self.stream = 0;
        Ok(())
    }

    /// Free memory of this rank's GPU now.
    fn free_now(&self) -> Option<i64> {
        self.current().ok()?;
        self.api.free_memory().map(|f| f as i64)
    }

    pub fn device(&self) -> c_int {
        self.device
    }

    pub(super) fn current(&self) -> Result<(), BackendError> {
        // SAFETY: the context handle came from cuDevicePrimaryCtxRetain.
        self.api.cuda("cuCtxSetCurrent", unsafe {
            drv::cuCtxSetCurrent(self.ctx as cu::CUcontext)
        })
    }

    pub(super) fn target(&self) -> Target {
        Target {
            ctx: self.ctx,
            comm: Arc::clone(&self.comm),
            stream: self.stream,
            dev_send: self.dev_send + self.shift,
            dev_recv: self.dev_recv + self.shift,
            rank: self.rank,
            nranks: self.nranks,
            device: self.device,
            rotation: self.rotation,
        }
    }

    /// Wait for the stream, watching for NCCL async errors (`completion::wait`).
    pub(super) fn wait(&self, spec: &PointSpec) -> Result<(), BackendError> {
        completion::wait(&self.comm, self.stream, self.rank, self.device, spec)
    }
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
    }

    fn prepare(&mut self, spec: &PointSpec) -> Result<(), BackendError> {
        spec.runnable(self.nranks())?;
        if crate::dtype::Dtype::FP8.contains(&spec.dtype) && self.api.nccl.version_code < 22400 {
            return Err(BackendError::Unsupported(format!(
                "{}: NCCL {} has no fp8 types (ncclFloat8e4m3 and ncclFloat8e5m2 came in 2.24)",
                spec.dtype,
                super::loader::version_string(self.api.nccl.version_code)
            )));
        }
        self.current()?;
        let bytes = spec.layout(self.nranks, self.rank).buffer_count() * spec.dtype.size_bytes();
        // -u: the collective's buffers start past the allocation's (aligned) start. Both
        // buffers hold -e's bytes (plus -u's shift) as nccl-tests' do (src/common.cu,
        // AllocateBuffs), so the calls of a batch can rotate through them.
        let needed = bytes + spec.shift_bytes();
        if needed > self.capacity {
            self.free_buffers();
            let before = self.free_now();
            let wanted = needed.max(spec.rotate_within + spec.shift_bytes());
            self.alloc_buffers(wanted.max(1))?;
            self.memory.allocated(before, self.free_now());
        }
        self.shift = spec.shift_bytes() as u64;
        self.rotation = Rotation::new(
            bytes as u64,
            needed as u64,
            self.capacity as u64,
            spec.rotate_within as u64,
        );
        self.host_send.ensure(bytes)?;
        self.host_recv.ensure(bytes)?;
        self.spec = Some(spec.clone());
        Ok(())
    }

    fn buffers(&mut self) -> RankBuffers<'_> {
        RankBuffers {
            send: self.host_send.bytes_mut(),
            recv: self.host_recv.bytes_mut(),
        }
    }

    /// Both buffers to the GPU on the rank's own stream, then wait for it: the stream is
    /// non-blocking, so a synchronous copy (issued on the legacy default stream) would not be
    /// ordered before the collectives on it (CUDA runtime API, "Stream synchronization
    /// behavior": non-blocking streams do not synchronise with the legacy stream; and a
    /// pageable cuMemcpyHtoD may return before its DMA lands).
    fn upload(&mut self) -> Result<(), BackendError> {
        self.current()?;
        let n = self.host_send.bytes().len();
        let stream = self.stream as cu::CUstream;
        // SAFETY: device buffers hold at least `n` bytes (prepare); the host buffers stay put
        // until the stream is synchronised below.
        unsafe {
            for (dst, src) in [
                (self.dev_send + self.shift, self.host_send.bytes().as_ptr()),
                (self.dev_recv + self.shift, self.host_recv.bytes().as_ptr()),
            ] {
                self.api.cuda(
                    "cuMemcpyHtoDAsync",
                    drv::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, n, stream),
                )?;
            }
            self.api
                .cuda("cuStreamSynchronize", drv::cuStreamSynchronize(stream))
        }
    }

    /// The receive buffer back, ordered after the collectives on the rank's stream.
    fn download(&mut self) -> Result<(), BackendError> {
        self.current()?;
        let n = self.host_recv.bytes().len();
        let stream = self.stream as cu::CUstream;
        // SAFETY: as for upload.
        unsafe {
            self.api.cuda(
                "cuMemcpyDtoHAsync",
                drv::cuMemcpyDtoHAsync_v2(
                    self.host_recv.bytes_mut().as_mut_ptr() as *mut c_void,
                    self.dev_recv + self.shift,
                    n,
                    stream,
                ),
            )?;
            self.api
                .cuda("cuStreamSynchronize", drv::cuStreamSynchronize(stream))
        }
    }

    fn run(&mut self, placement: Placement, iters: usize) -> Result<f64, BackendError> {
        self.run_batch(placement, iters, 1)
    }

    fn run_aggregated(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<f64, BackendError> {
        self.run_batch(placement, iters, agg)
    }

    fn run_graph(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        launches: usize,
    ) -> Result<f64, BackendError> {
        self.run_graph_batch(placement, iters, agg, launches)
    }

    fn run_each(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<(f64, Vec<f64>, IterationTiming), BackendError> {
        self.run_each_timed(placement, iters, agg)
    }

    /// ncclSend/ncclRecv in a group per phase on this rank's stream (`-g N`: every GPU's
    /// part in one group from one thread), then wait for the stream.
    fn exchange(&mut self, role: PairRole, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("exchange() before prepare()".into()))?;
        self.current()?;
        let mut start = Instant::now();
        match &self.group {
            Some(group) => {
                let work = Work::Pair(role, spec.count);
                start = group.launch(&self.api, self.target(), work, iters)?;
                self.current()?;
            }
            None => {
                let target = self.target();
                for _ in 0..iters {
                    for phase in role.phases() {
                        // SAFETY: both device buffers hold `count` bytes (prepare).
                        unsafe { enqueue_transfer(&self.api, &target, phase, spec.count)? };
                    }
                }
            }
        }
        self.wait(&spec)?;
        Ok(start.elapsed().as_secs_f64())
    }

    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        self.control.allgather(data)
    }

    /// nccl-tests 2.19's device column (src/util.cu: `device %2d [%04x:%02x:%02x] %s`, the
    /// CUDA ordinal, then PCI domain, bus and device): the address is what ties the rank to
    /// its GPU in NVML's and the topology's numbering, whatever CUDA_VISIBLE_DEVICES or
    /// CUDA_DEVICE_ORDER made of the ordinal.
    fn device_label(&self) -> Option<String> {
        let name = self.api.device_name(self.device);
        let address = self
            .api
            .pci_bus_id(self.device)
            .as_deref()
            .and_then(PciAddress::parse);
        Some(match address {
            Some(a) => format!(
                "{:2} [{:04x}:{:02x}:{:02x}] {name}",
                self.device,
                a.domain.unwrap_or(0),
                a.bus,
                a.device.unwrap_or(0)
            ),
            None => format!("{:2} {name}", self.device),
        })
    }

    /// NCCL's estimate for one call: the call enqueued in a group that is only simulated
    /// (nothing runs). NCCL reports microseconds, or a negative value when it has none.
    fn model_time_s(&mut self, placement: Placement) -> Option<f64> {
        let simulate = self.api.simulate?;
        let spec = self.spec.clone()?;
        // Only groups holding a collective are simulated. NCCL estimates collectives only
        // (estimatedTime stays -1 for sends and receives), and a simulated group's send/recv
        // tasks are never launched but stay queued in the communicator's planner (2.23+,
        // src/group.cc; in 2.22 they point at freed memory): the next group would run them.
        // alltoall, gather, scatter, hypercube and alltoallv are sends and receives (before
        // 2.28; from it the first three are calls whose estimate is not known to be kept).
        if !matches!(
            spec.coll,
            Collective::AllReduce
                | Collective::AllGather
                | Collective::ReduceScatter
                | Collective::Broadcast
                | Collective::Reduce
        ) {
            return None;
        }
        // On a non-blocking communicator NCCL does not simulate: ncclGroupEndInternal takes its
        // non-blocking branch and groupLaunchNonBlocking launches the group for real, without
        // the simulation info, answering ncclInProgress (src/group.cc, v2.28.9 642-644,
        // 704-738). NCCL_COMM_BLOCKING=0 overrides the blocking config (init.cc,
        // envConfigOverride), so ask only where the communicator blocks.
        if non_blocking_by_env() {
            return None;
        }
        self.current().ok()?;
        let mut info = ncclSimInfo_t {
            size: std::mem::size_of::<ncclSimInfo_t>(),
            magic: 0x7468_5283,
            version: self.api.nccl.version_code as u32,
            estimatedTime: -1.0,
        };
        // SAFETY: a group around one enqueue of the prepared point, closed by the simulation;
        // `info` is initialised as NCCL_SIM_INFO_INITIALIZER does.
        let rc = unsafe {
            (self.api.nccl_group_start)();
            let queued = enqueue(&self.api, &self.target(), &spec, placement);
            let rc = simulate(&mut info);
            queued.ok()?;
            rc
        };
        if rc == NCCL_IN_PROGRESS {
            // Non-blocking after all: the group runs for real; the next call must find the
            // communicator ready (init.cc, ncclCommEnsureReady).
            let _ = self
                .comm
                .settle(&|| "a group NCCL launched for real".into());
            return None;
        }
        (rc == 0 && info.estimatedTime >= 0.0).then_some(info.estimatedTime as f64 * 1e-6)
    }

    fn group(&self) -> usize {
        self.color
    }

    fn gpu_memory(&mut self) -> Option<crate::model::GpuMemory> {
        self.memory.report(self.free_now())
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn checks_in_place(&self, coll: Collective) -> bool {
        // As nccl-tests: in-place alltoall/sendrecv overwrite what peers still read.
        !matches!(coll, Collective::Alltoall | Collective::Sendrecv)
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // The communicator's work is done or aborted: registrations go before the
        // communicator, then buffers, events and the stream.
        let _ = self.current();
        self.free_buffers();
        self.comm.destroy();
        // SAFETY: our own handles, destroyed once.
        unsafe {
            if let Some((a, b)) = self.events {
                drv::cuEventDestroy_v2(a as cu::CUevent);
                drv::cuEventDestroy_v2(b as cu::CUevent);
            }
            if self.stream != 0 {
                drv::cuStreamDestroy_v2(self.stream as cu::CUstream);
            }
        }
    }
}

/// `CU_STREAM_NON_BLOCKING` (cuda.h, CUstream_flags).
const CU_STREAM_NON_BLOCKING: u32 = 0x1;

fn unique_id(bytes: &[u8]) -> ncclUniqueId {
    let mut uid = ncclUniqueId { internal: [0; 128] };
    for (dst, &src) in uid.internal.iter_mut().zip(bytes) {
        *dst = src as c_char;
    }
    uid
}
