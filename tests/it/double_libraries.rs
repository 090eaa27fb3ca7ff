//! The GPU test double stands in for every file name the product's loaders try, so on a GPU
//! host (whose driver's `libcuda.so` and `libnvidia-ml.so.1` sit on the loader's default path)
//! the double tests still load the double; and the product says which file it loaded.

use crate::common;

use common::{cudarc_driver_names, read_record, test_double_dir, test_double_lib};
use std::process::Command;

/// The file a loaded address belongs to, from this process's maps.
fn file_of(addr: usize) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let lo = usize::from_str_radix(lo, 16).ok()?;
        let hi = usize::from_str_radix(hi, 16).ok()?;
        let path = fields.nth(4)?;
        (lo <= addr && addr < hi).then(|| path.into())
    })
}

fn cu_init(lib: &libloading::Library) -> usize {
    // SAFETY: only the address is taken.
    unsafe { lib.get::<*const ()>(b"cuInit\0") }
        .map(|s| *s as usize)
        .expect("cuInit")
}

#[test]
fn every_name_cudarcs_loader_tries_loads_the_double() {
    let d = test_double_dir(&["libcuda.so.1"]);
    let names = cudarc_driver_names();
    assert_eq!(names[0], "libcuda.so", "cudarc's first name: {names:?}");
    assert!(names.iter().any(|n| n == "libcuda.so.1"), "{names:?}");
    // SAFETY: the test double's initialisers only read the environment.
    let driver = unsafe { libloading::Library::new(d.path().join("libcuda.so.1")) }.unwrap();
    let ours = cu_init(&driver);
    let double = std::fs::canonicalize(test_double_lib()).unwrap();
    assert_eq!(file_of(ours).as_deref(), Some(double.as_path()));
    for name in &names {
        let path = d.path().join(name);
        assert!(
            path.exists(),
            "{name} is missing from the double's directory"
        );
        // SAFETY: as above; an alias adds no code of its own.
        let lib =
            unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            cu_init(&lib),
            ours,
            "{name} is not the double's libcuda.so.1"
        );
    }
}

/// A sweep on the double: the record names the double's file as the CUDA driver and as NCCL,
/// and the banner says NCCL was found on LD_LIBRARY_PATH.
#[test]
fn the_record_names_the_files_it_loaded() {
    let d = test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(["sweep", "--backend", "nccl", "-b", "8", "-e", "8"])
        .args(["--max-samples", "4", "--point-budget", "0.02", "--json"])
        .arg(&json)
        .env("LD_LIBRARY_PATH", d.path())
        .env_remove("NCCLPROBE_CUDA_DRIVER")
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME")
        .env_remove("NCCLPROBE_TEST_DOUBLE_FAULT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let double = std::fs::canonicalize(test_double_lib()).unwrap();
    assert!(
        stdout.contains(&format!(
            "NCCL 2.18.5 found at {} (via LD_LIBRARY_PATH)",
            double.display()
        )),
        "{stdout}"
    );
    let libraries = read_record(&json).backend.library_versions;
    assert_eq!(libraries["nccl"], format!("2.18.5 ({})", double.display()));
    assert_eq!(
        libraries["cuda-driver"],
        format!("12.4 ({})", double.display())
    );
}
