//! Every doctor flag checked before any step, each refusal a usage error (exit 2) naming the
//! flag. The short sweep's flags and the simulation's go through the sweep's and simulate's
//! own checks (the plan, the simulation on a stand-in link), so doctor refuses exactly what
//! they would refuse, only sooner.

use super::inner::{parsed_sweep, simulate, Link};
use crate::cli::DoctorArgs;
use crate::exit::Failure;
use crate::flags::count_in;
use crate::sweep::Backend;
use std::path::Path;

/// The most ranks a host sweep takes (its own check says the same).
const MAX_HOST_RANKS: usize = 1024;
/// The most processes doctor asks a launcher for, and the most GPUs one process drives.
const MAX_PROCESSES: usize = 1 << 20;

pub fn flags(args: &DoctorArgs) -> Result<(), Failure> {
    args.history.target()?;
    // The input pipeline only exists in the DDP simulation: without --model no step would
    // ever read (or check) these flags.
    if args.model.is_none() && args.loader.given() {
        return Err(Failure::usage(
            "the loader flags need --model (and --compute-ms): they model the input pipeline of the DDP step doctor simulates for that model",
        ));
    }
    // The job's records are told apart before anything is measured (reading them waits).
    for path in &args.trace {
        crate::import::trace::files_of(path)
            .map_err(|e| Failure::usage(format!("--trace: {e}")))?;
    }
    if let Some(text) = &args.hardware {
        crate::expect::hardware::Hardware::parse(text).map_err(Failure::usage)?;
    }
    if args.launcher.split_whitespace().next().is_none() {
        return Err(Failure::usage(
            "--launcher: empty; give the MPI launcher with its arguments, e.g. `mpirun --oversubscribe`",
        ));
    }
    if args.output.as_os_str() == "-" {
        return Err(Failure::usage(
            "-o -: doctor writes a directory of files (the report, the plots, every JSON), not one document for stdout; name a directory",
        ));
    }
    if args.backend.backend == crate::cli::BackendChoice::Mpi {
        launcher_found(&args.launcher)?;
    }
    count_in("--np", args.np, 1, MAX_PROCESSES)?;
    if let Some(n) = args.backend.ranks {
        count_in("--ranks", n, 1, MAX_HOST_RANKS)?;
    }
    if let Some(g) = args.backend.ngpus {
        count_in("-g/--ngpus", g, 1, MAX_PROCESSES)?;
    }
    // The sizes, --point-budget and --timeout, as the sweep's plan checks them.
    let sweep = parsed_sweep(args, Backend::Host, Path::new("run.json"))?;
    crate::plan::Plan::from_options(&sweep.options(), None)?;
    if args.model.is_some() {
        // --model, --compute-ms and --batch-size as `simulate ddp` checks them.
        simulate(args, Link::StandIn, 2)?;
    } else if args.compute_ms.is_some() {
        return Err(Failure::usage(
            "--compute-ms: only with --model (the model whose DDP step it times)",
        ));
    }
    Ok(())
}

/// The launcher's program is there to run: a path that exists, or a name on PATH. A missing
/// one is the user's to fix (exit 2), not a verdict on the machine.
fn launcher_found(launcher: &str) -> Result<(), Failure> {
    let Some(program) = launcher.split_whitespace().next() else {
        return Ok(());
    };
    let runnable = |p: &Path| p.is_file();
    let found = if program.contains('/') {
        runnable(Path::new(program))
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| runnable(&d.join(program))))
    };
    match found {
        true => Ok(()),
        false => Err(Failure::usage(format!(
            "--launcher: `{program}` is not a file, nor a program on PATH; install Open MPI (mpirun) or give the launcher's path"
        ))),
    }
}
