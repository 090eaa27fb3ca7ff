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
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocHost_v2",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
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
fn file_of(addr: usize) -> Option<PathBuf> {
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
pub fn check(what: &str, rc: cu::CUresult) -> Result<(), String> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with {rc:?} ({})", rc as u32))
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
        check("cuInit", cu::cuInit(0)).map_err(|e| {
            format!("CUDA driver found but {e} (no usable GPU or driver/library mismatch)")
        })?;
        let mut version = 0;
        let _ = cu::cuDriverGetVersion(&mut version);
        let mut devices = 0;
        check("cuDeviceGetCount", cu::cuDeviceGetCount(&mut devices))?;
        Ok(Driver {
            path,
            version,
            devices,
        })
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
        assert_eq!(check("cuInit", cu::CUresult::CUDA_SUCCESS), Ok(()));
        assert_eq!(
            check("cuMemAlloc", cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY).unwrap_err(),
            "cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2)"
        );
    }
}
