//! The CUDA driver API, through cudarc's bindings with dynamic loading (the default build needs
//! no CUDA).
//!
//! cudarc's loader opens the first library its candidate names find (`libcuda.so` first,
//! `libcuda.so.1` last) and panics when none loads or a symbol is missing. So before the first
//! cudarc call, `open` loads `libcuda.so.1` itself (the name the driver installs), checks that
//! every entry point the backend uses is there, and checks that cudarc's loader lands on that
//! same library — not, say, a CUDA toolkit's stub `libcuda.so` left on `LD_LIBRARY_PATH`
//! (its cuInit fails with CUDA_ERROR_STUB_LIBRARY). Only then is cudarc called; it can no
//! longer panic. The library is never unloaded: cuInit starts driver threads.

use cudarc::driver::sys as cu;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The driver's library name.
pub const LIBRARY: &str = "libcuda.so.1";

/// Every driver entry point the backend calls (cudarc names them the same).
pub const ENTRY_POINTS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventElapsedTime",
];

/// The file a loaded address belongs to (from /proc/self/maps).
pub(crate) fn file_of(addr: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = fields.nth(4)?;
        (lo <= addr && addr < hi).then(|| PathBuf::from(path))
    })
}

fn address_of(lib: &libloading::Library, name: &str) -> Option<usize> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: only the symbol's address is taken, never called through this type.
    unsafe { lib.get::<*const std::ffi::c_void>(&n[..]) }
        .ok()
        .map(|s| *s as usize)
}

/// The environment variable naming the file to open as the CUDA driver instead of
/// `libcuda.so.1`; `none` turns GPU detection off (tests use it to mean "no driver" on any
/// machine, users to run the host or MPI backend on a GPU machine without touching it).
pub const OVERRIDE: &str = "NCCLPROBE_CUDA_DRIVER";

fn verify() -> Result<PathBuf, String> {
    let wanted = std::env::var_os(OVERRIDE).filter(|v| !v.is_empty());
    if wanted.as_deref() == Some(std::ffi::OsStr::new("none")) {
        return Err(format!(
            "no CUDA driver ({LIBRARY}) found: disabled by {OVERRIDE}=none"
        ));
    }
    let name = wanted.unwrap_or_else(|| LIBRARY.into());
    // SAFETY: loading the CUDA driver by its documented name runs its initialisers only.
    let lib = unsafe { libloading::Library::new(&name) }
        .map_err(|e| format!("no CUDA driver ({LIBRARY}) found: {}", super::dl_error(&e)))?;
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    let ours = address_of(lib, "cuInit")
        .ok_or_else(|| format!("{LIBRARY} has no cuInit: not the CUDA driver"))?;
    let path = file_of(ours).unwrap_or_else(|| PathBuf::from(LIBRARY));
    let missing: Vec<&str> = ENTRY_POINTS
        .iter()
        .copied()
        .filter(|name| address_of(lib, name).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the CUDA driver at {} lacks {} (driver too old?)",
            path.display(),
            missing.join(", ")
        ));
    }
    // SAFETY: cudarc's probe only tries to open its candidate names; it cannot panic.
    if !unsafe { cu::is_culib_present() } {
        return Err(format!(
            "{} loads, but cudarc's loader finds no CUDA library by its names",
            path.display()
        ));
    }
    // SAFETY: a candidate loads (checked above), so cudarc's loader returns instead of panicking.
    let theirs = address_of(unsafe { cu::culib() }, "cuInit");
    if theirs != Some(ours) {
        let other = theirs
            .and_then(file_of)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "another library".into());
        return Err(format!(
            "two CUDA driver libraries: {LIBRARY} is {} but cudarc's loader opens {other} first \
             (a CUDA toolkit stub libcuda.so on LD_LIBRARY_PATH?); remove it from the library path",
            path.display()
        ));
    }
    Ok(path)
}

/// Open the driver once per process, verified as above; its path.
pub fn open() -> Result<PathBuf, String> {
    static OPENED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    OPENED.get_or_init(verify).clone()
}

/// The driver's error for a result code, or Ok.
pub fn check(what: &str, rc: drv::Status) -> Result<(), String> {
    if rc == drv::SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with {} ({rc})", drv::name(rc)))
    }
}

/// What the driver says about this machine.
#[derive(Debug, Clone)]
pub struct Driver {
    pub path: PathBuf,
    pub version: i32,
    pub devices: i32,
}

/// Open, initialise and count GPUs (once per process).
pub fn probe() -> Result<Driver, String> {
    // Backend selection and the backend itself both ask; the driver is initialised once.
    static PROBED: OnceLock<Result<Driver, String>> = OnceLock::new();
    PROBED.get_or_init(initialise).clone()
}

