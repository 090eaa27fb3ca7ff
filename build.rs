//! Build metadata for `ncclprobe --version`, and the tiny C shim the MPI backend needs.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    };

    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(|f| f.to_lowercase()))
        .filter(|f| f != "default")
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(",")
    };
    let profile = std::env::var("PROFILE").unwrap_or_default();

    println!("cargo:rustc-env=NCCLPROBE_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=NCCLPROBE_FEATURES={features}");
    println!("cargo:rustc-env=NCCLPROBE_PROFILE={profile}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    println!("cargo:rerun-if-changed=csrc/mpi_shim.c");

    #[cfg(feature = "mpi")]
    build_mpi_shim();
}

/// `MPI_IN_PLACE` is a macro whose value differs between MPI implementations and that rsmpi
/// does not export, so a one-line C function hands it to Rust.
#[cfg(feature = "mpi")]
fn build_mpi_shim() {
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => panic!("the mpi feature needs an MPI installation (mpicc): {errs:?}"),
    };
    let mut build = cc::Build::new();
    build.file("csrc/mpi_shim.c");
    for inc in &lib.include_paths {
        build.include(inc);
    }
    build.compile("ncclprobe_mpi_shim");
}
