//! `ncclprobe sweep`: the flags as the sweep engine's options, run.

use crate::cli::SweepArgs;
use crate::exit::{ExitCode, Failure};

pub fn run(args: &SweepArgs) -> Result<ExitCode, Failure> {
    let mut options = args.options();
    options.history = args.history.target()?;
    crate::sweep::run(&options)
}
