//! `ncclprobe history add|check`: documents into the store, and the store's consistency.

use crate::cli::history::{HistoryAddArgs, HistoryCommand, HistoryStoreArgs};
use crate::exit::{ExitCode, Failure};
use crate::history::entry::{self, Stated};
use crate::history::keep::failure;
use crate::history::write::Added;
use crate::history::{HistoryError, Store};
use crate::import::input::{self, Kind};

pub fn run(cmd: &HistoryCommand) -> Result<ExitCode, Failure> {
    match cmd {
        HistoryCommand::Add(args) => add(args),
        HistoryCommand::Check(args) => check(args),
    }
}

/// One file as the store keeps it.
fn entry_of(path: &std::path::Path, stated: &Stated) -> Result<entry::Entry, Failure> {
    let name = path.display().to_string();
    let (opened, kind) = input::open(path)?;
    let bad = |m: String| failure(HistoryError::Document(m));
    if kind == Kind::RunRecord {
        return match input::read_document(opened)? {
            input::Document::Run(r) => entry::from_run(&r, "add", Some(&name), stated).map_err(bad),
            input::Document::Matrix(m) => {
                entry::from_matrix(&m, "add", Some(&name), stated).map_err(bad)
            }
        };
    }
    let (_, mut run, _) = input::read_run_from(opened, kind)?;
    // nccl-tests output does not say when it ran; the file was written as the run ended
    // (stdin has no such time: the run is dated now).
    if let Some(at) = modified(path).filter(|_| path.as_os_str() != "-") {
        run.started_at = at;
        run.finished_at = None;
    }
    entry::from_run(&run, "add", Some(&name), stated).map_err(bad)
}

/// A path as a printed line shows it: no escape sequence reaches the terminal.
fn shown(path: &std::path::Path) -> String {
    crate::render::safe::line(&path.display().to_string()).into_owned()
}

/// A file's modification time, RFC 3339 in UTC.
fn modified(path: &std::path::Path) -> Option<String> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    let unix = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64();
    Some(crate::history::read::rfc3339(unix))
}

fn add(args: &HistoryAddArgs) -> Result<ExitCode, Failure> {
    let stated = Stated {
        node: args.node_name.clone(),
        sku: args.sku.clone(),
    };
    // Every file is read before the store is touched: a bad file adds nothing.
    let entries = args
        .files
        .iter()
        .map(|p| entry_of(p, &stated))
        .collect::<Result<Vec<_>, _>>()?;
    let location = args.store.location()?;
    let mut store = Store::open(&location).map_err(failure)?;
    let added = store.add_many(&entries).map_err(failure)?;
    for ((e, path), added) in entries.iter().zip(&args.files).zip(added) {
        match added {
            Added::Stored { id } => crate::outln!(
                "{}: kept as run {id} (node {}, {}, {} points)",
                shown(path),
                crate::render::safe::line(&e.identity.node),
                crate::render::safe::line(&e.identity.sku),
                e.points.len() + e.links.len()
            ),
            Added::AlreadyStored { id } => {
                crate::outln!("{}: already kept as run {id}", shown(path))
            }
            Added::Rejudged { id } => crate::outln!(
                "{}: already kept as run {id}; its gate verdict is now this document's",
                shown(path)
            ),
        }
    }
    Ok(ExitCode::Ok)
}

fn check(args: &HistoryStoreArgs) -> Result<ExitCode, Failure> {
    let location = args.location()?;
    let shown = location.display();
    let mut store = match Store::open_reader(&location) {
        Ok(store) => store,
        Err(HistoryError::Empty(_)) => {
            crate::outln!("{shown}: empty: 0 nodes, 0 runs, 0 points (no run kept in it yet)");
            return Ok(ExitCode::Ok);
        }
        // A damaged file is what a check is for: a problem found, not a failure to look.
        Err(HistoryError::Corrupt(m)) => {
            crate::outln!("{shown}: could not be read");
            crate::outln!(
                "problem: {}",
                m.strip_prefix(&format!("{shown}: ")).unwrap_or(&m)
            );
            return Ok(ExitCode::CheckFailed);
        }
        Err(e) => return Err(failure(e)),
    };
    let problems = store.check().map_err(failure)?;
    let (nodes, runs, points) = store.counts().unwrap_or((0, 0, 0));
    crate::outln!(
        "{shown}: {nodes} nodes, {runs} runs, {points} points (history schema {})",
        crate::history::schema::SCHEMA_VERSION
    );
    for p in &problems {
        crate::outln!("problem: {p}");
    }
    Ok(if problems.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}
