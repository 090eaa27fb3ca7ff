//! `ncclprobe matrix`: the sweep's backend selection and launch, with pairs instead of
//! collectives.

use crate::cli::MatrixArgs;
use crate::exit::{ExitCode, Failure};
use crate::sweep::{select_backend, worlds, Backend, Environment};

pub fn run(args: &MatrixArgs) -> Result<ExitCode, Failure> {
    if !(args.outlier > 0.0 && args.outlier < 1.0) {
        return Err(Failure::usage(format!(
            "--outlier: {} is not a fraction between 0 and 1 (0.5: name pairs below half the median pair)",
            args.outlier
        )));
    }
    let mut sweep = args.options();
    sweep.output.check()?;
    let env = Environment::detect();
    let selection = select_backend(
        sweep.backend.backend,
        &env,
        args.backend.nccl_lib.as_deref(),
    )?;
    if args.backend.register != 0 {
        return Err(Failure::usage(
            "-R/--register: matrix uses plain buffers; buffer registration is a sweep option",
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ranks = args.backend.ranks.unwrap_or(cores.max(2));
    if selection.backend == Backend::Host && ranks > cores && !args.one_pair_at_a_time {
        // Rounds of pairs on fewer cores than threads time which thread the scheduler ran,
        // not the pairs: one pair at a time leaves a core to each end.
        eprintln!("ncclprobe: {ranks} host ranks on {cores} cores: measuring one pair at a time (rounds of pairs would share the cores; the two ends of a pair get a core each)");
        if let Some(m) = sweep.matrix.as_mut() {
            std::sync::Arc::make_mut(m).one_pair_at_a_time = true;
        }
    }
    match selection.backend {
        Backend::Host => worlds::host_threads(&sweep, &selection),
        Backend::Mpi => worlds::mpi(&sweep, &selection),
        Backend::Nccl => worlds::nccl(&sweep, &selection),
    }
}
