//! Real multi-process runs under Open MPI's `mpirun` (built with `--features mpi`; `ci/test`
//! installs Open MPI and builds with it). A missing `mpirun` fails these tests, it does not
//! skip them; a build without the feature fails the one test below, so a plain `cargo test`
//! cannot pass while running no MPI test at all.

#[cfg(not(feature = "mpi"))]
#[test]
fn the_mpi_tests_need_an_mpi_build() {
    panic!(
        "tests/sweep_mpi.rs runs only in an MPI build: `cargo test --features mpi` (ci/test does)"
    );
}

#[cfg(feature = "mpi")]
#[path = "it/common/mod.rs"]
mod common;

#[cfg(feature = "mpi")]
#[path = "sweep_mpi/runs.rs"]
mod runs;
