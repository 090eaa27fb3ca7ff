//! `ncclprobe import`: nccl-tests output in, our record and CSV out, with what had to be guessed.

use crate::cli::{ImportArgs, OutputFormat};
use crate::coll::Placement;
use crate::exit::{ExitCode, Failure};
use crate::import::{nccl_tests, text::InputError};
use crate::model::{Point, RunRecord};
use crate::render::{csv, table};
use std::path::Path;

/// Every input problem (unreadable, empty, binary, wrong kind) is bad input: exit 2.
pub fn input_failure(e: InputError) -> Failure {
    Failure::usage(e.to_string())
}

/// nccl-tests text or JSON, decided by the content.
pub fn import_file(path: &Path) -> Result<RunRecord, Failure> {
    let head = crate::import::text::head(path, 4).map_err(input_failure)?;
    let looks_json = head
        .iter()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.trim_start().starts_with('{'));
    if looks_json {
        nccl_tests::import_json(path).map_err(input_failure)
    } else {
        nccl_tests::import_text(path).map_err(input_failure)
    }
}

fn print_table(record: &RunRecord) {
    let mut current = None;
    let mut group: Vec<Point> = Vec::new();
    let flush = |group: &mut Vec<Point>| {
        if !group.is_empty() {
            println!("{}", table::footer(group));
            group.clear();
        }
    };
    for pair in record.points.chunks(2) {
        let [oop, inp] = pair else { continue };
        if oop.placement != Placement::OutOfPlace {
            continue;
        }
        if current != Some(oop.collective) {
            flush(&mut group);
            current = Some(oop.collective);
            println!("#\n# Collective test: {}_perf (imported)", oop.collective);
            println!("{}", table::header());
        }
        println!("{}", table::row(oop, inp));
        group.push(oop.clone());
        group.push(inp.clone());
    }
    flush(&mut group);
}

pub fn run(args: &ImportArgs) -> Result<ExitCode, Failure> {
    let out = &args.output;
    let sink = out.sink(import_file(&args.file)?);
    sink.flush()
        .map_err(|e| Failure::internal(format!("{e:#}")))?;
    let record = sink.record;
    let json = crate::render::to_json(&record)?;
    let csv_text = csv::to_string(&record.points).map_err(|e| Failure::internal(e.to_string()))?;
    match out.format {
        OutputFormat::Json => println!("{json}"),
        OutputFormat::Csv => print!("{csv_text}"),
        OutputFormat::Table => {
            if !out.json_to_stdout() && !out.csv_to_stdout() {
                let info = record.import.as_ref();
                println!(
                    "# imported {} ({} points, {} ranks, status {:?})",
                    args.file.display(),
                    record.points.len(),
                    record.backend.nranks,
                    record.status
                );
                if let Some(info) = info {
                    println!(
                        "# collective: {}; ranks from {}",
                        info.collective_from, info.nranks_from
                    );
                }
                for note in &record.notes {
                    println!("# note: {note}");
                }
                if let Some(info) = info {
                    for e in info.errors.iter().take(5) {
                        println!("# error in log: {e}");
                    }
                }
                print_table(&record);
                for h in &record.headlines {
                    println!("{}", table::headline(h));
                }
            }
        }
    }
    if out.json_to_stdout() {
        println!("{json}");
    }
    if out.csv_to_stdout() {
        print!("{csv_text}");
    }
    Ok(ExitCode::Ok)
}
