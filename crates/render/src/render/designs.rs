//! `ncclprobe baselines --designs`: the reference designs, as a table, CSV or Markdown.

use crate::documents::expectations::Design;
use crate::exit::Failure;
use crate::render::safe;
use std::fmt::Write;

fn names(d: &Design) -> String {
    d.names.join(", ")
}

fn domain(d: &Design) -> String {
    format!("{} ({} GPUs)", d.intra, d.domain)
}

pub fn table(designs: &[Design]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {} reference designs (`usual`: assumed of a node of that GPU and count when a run does not give its NICs)",
        designs.len()
    );
    for d in designs {
        let usual = if d.usual { "  [usual]" } else { "" };
        let _ = writeln!(out, "{:<26} {}{usual}", d.id, d.title);
        let _ = writeln!(out, "{:<26}   names: {}", "", names(d));
        let _ = writeln!(out, "{:<26}   {}; inside: {}", "", d.facts(), domain(d));
        if !d.variants.is_empty() {
            let _ = writeln!(out, "{:<26}   varies: {}", "", d.variants);
        }
        let _ = writeln!(out, "{:<26}   source: {}", "", d.citation);
    }
    safe::display(&out).into_owned()
}

pub fn csv(designs: &[Design]) -> Result<String, Failure> {
    crate::render::csv::table(
        &[
            "id", "title", "names", "gpu", "gpus", "intra", "domain", "nics", "nic_gbps",
            "nic_kind", "usual", "variants", "citation",
        ],
        designs.iter().map(|d| {
            vec![
                d.id.clone(),
                d.title.clone(),
                names(d),
                d.gpu.clone(),
                d.gpus.to_string(),
                d.intra.clone(),
                d.domain.to_string(),
                d.nics.to_string(),
                d.nic_gbps.to_string(),
                d.nic_kind.clone(),
                d.usual.to_string(),
                d.variants.clone(),
                d.citation.clone(),
            ]
        }),
    )
    .map_err(super::expect::csv_failure)
}

pub fn markdown(designs: &[Design]) -> String {
    let md = |t: &str| safe::markdown(t, safe::TEXT_CHARS);
    let mut out = String::from(
        "| design | names | node | inside | usual | source |\n|---|---|---|---|---|---|\n",
    );
    for d in designs {
        let _ = writeln!(
            out,
            "| `{}` {} | {} | {} | {} | {} | {} |",
            d.id,
            md(&d.title),
            md(&names(d)),
            md(&d.facts()),
            md(&domain(d)),
            if d.usual { "yes" } else { "" },
            md(&d.citation)
        );
    }
    out
}
