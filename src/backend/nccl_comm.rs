//! The `nccl` backend: one rank per GPU, CUDA driver API and NCCL both loaded at run time.
//!
//! CUDA calls go through cudarc's driver bindings once `cuda::open` has verified the library
//! (so cudarc cannot panic); NCCL calls through `Api`, resolved once with each missing symbol
//! named. Result codes stay plain integers for NCCL (a newer NCCL may return codes cudarc's
//! enums lack); cudarc supplies the NCCL argument types.
//! Timing is nccl-tests': host wall clock from the first enqueue of a batch to the stream's
//! completion, polling `cuStreamQuery` and `ncclCommGetAsyncError` (an async error aborts the
//! communicator and fails the run, naming the collective, size and rank).

use super::cuda;
use super::nccl::Nccl;
use super::{AlignedBuf, BackendError, Communicator, PointSpec};
use crate::coll::{Collective, Placement};
use crate::data::RankBuffers;
use crate::dtype::{Dtype, RedOp};
use cudarc::driver::sys as cu;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::nccl::sys::{
    ncclDataType_t as NcclType, ncclRedOp_t as NcclOp, ncclSimInfo_t, ncclUniqueId,
};

type NcclCommInitRank = unsafe extern "C" fn(*mut *mut c_void, c_int, ncclUniqueId, c_int) -> c_int;
type NcclCommInitAll = unsafe extern "C" fn(*mut *mut c_void, c_int, *const c_int) -> c_int;
type NcclGroup = unsafe extern "C" fn() -> c_int;
type NcclAllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclType,
    NcclOp,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclAllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclType,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclBroadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclType,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclType,
    NcclOp,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclSendRecv =
    unsafe extern "C" fn(*mut c_void, usize, NcclType, c_int, *mut c_void, *mut c_void) -> c_int;
type NcclAsyncError = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type NcclMemAlloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type NcclMemFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type NcclCommRegister =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut *mut c_void) -> c_int;
type NcclCommDeregister = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type NcclWindowRegister =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int;
/// `NCCL_WIN_COLL_SYMMETRIC` (nccl.h, 2.27).
const NCCL_WIN_COLL_SYMMETRIC: c_int = 0x01;
type NcclGroupSimulateEnd = unsafe extern "C" fn(*mut ncclSimInfo_t) -> c_int;

/// NCCL 2.19's local buffer registration (nccl-tests' -R 1): buffers from `ncclMemAlloc`,
/// registered with the communicator so NCCL can work on them without internal copies.
#[derive(Clone, Copy)]
pub struct Registration {
    mem_alloc: NcclMemAlloc,
    mem_free: NcclMemFree,
    register: NcclCommRegister,
    deregister: NcclCommDeregister,
    /// NCCL 2.27's symmetric windows (nccl-tests' -R 2), a collective registration.
    window: Option<(NcclWindowRegister, NcclCommDeregister)>,
}

/// How buffers are registered: nccl-tests' -R 1 (local) or -R 2 (symmetric windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationMode {
    Local,
    Symmetric,
}
type NcclCommFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// Every CUDA driver and NCCL entry point the backend calls.
pub struct Api {
    pub nccl: Nccl,
    nccl_comm_init_rank: NcclCommInitRank,
    nccl_comm_init_all: NcclCommInitAll,
    nccl_group_start: NcclGroup,
    nccl_group_end: NcclGroup,
    nccl_all_reduce: NcclAllReduce,
    nccl_all_gather: NcclAllGather,
    nccl_reduce_scatter: NcclAllReduce,
    nccl_broadcast: NcclBroadcast,
    nccl_reduce: NcclReduce,
    nccl_send: NcclSendRecv,
    nccl_recv: NcclSendRecv,
    nccl_async_error: NcclAsyncError,
    nccl_abort: NcclCommFn,
    nccl_destroy: NcclCommFn,
    pub devices: c_int,
    /// Present when the library is NCCL 2.19 or newer and has the four entry points.
    pub registration: Option<Registration>,
    /// NCCL 2.22's cost-model query, when present.
    simulate: Option<NcclGroupSimulateEnd>,
    /// The CUDA driver: its file and `cuDriverGetVersion` (e.g. 12040).
    pub driver: (std::path::PathBuf, i32),
}

fn sym<T: Copy>(
    lib: &libloading::Library,
    what: &str,
    name: &str,
    missing: &mut Vec<String>,
) -> Option<T> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: `T` is the C signature of `name` as declared in cuda.h / nccl.h; the library is
    // never unloaded, so the copied function pointer stays valid.
    match unsafe { lib.get::<T>(&n[..]) } {
        Ok(s) => Some(*s),
        Err(_) => {
            missing.push(format!("{name} ({what})"));
            None
        }
    }
}

