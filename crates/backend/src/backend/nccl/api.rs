//! The NCCL entry points the backend calls, resolved once from the library `loader` found, each
//! missing symbol named in one error; the CUDA driver is reached through cudarc once
//! `cuda::open` has verified it (so cudarc cannot panic). NCCL result codes stay plain integers
//! (a newer NCCL may return codes cudarc's enums lack); cudarc supplies the argument types.

use super::loader::Nccl;
use crate::backend::cuda::drv;
use crate::backend::{cuda, BackendError};
use cudarc::driver::sys as cu;
use std::ffi::{c_char, c_int, c_void};
use std::time::Instant;

pub(super) use super::types::{
    mulsum_scalar_bytes, nccl_dtype, nccl_op, NcclOpValue, NcclTypeValue,
};
use cudarc::nccl::sys::{ncclSimInfo_t, ncclUniqueId};

type NcclCommInitRankConfig =
    unsafe extern "C" fn(*mut *mut c_void, c_int, ncclUniqueId, c_int, *mut NcclConfig) -> c_int;

/// `ncclConfig_t` as nccl.h lays it out up to NCCL 2.28's `nvlinkCentricSched`. The struct is
/// append-only and NCCL reads `min(size, its own sizeof)` bytes, then resets fields newer than
/// `version` to their defaults (src/init.cc, parseCommConfig), so an older library reads the
/// prefix it knows and a newer one defaults the fields this struct lacks.
#[repr(C)]
pub(super) struct NcclConfig {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
    traffic_class: c_int,
    comm_name: *const c_char,
    collnet_enable: c_int,
    cta_policy: c_int,
    shrink_share: c_int,
    nvls_ctas: c_int,
    n_channels_per_net_peer: c_int,
    nvlink_centric_sched: c_int,
}

/// `NCCL_CONFIG_UNDEF_INT` (nccl.h): NCCL decides.
const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;

impl NcclConfig {
    /// What nccl-tests 2.19.6 asks for (src/common.cu, initComms: `NCCL_CONFIG_INITIALIZER`,
    /// and `nvlinkCentricSched = 1` when built with NCCL 2.28 or newer, so Blackwell rows
    /// compare), blocking as there. A non-blocking communicator is not the same measurement:
    /// NCCL runs every `ncclGroupEnd` with work on a non-blocking communicator on a thread it
    /// creates for that call (src/group.cc, ncclGroupEndInternal), and the next call must
    /// wait for it; on an H100 with NCCL 2.28 that made a one-GPU sendrecv 40-50 µs a call
    /// where nccl-tests takes 2-10 µs. How a timeout or a signal still ends a blocking run
    /// is in `abort`.
    ///
    /// `cta_policy` is nccl-tests' -x (`config.CTAPolicy`), already checked against the
    /// library by [`cta_policy_for`]; the layout's version (2.28) keeps NCCL 2.27 and later
    /// from resetting it, and an older library never reads that far.
    pub(super) fn nccl_tests(library_version: i32, cta_policy: Option<c_int>) -> NcclConfig {
        let undef = NCCL_CONFIG_UNDEF_INT;
        NcclConfig {
            size: std::mem::size_of::<NcclConfig>(),
            // NCCL_API_MAGIC
            magic: 0xcafe_beef,
            // The layout's version: fields up to 2.28's are meant as set.
            version: 22800,
            blocking: 1,
            cga_cluster_size: undef,
            min_ctas: undef,
            max_ctas: undef,
            net_name: std::ptr::null(),
            split_share: undef,
            traffic_class: undef,
            comm_name: std::ptr::null(),
            collnet_enable: undef,
            cta_policy: cta_policy.unwrap_or(undef),
            shrink_share: undef,
            nvls_ctas: undef,
            n_channels_per_net_peer: undef,
            nvlink_centric_sched: if library_version >= 22800 { 1 } else { undef },
        }
    }
}
/// nccl-tests' -x as it reaches `config.CTAPolicy` (src/common.cu: set when built with NCCL
/// 2.27 or later; a value above 1 refused before 2.28 with nccl-tests' line, and left unset).
#[derive(Debug, PartialEq)]
pub struct CtaPolicy {
    /// The value to set.
    pub value: Option<c_int>,
    /// nccl-tests' own line for stdout, where it ignores the value.
    pub said: Option<String>,
    /// Ours, for the record, where NCCL would ignore the value without a word.
    pub note: Option<String>,
}