fn initialise() -> Result<Driver, String> {
    let path = open()?;
    // SAFETY: the driver is open and verified; out-pointers are valid.
    unsafe {
        check("cuInit", drv::cuInit(0)).map_err(|e| {
            format!("CUDA driver found but {e} (no usable GPU or driver/library mismatch)")
        })?;
        let mut version = 0;
        let _ = drv::cuDriverGetVersion(&mut version);
        let mut devices = 0;
        check("cuDeviceGetCount", drv::cuDeviceGetCount(&mut devices))?;
        Ok(Driver {
            path,
            version,
            devices,
        })
    }
}

/// Driver calls with their results as the plain integers the driver returns. cudarc's
/// `CUresult` is a Rust enum built from one CUDA version's header (here 11.8): a newer driver
/// returning a code it lacks (e.g. CUDA_ERROR_CONTAINED, 226, after an NVLink fault on Hopper)
/// would put an invalid value in that enum, which is undefined behaviour. So the entry points
/// are resolved here with `u32` results (cudarc still supplies the argument types), and codes
/// are named by number.
pub mod drv {
    #![allow(non_snake_case)]
    use cudarc::driver::sys as cu;
    use std::ffi::{c_char, c_int, c_uint, c_void};
    use std::sync::OnceLock;

    /// A `CUresult` as a number.
    pub type Status = u32;
    pub const SUCCESS: Status = 0;
    pub const ERROR_NOT_READY: Status = 600;
    const ERROR_NOT_INITIALIZED: Status = 3;

    /// Names of the codes ncclprobe is likely to meet (cuda.h's `cudaError_enum`).
    pub fn name(code: Status) -> String {
        let known = match code {
            0 => "CUDA_SUCCESS",
            1 => "CUDA_ERROR_INVALID_VALUE",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            3 => "CUDA_ERROR_NOT_INITIALIZED",
            4 => "CUDA_ERROR_DEINITIALIZED",
            34 => "CUDA_ERROR_STUB_LIBRARY",
            46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
            100 => "CUDA_ERROR_NO_DEVICE",
            101 => "CUDA_ERROR_INVALID_DEVICE",
            201 => "CUDA_ERROR_INVALID_CONTEXT",
            214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
            220 => "CUDA_ERROR_NVLINK_UNCORRECTABLE",
            226 => "CUDA_ERROR_CONTAINED",
            400 => "CUDA_ERROR_INVALID_HANDLE",
            600 => "CUDA_ERROR_NOT_READY",
            700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
            702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
            709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            719 => "CUDA_ERROR_LAUNCH_FAILED",
            800 => "CUDA_ERROR_NOT_PERMITTED",
            900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            801 => "CUDA_ERROR_NOT_SUPPORTED",
            803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            999 => "CUDA_ERROR_UNKNOWN",
            _ => return "an unknown CUDA error".into(),
        };
        known.into()
    }

    /// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`, nccl-tests' mode (src/common.cu, BenchTime:
    /// graph capture and instantiation may happen on several threads at once).
    pub const CAPTURE_MODE_THREAD_LOCAL: c_uint = 1;

    /// Stream capture and CUDA graphs (nccl-tests' -G), looked up only when asked for: a
    /// driver without them (before CUDA 11.4) runs everything else.
    pub struct Graphs {
        pub begin_capture: unsafe extern "C" fn(cu::CUstream, c_uint) -> Status,
        pub end_capture: unsafe extern "C" fn(cu::CUstream, *mut cu::CUgraph) -> Status,
        pub instantiate: unsafe extern "C" fn(*mut cu::CUgraphExec, cu::CUgraph, u64) -> Status,
        pub launch: unsafe extern "C" fn(cu::CUgraphExec, cu::CUstream) -> Status,
        pub exec_destroy: unsafe extern "C" fn(cu::CUgraphExec) -> Status,
        pub destroy: unsafe extern "C" fn(cu::CUgraph) -> Status,
    }