/// The registration entry points, only from NCCL 2.19 on (they are newer than the 2.18 floor).
fn optional_registration(lib: &libloading::Library, version_code: i32) -> Option<Registration> {
    if version_code < 21900 {
        return None;
    }
    let mut ignored = Vec::new();
    Some(Registration {
        mem_alloc: sym(lib, "NCCL", "ncclMemAlloc", &mut ignored)?,
        mem_free: sym(lib, "NCCL", "ncclMemFree", &mut ignored)?,
        register: sym(lib, "NCCL", "ncclCommRegister", &mut ignored)?,
        deregister: sym(lib, "NCCL", "ncclCommDeregister", &mut ignored)?,
        window: (version_code >= 22700)
            .then(|| {
                Some((
                    sym(lib, "NCCL", "ncclCommWindowRegister", &mut ignored)?,
                    sym(lib, "NCCL", "ncclCommWindowDeregister", &mut ignored)?,
                ))
            })
            .flatten(),
    })
}

impl Api {
    /// Resolve every symbol; all missing ones are named in one error.
    pub fn load(nccl: Nccl) -> Result<Api, BackendError> {
        // The driver, verified so that cudarc's calls below cannot panic (see `cuda`).
        let driver = cuda::probe().map_err(BackendError::Unavailable)?;
        if driver.devices == 0 {
            return Err(BackendError::Unavailable(format!(
                "the CUDA driver at {} sees no GPU",
                driver.path.display()
            )));
        }
        // The NCCL handle is kept alive by `nccl` (never unloaded); reopen for symbol lookup.
        // SAFETY: the same file is already loaded; this only takes another reference.
        let nlib = unsafe { libloading::Library::new(&nccl.path) }.map_err(|e| {
            BackendError::Unavailable(format!("{}: {}", nccl.path.display(), super::dl_error(&e)))
        })?;
        let nlib = Box::leak(Box::new(nlib));
        let mut missing = Vec::new();
        let n = "NCCL";
        let api = (|| {
            let nccl = nccl;
            Some(Api {
                nccl_comm_init_rank: sym(nlib, n, "ncclCommInitRank", &mut missing)?,
                nccl_comm_init_all: sym(nlib, n, "ncclCommInitAll", &mut missing)?,
                nccl_group_start: sym(nlib, n, "ncclGroupStart", &mut missing)?,
                nccl_group_end: sym(nlib, n, "ncclGroupEnd", &mut missing)?,
                nccl_all_reduce: sym(nlib, n, "ncclAllReduce", &mut missing)?,
                nccl_all_gather: sym(nlib, n, "ncclAllGather", &mut missing)?,
                nccl_reduce_scatter: sym(nlib, n, "ncclReduceScatter", &mut missing)?,
                nccl_broadcast: sym(nlib, n, "ncclBroadcast", &mut missing)?,
                nccl_reduce: sym(nlib, n, "ncclReduce", &mut missing)?,
                nccl_send: sym(nlib, n, "ncclSend", &mut missing)?,
                nccl_recv: sym(nlib, n, "ncclRecv", &mut missing)?,
                nccl_async_error: sym(nlib, n, "ncclCommGetAsyncError", &mut missing)?,
                nccl_abort: sym(nlib, n, "ncclCommAbort", &mut missing)?,
                nccl_destroy: sym(nlib, n, "ncclCommDestroy", &mut missing)?,
                registration: optional_registration(nlib, nccl.version_code),
                simulate: (nccl.version_code >= 22200)
                    .then(|| sym(nlib, n, "ncclGroupSimulateEnd", &mut Vec::new()))
                    .flatten(),
                nccl,
                devices: 0,
                driver: (driver.path.clone(), driver.version),
            })
        })();
        let Some(mut api) = api else {
            return Err(BackendError::Unavailable(format!(
                "missing symbols: {}",
                missing.join(", ")
            )));
        };
        api.devices = driver.devices;
        Ok(api)
    }

    fn cuda(&self, what: &str, rc: cu::CUresult) -> Result<(), BackendError> {
        cuda::check(what, rc).map_err(BackendError::Failed)
    }

