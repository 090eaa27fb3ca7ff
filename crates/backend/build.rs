//! The tiny C shim the MPI backend needs (built only with the `mpi` feature).

fn main() {
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
