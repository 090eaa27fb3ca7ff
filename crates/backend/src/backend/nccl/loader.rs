//! Finding NCCL and the CUDA driver where users have them, loaded at run time. A missing file
//! or symbol is an error value naming what was tried, never a panic (cudarc's own loader looks
//! for other file names and panics when a library is absent, so discovery is ours).

use serde::Serialize;
use std::ffi::c_int;
use std::path::{Path, PathBuf};

/// How a library was found, in search order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// `--nccl-lib PATH`
    Flag,
    /// `NCCL_LIBRARY`
    NcclLibraryEnv,
    /// `nvidia/nccl/lib` in the site-packages of the Python environment this ncclprobe is
    /// installed in (`pip install ncclprobe` beside PyTorch: the NCCL PyTorch itself loads)
    InstalledEnvironment,
    /// `NCCL_HOME/lib`
    NcclHome,
    /// a directory of `LD_LIBRARY_PATH`
    LdLibraryPath,
    /// the dynamic loader's default search (ld.so.cache, /usr/lib, ...)
    LoaderDefault,
    /// `nvidia/nccl/lib` in the site-packages of the `python3` on PATH (pip wheels, PyTorch)
    PythonSitePackages,
}

impl Route {
    pub fn describe(self) -> &'static str {
        match self {
            Route::Flag => "--nccl-lib",
            Route::NcclLibraryEnv => "NCCL_LIBRARY",
            Route::InstalledEnvironment => "the Python environment ncclprobe is installed in",
            Route::NcclHome => "NCCL_HOME/lib",
            Route::LdLibraryPath => "LD_LIBRARY_PATH",
            Route::LoaderDefault => "the dynamic loader's default paths",
            Route::PythonSitePackages => "python3 site-packages (nvidia/nccl/lib)",
        }
    }
}

/// File names NCCL ships as (pip wheels and most distributions: libnccl.so.2).
const NCCL_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// A loaded NCCL. Never unloaded: NCCL starts threads (bootstrap, proxy) whose code must stay
/// mapped until the process ends, so the handle is deliberately kept open.
pub struct Nccl {
    lib: std::mem::ManuallyDrop<libloading::Library>,
    pub path: PathBuf,
    pub route: Route,
    pub version_code: i32,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NCCL {} at {} (via {})",
            self.version(),
            self.path.display(),
            self.route.describe()
        )
    }
}

/// What was tried, for the error message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    pub route: Route,
    pub candidate: String,
    pub error: String,
}

/// Version code → "2.21.5" (codes ≥ 2.9 are major*10000 + minor*100 + patch; older *1000).
pub fn version_string(code: i32) -> String {
    let code = code.max(0);
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code / 100) % 10, code % 100)
    }
}

impl Nccl {
    pub fn version(&self) -> String {
        version_string(self.version_code)
    }

    /// `ncclGetUniqueId`: 128 bytes that identify a communicator (works without a GPU).
    pub fn unique_id(&self) -> Result<[u8; 128], String> {
        type GetUniqueId = unsafe extern "C" fn(*mut [u8; 128]) -> c_int;
        // SAFETY: the symbol has this C signature in every NCCL 2.x (nccl.h).
        let f = unsafe { self.lib.get::<GetUniqueId>(b"ncclGetUniqueId\0") }.map_err(|e| {
            format!(
                "{}: no ncclGetUniqueId: {}",
                self.path.display(),
                crate::backend::dl_error(&e)
            )
        })?;
        let mut id = [0u8; 128];
        // SAFETY: `id` is a valid 128-byte out buffer (ncclUniqueId is char[128]).
        let rc = unsafe { f(&mut id) };
        if rc != 0 {
            return Err(format!("ncclGetUniqueId failed: {}", self.error_string(rc)));
        }
        Ok(id)
    }

