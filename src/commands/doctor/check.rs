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
    if let Some(text) = &args.hardware {
        crate::expect::hardware::Hardware::parse(text).map_err(Failure::usage)?;
    }
    if args.launcher.split_whitespace().next().is_none() {
        return Err(Failure::usage(
            "--launcher: empty; give the MPI launcher with its arguments, e.g. `mpirun --oversubscribe`",
        ));
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