    fn nccl_check(&self, what: &str, rc: c_int) -> Result<(), BackendError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(BackendError::Failed(format!(
                "{what} failed: {}",
                self.nccl.error_string(rc)
            )))
        }
    }

    pub fn device_name(&self, dev: c_int) -> String {
        let mut buf = [0 as c_char; 128];
        // SAFETY: buffer and length match.
        let rc = unsafe { cu::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        if rc != cu::CUresult::CUDA_SUCCESS {
            return format!("GPU {dev}");
        }
        // SAFETY: the driver NUL-terminates within the given length.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Make `dev`'s primary context current on this thread.
    pub fn use_device(&self, dev: c_int) -> Result<usize, BackendError> {
        let mut d = 0;
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointers; dev checked by the driver.
        unsafe {
            self.cuda("cuDeviceGet", cu::cuDeviceGet(&mut d, dev))?;
            self.cuda(
                "cuDevicePrimaryCtxRetain",
                cu::cuDevicePrimaryCtxRetain(&mut ctx, d),
            )?;
            self.cuda("cuCtxSetCurrent", cu::cuCtxSetCurrent(ctx))?;
        }
        Ok(ctx as usize)
    }

    /// Free device memory on the current device.
    pub fn free_memory(&self) -> Option<usize> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        (unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) } == cu::CUresult::CUDA_SUCCESS)
            .then_some(free)
    }

    pub fn unique_id(&self) -> Result<[u8; 128], BackendError> {
        self.nccl.unique_id().map_err(BackendError::Failed)
    }

    /// Copy bandwidth in bytes/s between host and the current device, host→device or
    /// device→host: pageable (plain memory, synchronous copy) or pinned (page-locked memory,
    /// async copy then synchronise). Best of five copies.
    pub fn copy_bandwidth(
        &self,
        bytes: usize,
        pinned: bool,
        to_device: bool,
    ) -> Result<f64, BackendError> {
        let mut dev = 0u64;
        let mut stream: cu::CUstream = std::ptr::null_mut();
        let mut pinned_ptr = std::ptr::null_mut();
        // SAFETY: every pointer below is allocated here with `bytes` bytes and freed at the
        // end, whichever call fails.
        unsafe {
            let measured = (|| {
                self.cuda("cuMemAlloc", cu::cuMemAlloc_v2(&mut dev, bytes))?;
                self.cuda("cuStreamCreate", cu::cuStreamCreate(&mut stream, 0))?;
                let mut pageable = Vec::new();
                let host = if pinned {
                    self.cuda(
                        "cuMemAllocHost",
                        cu::cuMemAllocHost_v2(&mut pinned_ptr, bytes),
                    )?;
                    pinned_ptr
                } else {
                    pageable.resize(bytes, 1u8);
                    pageable.as_mut_ptr() as *mut c_void
                };
                let mut best = f64::INFINITY;
                for _ in 0..5 {
                    let t = Instant::now();
                    match (pinned, to_device) {
                        (true, true) => {
                            self.cuda(
                                "cuMemcpyHtoDAsync",
                                cu::cuMemcpyHtoDAsync_v2(dev, host, bytes, stream),
                            )?;
                            self.cuda("cuStreamSynchronize", cu::cuStreamSynchronize(stream))?;
                        }
                        (true, false) => {
                            self.cuda(
                                "cuMemcpyDtoHAsync",
                                cu::cuMemcpyDtoHAsync_v2(host, dev, bytes, stream),
                            )?;
                            self.cuda("cuStreamSynchronize", cu::cuStreamSynchronize(stream))?;
                        }
                        (false, true) => {
                            self.cuda("cuMemcpyHtoD", cu::cuMemcpyHtoD_v2(dev, host, bytes))?
                        }
                        (false, false) => {
                            self.cuda("cuMemcpyDtoH", cu::cuMemcpyDtoH_v2(host, dev, bytes))?
                        }
                    }
                    best = best.min(t.elapsed().as_secs_f64());
                }
                Ok(bytes as f64 / best)
            })();
            if !pinned_ptr.is_null() {
                cu::cuMemFreeHost(pinned_ptr);
            }
            if !stream.is_null() {
                cu::cuStreamDestroy_v2(stream);
            }
            if dev != 0 {
                cu::cuMemFree_v2(dev);
            }
            measured
        }
    }
}

fn nccl_dtype(d: Dtype) -> NcclType {
    match d {
        Dtype::Int8 => NcclType::ncclInt8,
        Dtype::Uint8 => NcclType::ncclUint8,
        Dtype::Int32 => NcclType::ncclInt32,
        Dtype::Uint32 => NcclType::ncclUint32,
        Dtype::Int64 => NcclType::ncclInt64,
        Dtype::Uint64 => NcclType::ncclUint64,
        Dtype::Half => NcclType::ncclFloat16,
        Dtype::Float => NcclType::ncclFloat32,
        Dtype::Double => NcclType::ncclFloat64,
        // NCCL 2.10 and newer; the oldest NCCL we load is 2.18.
        Dtype::Bfloat16 => NcclType::ncclBfloat16,
    }
}

fn nccl_op(o: RedOp) -> NcclOp {
    match o {
        RedOp::Sum => NcclOp::ncclSum,
        RedOp::Prod => NcclOp::ncclProd,
        RedOp::Max => NcclOp::ncclMax,
        RedOp::Min => NcclOp::ncclMin,
        RedOp::Avg => NcclOp::ncclAvg,
    }
}

/// A live communicator: the API that made it and its handle.
type LiveComm = (Arc<Api>, usize);

/// Communicators the watchdog aborts before the process exits on a timeout.
pub fn live_comms() -> &'static Mutex<Vec<LiveComm>> {
    static C: std::sync::OnceLock<Mutex<Vec<LiveComm>>> = std::sync::OnceLock::new();
    C.get_or_init(|| Mutex::new(Vec::new()))
}

/// Abort every registered communicator (the watchdog's last act).
pub fn abort_all() {
    if let Ok(list) = live_comms().try_lock() {
        for (api, comm) in list.iter() {
            // SAFETY: a communicator created by this process and not destroyed.
            unsafe { (api.nccl_abort)(*comm as *mut c_void) };
        }
    }
}

/// Control-plane exchange between ranks (results, decisions, the unique id).
pub trait ControlPlane {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError>;
}

/// Ranks that are threads of one process.
pub struct InProcess {
    rank: usize,
    board: Arc<(Mutex<Vec<Vec<u8>>>, std::sync::Barrier)>,
}

