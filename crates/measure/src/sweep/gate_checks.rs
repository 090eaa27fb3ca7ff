//! Gates a sweep cannot judge, refused before it measures: a shipped profile on a backend
//! that moves host memory (and, in `expect::gate::one_rank`, rules on a link when there is
//! one rank).

use super::select::Backend;
use crate::exit::Failure;

/// A shipped profile describes NCCL on GPUs (`ncclprobe baselines`); the host and MPI backends
/// move host memory, which none of them describes: refused before measuring.
pub fn profile_needs_nccl(id: &str, backend: Backend) -> Failure {
    let what = crate::expect::shipped()
        .get(id)
        .map(|e| e.title.clone())
        .unwrap_or_default();
    Failure::usage(format!(
        "--qualify {id} ({what}) describes NCCL on GPUs; the {} backend moves host memory, which no shipped profile describes: run with --backend nccl on that machine, or gate with rules (--min-busbw, --max-latency-us, --rules)",
        backend.name()
    ))
}
