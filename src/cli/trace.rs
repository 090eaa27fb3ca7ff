//! `ncclprobe trace`: a training job's own records, read and judged.

use super::args::LinkArgs;
use super::groups::OutputFormat;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// PyTorch profiler traces (`.json`, `.json.gz`; one per rank, or a directory of them),
    /// Flight Recorder dumps (JSON or pickle, `<prefix><rank>`), NCCL Inspector output. The
    /// kind of each is told by its content.
    #[arg(required = true, value_name = "PATH", help_heading = "Input")]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub link: LinkArgs,
    /// table for people; json: the trace document; csv: one row per rank and step.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, help_heading = "Output")]
    pub format: OutputFormat,
}