impl InProcess {
    pub fn group(n: usize) -> Vec<InProcess> {
        let board = Arc::new((Mutex::new(vec![Vec::new(); n]), std::sync::Barrier::new(n)));
        (0..n)
            .map(|rank| InProcess {
                rank,
                board: Arc::clone(&board),
            })
            .collect()
    }
}

impl ControlPlane for InProcess {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let poisoned = || BackendError::Failed("a rank thread panicked".into());
        self.board.0.lock().map_err(|_| poisoned())?[self.rank] = data.to_vec();
        self.board.1.wait();
        let all = self.board.0.lock().map_err(|_| poisoned())?.clone();
        self.board.1.wait();
        Ok(all)
    }
}

/// One rank on one GPU.
pub struct NcclComm {
    api: Arc<Api>,
    rank: usize,
    nranks: usize,
    device: c_int,
    ctx: usize,
    comm: usize,
    stream: usize,
    dev_send: u64,
    dev_recv: u64,
    capacity: usize,
    host_send: AlignedBuf,
    host_recv: AlignedBuf,
    spec: Option<PointSpec>,
    control: Box<dyn ControlPlane>,
    /// Time batches with CUDA events on the stream instead of the host clock.
    events: Option<(usize, usize)>,
    /// `-g N`: the launcher that enqueues every GPU's calls from one thread, grouped.
    group: Option<Arc<GroupLauncher>>,
    /// `-R 1|2`: buffers from ncclMemAlloc, registered; the two registration handles.
    registered: Option<(Registration, RegistrationMode, [usize; 2])>,
    /// Set once ncclCommAbort released the communicator: nothing may use it after that.
    aborted: std::cell::Cell<bool>,
}

/// What one call on one rank needs: plain handles, so another thread can enqueue it.
#[derive(Clone, Copy)]
struct Target {
    ctx: usize,
    comm: usize,
    stream: usize,
    dev_send: u64,
    dev_recv: u64,
    rank: usize,
    nranks: usize,
}

/// `-g N` in one process, as nccl-tests does it and as NCCL requires when one thread drives
/// several devices: rank threads hand over their targets, one thread (rank 0's) enqueues every
/// GPU's call between `ncclGroupStart` and `ncclGroupEnd`, then each rank waits for its own
/// stream. Every rank thread calls `launch` with the same point and iteration count (the
/// harness takes its decisions from all-gathered numbers).
pub struct GroupLauncher {
    targets: Mutex<Vec<Option<Target>>>,
    arrived: std::sync::Barrier,
    launched: std::sync::Barrier,
    error: Mutex<Option<BackendError>>,
}

impl GroupLauncher {
    fn new(n: usize) -> GroupLauncher {
        GroupLauncher {
            targets: Mutex::new(vec![None; n]),
            arrived: std::sync::Barrier::new(n),
            launched: std::sync::Barrier::new(n),
            error: Mutex::new(None),
        }
    }

