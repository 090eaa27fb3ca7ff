//! ncclprobe: measure, explain and predict collective communication performance.
//!
//! Layers, top to bottom (README, Development: Layers; `tests/it/architecture.rs` holds them):
//! `commands` and `cli` (flags converted once into each engine's options; this package) → the
//! engines (`sweep` → `matrix` → the harness `measure`/`plan` → `backend` → `history` → `report`
//! → `diagnose` → `expect` → `live` → `analysis` → `import`) → `render` (formatting) → the
//! documents and the model they are made of. Each layer group is a crate under `crates/`; its
//! modules are re-exported here under their own names, so `ncclprobe::sweep::run` is where a
//! library user starts a sweep (`sweep::run(&sweep::options::Options)`).

pub use ncclprobe_analysis::{analysis, diagnose, expect, live};
pub use ncclprobe_backend::backend;
pub use ncclprobe_core::{
    bounded, buildinfo, coll, data, documents, dtype, exit, fault_injection, flags, model, out,
    outln, secrets, stats, term, units, with_dtype,
};
pub use ncclprobe_history::history;
pub use ncclprobe_import::import;
pub use ncclprobe_measure::{arrivals, matrix, measure, plan, sweep, watchdog};
pub use ncclprobe_render::render;
pub use ncclprobe_report::report;

pub mod cli;
pub mod commands;

/// Hands what build.rs read of this binary to the libraries (`buildinfo::tool_info` in every
/// record) and, in a build with the TEST-ONLY `fault-injection` feature, turns the test hooks on.
/// `run_cli` calls it first; a library user calls it once to get the same records.
pub fn register_build() {
    buildinfo::register(buildinfo::Build {
        git_commit: env!("NCCLPROBE_GIT_COMMIT"),
        features: env!("NCCLPROBE_FEATURES"),
        profile: env!("NCCLPROBE_PROFILE"),
    });
    #[cfg(feature = "fault-injection")]
    fault_injection::enable_test_hooks();
}

use clap::Parser;
use exit::ExitCode;

/// Parse the command line, run, and return the process exit code.
pub fn run_cli() -> i32 {
    register_build();
    let mut args = std::env::args_os();
    let argv0 = args.next();
    if let Some((program, coll)) = argv0.as_deref().and_then(cli::perf::program) {
        let rest: Vec<std::ffi::OsString> = args.collect();
        let argv0 = argv0.unwrap_or_default().to_string_lossy().into_owned();
        return commands::perf::run(&argv0, &program, coll, &rest);
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
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    cli.configure_terminal(&argv);
    let result = commands::files::check(&cli.command).and_then(|()| match &cli.command {
        cli::Command::Sweep(args) => commands::sweep::run(args),
        cli::Command::Matrix(args) => commands::matrix::run(args),
        cli::Command::Import(args) => commands::import::run(args),
        cli::Command::Topo(args) => commands::topo::run(args),
        cli::Command::Diagnose(args) => commands::diagnose::run(args),
        cli::Command::Trace(args) => commands::trace::run(args),
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
        cli::Command::Messages(args) => commands::messages::run(args),
        cli::Command::Report(args) => commands::report::run(args),
        cli::Command::Doctor(args) => commands::doctor::run(args),
        cli::Command::Bundle(args) => commands::bundle::run_bundle(args),
        cli::Command::History(cmd) => commands::history::run(cmd),
        cli::Command::Fleet(args) => commands::fleet::run(args),
        cli::Command::Aliases(args) => commands::perf::aliases(&args.dir, args.mpi),
        cli::Command::Completions(args) => commands::manual::completions(args.shell),
        cli::Command::Man(args) => commands::manual::man(&args.command),
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