    /// `ncclGetErrorString`, when the library has it.
    pub fn error_string(&self, rc: c_int) -> String {
        type GetErrorString = unsafe extern "C" fn(c_int) -> *const std::ffi::c_char;
        // SAFETY: C signature from nccl.h; the returned pointer is a static string.
        unsafe {
            match self.lib.get::<GetErrorString>(b"ncclGetErrorString\0") {
                Ok(f) => {
                    let p = f(rc);
                    if p.is_null() {
                        format!("error {rc}")
                    } else {
                        format!(
                            "{} (error {rc})",
                            std::ffi::CStr::from_ptr(p).to_string_lossy()
                        )
                    }
                }
                Err(_) => format!("error {rc}"),
            }
        }
    }

    /// Whether an optional (newer than 2.18) symbol exists.
    pub fn has_symbol(&self, name: &str) -> bool {
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        // SAFETY: only the address is looked up, never called.
        unsafe { self.lib.get::<*const ()>(&n[..]).is_ok() }
    }
}

/// site-packages directories of the `python3` on PATH (asked with a short timeout).
pub fn python_site_packages() -> Vec<PathBuf> {
    let script = "import site,sys\ntry:\n p=site.getsitepackages()\nexcept Exception:\n p=[]\ntry:\n p.append(site.getusersitepackages())\nexcept Exception:\n pass\nprint('\\n'.join(p))";
    let Ok(mut child) = std::process::Command::new("python3")
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return Vec::new();
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                return Vec::new();
            }
        }
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        use std::io::Read;
        let _ = s.read_to_string(&mut out);
    }
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The site-packages of the environment whose `bin/` holds `exe` (a virtual environment, a
/// conda environment, `~/.local` for `pip install --user`): `<prefix>/lib/python3.*/site-packages`.
pub fn installed_site_packages(exe: &Path) -> Vec<PathBuf> {
    let Some(prefix) = exe
        .parent()
        .filter(|b| b.ends_with("bin"))
        .and_then(Path::parent)
    else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The loader's default route asks for bare names, which dlopen looks up in ld.so.cache and
/// the system directories. In builds with the TEST-ONLY `fault-injection` feature,
/// `NCCLPROBE_TEST_LOADER_DIR` names a directory that stands for them, so a test can mean "the
/// loader finds this NCCL" or "the loader finds none" on any machine, one with a system
/// libnccl2 included.
fn loader_default_dir() -> PathBuf {
    crate::fault_injection::test_path("NCCLPROBE_TEST_LOADER_DIR").unwrap_or_default()
}

/// Candidates in search order: (route, path or bare name for the loader).
pub fn candidates(explicit: Option<&Path>) -> Vec<(Route, PathBuf)> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push((Route::Flag, p.to_path_buf()));
        return out;
    }
    if let Some(p) = std::env::var_os("NCCL_LIBRARY") {
        out.push((Route::NcclLibraryEnv, PathBuf::from(p)));
    }
    if let Ok(exe) = std::env::current_exe() {
        for sp in installed_site_packages(&exe) {
            for name in NCCL_NAMES {
                out.push((
                    Route::InstalledEnvironment,
                    sp.join("nvidia/nccl/lib").join(name),
                ));
            }
        }
    }
    if let Some(home) = std::env::var_os("NCCL_HOME") {
        for name in NCCL_NAMES {
            out.push((Route::NcclHome, Path::new(&home).join("lib").join(name)));
        }
    }
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        for dir in std::env::split_paths(&ld).filter(|d| !d.as_os_str().is_empty()) {
            for name in NCCL_NAMES {
                out.push((Route::LdLibraryPath, dir.join(name)));
            }
        }
    }
    for name in NCCL_NAMES {
        out.push((Route::LoaderDefault, loader_default_dir().join(name)));
    }
    for sp in python_site_packages() {
        for name in NCCL_NAMES {
            out.push((
                Route::PythonSitePackages,
                sp.join("nvidia/nccl/lib").join(name),
            ));
        }
    }
    out
}

