//! Against the real NCCL library of a pip wheel: the `nvidia-nccl-cu11` that `ci/test` installs
//! or, where one is already there, PyTorch's `nvidia-nccl-cu12`. Discovery through each search
//! route and in the README's order, the version, `ncclGetUniqueId`, and the exact error when the
//! CUDA driver is absent. The version expected is the wheel's own, never a constant, and every
//! route is pinned to the wheel's file, so a GPU host's system libnccl2 changes nothing. A
//! missing wheel fails these tests with a message; it does not skip them.

use crate::common;

use common::{bin, needs_fault_injection};
use ncclprobe::backend::cuda;
use ncclprobe::backend::nccl::{find_nccl, Route};
use predicates::str::contains;
use std::path::{Path, PathBuf};

/// The NCCL wheel in the site-packages of the `python3` on PATH.
struct Wheel {
    /// `nvidia/nccl/lib/libnccl.so.2`, as found and resolved.
    lib: PathBuf,
    /// What the wheel's metadata says it is (`nvidia-nccl-cu11 2.21.5`).
    distribution: String,
    /// NCCL's version: the wheel's version up to its patch number (`2.21.5`).
    version: String,
    code: i32,
}

fn wheel() -> Wheel {
    // The distribution that installed the file, from its RECORD.
    let script = r#"
import importlib.metadata as md, os, site
for sp in site.getsitepackages():
    lib = os.path.join(sp, "nvidia/nccl/lib/libnccl.so.2")
    if not os.path.exists(lib):
        continue
    owners = [d for d in md.distributions(path=[sp])
              if any(str(f) == "nvidia/nccl/lib/libnccl.so.2" for f in (d.files or []))]
    print(lib)
    for d in owners:
        print(d.metadata["Name"], d.version)
    break
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3 is needed to locate the NCCL wheel");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    let lib = lines.next().map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "no nvidia/nccl/lib/libnccl.so.2 in python3's site-packages: pip install nvidia-nccl-cu11 (ci/test does); python3 said: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let owners: Vec<&str> = lines.collect();
    let [distribution] = owners[..] else {
        panic!(
            "{}: expected one pip distribution to own it, found {owners:?}",
            lib.display()
        );
    };
    let version: Vec<i32> = distribution
        .rsplit(' ')
        .next()
        .unwrap()
        .split('.')
        .take(3)
        .map_while(|p| p.parse().ok())
        .collect();
    let [major, minor, patch] = version[..] else {
        panic!("{distribution}: the wheel's version is not MAJOR.MINOR.PATCH");
    };
    let wheel = Wheel {
        lib: std::fs::canonicalize(&lib).unwrap(),
        distribution: distribution.to_string(),
        version: format!("{major}.{minor}.{patch}"),
        code: major * 10000 + minor * 100 + patch,
    };
    // The file agrees: NCCL's banner carries the version it was built as.
    let bytes = std::fs::read(&wheel.lib).unwrap();
    let banner = format!("NCCL version {}+", wheel.version);
    assert!(
        bytes.windows(banner.len()).any(|w| w == banner.as_bytes()),
        "{} (from {}) does not carry \"{banner}\"",
        wheel.lib.display(),
        wheel.distribution
    );
    wheel
}

#[test]
fn the_wheel_loads_reports_its_version_and_makes_unique_ids() {
    let wheel = wheel();
    let nccl = find_nccl(Some(&wheel.lib)).expect("the wheel's libnccl.so.2 loads");
    assert_eq!(nccl.route, Route::Flag);
    assert_eq!(nccl.path, wheel.lib, "{}", wheel.distribution);
    assert_eq!(nccl.version(), wheel.version, "{}", wheel.distribution);
    assert_eq!(nccl.version_code, wheel.code);
    let a = nccl
        .unique_id()
        .expect("ncclGetUniqueId works without a GPU");
    let b = nccl.unique_id().unwrap();
    assert!(a.iter().any(|&x| x != 0));
    assert_ne!(a, b, "every id is new");
    assert!(nccl.has_symbol("ncclCommInitRank"));
    assert!(nccl.has_symbol("ncclCommAbort"));
    assert!(!nccl.has_symbol("ncclNoSuchFunction"));
}

/// A driver file that does not exist: "no CUDA driver" on any machine, GPU or not.
fn missing_driver() -> std::path::PathBuf {
    std::env::temp_dir().join("ncclprobe-no-such-dir/libcuda.so.1")
}

#[test]
fn the_cuda_driver_is_found_or_its_absence_is_said() {
    match cuda::probe() {
        // A machine with a GPU: what only it can check.
        Ok(d) => {
            assert!(d.path.exists(), "{}", d.path.display());
            assert!(d.version >= 11000, "driver {}", d.version);
        }
        Err(err) => assert!(
            err.starts_with("no CUDA driver (libcuda.so.1) found") || err.contains("cuInit failed"),
            "{err}"
        ),
    }
    for driver in [missing_driver().into_os_string(), "none".into()] {
        bin()
            .args(["sweep", "--backend", "nccl"])
            .env("NCCLPROBE_CUDA_DRIVER", &driver)
            .assert()
            .code(5)
            .stderr(contains("no CUDA driver (libcuda.so.1) found"));
    }
}

