//! The lines a sweep prints after its table: headlines, then what the run measured beside the
//! table (memcpy ratio, copy bandwidth, NCCL's cost model, intervals, stragglers).

use crate::coll::{Collective, Placement};
use crate::model::{self, RunRecord};
use crate::render::table;
use crate::units::format_size;

/// What a one-rank run says instead of its headlines.
pub const ONE_RANK: &str = "# one rank: no interconnect measured (busbw is 0 by definition; the times are this rank's own work). Run with 2 or more ranks to measure a link";

/// Headlines, then what the run measured beside the table.
pub fn lines(record: &RunRecord) -> Vec<String> {
    let one_rank = record.backend.nranks == 1;
    let mut lines: Vec<String> = match one_rank {
        // A plateau busbw of 0 and a latency of a local copy would read as a broken link.
        true => vec![ONE_RANK.to_string()],
        false => record.headlines.iter().map(table::headline).collect(),
    };
    lines.extend(memcpy_ratio_line(record));
    lines.extend(copy_bandwidth_lines(record));
    lines.extend(cost_model_lines(record));
    lines.extend(interval_line(record));
    lines.extend(table::algo_ranges(&record.points));
    lines.extend(table::nccl_said(record));
    if record.settings.as_ref().is_some_and(|s| s.stragglers) && !one_rank {
        lines.push(match crate::arrivals::straggler(&record.points) {
            Some(s) => format!(
                "# STRAGGLER: {}",
                crate::arrivals::describe(&s, &record.backend.ranks)
            ),
            None => {
                "# stragglers: no rank entered last in most calls (arrival times in the record)"
                    .into()
            }
        });
    }
    lines
}

/// How many points reached `--target-ci`, and which did not (with the interval they have).
fn interval_line(record: &RunRecord) -> Option<String> {
    let target = record.settings.as_ref()?.target_rel_ci?;
    let missed: Vec<&crate::model::Point> = record
        .points
        .iter()
        .filter(|p| !(p.stats.ci_level > 0.0 && p.stats.ci_rel_half_width <= target))
        .collect();
    let n = record.points.len();
    let head = format!(
        "# {} of {n} points within ±{:.1}% (95% interval of the median)",
        n - missed.len(),
        target * 100.0
    );
    if missed.is_empty() {
        return Some(head);
    }
    const SHOWN: usize = 6;
    let mut named: Vec<String> = missed
        .iter()
        .take(SHOWN)
        .map(|p| {
            format!(
                "{} {} {} ±{:.1}% ({})",
                p.collective,
                format_size(p.size_bytes),
                p.placement.name(),
                p.stats.ci_rel_half_width * 100.0,
                p.stop_reason.name()
            )
        })
        .collect();
    if missed.len() > SHOWN {
        named.push(format!("and {} more in the record", missed.len() - SHOWN));
    }
    Some(format!("{head}; short of it: {}", named.join(", ")))
}

/// Per collective and dtype, the largest out-of-place point against NCCL's own cost model.
fn cost_model_lines(record: &RunRecord) -> Vec<String> {
    model::largest_with_nccl_model(&record.points)
        .into_iter()
        .filter_map(|p| {
            let model = p.nccl_model_time_s?;
            Some(format!(
                "# {} {} {}: measured {:.1} us, NCCL's cost model {:.1} us (ncclGroupSimulateEnd): {:.2}x its estimate",
                p.collective,
                p.dtype,
                format_size(p.size_bytes),
                p.time_s * 1e6,
                model * 1e6,
                p.time_s / model
            ))
        })
        .collect()
}

/// Per GPU and direction: pageable vs pinned copy bandwidth (why DataLoader(pin_memory=True)).
fn copy_bandwidth_lines(record: &RunRecord) -> Vec<String> {
    let c = &record.calibration.copy_bandwidth;
    let mut lines = Vec::new();
    for p in c.iter().filter(|p| p.pinned) {
        if let Some(q) = c
            .iter()
            .find(|q| !q.pinned && q.device == p.device && q.direction == p.direction)
        {
            lines.push(format!(
                "# GPU{} {} {}: pageable {:.2} GB/s, pinned {:.2} GB/s ({} copies)",
                p.device,
                p.name,
                p.direction,
                q.bytes_per_s / 1e9,
                p.bytes_per_s / 1e9,
                format_size(p.size_bytes)
            ));
        }
    }
    lines
}

/// The host backend's all_reduce busbw at 64 MiB against single-thread memcpy of this run.
fn memcpy_ratio_line(record: &RunRecord) -> Option<String> {
    let memcpy = record.calibration.memcpy_bytes_per_s?;
    let p = record.points.iter().find(|p| {
        p.collective == Collective::AllReduce
            && p.placement == Placement::OutOfPlace
            && p.size_bytes == 64 << 20
    })?;
    Some(format!(
        "# host backend: all_reduce busbw at 64 MiB {:.2} GB/s = {:.2} x single-thread memcpy ({:.2} GB/s, measured in this run)",
        p.busbw_bytes_per_s / 1e9,
        p.busbw_bytes_per_s / memcpy,
        memcpy / 1e9
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CopyBandwidth;

    #[test]
    fn copy_bandwidth_pairs_pinned_with_pageable_per_gpu_and_direction() {
        let copy = |device, pinned, direction: &str, gbps: f64| CopyBandwidth {
            device,
            name: "GPU".into(),
            direction: direction.into(),
            pinned,
            size_bytes: 64 << 20,
            bytes_per_s: gbps * 1e9,
        };
        let mut record = RunRecord::blank(model::Source::Measured, "nccl", "test".into());
        record.calibration.copy_bandwidth = vec![
            copy(0, false, "host-to-device", 6.0),
            copy(0, true, "host-to-device", 24.5),
            copy(1, true, "device-to-host", 25.0),
        ];
        let lines = copy_bandwidth_lines(&record);
        assert_eq!(
            lines,
            vec![
                "# GPU0 GPU host-to-device: pageable 6.00 GB/s, pinned 24.50 GB/s (64 MiB copies)"
            ],
            "a pinned figure without its pageable twin is not printed"
        );
    }
}
