//! `ncclprobe sweep`: pick the backend, refuse what it cannot do, run it.

use crate::cli::SweepArgs;
use crate::exit::{ExitCode, Failure};
use crate::sweep::options::Options;
use crate::sweep::{select_backend, worlds, Backend, Environment};

pub fn run(args: &SweepArgs) -> Result<ExitCode, Failure> {
    measure(&args.options())
}

/// A sweep from the engine's options: refuse what cannot be done before measuring, then run.
pub fn measure(args: &Options) -> Result<ExitCode, Failure> {
    args.output.check()?;
    args.report.destinations()?;
    if args.gate.requested() {
        // A bad rules file or profile is refused before anything is measured.
        crate::expect::gate::rules_from(&args.gate.rules, &args.gate.qualify)?;
        if let Some(id) = &args.gate.qualify {
            let table = crate::expect::shipped();
            if table.get(id).is_none() {
                return Err(Failure::usage(format!(
                    "--qualify: unknown profile `{id}`; valid names: {}",
                    table.ids().join(", ")
                )));
            }
        }
    } else if args.gate.retries > 0 {
        return Err(Failure::usage(
            "--retries re-measures the points a gate failed: give --qualify PROFILE or rules",
        ));
    }
    let env = Environment::detect();
    let selection = select_backend(args.backend.backend, &env, args.backend.nccl_lib.as_deref())?;
    if args.backend.register != 0 && selection.backend != Backend::Nccl {
        return Err(Failure::usage(format!(
            "-R/--register: buffer registration is an NCCL feature; the {} backend has none ({})",
            selection.backend.name(),
            selection.reason
        )));
    }
    match selection.backend {
        Backend::Host => worlds::host_threads(args, &selection),
        Backend::Mpi => worlds::mpi(args, &selection),
        Backend::Nccl => worlds::nccl(args, &selection),
    }
}