    /// Enqueue `iters` grouped calls on every rank; returns when all are enqueued, with the
    /// moment every rank had arrived (the start of the timed batch).
    fn launch(
        &self,
        api: &Api,
        target: Target,
        spec: &PointSpec,
        placement: Placement,
        iters: usize,
    ) -> Result<Instant, BackendError> {
        let poisoned = || BackendError::Failed("a rank thread panicked".into());
        self.targets.lock().map_err(|_| poisoned())?[target.rank] = Some(target);
        self.arrived.wait();
        let start = Instant::now();
        if target.rank == 0 {
            let targets: Vec<Target> = self
                .targets
                .lock()
                .map_err(|_| poisoned())?
                .iter()
                .flatten()
                .copied()
                .collect();
            let outcome = (|| {
                for _ in 0..iters {
                    // SAFETY: no arguments; paired with the group end below.
                    unsafe { (api.nccl_group_start)() };
                    let mut first_error = Ok(());
                    for t in &targets {
                        // SAFETY: each target's context and buffers were set up by its rank
                        // for this spec (prepare) before it arrived.
                        let r = unsafe {
                            api.cuda(
                                "cuCtxSetCurrent",
                                cu::cuCtxSetCurrent(t.ctx as cu::CUcontext),
                            )
                            .and_then(|_| enqueue(api, t, spec, placement))
                        };
                        if first_error.is_ok() {
                            first_error = r;
                        }
                    }
                    // SAFETY: closes the group opened above.
                    let end = unsafe { (api.nccl_group_end)() };
                    first_error?;
                    api.nccl_check(
                        &format!("ncclGroupEnd after {} on {} GPUs", spec.coll, targets.len()),
                        end,
                    )?;
                }
                Ok(())
            })();
            *self.error.lock().map_err(|_| poisoned())? = outcome.err();
        }
        self.launched.wait();
        match &*self.error.lock().map_err(|_| poisoned())? {
            Some(e) => Err(BackendError::Failed(e.to_string())),
            None => Ok(start),
        }
    }
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
    ) -> Result<NcclComm, BackendError> {
        let ctx = api.use_device(device)?;
        let id = if rank == 0 {
            api.unique_id()?.to_vec()
        } else {
            Vec::new()
        };
        let ids = control.allgather(&id)?;
        let mut uid = ncclUniqueId { internal: [0; 128] };
        let root = ids
            .first()
            .filter(|b| b.len() == 128)
            .ok_or_else(|| BackendError::Failed("rank 0 sent no NCCL unique id".into()))?;
        for (dst, &src) in uid.internal.iter_mut().zip(root) {
            *dst = src as c_char;
        }
        let mut comm = std::ptr::null_mut();
        // SAFETY: out-pointer valid; id by value as ncclCommInitRank takes it.
        let rc =
            unsafe { (api.nccl_comm_init_rank)(&mut comm, nranks as c_int, uid, rank as c_int) };
        api.nccl_check(
            &format!("ncclCommInitRank (rank {rank} of {nranks}, GPU {device})"),
            rc,
        )?;
        Self::finish(api, rank, nranks, device, ctx, comm as usize, control)
    }

    /// `-g N` in one process: `ncclCommInitAll`, one communicator per GPU, each handed to its thread.
    pub fn init_all(api: Arc<Api>, devices: &[c_int]) -> Result<Vec<NcclComm>, BackendError> {
        let n = devices.len();
        let mut comms = vec![std::ptr::null_mut(); n];
        api.use_device(devices[0])?;
        // SAFETY: `comms` has room for `n` handles; devlist has `n` entries.
        let rc =
            unsafe { (api.nccl_comm_init_all)(comms.as_mut_ptr(), n as c_int, devices.as_ptr()) };
        api.nccl_check(&format!("ncclCommInitAll ({n} GPUs)"), rc)?;
        let planes = InProcess::group(n);
        let launcher = Arc::new(GroupLauncher::new(n));
        comms
            .into_iter()
            .zip(planes)
            .enumerate()
            .map(|(rank, (comm, plane))| {
                let ctx = api.use_device(devices[rank])?;
                let mut c = Self::finish(
                    Arc::clone(&api),
                    rank,
                    n,
                    devices[rank],
                    ctx,
                    comm as usize,
                    Box::new(plane),
                )?;
                c.group = Some(Arc::clone(&launcher));
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
        comm: usize,
        control: Box<dyn ControlPlane>,
    ) -> Result<NcclComm, BackendError> {
        let mut stream = std::ptr::null_mut();
        // SAFETY: out-pointer valid; context current.
        api.cuda("cuStreamCreate", unsafe {
            cu::cuStreamCreate(&mut stream, 0)
        })?;
        if let Ok(mut list) = live_comms().lock() {
            list.push((Arc::clone(&api), comm));
        }
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
            capacity: 0,
            host_send: AlignedBuf::default(),
            host_recv: AlignedBuf::default(),
            spec: None,
            control,
            events: None,
            group: None,
            registered: None,
            aborted: std::cell::Cell::new(false),
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
                .cuda("cuEventCreate", cu::cuEventCreate(&mut a, 0))?;
            self.api
                .cuda("cuEventCreate", cu::cuEventCreate(&mut b, 0))?;
        }
        self.events = Some((a as usize, b as usize));
        Ok(())
    }

    /// `-R 1`: allocate buffers with ncclMemAlloc and register them with the communicator;
    /// `-R 2`: register them as symmetric windows (a collective call on every rank).
    pub fn use_registration(&mut self, mode: RegistrationMode) -> Result<(), BackendError> {
        let nccl = &self.api.nccl;
        let missing = |flag: &str, needs: &str, since: &str| {
            BackendError::Unavailable(format!(
                "{flag} needs {needs} (NCCL {since} or newer); NCCL {} at {} has none",
                nccl.version(),
                nccl.path.display()
            ))
        };
        let reg = self
            .api
            .registration
            .ok_or_else(|| missing("-R 1", "ncclMemAlloc and ncclCommRegister", "2.19"))?;
        if mode == RegistrationMode::Symmetric && reg.window.is_none() {
            return Err(missing("-R 2", "ncclCommWindowRegister", "2.27"));
        }
        self.registered = Some((reg, mode, [0, 0]));
        Ok(())
    }

    /// Free the device buffers (deregistering them first under -R 1).
    fn free_buffers(&mut self) {
        if self.capacity == 0 {
            return;
        }
        // SAFETY: our own allocations (and registrations), released once.
        unsafe {
            match &mut self.registered {
                Some((reg, mode, handles)) => {
                    let comm_alive = !self.aborted.get();
                    let deregister = match (*mode, reg.window) {
                        (RegistrationMode::Symmetric, Some((_, deregister))) => deregister,
                        _ => reg.deregister,
                    };
                    for (buf, handle) in [self.dev_send, self.dev_recv]
                        .iter()
                        .zip(handles.iter_mut())
                    {
                        if *handle != 0 && comm_alive {
                            deregister(self.comm as *mut c_void, *handle as *mut c_void);
                            *handle = 0;
                        }
                        (reg.mem_free)(*buf as *mut c_void);
                    }
                }
                None => {
                    cu::cuMemFree_v2(self.dev_send);
                    cu::cuMemFree_v2(self.dev_recv);
                }
            }
        }
        self.capacity = 0;
    }

    /// Allocate both device buffers of `bytes` (registered under -R 1).
    fn alloc_buffers(&mut self, bytes: usize) -> Result<(), BackendError> {
        let device = self.device;
        let failed = |how: String| BackendError::Alloc {
            bytes: bytes as u64,
            reason: how,
        };
        let comm = self.comm;
        let nccl = &self.api.nccl;
        match &mut self.registered {
            Some((reg, mode, handles)) => {
                for (buf, handle) in [&mut self.dev_send, &mut self.dev_recv]
                    .into_iter()
                    .zip(handles.iter_mut())
                {
                    let mut p = std::ptr::null_mut();
                    // SAFETY: valid out-pointers; the device's context is current.
                    let rc = unsafe { (reg.mem_alloc)(&mut p, bytes) };
                    if rc != 0 {
                        return Err(failed(format!(
                            "ncclMemAlloc on GPU {device} failed: {}",
                            nccl.error_string(rc)
                        )));
                    }
                    *buf = p as u64;
                    let mut h = std::ptr::null_mut();
                    let c = comm as *mut c_void;
                    // SAFETY: a live communicator and the buffer just allocated; every rank
                    // registers the same size at the same point (windows are collective).
                    let (call, rc) = unsafe {
                        match (*mode, reg.window) {
                            (RegistrationMode::Symmetric, Some((register, _))) => (
                                "ncclCommWindowRegister",
                                register(c, p, bytes, &mut h, NCCL_WIN_COLL_SYMMETRIC),
                            ),
                            _ => ("ncclCommRegister", (reg.register)(c, p, bytes, &mut h)),
                        }
                    };
                    if rc != 0 {
                        return Err(failed(format!(
                            "{call} on GPU {device} failed: {}",
                            nccl.error_string(rc)
                        )));
                    }
                    *handle = h as usize;
                }
            }
            None => {
                for buf in [&mut self.dev_send, &mut self.dev_recv] {
                    // SAFETY: valid out-pointer; the device's context is current.
                    let rc = unsafe { cu::cuMemAlloc_v2(buf, bytes) };
                    if rc != cu::CUresult::CUDA_SUCCESS {
                        return Err(failed(format!(
                            "cuMemAlloc on GPU {device} failed with {rc:?}"
                        )));
                    }
                }
            }
        }
        self.capacity = bytes;
        Ok(())
    }

    pub fn device(&self) -> c_int {
        self.device
    }

    fn current(&self) -> Result<(), BackendError> {
        // SAFETY: the context handle came from cuDevicePrimaryCtxRetain.
        self.api.cuda("cuCtxSetCurrent", unsafe {
            cu::cuCtxSetCurrent(self.ctx as cu::CUcontext)
        })
    }

    fn target(&self) -> Target {
        Target {
            ctx: self.ctx,
            comm: self.comm,
            stream: self.stream,
            dev_send: self.dev_send,
            dev_recv: self.dev_recv,
            rank: self.rank,
            nranks: self.nranks,
        }
    }

    /// Wait for the stream, watching for NCCL async errors (abort and fail on one).
    /// Polling does not sleep while a batch could still be timed: a sleep's granularity
    /// (50-100 µs on Linux) would land in the measured time. Like nccl-tests it yields the CPU
    /// between polls (NCCL's proxy threads need it); only waits past 100 ms, long enough that
    /// 50 µs is noise, sleep between polls.
    fn wait(&self, spec: &PointSpec) -> Result<(), BackendError> {
        let a = &self.api;
        let mut spins = 0u32;
        let since = Instant::now();
        loop {
            // SAFETY: the stream belongs to this rank.
            let rc = unsafe { cu::cuStreamQuery(self.stream as cu::CUstream) };
            if rc == cu::CUresult::CUDA_SUCCESS {
                return Ok(());
            }
            if rc != cu::CUresult::CUDA_ERROR_NOT_READY {
                return Err(BackendError::Failed(format!(
                    "cuStreamQuery failed with {rc:?} during {} on rank {}",
                    spec.coll, self.rank
                )));
            }
            let mut async_rc = 0;
            // SAFETY: a live communicator and a valid out-pointer.
            unsafe { (a.nccl_async_error)(self.comm as *mut c_void, &mut async_rc) };
            if async_rc != 0 {
                // SAFETY: as above; abort makes the stream's NCCL work return.
                unsafe { (a.nccl_abort)(self.comm as *mut c_void) };
                self.aborted.set(true);
                return Err(BackendError::Failed(format!(
                    "NCCL async error on rank {} (GPU {}) during {} of {} bytes: {}; communicator aborted",
                    self.rank,
                    self.device,
                    spec.coll,
                    spec.count * spec.dtype.size_bytes(),
                    a.nccl.error_string(async_rc)
                )));
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
}

/// Enqueue one call of the prepared collective on the stream.
unsafe fn enqueue(
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
    let (comm, stream) = (t.comm as *mut c_void, t.stream as *mut c_void);
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
            let mut rc = 0;
            if spec.coll == Collective::Alltoall {
                for peer in 0..n {
                    let off = peer as u64 * bytes;
                    rc |= (a.nccl_send)(
                        (send + off) as *mut c_void,
                        count,
                        dt,
                        peer as c_int,
                        comm,
                        stream,
                    );
                    rc |= (a.nccl_recv)(
                        (recv + off) as *mut c_void,
                        count,
                        dt,
                        peer as c_int,
                        comm,
                        stream,
                    );
                }
            } else {
                rc |= (a.nccl_send)(s, count, dt, ((t.rank + 1) % n) as c_int, comm, stream);
                rc |= (a.nccl_recv)(r, count, dt, ((t.rank + n - 1) % n) as c_int, comm, stream);
            }
            let end = (a.nccl_group_end)();
            if rc != 0 {
                rc
            } else {
                end
            }
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
    a.nccl_check(&format!("nccl {} on rank {}", spec.coll, t.rank), rc)
}

impl Communicator for NcclComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
    }

    fn prepare(&mut self, spec: &PointSpec) -> Result<(), BackendError> {
        spec.runnable()?;
        self.current()?;
        let bytes = spec.layout(self.nranks, self.rank).buffer_count() * spec.dtype.size_bytes();
        if bytes > self.capacity {
            self.free_buffers();
            self.alloc_buffers(bytes.max(1))?;
        }
        self.host_send.ensure(bytes)?;
        self.host_recv.ensure(bytes)?;
        self.spec = Some(*spec);
        Ok(())
    }

    fn buffers(&mut self) -> RankBuffers<'_> {
        RankBuffers {
            send: self.host_send.bytes_mut(),
            recv: self.host_recv.bytes_mut(),
        }
    }

    fn upload(&mut self) -> Result<(), BackendError> {
        self.current()?;
        let n = self.host_send.bytes().len();
        // SAFETY: device buffers hold at least `n` bytes (prepare).
        unsafe {
            self.api.cuda(
                "cuMemcpyHtoD",
                cu::cuMemcpyHtoD_v2(
                    self.dev_send,
                    self.host_send.bytes().as_ptr() as *const c_void,
                    n,
                ),
            )?;
            self.api.cuda(
                "cuMemcpyHtoD",
                cu::cuMemcpyHtoD_v2(
                    self.dev_recv,
                    self.host_recv.bytes().as_ptr() as *const c_void,
                    n,
                ),
            )
        }
    }

    fn download(&mut self) -> Result<(), BackendError> {
        self.current()?;
        let n = self.host_recv.bytes().len();
        // SAFETY: as for upload.
        unsafe {
            self.api.cuda(
                "cuMemcpyDtoH",
                cu::cuMemcpyDtoH_v2(
                    self.host_recv.bytes_mut().as_mut_ptr() as *mut c_void,
                    self.dev_recv,
                    n,
                ),
            )
        }
    }

    fn run(&mut self, placement: Placement, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .ok_or_else(|| BackendError::Failed("run() before prepare()".into()))?;
        self.current()?;
        let stream = self.stream as cu::CUstream;
        let mut start = Instant::now();
        if let Some((a, _)) = self.events {
            // SAFETY: an event created for this rank, recorded on its stream.
            self.api.cuda("cuEventRecord", unsafe {
                cu::cuEventRecord(a as cu::CUevent, stream)
            })?;
        }
        match &self.group {
            Some(group) => {
                start = group.launch(&self.api, self.target(), &spec, placement, iters)?;
                self.current()?;
            }
            None => {
                for _ in 0..iters {
                    // SAFETY: buffers sized by prepare for this spec in both placements.
                    unsafe { enqueue(&self.api, &self.target(), &spec, placement)? };
                }
            }
        }
        if let Some((_, b)) = self.events {
            // SAFETY: as above.
            self.api.cuda("cuEventRecord", unsafe {
                cu::cuEventRecord(b as cu::CUevent, stream)
            })?;
        }
        self.wait(&spec)?;
        let host_s = start.elapsed().as_secs_f64();
        match self.events {
            Some((a, b)) => {
                let mut ms = 0f32;
                // SAFETY: both events completed (the stream is idle).
                self.api.cuda("cuEventElapsedTime", unsafe {
                    cu::cuEventElapsedTime(&mut ms, a as cu::CUevent, b as cu::CUevent)
                })?;
                Ok(ms as f64 * 1e-3)
            }
            None => Ok(host_s),
        }
    }

    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        self.control.allgather(data)
    }

    fn device_label(&self) -> Option<String> {
        Some(format!(
            "{:2} {}",
            self.device,
            self.api.device_name(self.device)
        ))
    }

    /// NCCL's estimate for one call: the call enqueued in a group that is only simulated
    /// (nothing runs). NCCL reports microseconds, or a negative value when it has none.
    fn model_time_s(&mut self, placement: Placement) -> Option<f64> {
        let simulate = self.api.simulate?;
        let spec = self.spec?;
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
        (rc == 0 && info.estimatedTime >= 0.0).then_some(info.estimatedTime as f64 * 1e-6)
    }

    fn checks_in_place(&self, coll: Collective) -> bool {
        // As nccl-tests: in-place alltoall/sendrecv overwrite what peers still read.
        !matches!(coll, Collective::Alltoall | Collective::Sendrecv)
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if let Ok(mut list) = live_comms().lock() {
            list.retain(|(_, c)| *c != self.comm);
        }
        // The communicator's work is done or aborted: registrations go before the
        // communicator, then buffers, events and the stream.
        let _ = self.current();
        self.free_buffers();
        // SAFETY: our own handles, destroyed once; an aborted communicator is already gone.
        unsafe {
            if !self.aborted.get() {
                (self.api.nccl_destroy)(self.comm as *mut c_void);
            }
            if let Some((a, b)) = self.events {
                cu::cuEventDestroy_v2(a as cu::CUevent);
                cu::cuEventDestroy_v2(b as cu::CUevent);
            }
            cu::cuStreamDestroy_v2(self.stream as cu::CUstream);
        }
    }
}

