//! `ncclprobe topo`: the link matrix, from a pasted `nvidia-smi topo -m` or this machine.

use crate::cli::{OutputFormat, TopoArgs};
use crate::documents::TopologyDocument;
use crate::exit::{ExitCode, Failure};
use crate::import::input::input_failure;
use crate::import::{text::Input, topo};
use crate::render;

pub fn run(args: &TopoArgs) -> Result<ExitCode, Failure> {
    let (source, topo) = match &args.from {
        Some(path) => {
            let input = Input::open(path).map_err(input_failure)?;
            (
                input.name.clone(),
                topo::from_input(input).map_err(input_failure)?,
            )
        }
        None => (
            "(live)".to_string(),
            crate::live::topology().map_err(Failure::unavailable)?,
        ),
    };
    match args.format {
        OutputFormat::Csv => crate::out!("{}", render::topo::csv(&topo)),
        OutputFormat::Json => {
            crate::outln!("{}", render::to_json(&TopologyDocument::new(source, topo))?)
        }
        OutputFormat::Table => crate::out!("{}", render::topo::table(&topo)),
    }
    Ok(ExitCode::Ok)
}
