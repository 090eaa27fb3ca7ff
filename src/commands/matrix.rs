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
    args.output.check()?;
    let sweep = args.sweep_args();
    let env = Environment::detect();
    let selection = select_backend(args.backend.backend, &env, args.backend.nccl_lib.as_deref())?;
    if args.backend.register != 0 {
        return Err(Failure::usage(
            "-R/--register: matrix uses plain buffers; buffer registration is a sweep option",
        ));
    }
    match selection.backend {
        Backend::Host => worlds::host_threads(&sweep, &selection),
        Backend::Mpi => worlds::mpi(&sweep, &selection),
        Backend::Nccl => worlds::nccl(&sweep, &selection),
    }
}