/// Ranks in separate processes started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR): a star
/// over TCP with rank 0 at the centre. torchrun's own store already listens on MASTER_PORT, so
/// the rendezvous uses MASTER_PORT + 1 (or NCCLPROBE_RENDEZVOUS_PORT).
pub struct Tcp {
    rank: usize,
    peers: Vec<std::net::TcpStream>,
}

fn io(what: &str, e: std::io::Error) -> BackendError {
    BackendError::Failed(format!("rendezvous {what}: {e}"))
}

impl Tcp {
    pub fn connect(
        rank: usize,
        nranks: usize,
        addr: &str,
        port: u16,
        timeout: std::time::Duration,
    ) -> Result<Tcp, BackendError> {
        use std::io::{Read, Write};
        let deadline = Instant::now() + timeout;
        if rank == 0 {
            let listener = std::net::TcpListener::bind((addr, port))
                .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", port)))
                .map_err(|e| io(&format!("listening on {addr}:{port}"), e))?;
            listener
                .set_nonblocking(true)
                .map_err(|e| io("listener", e))?;
            let mut slots: Vec<Option<std::net::TcpStream>> =
                (0..nranks.saturating_sub(1)).map(|_| None).collect();
            while slots.iter().any(Option::is_none) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).map_err(|e| io("accept", e))?;
                        // Small control messages: without this, Nagle + delayed ACK add 40 ms.
                        s.set_nodelay(true).map_err(|e| io("accept", e))?;
                        let mut r = [0u8; 8];
                        s.read_exact(&mut r)
                            .map_err(|e| io("reading a peer's rank", e))?;
                        let peer = u64::from_le_bytes(r) as usize;
                        if peer == 0 || peer >= nranks {
                            return Err(BackendError::Failed(format!(
                                "rendezvous: a peer claims rank {peer} of {nranks}"
                            )));
                        }
                        slots[peer - 1] = Some(s);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            let missing: Vec<usize> = slots
                                .iter()
                                .enumerate()
                                .filter(|(_, s)| s.is_none())
                                .map(|(i, _)| i + 1)
                                .collect();
                            return Err(BackendError::Failed(format!("rendezvous on {addr}:{port}: ranks {missing:?} did not connect within {:?}", timeout)));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(e) => return Err(io("accept", e)),
                }
            }
            Ok(Tcp {
                rank,
                peers: slots.into_iter().flatten().collect(),
            })
        } else {
            loop {
                match std::net::TcpStream::connect((addr, port)) {
                    Ok(mut s) => {
                        s.write_all(&(rank as u64).to_le_bytes())
                            .map_err(|e| io("sending our rank", e))?;
                        return Ok(Tcp {
                            rank,
                            peers: vec![s],
                        });
                    }
                    Err(e) if Instant::now() > deadline => {
                        return Err(io(&format!("connecting to rank 0 at {addr}:{port}"), e))
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
            }
        }
    }
}

