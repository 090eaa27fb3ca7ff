//! `ncclprobe baselines`: the shipped expectations with their provenance and citations.

use crate::cli::{BaselinesArgs, DocFormat};
use crate::documents::{BaselinesDocument, Kind, SCHEMA_VERSION};
use crate::exit::{ExitCode, Failure};
use crate::render;

pub fn run(args: &BaselinesArgs) -> Result<ExitCode, Failure> {
    let table = crate::expect::shipped();
    let designs = crate::expect::designs::shipped();
    match args.format {
        DocFormat::Json => crate::outln!(
            "{}",
            render::to_json(&BaselinesDocument {
                schema_version: SCHEMA_VERSION,
                kind: Kind::Baselines,
                tool: crate::buildinfo::tool_info(),
                entries: table.entries.clone(),
                designs: designs.to_vec(),
            })?
        ),
        DocFormat::Csv if args.designs => crate::out!("{}", render::designs::csv(designs)?),
        DocFormat::Markdown if args.designs => {
            crate::out!("{}", render::designs::markdown(designs))
        }
        DocFormat::Table if args.designs => crate::out!("{}", render::designs::table(designs)),
        DocFormat::Csv => crate::out!("{}", render::expect::baselines_csv(table)?),
        DocFormat::Markdown => crate::out!("{}", render::expect::baselines_markdown(table)),
        DocFormat::Table => crate::out!("{}", render::expect::baselines_table(table)),
    }
    Ok(ExitCode::Ok)
}
