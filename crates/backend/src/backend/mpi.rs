//! The `mpi` backend: MPI's own collectives on host memory, one rank per process, launched by
//! `mpirun`/`srun`. Built with the `mpi` cargo feature; without it, a clear error.

#[cfg(feature = "mpi")]
#[path = "mpi_enabled.rs"]
mod imp;

#[cfg(feature = "mpi")]
#[path = "mpi_thread.rs"]
mod thread;
#[cfg(feature = "mpi")]
pub use thread::{start_single, MpiThread};

#[cfg(not(feature = "mpi"))]
mod imp {
    use crate::backend::BackendError;

    pub struct MpiSession;

    pub fn start() -> Result<MpiSession, BackendError> {
        Err(BackendError::Unavailable(
            "--backend mpi: this ncclprobe was built without MPI support; rebuild with `cargo build --release --features mpi` (needs an MPI library and libclang)".into(),
        ))
    }
}

pub use imp::*;

/// Whether this process was started by an MPI launcher, and how many ranks it has (from the
/// launchers' environment: Open MPI, MPICH/Hydra, PMIx, Slurm's srun).
pub fn launcher_world_size() -> Option<usize> {
    const SIZE_VARS: [&str; 4] = [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_SIZE",
        "MPI_LOCALNRANKS",
    ];
    if let Some(n) = SIZE_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
    {
        return Some(n);
    }
    // srun sets SLURM_STEP_NUM_TASKS only inside a job step, never in the batch script itself.
    if std::env::var_os("SLURM_STEP_ID").is_some() || std::env::var_os("PMIX_RANK").is_some() {
        return std::env::var("SLURM_STEP_NUM_TASKS")
            .ok()?
            .parse()
            .ok()
            .or(Some(1));
    }
    None
}

/// This process's rank, where a launcher says (0 when none does).
pub fn launcher_rank() -> usize {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(0)
}

/// Ranks sharing this host, where the launcher says (to size buffers against memory).
pub fn launcher_local_size() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "SLURM_NTASKS_PER_NODE",
        "PMIX_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
}
