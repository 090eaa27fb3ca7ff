//! `ncclprobe report`: read the documents given (each told by its kind), render the HTML page,
//! the plots and the Markdown summary, write what was asked for.

use crate::cli::ReportArgs;
use crate::exit::{ExitCode, Failure};
use crate::render::report::Destinations;
use crate::report::output::{produce, render};
use crate::report::Documents;

pub fn run(args: &ReportArgs) -> Result<ExitCode, Failure> {
    if let Some(text) = &args.hardware {
        crate::expect::hardware::Hardware::parse(text).map_err(Failure::usage)?;
    }
    let mut docs = Documents::default();
    for path in &args.inputs {
        docs.add_file(path)?;
    }
    docs.tie_to_runs()?;
    if let Some(text) = &args.collective {
        for run in &mut docs.runs {
            crate::expect::setup::name_collective(&mut run.doc, text)?;
        }
    }
    if !args.no_expect {
        docs.hardware = args.hardware.clone();
        docs.compare_runs_without_comparison();
    }
    let outputs = args.outputs.outputs(args.output.clone());
    let title = outputs.title();
    match outputs.destinations()? {
        Some(dest) => produce(&docs, title, &dest)?,
        None => crate::out!(
            "{}",
            render(&docs, title, &Destinations::default())?.markdown
        ),
    }
    Ok(ExitCode::Ok)
}
