//! What measured or imported runs say: wrong data, cut-off output, and results far below what
//! NCCL's cost model or the topology lead one to expect.

use super::Hit;
use crate::coll::{Collective, Placement};
use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::{ev, Evidence};
use crate::import::topo::Topology;
use crate::model::{RunRecord, RunStatus};

/// The name a run's evidence carries: its imported file, else "(run)".
fn file_of(r: &RunRecord) -> String {
    r.import
        .as_ref()
        .map(|i| i.file.clone())
        .unwrap_or_else(|| "(run)".into())
}

pub fn wrong(inp: &Inputs) -> Vec<Hit> {
    let mut hits = Vec::new();
    for r in &inp.runs {
        let file = file_of(r);
        let mut evidence: Vec<Evidence> = r
            .points
            .iter()
            .filter(|p| p.wrong.unwrap_or(0) > 0)
            .map(|p| {
                let text = format!(
                    "{} {} {}: #wrong {}",
                    p.collective,
                    p.size_bytes,
                    p.placement.name(),
                    p.wrong.unwrap_or(0)
                );
                ev(&file, 0, text)
            })
            .take(8)
            .collect();
        let oob = r
            .import
            .as_ref()
            .and_then(|i| i.reported_out_of_bounds)
            .filter(|&n| n > 0);
        if let Some(n) = oob {
            evidence.push(ev(&file, 0, format!("# Out of bounds values : {n} FAILED")));
        }
        if !evidence.is_empty() {
            hits.push(Hit::new("Collectives returned wrong data", evidence));
        }
    }
    hits
}

pub fn truncated(inp: &Inputs) -> Vec<Hit> {
    let mut hits = Vec::new();
    for r in &inp.runs {
        let file = file_of(r);
        let cut_row = r
            .notes
            .iter()
            .any(|n| n.contains("interrupted") || n.contains("cut off"));
        let truncated = r.import.as_ref().is_some_and(|i| i.truncated);
        // A run that failed during start-up is an error, not a cut-off table.
        if !truncated || !(r.status == RunStatus::Truncated || cut_row || !r.points.is_empty()) {
            continue;
        }
        let last = r
            .points
            .last()
            .map(|p| format!("last complete row: {} bytes", p.size_bytes))
            .unwrap_or_else(|| "no complete row".into());
        let mut evidence = vec![ev(&file, 0, last)];
        evidence.extend(
            r.notes
                .iter()
                .filter(|n| n.contains("cut") || n.contains("interrupted") || n.contains("footer"))
                .map(|n| ev(&file, 0, n.clone())),
        );
        hits.push(Hit::new(
            "The benchmark output stops before the end of the run",
            evidence,
        ));
    }
    hits
}

/// The largest out-of-place size of each collective and type whose measured time exceeds 1.5x
/// what NCCL's cost model predicted for it.
fn slower_than_model(r: &RunRecord) -> Vec<String> {
    crate::model::largest_with_nccl_model(&r.points)
        .into_iter()
        .filter_map(|p| {
            let model = p.nccl_model_time_s?;
            (p.time_s > 1.5 * model).then(|| {
                format!(
                    "{} {} {} bytes: measured {:.1} us, NCCL's model {:.1} us ({:.1}x)",
                    p.collective,
                    p.dtype,
                    p.size_bytes,
                    p.time_s * 1e6,
                    model * 1e6,
                    p.time_s / model
                )
            })
        })
        .collect()
}

pub fn slower_than_nccl_model(inp: &Inputs) -> Vec<Hit> {
    inp.runs
        .iter()
        .filter_map(|r| {
            let slow = slower_than_model(r);
            let file = file_of(r);
            (!slow.is_empty()).then(|| {
                Hit::new(
                    "Collectives take far longer than NCCL's own cost model predicts for this machine",
                    slow.into_iter().map(|line| ev(&file, 0, line)).collect(),
                )
            })
        })
        .collect()
}

/// Conservative expected plateau busbw (bytes/s) for the slowest GPU pair of a topology:
/// NCCL's own link model (anchors.md §5.3) at the oldest generation that link type exists in,
/// NVLink at 20 GB/s per link (SM80), PCIe Gen3 x16 at 12 GB/s, host-bridge paths at 0.75 of it,
/// cross-socket at 6 GB/s (the lowest SYS constant).
pub fn expected_busbw(topo: &Topology) -> Option<(f64, String)> {
    let gpus = topo.gpus();
    let mut worst: Option<(f64, String)> = None;
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            let Some(code) = topo.link(a, b) else {
                continue;
            };
            let bw = if let Some(n) = code.strip_prefix("NV").and_then(|n| n.parse::<f64>().ok()) {
                n * 20e9
            } else {
                match code {
                    "PIX" | "PXB" => 12e9,
                    "PHB" | "NODE" => 9e9,
                    _ => 6e9,
                }
            };
            if worst.as_ref().is_none_or(|(w, _)| bw < *w) {
                worst = Some((bw, format!("{a}-{b} {code}")));
            }
        }
    }
    worst
}

/// Whether a run's plateau can be held against one box's slowest GPU pair: several ranks,
/// one host, out-of-place points measured.
fn comparable(r: &RunRecord, coll: Collective) -> bool {
    let n = r
        .points
        .iter()
        .find(|p| p.collective == coll)
        .map(|p| p.nranks)
        .unwrap_or(0);
    n >= 2
        && r.backend.hosts.len() <= 1
        && r.points
            .iter()
            .any(|p| p.placement == Placement::OutOfPlace)
}

pub fn below_topology_expectation(inp: &Inputs) -> Vec<Hit> {
    let Some((file_t, topo)) = inp.topos.first() else {
        return Vec::new();
    };
    let Some((expected, pair)) = expected_busbw(topo) else {
        return Vec::new();
    };
    let mut hits = Vec::new();
    for r in &inp.runs {
        let file = file_of(r);
        let bandwidth_bound = r.headlines.iter().filter(|h| {
            matches!(
                h.collective,
                Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter
            )
        });
        for h in bandwidth_bound {
            if !comparable(r, h.collective) || h.plateau_busbw_bytes_per_s >= 0.5 * expected {
                continue;
            }
            let measured = h.plateau_busbw_bytes_per_s / 1e9;
            hits.push(Hit::new(
                format!("{} plateau busbw {measured:.2} GB/s is below half of what the slowest GPU link should give ({:.0} GB/s)", h.collective, expected / 1e9),
                vec![
                    ev(&file, 0, format!("plateau busbw {measured:.2} GB/s over {:?} bytes", h.plateau_sizes_bytes)),
                    ev(file_t, 0, format!("slowest pair {pair}")),
                ],
            ));
        }
    }
    hits
}
