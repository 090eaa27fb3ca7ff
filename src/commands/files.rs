//! Every command's files, named for the output-path guard (`render::record::paths`) and
//! checked before the command does any work: an output aimed at an input, two outputs on one
//! file, two documents on stdout, stdin read twice, an output whose path cannot be written.
//! A sweep and a pair matrix are checked by their engine (`sweep::entry::files`), which
//! library users and the `*_perf` names reach too; `doctor` checks its `-o` directory itself
//! (`commands::doctor::outdir`).

use crate::cli::{Command, DocFormat, SimulateCommand};
use crate::exit::Failure;
use crate::render::record::paths::Files;

/// The SQLite stores `--history`/`--against-fleet` name, and the files SQLite keeps beside
/// them, as inputs: no output of the command may replace them. A value that is no store (a
/// blank one) is refused where the command opens it.
fn stores(files: Files, values: &[Option<&str>]) -> Files {
    values
        .iter()
        .flatten()
        .filter_map(|v| crate::history::Location::parse(v).ok())
        .flat_map(|l| crate::history::open::store_files(&l))
        .fold(files, |files, p| files.input("--history", Some(&p)))
}

/// Refuse (exit 2) what would lose data; see the module comment.
pub fn check(command: &Command) -> Result<(), Failure> {
    files(command).check()
}

fn files(command: &Command) -> Files {
    let files = Files::new();
    match command {
        Command::Import(a) => a.output.outputs().files(files.input("FILE", Some(&a.file))),
        Command::Report(a) => {
            let outputs = a.outputs.outputs(a.output.clone());
            outputs.files(files.inputs("INPUT", &a.inputs), "-o")
        }
        Command::Qualify(a) => stores(
            files,
            &[a.history.history.as_deref(), a.against_fleet.as_deref()],
        )
        .input("RUN", Some(&a.run))
        .input("--topo", a.expectation.topo.as_deref())
        .input("--log", a.expectation.log.as_deref())
        .input("--rules", a.rules.rules.as_deref())
        .output("--junit", a.rules.junit.as_deref())
        .stdout("--format", a.format != DocFormat::Table),
        Command::Compare(a) => files
            .inputs("RUN", &a.runs)
            .input("--topo", a.expectation.topo.as_deref())
            .input("--log", a.expectation.log.as_deref()),
        Command::Diagnose(a) => files.inputs("--from", &a.from),
        Command::Trace(a) => files
            .inputs("PATH", &a.paths)
            .input("--curve", a.link.curve.as_deref()),
        Command::Topo(a) => files.inputs("--from", &a.from),
        Command::Simulate(SimulateCommand::Ddp(a)) => {
            files.input("--curve", a.link.curve.as_deref())
        }
        Command::Simulate(SimulateCommand::Fsdp(a)) => {
            files.input("--curve", a.link.curve.as_deref())
        }
        Command::Simulate(SimulateCommand::Memory(a)) => files
            .input("--curve", a.link.curve.as_deref())
            .input("--model-config", a.model_config.as_deref()),
        Command::History(crate::cli::history::HistoryCommand::Add(a)) => {
            files.inputs("FILE", &a.files)
        }
        Command::History(crate::cli::history::HistoryCommand::Check(_)) => files,
        // The table is a document on stdout as much as JSON is: `--html -` beside it is two.
        Command::Fleet(a) => stores(files, &[a.store.history.as_deref()])
            .output("--html", a.html.as_deref())
            .stdout("--format", true),
        // doctor checks its directory itself (a marker of what an earlier run wrote).
        Command::Bundle(_)
        | Command::Doctor(_)
        | Command::Sweep(_)
        | Command::Matrix(_)
        | Command::Baselines(_)
        | Command::Messages(_)
        | Command::Aliases(_)
        | Command::Completions(_)
        | Command::Man(_) => files,
    }
}
