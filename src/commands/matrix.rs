//! `ncclprobe matrix`: the flags as the sweep engine's options with pairs instead of
//! collectives, run on the sweep's backend selection and launch.

use crate::cli::MatrixArgs;
use crate::exit::{ExitCode, Failure};

pub fn run(args: &MatrixArgs) -> Result<ExitCode, Failure> {
    let mut options = args.options();
    options.history = args.history.target()?;
    crate::sweep::run(&options)
}
