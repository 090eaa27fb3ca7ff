//! `ncclprobe fleet`: the store's nodes against their peers and their past; the drain list.

use crate::cli::history::{FleetArgs, FleetFormat};
use crate::exit::{ExitCode, Failure};
use crate::history::fleet::{analyse, FleetOptions};
use crate::history::keep::failure;
use crate::history::Store;
use crate::render;

pub fn options(args: &FleetArgs) -> Result<FleetOptions, Failure> {
    let now = crate::history::entry::unix_time(&crate::model::now_rfc3339()).unwrap_or(0.0);
    let since_unix = match &args.since {
        Some(s) => crate::history::keep::since(s, now).map_err(Failure::usage)?,
        None => f64::NEG_INFINITY,
    };
    Ok(FleetOptions {
        filters: args.filters(),
        since_unix,
        rules: args.rules.rules()?,
    })
}

/// Exit 0 when nothing is to be drained, 3 when something is, 2 when no node was judged.
pub fn run(args: &FleetArgs) -> Result<ExitCode, Failure> {
    let opts = options(args)?;
    let location = args.store.location()?;
    let mut store = Store::open_reader(&location).map_err(failure)?;
    let doc = analyse(&mut store, &opts).map_err(failure)?;
    if doc.nodes.is_empty() {
        return Err(Failure::usage(format!(
            "{}: no measured runs{}",
            location.display(),
            match (&args.sku, &args.node, &args.since) {
                (None, None, None) => String::new(),
                _ => " match --sku/--node/--since".into(),
            }
        )));
    }
    if let Some(page) = &args.html {
        let html = render::fleet::html(&doc);
        render::record::write_document("--html", page, html.as_bytes())?;
    }
    match args.format {
        FleetFormat::Table => crate::out!("{}", render::fleet::table(&doc)),
        FleetFormat::Json => crate::outln!("{}", render::to_json(&doc)?),
        FleetFormat::Csv => crate::out!("{}", render::fleet::csv(&doc)?),
        FleetFormat::Junit => crate::out!("{}", render::fleet::junit(&doc)?),
        FleetFormat::Markdown => crate::out!("{}", render::fleet::markdown(&doc)),
    }
    // Nothing judged is no verdict: exit 2, as compare and qualify that judged nothing.
    if doc.drain.is_empty() && render::fleet::unjudged(&doc).len() == doc.nodes.len() {
        return Err(Failure::usage(format!(
            "not judged: {}",
            render::fleet::judged_line(&doc)
        )));
    }
    Ok(if doc.drain.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::CheckFailed
    })
}