fn try_load(route: Route, candidate: &Path) -> Result<Nccl, String> {
    if route != Route::LoaderDefault && !candidate.exists() {
        return Err("no such file".into());
    }
    // A bare file name would send dlopen searching the library path instead of this file.
    let absolute;
    let candidate = if route != Route::LoaderDefault && candidate.is_relative() {
        absolute = std::env::current_dir()
            .map(|d| d.join(candidate))
            .unwrap_or_else(|_| candidate.to_path_buf());
        absolute.as_path()
    } else {
        candidate
    };
    // SAFETY: loading a shared library runs its initialisers; NCCL's are benign and this is
    // the documented way to use it without linking.
    let lib =
        unsafe { libloading::Library::new(candidate) }.map_err(|e| crate::backend::dl_error(&e))?;
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: C signature from nccl.h.
    let get = unsafe { lib.get::<GetVersion>(b"ncclGetVersion\0") }.map_err(|e| {
        format!(
            "not NCCL (no ncclGetVersion): {}",
            crate::backend::dl_error(&e)
        )
    })?;
    let mut code: c_int = 0;
    // SAFETY: `code` is a valid out pointer.
    let rc = unsafe { get(&mut code) };
    if rc != 0 {
        return Err(format!("ncclGetVersion returned {rc}"));
    }
    // The file that answered, whichever name and links led to it (for a bare name, the one
    // the loader chose).
    let path = crate::backend::cuda::file_of(*get as usize)
        .or_else(|| std::fs::canonicalize(candidate).ok())
        .unwrap_or_else(|| candidate.to_path_buf());
    Ok(Nccl {
        lib: std::mem::ManuallyDrop::new(lib),
        path,
        route,
        version_code: code,
    })
}

/// The first NCCL that loads and answers `ncclGetVersion`, or every attempt and why it failed.
pub fn find_nccl(explicit: Option<&Path>) -> Result<Nccl, Vec<Attempt>> {
    let mut attempts = Vec::new();
    for (route, candidate) in candidates(explicit) {
        match try_load(route, &candidate) {
            Ok(n) if n.version_code >= 21800 => return Ok(n),
            Ok(n) => attempts.push(Attempt {
                route,
                candidate: candidate.display().to_string(),
                error: format!(
                    "NCCL {} is older than 2.18, the oldest supported",
                    n.version()
                ),
            }),
            Err(error) => attempts.push(Attempt {
                route,
                candidate: candidate.display().to_string(),
                error,
            }),
        }
    }
    Err(attempts)
}

/// One line for `--backend nccl` errors: what was found, what is missing.
pub fn describe_attempts(attempts: &[Attempt]) -> String {
    let absent = |e: &str| e == "no such file" || e.contains("cannot open shared object file");
    let tried: Vec<String> = attempts
        .iter()
        .filter(|a| !absent(&a.error))
        .map(|a| format!("{} ({}): {}", a.candidate, a.route.describe(), a.error))
        .collect();
    if tried.is_empty() {
        format!(
            "no NCCL library (libnccl.so.2) found; searched --nccl-lib, NCCL_LIBRARY, the Python environment ncclprobe is installed in, NCCL_HOME/lib, LD_LIBRARY_PATH, the loader's default paths and python3's site-packages ({} candidates)",
            attempts.len()
        )
    } else {
        format!("no usable NCCL library; {}", tried.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes() {
        assert_eq!(version_string(22105), "2.21.5");
        assert_eq!(version_string(21803), "2.18.3");
        assert_eq!(version_string(2708), "2.7.8");
    }

    #[test]
    fn explicit_path_that_is_not_a_library() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnccl.so.2");
        std::fs::write(&p, b"not an ELF file").unwrap();
        let attempts = find_nccl(Some(&p)).unwrap_err();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].route, Route::Flag);
        assert!(describe_attempts(&attempts).contains("libnccl.so.2 (--nccl-lib)"));
    }

    #[test]
    fn the_environment_ncclprobe_is_installed_in_is_searched_by_its_prefix() {
        let root = tempfile::tempdir().unwrap();
        let venv = root.path().join("venv");
        let sp = venv.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&sp).unwrap();
        std::fs::create_dir_all(venv.join("lib/pkgconfig")).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        assert_eq!(installed_site_packages(&venv.join("bin/ncclprobe")), [sp]);
        // A binary outside any bin/ (cargo's target/release) has no environment.
        assert!(installed_site_packages(&root.path().join("release/ncclprobe")).is_empty());
        assert!(installed_site_packages(Path::new("/nonexistent/bin/ncclprobe")).is_empty());
    }
}
