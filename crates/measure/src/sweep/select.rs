//! Which backend runs a sweep, and why: `--backend auto` resolved against what this machine
//! offers. After selection there is no `auto` any more, only a backend and its reason.

pub use super::options::BackendChoice;
use crate::backend::{cuda, mpi as mpi_backend, nccl};
use crate::exit::Failure;
use std::path::Path;

/// A backend that will actually run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Host,
    Mpi,
    Nccl,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }
}

/// The backend that will run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub backend: Backend,
    pub reason: String,
}

/// What the machine offers, for `--backend auto` (kept apart so the rule is testable).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// GPUs the CUDA driver sees (0 without a driver).
    pub driver_gpus: i32,
    pub gpu_device_nodes: bool,
    pub mpi_world_size: Option<usize>,
    pub mpi_built: bool,
}

impl Environment {
    pub fn detect() -> Environment {
        Environment {
            driver_gpus: cuda::probe().map(|d| d.devices).unwrap_or(0),
            gpu_device_nodes: Path::new("/dev/nvidiactl").exists()
                || Path::new("/dev/dxg").exists(),
            mpi_world_size: mpi_backend::launcher_world_size(),
            mpi_built: cfg!(feature = "mpi"),
        }
    }
}

/// NCCL and the CUDA driver as found on this machine, in one line; whether both are usable.
fn nccl_status(explicit: Option<&Path>) -> (bool, String) {
    let lib = nccl::find_nccl(explicit);
    let driver = cuda::probe();
    let found = |n: &nccl::Nccl| {
        format!(
            "NCCL {} found at {} (via {})",
            n.version(),
            n.path.display(),
            n.route.describe()
        )
    };
    match (lib, driver) {
        (Ok(n), Ok(d)) if d.devices > 0 => (
            true,
            format!(
                "{} and {} GPU(s) with CUDA driver {}",
                found(&n),
                d.devices,
                d.version
            ),
        ),
        (Ok(n), Ok(_)) => (
            false,
            format!(
                "the CUDA driver sees no GPU; NCCL {} found at {}",
                n.version(),
                n.path.display()
            ),
        ),
        (Ok(n), Err(e)) => (false, format!("{e}; {}", found(&n))),
        (Err(attempts), Ok(d)) => (
            false,
            format!(
                "{}; CUDA driver {} with {} GPU(s) found",
                nccl::describe_attempts(&attempts),
                d.version,
                d.devices
            ),
        ),
        (Err(attempts), Err(e)) => (
            false,
            format!("{e}; {}", nccl::describe_attempts(&attempts)),
        ),
    }
}

pub fn select_backend(
    choice: BackendChoice,
    env: &Environment,
    nccl_lib: Option<&Path>,
) -> Result<Selection, Failure> {
    let chosen = |backend, reason: String| Ok(Selection { backend, reason });
    match choice {
        BackendChoice::Host => chosen(Backend::Host, "asked for with --backend host".into()),
        BackendChoice::Mpi => chosen(Backend::Mpi, "asked for with --backend mpi".into()),
        BackendChoice::Nccl => match nccl_status(nccl_lib) {
            (true, status) => chosen(
                Backend::Nccl,
                format!("asked for with --backend nccl; {status}"),
            ),
            (false, status) => Err(Failure::unavailable(format!("--backend nccl: {status}"))),
        },
        BackendChoice::Auto => {
            // The driver probe is a failed dlopen on machines without one: cheap.
            let gpu_note = match env.driver_gpus {
                n if n > 0 => match nccl_status(nccl_lib) {
                    (true, status) => return chosen(Backend::Nccl, format!("auto: {status}")),
                    (false, status) => format!("GPUs found, but {status}"),
                },
                _ if env.gpu_device_nodes => {
                    "GPU device nodes found, but no usable CUDA driver".into()
                }
                _ => "no GPU found".into(),
            };
            match env.mpi_world_size {
                Some(n) if env.mpi_built => chosen(
                    Backend::Mpi,
                    format!("auto: {gpu_note}; launched by an MPI launcher with {n} ranks"),
                ),
                Some(n) if n > 1 => Err(Failure::unavailable(format!(
                    "--backend auto: launched by an MPI launcher with {n} ranks, but this build has no MPI support; rebuild with --features mpi (or run without mpirun for the host backend)"
                ))),
                _ => chosen(
                    Backend::Host,
                    format!("auto: {gpu_note}; not launched under MPI"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(mpi_world_size: Option<usize>, mpi_built: bool) -> Environment {
        Environment {
            driver_gpus: 0,
            gpu_device_nodes: false,
            mpi_world_size,
            mpi_built,
        }
    }

    #[test]
    fn explicit_host_and_mpi_are_taken_as_asked() {
        let s = select_backend(BackendChoice::Host, &env(Some(4), true), None).unwrap();
        assert_eq!(s.backend, Backend::Host);
        assert!(s.reason.contains("--backend host"));
        let s = select_backend(BackendChoice::Mpi, &env(None, false), None).unwrap();
        assert_eq!(s.backend, Backend::Mpi);
    }

    #[test]
    fn auto_without_gpu_picks_mpi_under_a_launcher_only_when_built_with_it() {
        let s = select_backend(BackendChoice::Auto, &env(Some(2), true), None).unwrap();
        assert_eq!(s.backend, Backend::Mpi);
        assert!(s.reason.contains("2 ranks"), "{}", s.reason);
        let e = select_backend(BackendChoice::Auto, &env(Some(2), false), None).unwrap_err();
        assert_eq!(e.code, crate::exit::ExitCode::BackendUnavailable);
        assert!(e.message.contains("--features mpi"));
        // One rank under a launcher without MPI support is just a host run.
        let s = select_backend(BackendChoice::Auto, &env(Some(1), false), None).unwrap();
        assert_eq!(s.backend, Backend::Host);
        let s = select_backend(BackendChoice::Auto, &env(None, false), None).unwrap();
        assert_eq!(s.backend, Backend::Host);
        assert!(s.reason.starts_with("auto: no GPU found"), "{}", s.reason);
    }
}
