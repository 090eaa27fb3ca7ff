//! The commands doctor runs inside itself: the short sweep's arguments (for a child process,
//! for this process under a launcher, and for checking the flags before anything runs) and the
//! DDP simulation, each built as the real command's arguments so they are checked and run by
//! that command's own code.

use crate::cli::{Cli, Command as Cmd, DoctorArgs, SimulateCommand};
use crate::exit::Failure;
use crate::sweep::Backend;
use clap::Parser;
use std::path::Path;

/// The short sweep's arguments, shared by the child process and the in-process run. Values go
/// as `--flag=value`, so that a value starting with `-` reaches the sweep's own check.
pub fn sweep_args(args: &DoctorArgs, backend: Backend, json: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec!["sweep".into(), "--backend".into(), backend.name().into()];
    if let Some(n) = args.backend.ranks.filter(|_| backend == Backend::Host) {
        v.push(format!("--ranks={n}"));
    }
    if backend == Backend::Nccl {
        if let Some(g) = args.backend.ngpus {
            v.push(format!("--ngpus={g}"));
        }
        if let Some(lib) = &args.backend.nccl_lib {
            v.push(format!("--nccl-lib={}", lib.display()));
        }
    }
    v.extend([
        format!("--minbytes={}", args.minbytes),
        format!("--maxbytes={}", args.maxbytes),
        format!("--stepfactor={}", args.stepfactor),
        format!("--point-budget={}", args.point_budget),
        format!("--timeout={}", args.timeout),
        format!("--json={}", json.display()),
    ]);
    v
}

/// The sweep's own arguments as its command parses them.
pub fn parsed_sweep(
    args: &DoctorArgs,
    backend: Backend,
    json: &Path,
) -> Result<Box<crate::cli::SweepArgs>, Failure> {
    let mut argv = vec!["ncclprobe".to_string()];
    argv.extend(sweep_args(args, backend, json));
    let cli = Cli::try_parse_from(&argv).map_err(|e| Failure::usage(e.to_string()))?;
    match cli.command {
        Cmd::Sweep(sweep) => Ok(sweep),
        _ => Err(Failure::internal(
            "doctor built a command that is not a sweep",
        )),
    }
}

/// The short sweep in this process (ranks started by a launcher): the sweep command itself.
pub fn sweep_here(args: &DoctorArgs, backend: Backend, json: &Path) -> Result<(), Failure> {
    let sweep = parsed_sweep(args, backend, json)?;
    crate::commands::sweep::run(&sweep).map(|_| ())
}

/// The link a DDP simulation runs on: a measured record, or a stand-in that only lets the
/// simulation's own checks run on the other flags before anything is measured.
pub enum Link<'a> {
    Curve(&'a Path),
    StandIn,
}

/// `simulate ddp` on `link` for `world` ranks, with doctor's --model, --compute-ms,
/// --batch-size and input pipeline flags.
pub fn simulate(
    args: &DoctorArgs,
    link: Link,
    world: usize,
) -> Result<crate::documents::DdpSimulation, Failure> {
    let (Some(model), Some(ms)) = (&args.model, args.compute_ms) else {
        return Err(Failure::usage("--model needs --compute-ms"));
    };
    let mut argv = vec![
        "ncclprobe".to_string(),
        "simulate".into(),
        "ddp".into(),
        format!("--model={model}"),
        format!("--world-size={}", world.max(1)),
        format!("--batch-size={}", args.batch_size),
        format!("--compute-ms={ms}"),
    ];
    argv.extend(args.loader.to_argv());
    match link {
        // doctor's sweep is short by design (-e 64M): the curve is extrapolated past its
        // last size, and the document's link says so.
        Link::Curve(run) => argv.extend([
            format!("--curve={}", run.display()),
            "--allow-partial".into(),
        ]),
        Link::StandIn => argv.push("--busbw=100".into()),
    }
    let cli = Cli::try_parse_from(argv).map_err(|e| Failure::usage(e.to_string()))?;
    match &cli.command {
        Cmd::Simulate(SimulateCommand::Ddp(ddp)) => crate::commands::simulate::ddp_document(ddp),
        _ => Err(Failure::internal(
            "doctor built a command that is not simulate ddp",
        )),
    }
}
