//! `ncclprobe messages`: the message catalogue, filtered, or its coverage per release; and
//! `ncclprobe diagnose --explain LINE`, the entry one line comes from.

use crate::cli::{DocFormat, MessagesArgs, OutputFormat};
use crate::diagnose::catalogue::{coverage, explain, rows, Filter};
use crate::documents::messages::{ExplainDocument, MessagesDocument};
use crate::documents::{Kind, SCHEMA_VERSION};
use crate::exit::{ExitCode, Failure};
use crate::render;

pub fn run(args: &MessagesArgs) -> Result<ExitCode, Failure> {
    let filter = Filter {
        project: args.project.clone(),
        level: args.level.clone(),
        class: args.class.clone(),
        text: args.grep.clone(),
        version: args.version.clone(),
    };
    let coverage_rows = coverage();
    let doc = MessagesDocument {
        schema_version: SCHEMA_VERSION,
        kind: Kind::Messages,
        tool: crate::buildinfo::tool_info(),
        entries: if args.coverage {
            Vec::new()
        } else {
            rows(&filter)
        },
        coverage: coverage_rows,
    };
    match args.format {
        DocFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        DocFormat::Table if args.coverage => {
            crate::out!("{}", render::messages::coverage_table(&doc.coverage))
        }
        DocFormat::Table => crate::out!("{}", render::messages::table(&doc)),
        DocFormat::Csv => crate::out!("{}", render::messages::csv(&doc)?),
        DocFormat::Markdown => crate::out!("{}", render::messages::markdown(&doc)),
    }
    if !args.coverage && doc.entries.is_empty() {
        return Err(Failure::new(
            ExitCode::CheckFailed,
            "messages: no entry matches these filters".to_string(),
        ));
    }
    Ok(ExitCode::Ok)
}

/// `diagnose --explain LINE`: exit 0 with the entry, 3 when the catalogue knows no such line.
pub fn explain_line(line: &str, format: OutputFormat) -> Result<ExitCode, Failure> {
    let found = explain(line, None);
    match format {
        OutputFormat::Json => {
            let (entry, values) = match &found {
                Some((r, v)) => (Some(r.clone()), v.clone()),
                None => (None, Vec::new()),
            };
            let doc = ExplainDocument {
                schema_version: SCHEMA_VERSION,
                kind: Kind::Messages,
                tool: crate::buildinfo::tool_info(),
                line: line.to_string(),
                entry,
                values,
            };
            crate::outln!("{}", render::to_json(&doc)?);
        }
        _ => crate::out!(
            "{}",
            render::messages::explain(
                line,
                found.as_ref().map(|(r, _)| r),
                found.as_ref().map(|(_, v)| v.as_slice()).unwrap_or(&[])
            )
        ),
    }
    match found {
        Some(_) => Ok(ExitCode::Ok),
        None => Err(Failure::new(
            ExitCode::CheckFailed,
            "diagnose: the message catalogue knows no such line".to_string(),
        )),
    }
}
