//! `ncclprobe topo`: the link matrix, from a pasted `nvidia-smi topo -m`, NCCL's own topology
//! and graph dumps (with the rail map), or this machine.

use crate::cli::{OutputFormat, TopoArgs};
use crate::documents::TopologyDocument;
use crate::exit::{ExitCode, Failure};
use crate::import::input::{input_failure, open, Kind};
use crate::import::{nccl_dump, topo};
use crate::render;

/// The topology a file states: `nvidia-smi topo -m`, or an NCCL dump (its matrix and the dump).
pub fn read(path: &std::path::Path) -> Result<TopologyDocument, Failure> {
    let (input, kind) = open(path)?;
    let name = input.name.clone();
    match kind {
        Kind::NcclDump => {
            let dump = nccl_dump::from_input(input).map_err(input_failure)?;
            let topology = dump
                .system
                .as_ref()
                .map(|s| s.to_topology())
                .unwrap_or_default();
            let mut doc = TopologyDocument::new(name, topology);
            doc.nccl = Some(dump);
            Ok(doc)
        }
        _ => Ok(TopologyDocument::new(
            name,
            topo::from_input(input).map_err(input_failure)?,
        )),
    }
}

/// Several files: NCCL's system dump and its graph dump, read as one.
fn read_all(paths: &[std::path::PathBuf]) -> Result<TopologyDocument, Failure> {
    let mut docs = paths
        .iter()
        .map(|p| read(p))
        .collect::<Result<Vec<_>, _>>()?;
    if docs.len() == 1 {
        return Ok(docs.remove(0));
    }
    let mut dump = nccl_dump::NcclDump::default();
    let mut names = Vec::new();
    for doc in docs {
        let Some(d) = doc.nccl else {
            return Err(Failure::usage(format!(
                "{}: is `nvidia-smi topo -m`; several --from files must be NCCL's dumps (one \
                 system, one graph)",
                doc.source
            )));
        };
        let clash = |what: &str| {
            Failure::usage(format!(
                "{}: a second {what} dump; give one system dump and one graph dump",
                doc.source
            ))
        };
        if let Some(s) = d.system {
            if dump.system.replace(s).is_some() {
                return Err(clash("system"));
            }
        }
        if let Some(g) = d.graphs {
            if dump.graphs.replace(g).is_some() {
                return Err(clash("graph"));
            }
        }
        names.push(doc.source);
    }
    // The files are dumps, not logs: no word of NICs NCCL fused (see `nccl_dump::rails`).
    dump.rails = nccl_dump::rails(
        dump.system.as_ref(),
        dump.graphs.as_ref(),
        &Default::default(),
    );
    let topology = dump
        .system
        .as_ref()
        .map(|s| s.to_topology())
        .unwrap_or_default();
    let mut doc = TopologyDocument::new(names.join(" + "), topology);
    doc.nccl = Some(dump);
    Ok(doc)
}

pub fn run(args: &TopoArgs) -> Result<ExitCode, Failure> {
    let doc = if args.from.is_empty() {
        TopologyDocument::new(
            "(live)".to_string(),
            crate::live::topology().map_err(Failure::unavailable)?,
        )
    } else {
        read_all(&args.from)?
    };
    match args.format {
        OutputFormat::Csv => crate::out!("{}", render::topo::csv(&doc.topology)),
        OutputFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        OutputFormat::Table => {
            if !doc.topology.devices.is_empty() {
                crate::out!("{}", render::topo::table(&doc.topology));
            }
            if let Some(dump) = &doc.nccl {
                crate::out!("{}", render::nccl_dump::table(dump));
            }
        }
    }
    Ok(ExitCode::Ok)
}
