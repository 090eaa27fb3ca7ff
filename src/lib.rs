//! ncclprobe: measure, explain and predict collective communication performance.
//!
//! Layers, top to bottom (README, Development: Layers; `tests/architecture.rs` holds them):
//! `commands` and `cli` (flags converted once into each engine's options) → the engines
//! (`sweep` → `matrix` → the harness `measure`/`plan` → `backend` → `report` → `diagnose` →
//! `expect` → `live` → `analysis` → `import`) → `render` (formatting) → the documents and the
//! model they are made of. A library user starts a sweep with `sweep::run(&sweep::options::
//! Options)`.

pub mod arrivals;
pub mod backend;
pub mod buildinfo;
pub mod cli;
pub mod coll;
pub mod commands;
pub mod data;
pub mod diagnose;
pub mod documents;
pub mod dtype;
pub mod exit;
pub mod expect;
pub mod fault_injection;
pub mod flags;
pub mod history;
pub mod import;
pub mod live;
pub mod matrix;
pub mod measure;
pub mod model;
pub mod plan;
pub mod render;
pub mod report;
pub mod stats;
pub mod sweep;
pub mod units;
pub mod watchdog;

use clap::Parser;
use exit::ExitCode;

/// Parse the command line, run, and return the process exit code.
pub fn run_cli() -> i32 {
    let mut args = std::env::args_os();
    if let Some((program, coll)) = args.next().as_deref().and_then(cli::perf::program) {
        let rest: Vec<std::ffi::OsString> = args.collect();
        return commands::perf::run(&program, coll, &rest);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => ExitCode::Usage.code(),
            };
        }
    };
    let result = commands::files::check(&cli.command).and_then(|()| match &cli.command {
        cli::Command::Sweep(args) => commands::sweep::run(args),
        cli::Command::Matrix(args) => commands::matrix::run(args),
        cli::Command::Import(args) => commands::import::run(args),
        cli::Command::Topo(args) => commands::topo::run(args),
        cli::Command::Diagnose(args) => commands::diagnose::run(args),
        cli::Command::Simulate(cli::SimulateCommand::Ddp(args)) => {
            commands::simulate::run_ddp(args)
        }
        cli::Command::Simulate(cli::SimulateCommand::Fsdp(args)) => {
            commands::simulate::run_fsdp(args)
        }
        cli::Command::Simulate(cli::SimulateCommand::Memory(args)) => commands::memory::run(args),
        cli::Command::Compare(args) => commands::compare::run(args),
        cli::Command::Qualify(args) => commands::qualify::run(args),
        cli::Command::Baselines(args) => commands::baselines::run(args),
        cli::Command::Report(args) => commands::report::run(args),
        cli::Command::Doctor(args) => commands::doctor::run(args),
        cli::Command::Bundle(args) => commands::bundle::run_bundle(args),
        cli::Command::History(cmd) => commands::history::run(cmd),
        cli::Command::Fleet(args) => commands::fleet::run(args),
        cli::Command::Aliases(args) => commands::perf::aliases(&args.dir, args.mpi),
    });
    match result {
        Ok(code) => code.code(),
        Err(failure) => {
            if !failure.message.is_empty() {
                // Messages quote file names and records: no escape sequence reaches the terminal.
                eprintln!("ncclprobe: {}", render::safe::display(&failure.message));
            }
            failure.code.code()
        }
    }
}
pub mod analysis;