/// `sweep --backend nccl` with no driver and no NCCL route set: the loader's default paths
/// are `loader_dir` (TEST-ONLY `NCCLPROBE_TEST_LOADER_DIR`), never this machine's.
fn sweep_with_loader_dir(loader_dir: &Path) -> assert_cmd::Command {
    let mut c = bin();
    c.args(["sweep", "--backend", "nccl"])
        .env("NCCLPROBE_CUDA_DRIVER", missing_driver())
        .env("NCCLPROBE_TEST_LOADER_DIR", loader_dir)
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME")
        .env_remove("LD_LIBRARY_PATH");
    c
}

fn expect_found(wheel: &Wheel, cmd: &mut assert_cmd::Command, route: &str) {
    cmd.assert()
        .code(5)
        .stderr(contains(
            "--backend nccl: no CUDA driver (libcuda.so.1) found",
        ))
        .stderr(contains(format!(
            "NCCL {} found at {} (via {route})",
            wheel.version,
            wheel.lib.display()
        )));
}

#[test]
fn found_through_each_route() {
    needs_fault_injection();
    let wheel = wheel();
    let dir = wheel.lib.parent().unwrap().to_path_buf();
    let empty = tempfile::tempdir().unwrap();
    // Hide python3 so the later routes cannot answer first.
    let no_python = empty.path().to_str().unwrap().to_string();
    let sweep = || sweep_with_loader_dir(empty.path());

    expect_found(
        &wheel,
        sweep()
            .arg("--nccl-lib")
            .arg(&wheel.lib)
            .env("PATH", &no_python),
        "--nccl-lib",
    );
    expect_found(
        &wheel,
        sweep()
            .env("NCCL_LIBRARY", &wheel.lib)
            .env("PATH", &no_python),
        "NCCL_LIBRARY",
    );

    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("lib")).unwrap();
    std::os::unix::fs::symlink(&wheel.lib, home.path().join("lib/libnccl.so.2")).unwrap();
    expect_found(
        &wheel,
        sweep()
            .env("NCCL_HOME", home.path())
            .env("PATH", &no_python),
        "NCCL_HOME/lib",
    );
    expect_found(
        &wheel,
        sweep().env("LD_LIBRARY_PATH", &dir).env("PATH", &no_python),
        "LD_LIBRARY_PATH",
    );
    let loader = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&wheel.lib, loader.path().join("libnccl.so.2")).unwrap();
    expect_found(
        &wheel,
        sweep_with_loader_dir(loader.path()).env("PATH", &no_python),
        "the dynamic loader's default paths",
    );
    expect_found(
        &wheel,
        &mut sweep(),
        "python3 site-packages (nvidia/nccl/lib)",
    );
}

/// The README's order: --nccl-lib, NCCL_LIBRARY, NCCL_HOME/lib, LD_LIBRARY_PATH, the loader's
/// default paths, then python3's site-packages (so a system libnccl2 is taken before a pip
/// wheel, as nccl-tests linked against it would). Every route is offered a library at once,
/// then the first is taken away, and so on down to the last.
#[test]
fn routes_are_searched_in_the_documented_order() {
    needs_fault_injection();
    let wheel = wheel();
    let holder = |name: &str| {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("lib")).unwrap();
        std::os::unix::fs::symlink(&wheel.lib, d.path().join(name)).unwrap();
        d
    };
    let home = holder("lib/libnccl.so.2");
    let ld = holder("libnccl.so.2");
    let loader = holder("libnccl.so.2");
    let routes = [
        "--nccl-lib",
        "NCCL_LIBRARY",
        "NCCL_HOME/lib",
        "LD_LIBRARY_PATH",
        "the dynamic loader's default paths",
        "python3 site-packages (nvidia/nccl/lib)",
    ];
    let empty = tempfile::tempdir().unwrap();
    for (first, route) in routes.iter().enumerate() {
        let offered = |i: usize| i >= first;
        let mut c = sweep_with_loader_dir(if offered(4) {
            loader.path()
        } else {
            empty.path()
        });
        if offered(0) {
            c.arg("--nccl-lib").arg(&wheel.lib);
        }
        if offered(1) {
            c.env("NCCL_LIBRARY", &wheel.lib);
        }
        if offered(2) {
            c.env("NCCL_HOME", home.path());
        }
        if offered(3) {
            c.env("LD_LIBRARY_PATH", ld.path());
        }
        // python3 stays on PATH: its site-packages always offer the wheel.
        expect_found(&wheel, &mut c, route);
    }
}

#[test]
fn nothing_found_and_wrong_files() {
    needs_fault_injection();
    let empty = tempfile::tempdir().unwrap();
    sweep_with_loader_dir(empty.path())
        .env("PATH", empty.path())
        .assert()
        .code(5)
        .stderr(contains("no CUDA driver (libcuda.so.1) found"))
        .stderr(contains(
            "no NCCL library (libnccl.so.2) found; searched --nccl-lib, NCCL_LIBRARY",
        ));
    bin()
        .args(["sweep", "--backend", "nccl", "--nccl-lib", "Cargo.toml"])
        .env("NCCLPROBE_CUDA_DRIVER", missing_driver())
        .assert()
        .code(5)
        .stderr(contains("no usable NCCL library; Cargo.toml (--nccl-lib)"));
}