    /// The graph entry points of the verified driver.
    pub fn graphs() -> Result<&'static Graphs, String> {
        static GRAPHS: OnceLock<Result<Graphs, String>> = OnceLock::new();
        GRAPHS
            .get_or_init(|| {
                let path = super::open()?;
                // SAFETY: the verified driver, already loaded; never unloaded.
                let lib = unsafe { libloading::Library::new(&path) }
                    .map_err(|e| super::super::dl_error(&e))?;
                let lib: &'static libloading::Library = Box::leak(Box::new(lib));
                let missing = |name: &str| {
                    format!(
                        "-G: the CUDA driver at {} has no {name} (CUDA graphs need a CUDA 11.4 or newer driver)",
                        path.display()
                    )
                };
                // SAFETY: each signature is cuda.h's, with the enum result as u32.
                unsafe {
                    Ok(Graphs {
                        begin_capture: *lib
                            .get(b"cuStreamBeginCapture_v2\0")
                            .map_err(|_| missing("cuStreamBeginCapture_v2"))?,
                        end_capture: *lib
                            .get(b"cuStreamEndCapture\0")
                            .map_err(|_| missing("cuStreamEndCapture"))?,
                        instantiate: *lib
                            .get(b"cuGraphInstantiateWithFlags\0")
                            .map_err(|_| missing("cuGraphInstantiateWithFlags"))?,
                        launch: *lib
                            .get(b"cuGraphLaunch\0")
                            .map_err(|_| missing("cuGraphLaunch"))?,
                        exec_destroy: *lib
                            .get(b"cuGraphExecDestroy\0")
                            .map_err(|_| missing("cuGraphExecDestroy"))?,
                        destroy: *lib
                            .get(b"cuGraphDestroy\0")
                            .map_err(|_| missing("cuGraphDestroy"))?,
                    })
                }
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    macro_rules! driver_calls {
        ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
            struct Calls {
                $($name: unsafe extern "C" fn($($ty),*) -> Status,)*
            }

            /// The entry points, from the driver `super::open` verified (none if it did not).
            fn calls() -> Option<&'static Calls> {
                static CALLS: OnceLock<Option<Calls>> = OnceLock::new();
                CALLS
                    .get_or_init(|| {
                        let path = super::open().ok()?;
                        // SAFETY: the verified driver, already loaded; never unloaded.
                        let lib = unsafe { libloading::Library::new(&path) }.ok()?;
                        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
                        // SAFETY: each signature is cuda.h's, with the enum result as u32.
                        unsafe {
                            Some(Calls {
                                $($name: *lib
                                    .get(concat!(stringify!($name), "\0").as_bytes())
                                    .ok()?,)*
                            })
                        }
                    })
                    .as_ref()
            }

            $(
                /// The driver's entry point of the same name; its result as a number.
                ///
                /// # Safety
                /// As the driver API documents for this call.
                pub unsafe fn $name($($arg: $ty),*) -> Status {
                    match calls() {
                        Some(c) => (c.$name)($($arg),*),
                        None => ERROR_NOT_INITIALIZED,
                    }
                }
            )*
        };
    }

    driver_calls! {
        cuInit(flags: c_uint);
        cuDriverGetVersion(version: *mut c_int);
        cuDeviceGetCount(count: *mut c_int);
        cuDeviceGet(device: *mut cu::CUdevice, ordinal: c_int);
        cuDeviceGetName(name: *mut c_char, len: c_int, device: cu::CUdevice);
        cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, device: cu::CUdevice);
        cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: cu::CUdevice);
        cuDevicePrimaryCtxRetain(ctx: *mut cu::CUcontext, device: cu::CUdevice);
        cuCtxSetCurrent(ctx: cu::CUcontext);
        cuCtxSynchronize();
        cuMemGetInfo_v2(free: *mut usize, total: *mut usize);
        cuMemAlloc_v2(dptr: *mut cu::CUdeviceptr, bytes: usize);
        cuMemFree_v2(dptr: cu::CUdeviceptr);
        cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize);
        cuMemFreeHost(p: *mut c_void);
        cuMemcpyHtoD_v2(dst: cu::CUdeviceptr, src: *const c_void, bytes: usize);
        cuMemcpyDtoH_v2(dst: *mut c_void, src: cu::CUdeviceptr, bytes: usize);
        cuMemcpyHtoDAsync_v2(dst: cu::CUdeviceptr, src: *const c_void, bytes: usize, stream: cu::CUstream);
        cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: cu::CUdeviceptr, bytes: usize, stream: cu::CUstream);
        cuMemcpyDtoDAsync_v2(dst: cu::CUdeviceptr, src: cu::CUdeviceptr, bytes: usize, stream: cu::CUstream);
        cuStreamCreate(stream: *mut cu::CUstream, flags: c_uint);
        cuStreamDestroy_v2(stream: cu::CUstream);
        cuStreamQuery(stream: cu::CUstream);
        cuStreamSynchronize(stream: cu::CUstream);
        cuEventCreate(event: *mut cu::CUevent, flags: c_uint);
        cuEventDestroy_v2(event: cu::CUevent);
        cuEventRecord(event: cu::CUevent, stream: cu::CUstream);
        cuEventElapsedTime(ms: *mut f32, start: cu::CUevent, end: cu::CUevent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_their_files() {
        let here = addresses_map_to_their_files as *const () as usize;
        let file = file_of(here).expect("this function is mapped");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            std::fs::canonicalize(file).unwrap(),
            std::fs::canonicalize(exe).unwrap()
        );
        assert_eq!(file_of(0), None);
    }

    #[test]
    fn result_codes_name_the_call_and_the_code() {
        assert_eq!(check("cuInit", drv::SUCCESS), Ok(()));
        // Codes newer than the bindings are numbers, never undefined behaviour.
        assert_eq!(
            check("cuStreamQuery", 226).unwrap_err(),
            "cuStreamQuery failed with CUDA_ERROR_CONTAINED (226)"
        );
        assert_eq!(
            check("cuStreamQuery", 4242).unwrap_err(),
            "cuStreamQuery failed with an unknown CUDA error (4242)"
        );
        assert_eq!(
            check("cuMemAlloc", 2).unwrap_err(),
            "cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2)"
        );
    }
}