pub fn cta_policy_for(requested: Option<i64>, library_version: i32) -> CtaPolicy {
    let mut out = CtaPolicy {
        value: None,
        said: None,
        note: None,
    };
    // Set only `if (ctaPolicy >= 0)`: a negative -x leaves NCCL's default.
    let Some(p) = requested.map(|p| p as c_int).filter(|p| *p >= 0) else {
        return out;
    };
    if p > 1 && library_version < 22800 {
        out.said = Some(format!(
            "Option -x (cta_policy) {p} is not supported before NCCL 2.28. Ignoring"
        ));
    } else if library_version < 22700 {
        out.note = Some(format!(
            "-x {p}: NCCL {} has no CTA policy (ncclConfig_t.CTAPolicy came in 2.27); not set",
            super::loader::version_string(library_version)
        ));
    } else {
        out.value = Some(p);
    }
    out
}

type NcclGroup = unsafe extern "C" fn() -> c_int;
/// `ncclRedOpCreatePreMulSum(op*, scalar*, datatype, residence, comm)` (NCCL 2.11+).
type NcclRedOpCreatePreMulSum =
    unsafe extern "C" fn(*mut NcclOpValue, *mut c_void, NcclTypeValue, c_int, *mut c_void) -> c_int;
type NcclRedOpDestroy = unsafe extern "C" fn(NcclOpValue, *mut c_void) -> c_int;
/// `ncclScalarHostImmediate`: the scalar is read from host memory at the call.
pub(super) const NCCL_SCALAR_HOST_IMMEDIATE: c_int = 1;
type NcclAllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclTypeValue,
    NcclOpValue,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclAllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclTypeValue,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclBroadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclTypeValue,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    NcclTypeValue,
    NcclOpValue,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
/// NCCL 2.28's `ncclAlltoAll(send, recv, count, type, comm, stream)`.
type NcclAlltoAll = NcclAllGather;
/// NCCL 2.28's `ncclGather` / `ncclScatter(send, recv, count, type, root, comm, stream)`.
type NcclRooted = NcclBroadcast;
type NcclSendRecv = unsafe extern "C" fn(
    *mut c_void,
    usize,
    NcclTypeValue,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type NcclAsyncError = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type NcclMemAlloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type NcclMemFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type NcclCommRegister =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut *mut c_void) -> c_int;
type NcclCommDeregister = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type NcclWindowRegister =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int;
/// `NCCL_WIN_COLL_SYMMETRIC` (nccl.h, 2.27).
pub(super) const NCCL_WIN_COLL_SYMMETRIC: c_int = 0x01;
type NcclGroupSimulateEnd = unsafe extern "C" fn(*mut ncclSimInfo_t) -> c_int;
type NcclQueryProperties = unsafe extern "C" fn(*mut c_void, *mut CommProperties) -> c_int;

/// `ncclCommProperties_t` (nccl.h, NCCL 2.29) up to the fields 2.29.0 writes, and room for
/// what later versions append (NCCL writes fields by the `version` we pass).
#[repr(C)]
pub(super) struct CommProperties {
    size: usize,
    magic: u32,
    version: u32,
    rank: c_int,
    n_ranks: c_int,
    cuda_dev: c_int,
    nvml_dev: c_int,
    /// `comm->symmetricSupport` (src/dev_runtime.cc): windows are symmetric.
    pub(super) device_api_support: bool,
    multimem_support: bool,
    gin_type: c_int,
    reserved: [u8; 64],
}

impl CommProperties {
    /// NCCL_COMM_PROPERTIES_INITIALIZER for the 2.29.0 layout.
    pub(super) fn new() -> CommProperties {
        CommProperties {
            size: std::mem::size_of::<CommProperties>(),
            magic: 0xcafe_beef,
            version: 22900,
            rank: 0,
            n_ranks: 0,
            cuda_dev: 0,
            nvml_dev: 0,
            device_api_support: false,
            multimem_support: false,
            gin_type: 0,
            reserved: [0; 64],
        }
    }
}

/// NCCL 2.19's local buffer registration (nccl-tests' -R 1): buffers from `ncclMemAlloc`,
/// registered with the communicator so NCCL can work on them without internal copies.
#[derive(Clone, Copy)]
pub struct Registration {
    pub(super) mem_alloc: NcclMemAlloc,
    pub(super) mem_free: NcclMemFree,
    pub(super) register: NcclCommRegister,
    pub(super) deregister: NcclCommDeregister,
    /// NCCL 2.27's symmetric windows (nccl-tests' -R 2), a collective registration.
    pub(super) window: Option<(NcclWindowRegister, NcclCommDeregister)>,
}

