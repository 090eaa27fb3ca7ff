//! Against the real NCCL library from PyPI (`nvidia-nccl-cu11`, NCCL 2.21; `ci/test` installs
//! it): discovery through each search route, the version, `ncclGetUniqueId`, and the exact
//! error when the CUDA driver is absent (no machine here has a GPU). A missing wheel fails
//! these tests with a message; it does not skip them.

mod common;

use common::bin;
use ncclprobe::backend::cuda;
use ncclprobe::backend::nccl::{find_nccl, Route};
use predicates::str::contains;
use std::path::PathBuf;

fn wheel_lib() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import site; print('\\n'.join(site.getsitepackages()))",
        ])
        .output()
        .expect("python3 is needed to locate the nvidia-nccl-cu11 wheel");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|sp| PathBuf::from(sp).join("nvidia/nccl/lib/libnccl.so.2"))
        .find(|p| p.exists())
        .expect("libnccl.so.2 from the nvidia-nccl-cu11 wheel is not installed: pip install nvidia-nccl-cu11 (ci/test does)")
}

#[test]
fn the_wheel_loads_reports_its_version_and_makes_unique_ids() {
    let lib = wheel_lib();
    let nccl = find_nccl(Some(&lib)).expect("the wheel's libnccl.so.2 loads");
    assert_eq!(nccl.route, Route::Flag);
    assert_eq!(nccl.version(), "2.21.5");
    assert_eq!(nccl.version_code, 22105);
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

fn expect_found(cmd: &mut assert_cmd::Command, route: &str) {
    // The command is `sweep --backend nccl` with one route set up.
    let lib = wheel_lib();
    let canonical = std::fs::canonicalize(&lib).unwrap();
    cmd.assert()
        .code(5)
        .stderr(contains(
            "--backend nccl: no CUDA driver (libcuda.so.1) found",
        ))
        .stderr(contains(format!(
            "NCCL 2.21.5 found at {} (via {route})",
            canonical.display()
        )));
}

#[test]
fn found_through_each_route() {
    let lib = wheel_lib();
    let dir = lib.parent().unwrap().to_path_buf();
    let empty = tempfile::tempdir().unwrap();
    // Hide python3 so the later routes cannot answer first.
    let no_python = empty.path().to_str().unwrap().to_string();

    let sweep = || {
        let mut c = bin();
        c.args(["sweep", "--backend", "nccl"])
            .env("NCCLPROBE_CUDA_DRIVER", missing_driver())
            .env_remove("NCCL_LIBRARY")
            .env_remove("NCCL_HOME")
            .env_remove("LD_LIBRARY_PATH");
        c
    };
    expect_found(
        sweep().arg("--nccl-lib").arg(&lib).env("PATH", &no_python),
        "--nccl-lib",
    );
    expect_found(
        sweep().env("NCCL_LIBRARY", &lib).env("PATH", &no_python),
        "NCCL_LIBRARY",
    );

    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("lib")).unwrap();
    std::os::unix::fs::symlink(&lib, home.path().join("lib/libnccl.so.2")).unwrap();
    expect_found(
        sweep()
            .env("NCCL_HOME", home.path())
            .env("PATH", &no_python),
        "NCCL_HOME/lib",
    );
    expect_found(
        sweep().env("LD_LIBRARY_PATH", &dir).env("PATH", &no_python),
        "LD_LIBRARY_PATH",
    );
    expect_found(&mut sweep(), "python3 site-packages (nvidia/nccl/lib)");
}

#[test]
fn nothing_found_and_wrong_files() {
    let empty = tempfile::tempdir().unwrap();
    bin()
        .args(["sweep", "--backend", "nccl"])
        .env("NCCLPROBE_CUDA_DRIVER", missing_driver())
        .env("PATH", empty.path())
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("NCCL_HOME")
        .env_remove("NCCL_LIBRARY")
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
