//! `ncclprobe report`: read the documents given (each told by its kind), render the HTML page,
//! the plots and the Markdown summary, write what was asked for.

use crate::cli::{ReportArgs, ReportOutputs};
use crate::exit::{ExitCode, Failure};
use crate::render::report::{render, write_all, Destinations};
use crate::report::Documents;
use std::path::PathBuf;

pub const DEFAULT_TITLE: &str = "ncclprobe report";

/// Where `--report`/`-o`, `--markdown` and `--png-dir` send the report; refuses two outputs on
/// one path (one would silently replace the other).
pub fn destinations(
    html: Option<PathBuf>,
    outputs: &ReportOutputs,
) -> Result<Option<Destinations>, Failure> {
    if html.is_none() && outputs.markdown.is_none() && outputs.png_dir.is_none() {
        return Ok(None);
    }
    if let (Some(h), Some(m)) = (&html, &outputs.markdown) {
        if h == m {
            return Err(Failure::usage(format!(
                "the HTML report and the Markdown summary would both be written to {}",
                h.display()
            )));
        }
    }
    Ok(Some(Destinations {
        html,
        markdown: outputs.markdown.clone(),
        png_dir: outputs.png_dir.clone(),
        svg: true,
    }))
}

/// Render and write; the files written are listed on stderr.
pub fn produce(docs: &Documents, title: &str, dest: &Destinations) -> Result<(), Failure> {
    let rendered = render(docs, title, dest)?;
    for path in write_all(&rendered, dest)? {
        eprintln!("ncclprobe: wrote {}", path.display());
    }
    Ok(())
}

pub fn run(args: &ReportArgs) -> Result<ExitCode, Failure> {
    let mut docs = Documents::default();
    for path in &args.inputs {
        docs.add_file(path)?;
    }
    if let Some(text) = &args.collective {
        for run in &mut docs.runs {
            super::expectation::name_collective(&mut run.doc, text)?;
        }
    }
    if !args.no_expect {
        docs.compare_runs_without_comparison();
    }
    let title = args.outputs.title.as_deref().unwrap_or(DEFAULT_TITLE);
    match destinations(args.output.clone(), &args.outputs)? {
        Some(dest) => produce(&docs, title, &dest)?,
        None => print!(
            "{}",
            render(&docs, title, &Destinations::default())?.markdown
        ),
    }
    Ok(ExitCode::Ok)
}