/// NCCL 2.28's collectives made of sends and receives (see `Api::native_p2p`).
pub(super) struct NativeP2p {
    pub(super) alltoall: NcclAlltoAll,
    pub(super) gather: NcclRooted,
    pub(super) scatter: NcclRooted,
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
    pub(super) nccl_comm_init_rank_config: NcclCommInitRankConfig,
    pub(super) nccl_group_start: NcclGroup,
    pub(super) nccl_group_end: NcclGroup,
    pub(super) nccl_all_reduce: NcclAllReduce,
    pub(super) nccl_all_gather: NcclAllGather,
    pub(super) nccl_reduce_scatter: NcclAllReduce,
    pub(super) nccl_broadcast: NcclBroadcast,
    pub(super) nccl_reduce: NcclReduce,
    pub(super) nccl_send: NcclSendRecv,
    pub(super) nccl_recv: NcclSendRecv,
    pub(super) nccl_premulsum: NcclRedOpCreatePreMulSum,
    pub(super) nccl_redop_destroy: NcclRedOpDestroy,
    pub(super) nccl_async_error: NcclAsyncError,
    pub(super) nccl_abort: NcclCommFn,
    pub(super) nccl_destroy: NcclCommFn,
    /// `ncclCommFinalize` (2.14+), before destroying a non-blocking communicator.
    pub(super) nccl_finalize: Option<NcclCommFn>,
    pub devices: c_int,
    /// Present when the library is NCCL 2.19 or newer and has the four entry points.
    pub registration: Option<Registration>,
    /// NCCL 2.28's alltoall, gather and scatter, which nccl-tests 2.19.6 calls from that
    /// version on (src/alltoall.cu, gather.cu, scatter.cu) instead of sends and receives.
    pub(super) native_p2p: Option<NativeP2p>,
    /// NCCL 2.22's cost-model query, when present.
    pub(super) simulate: Option<NcclGroupSimulateEnd>,
    /// NCCL 2.29's `ncclCommQueryProperties`: whether -R 2's windows are really symmetric.
    pub(super) query_properties: Option<NcclQueryProperties>,
    /// `ncclResetDebugInit` (exported from 2.24, v2.24.3 debug.cc:230; deprecated in 2.28,
    /// debug.cc:399-410): NCCL reads its debug variables again at its next log line.
    pub reset_debug: Option<unsafe extern "C" fn()>,
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
            BackendError::Unavailable(format!(
                "{}: {}",
                nccl.path.display(),
                crate::backend::dl_error(&e)
            ))
        })?;
        let nlib = Box::leak(Box::new(nlib));
        let mut missing = Vec::new();
        let n = "NCCL";
        let api = (|| {
            let nccl = nccl;
            Some(Api {
                nccl_comm_init_rank_config: sym(nlib, n, "ncclCommInitRankConfig", &mut missing)?,
                nccl_group_start: sym(nlib, n, "ncclGroupStart", &mut missing)?,
                nccl_group_end: sym(nlib, n, "ncclGroupEnd", &mut missing)?,
                nccl_all_reduce: sym(nlib, n, "ncclAllReduce", &mut missing)?,
                nccl_all_gather: sym(nlib, n, "ncclAllGather", &mut missing)?,
                nccl_reduce_scatter: sym(nlib, n, "ncclReduceScatter", &mut missing)?,
                nccl_broadcast: sym(nlib, n, "ncclBroadcast", &mut missing)?,
                nccl_reduce: sym(nlib, n, "ncclReduce", &mut missing)?,
                nccl_send: sym(nlib, n, "ncclSend", &mut missing)?,
                nccl_recv: sym(nlib, n, "ncclRecv", &mut missing)?,
                nccl_premulsum: sym(nlib, n, "ncclRedOpCreatePreMulSum", &mut missing)?,
                nccl_redop_destroy: sym(nlib, n, "ncclRedOpDestroy", &mut missing)?,
                nccl_async_error: sym(nlib, n, "ncclCommGetAsyncError", &mut missing)?,
                nccl_abort: sym(nlib, n, "ncclCommAbort", &mut missing)?,
                nccl_destroy: sym(nlib, n, "ncclCommDestroy", &mut missing)?,
                nccl_finalize: sym(nlib, n, "ncclCommFinalize", &mut Vec::new()),
                registration: optional_registration(nlib, nccl.version_code),
                native_p2p: (nccl.version_code >= 22800)
                    .then(|| {
                        let mut ignored = Vec::new();
                        Some(NativeP2p {
                            alltoall: sym(nlib, n, "ncclAlltoAll", &mut ignored)?,
                            gather: sym(nlib, n, "ncclGather", &mut ignored)?,
                            scatter: sym(nlib, n, "ncclScatter", &mut ignored)?,
                        })
                    })
                    .flatten(),
                simulate: (nccl.version_code >= 22200)
                    .then(|| sym(nlib, n, "ncclGroupSimulateEnd", &mut Vec::new()))
                    .flatten(),
                query_properties: (nccl.version_code >= 22900)
                    .then(|| sym(nlib, n, "ncclCommQueryProperties", &mut Vec::new()))
                    .flatten(),
                reset_debug: (nccl.version_code >= 22400)
                    .then(|| sym(nlib, n, "ncclResetDebugInit", &mut Vec::new()))
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

    pub(super) fn cuda(&self, what: &str, rc: drv::Status) -> Result<(), BackendError> {
        cuda::check(what, rc).map_err(BackendError::Failed)
    }

    pub(super) fn nccl_check(&self, what: &str, rc: c_int) -> Result<(), BackendError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(BackendError::Failed(format!(
                "{what} failed: {}",
                self.nccl.error_string(rc)
            )))
        }
    }

    /// `dev`'s compute capability major number (`CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`).
    pub fn compute_major(&self, dev: c_int) -> Option<c_int> {
        let mut major = 0;
        // SAFETY: a valid out-pointer; attribute 75 is the compute capability's major number.
        let rc = unsafe { drv::cuDeviceGetAttribute(&mut major, 75, dev) };
        (rc == drv::SUCCESS).then_some(major)
    }

    pub fn device_name(&self, dev: c_int) -> String {
        let mut buf = [0 as c_char; 128];
        // SAFETY: buffer and length match.
        let rc = unsafe { drv::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        if rc != drv::SUCCESS {
            return format!("GPU {dev}");
        }
        // SAFETY: the driver NUL-terminates within the given length.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `dev`'s PCI address as the driver writes it (`0000:18:00.0`): what NCCL tells GPUs apart
    /// by (its peer info's `busId`), whatever CUDA_VISIBLE_DEVICES numbered them.
    pub fn pci_bus_id(&self, dev: c_int) -> Option<String> {
        // cuda.h: "pciBusId: Returned identifier string ... [domain]:[bus]:[device].[function]",
        // 13 characters; 64 leaves room.
        let mut buf = [0 as c_char; 64];
        // SAFETY: buffer and length match.
        let rc = unsafe { drv::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev) };
        if rc != drv::SUCCESS {
            return None;
        }
        // SAFETY: the driver NUL-terminates within the given length.
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        Some(id.to_ascii_lowercase())
    }

    /// Make `dev`'s primary context current on this thread.
    pub fn use_device(&self, dev: c_int) -> Result<usize, BackendError> {
        let mut d = 0;
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointers; dev checked by the driver.
        unsafe {
            self.cuda("cuDeviceGet", drv::cuDeviceGet(&mut d, dev))?;
            self.cuda(
                "cuDevicePrimaryCtxRetain",
                drv::cuDevicePrimaryCtxRetain(&mut ctx, d),
            )?;
            self.cuda("cuCtxSetCurrent", drv::cuCtxSetCurrent(ctx))?;
        }
        Ok(ctx as usize)
    }

    /// Free device memory on the current device.
    pub fn free_memory(&self) -> Option<usize> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        (unsafe { drv::cuMemGetInfo_v2(&mut free, &mut total) } == drv::SUCCESS).then_some(free)
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
                self.cuda("cuMemAlloc", drv::cuMemAlloc_v2(&mut dev, bytes))?;
                self.cuda("cuStreamCreate", drv::cuStreamCreate(&mut stream, 0))?;
                let mut pageable = Vec::new();
                let host = if pinned {
                    self.cuda(
                        "cuMemAllocHost",
                        drv::cuMemAllocHost_v2(&mut pinned_ptr, bytes),
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
                                drv::cuMemcpyHtoDAsync_v2(dev, host, bytes, stream),
                            )?;
                            self.cuda("cuStreamSynchronize", drv::cuStreamSynchronize(stream))?;
                        }
                        (true, false) => {
                            self.cuda(
                                "cuMemcpyDtoHAsync",
                                drv::cuMemcpyDtoHAsync_v2(host, dev, bytes, stream),
                            )?;
                            self.cuda("cuStreamSynchronize", drv::cuStreamSynchronize(stream))?;
                        }
                        (false, true) => {
                            // From pageable memory cuMemcpyHtoD returns once the data is staged
                            // for DMA, "but the DMA to final destination may not have completed"
                            // (CUDA driver API, API synchronization behavior): wait for it.
                            self.cuda("cuMemcpyHtoD", drv::cuMemcpyHtoD_v2(dev, host, bytes))?;
                            self.cuda("cuCtxSynchronize", drv::cuCtxSynchronize())?;
                        }
                        (false, false) => {
                            self.cuda("cuMemcpyDtoH", drv::cuMemcpyDtoH_v2(host, dev, bytes))?
                        }
                    }
                    best = best.min(t.elapsed().as_secs_f64());
                }
                Ok(bytes as f64 / best)
            })();
            if !pinned_ptr.is_null() {
                drv::cuMemFreeHost(pinned_ptr);
            }
            if !stream.is_null() {
                drv::cuStreamDestroy_v2(stream);
            }
            if dev != 0 {
                drv::cuMemFree_v2(dev);
            }
            measured
        }
    }
}
