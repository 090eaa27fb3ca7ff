//! `ncclprobe trace`: read a job's own records (profiler traces, Flight Recorder dumps,
//! Inspector output), judge them against the link given, print the document.

use super::simulate::{load_link, Needs};
use crate::cli::{LinkArgs, OutputFormat, TraceArgs};
use crate::coll::Collective;
use crate::documents::trace::TraceDocument;
use crate::exit::{ExitCode, Failure};
use crate::import::trace::{read_job, JobRecords};
use crate::render;
use std::path::PathBuf;

/// Every record under `paths`, read (exit 2 naming the file that could not be).
pub fn read(paths: &[PathBuf]) -> Result<JobRecords, Failure> {
    read_job(paths).map_err(|e| Failure::usage(e.to_string()))
}

/// The job's records judged against `link` (a curve or a busbw, or none). A link that cannot
/// be loaded is refused before the records are touched, so they can be judged without one.
pub fn judge(job: &mut JobRecords, link: &LinkArgs) -> Result<TraceDocument, Failure> {
    let world = job
        .ranks
        .iter()
        .find_map(|r| r.world_size)
        .or_else(|| job.inspector.first().map(|i| i.nranks))
        .unwrap_or(2);
    let largest = job
        .ranks
        .iter()
        .flat_map(|r| r.comms.iter().filter_map(|c| c.bytes))
        .chain(job.inspector.iter().map(|i| i.size_bytes))
        .max();
    let (curve, notes) = if link.curve.is_some() || link.busbw.is_some() {
        let needs = Needs {
            wanted: &[
                Collective::AllReduce,
                Collective::AllGather,
                Collective::ReduceScatter,
                Collective::Alltoall,
                Collective::Broadcast,
            ],
            world_size: world,
            largest_message_bytes: largest,
            link_optional: false,
        };
        let (c, n) = load_link(link, &needs)?;
        (Some(c), n)
    } else {
        (None, Vec::new())
    };
    let described = curve.as_ref().map(|c| c.describe());
    let mut doc = crate::analysis::trace::analyse(job, curve.as_ref(), described);
    doc.notes.extend(notes);
    if curve.is_none() && !doc.collectives.is_empty() {
        doc.notes.push("no link given: the collectives' busbw is shown but not judged; give --curve (this machine's sweep record) or --busbw".into());
    }
    Ok(doc)
}

pub fn run(args: &TraceArgs) -> Result<ExitCode, Failure> {
    let doc = judge(&mut read(&args.paths)?, &args.link)?;
    match args.format {
        OutputFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        OutputFormat::Table => crate::out!("{}", render::trace::table(&doc)),
        OutputFormat::Csv if doc.steps.is_empty() => {
            return Err(Failure::usage(format!(
                "--format csv has one row per profiler step, and these inputs have none ({}): use --format table or json",
                doc.verdict.summary
            )))
        }
        OutputFormat::Csv => crate::out!(
            "{}",
            render::trace::steps_csv(&doc)
                .map_err(|e| Failure::internal(format!("writing CSV: {e}")))?
        ),
    }
    Ok(ExitCode::Ok)
}

/// `simulate ddp --from-trace PATH`: the what-if calibrated on the job's trace.
pub fn run_what_if(
    path: &std::path::Path,
    link: &LinkArgs,
    format: OutputFormat,
) -> Result<ExitCode, Failure> {
    let doc = judge(&mut read(&[path.to_path_buf()])?, link)?;
    let Some(w) = &doc.what_if else {
        let why = if doc.steps.is_empty() {
            "it holds no profiler step (Flight Recorder dumps and Inspector records have none; give the job's torch.profiler trace)"
        } else {
            "no step in it ran backward on the GPU (no kernels launched from autograd's thread)"
        };
        return Err(Failure::usage(format!(
            "--from-trace {}: {why}, so no step can be rebuilt",
            path.display()
        )));
    };
    match format {
        OutputFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        _ => crate::out!("{}", render::trace::what_if_table(w)),
    }
    Ok(ExitCode::Ok)
}
