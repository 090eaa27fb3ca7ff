//! The whole matrix as one rank runs it: who is where, every step of every size (`run`), then
//! the suspects measured again alone (`remeasure`).

use super::remeasure::outliers_alone;
use super::run::{after_step, begin_size, endpoints, measure_step, steps, total_steps, Context};
use crate::backend::Communicator;
use crate::documents::matrix::By;
use crate::exit::Failure;

/// The whole matrix as seen by one rank.
pub fn run_rank(comm: &mut dyn Communicator, cx: &Context<'_>) -> Result<(), Failure> {
    let ranks = crate::measure::exchange_whoami(comm, &cx.plan.injected)?;
    let endpoints = endpoints(cx.options.by, &ranks);
    if endpoints.len() < 2 {
        return Err(Failure::usage(match cx.options.by {
            By::Rank => format!(
                "matrix: {} rank; pairs need at least 2 (--ranks, -g, or the launcher's -np)",
                ranks.len()
            ),
            By::Node => format!(
                "matrix --by node: every rank runs on {}; pairs of nodes need ranks on at least 2 hosts",
                ranks.first().map_or("one host", |r| r.host.as_str())
            ),
        }));
    }
    let sizes = &cx.plan.sizes_bytes;
    if let Some(out) = cx.out {
        out.start(
            ranks,
            endpoints.clone(),
            total_steps(&endpoints, cx.options, sizes),
        )?;
    }
    // Every rank keeps every cell (each step returns the same on all), so all agree on what
    // to measure again without another message.
    let mut all_cells = Vec::new();
    for &size in sizes {
        begin_size(comm, size)?;
        for step in steps(&endpoints, cx.options, size) {
            let cells = measure_step(comm, cx, &endpoints, &step, size)?;
            after_step(comm, cx, &cells, false)?;
            all_cells.extend(cells);
        }
    }
    outliers_alone(comm, cx, &endpoints, &all_cells)?;
    if let Some(w) = cx.watchdog {
        w.disarm();
    }
    Ok(())
}