fn write_frame(s: &mut std::net::TcpStream, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    s.write_all(&(data.len() as u64).to_le_bytes())?;
    s.write_all(data)
}

fn read_frame(s: &mut std::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len) as usize;
    if len > 1 << 30 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

impl ControlPlane for Tcp {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let lost = |r: usize, e: std::io::Error| {
            BackendError::Failed(format!("rank {r} is gone (rendezvous connection: {e})"))
        };
        if self.rank == 0 {
            let mut all = vec![data.to_vec()];
            for (i, s) in self.peers.iter_mut().enumerate() {
                all.push(read_frame(s).map_err(|e| lost(i + 1, e))?);
            }
            let mut packed = Vec::new();
            for part in &all {
                packed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                packed.extend_from_slice(part);
            }
            for (i, s) in self.peers.iter_mut().enumerate() {
                write_frame(s, &packed).map_err(|e| lost(i + 1, e))?;
            }
            Ok(all)
        } else {
            let s = &mut self.peers[0];
            write_frame(s, data).map_err(|e| lost(0, e))?;
            let packed = read_frame(s).map_err(|e| lost(0, e))?;
            let mut all = Vec::new();
            let mut at = 0;
            while at + 8 <= packed.len() {
                let len =
                    u64::from_le_bytes(packed[at..at + 8].try_into().unwrap_or([0; 8])) as usize;
                at += 8;
                let end = (at + len).min(packed.len());
                all.push(packed[at..end].to_vec());
                at = end;
            }
            Ok(all)
        }
    }
}
