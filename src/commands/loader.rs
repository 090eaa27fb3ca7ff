//! `simulate ddp`'s input pipeline flags turned into the loader model: each value checked,
//! and what the flags leave out read from this machine (cores, MemTotal) or from the --curve
//! record's host-to-device copy probe, with where each came from said in the document.

use crate::analysis::loader::{Loader, PAGEABLE_DEFAULT_BYTES_PER_S, PINNED_DEFAULT_BYTES_PER_S};
use crate::analysis::loader_plan::{BatchChoice, Sources};
use crate::cli::LoaderArgs;
use crate::exit::Failure;
use crate::flags::{count_in, non_negative, parse_list, positive};
use crate::model::RunRecord;
use std::path::Path;

/// The loader model and what goes with it.
pub struct Built {
    pub loader: Loader,
    pub sources: Sources,
    pub choices: Vec<BatchChoice>,
    pub compute_fixed_s: f64,
    pub compute_fixed_given: bool,
}

/// Ranks per node when not given: the world size, at most this many (one 8-GPU node).
const RANKS_PER_NODE_CAP: usize = 8;

fn any_given(a: &LoaderArgs) -> bool {
    a.num_workers.is_some()
        || a.cpu_cores.is_some()
        || a.ranks_per_node.is_some()
        || a.pin_memory
        || a.persistent_workers
        || a.prefetch_factor != 2
        || a.dataset_gb.is_some()
        || a.host_memory_gb.is_some()
        || a.h2d_gbps.is_some()
        || a.sample_bytes.is_some()
        || a.batch_bytes.is_some()
        || a.compute_fixed_ms != 0.0
        || a.batch_sizes.is_some()
}

/// The loader, or `None` when no data time was given (and no other loader flag either).
pub fn build(
    a: &LoaderArgs,
    world_size: usize,
    batch_size: usize,
    curve: Option<&Path>,
) -> Result<Option<Built>, Failure> {
    let sample_s = match (a.data_ms, a.sample_ms) {
        (Some(ms), _) => positive("--data-ms", ms, "milliseconds")? * 1e-3 / batch_size as f64,
        (None, Some(ms)) => positive("--sample-ms", ms, "milliseconds")? * 1e-3,
        (None, None) if any_given(a) => {
            return Err(Failure::usage(
                "the input pipeline flags need the data time: --data-ms (one worker, one batch) or --sample-ms",
            ))
        }
        (None, None) => return Ok(None),
    };
    let (cpu_cores, cpu_cores_from) = match a.cpu_cores {
        Some(n) => (
            count_in("--cpu-cores", n, 1, 1 << 16)?,
            "--cpu-cores".into(),
        ),
        None => (
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            "this machine (sched_getaffinity, as PyTorch counts them)".to_string(),
        ),
    };
    let (ranks_per_node, ranks_per_node_from) = match a.ranks_per_node {
        Some(n) => (
            count_in("--ranks-per-node", n, 1, world_size)?,
            "--ranks-per-node".into(),
        ),
        None => (
            world_size.min(RANKS_PER_NODE_CAP),
            format!("the world size capped at {RANKS_PER_NODE_CAP}; --ranks-per-node to change"),
        ),
    };
    let sample_bytes = match (&a.sample_bytes, &a.batch_bytes) {
        (Some(s), _) => size("--sample-bytes", s)?,
        (None, Some(b)) => size("--batch-bytes", b)? / batch_size as f64,
        (None, None) => 0.0,
    };
    let (pinned, pageable, h2d_from) = copy_bandwidth(a, curve)?;
    let (host_memory_bytes, host_memory_from) = match a.host_memory_gb {
        Some(gb) => (
            Some(positive("--host-memory-gb", gb, "GB")? * 1e9),
            "--host-memory-gb".into(),
        ),
        None => match mem_total_bytes() {
            Some(b) => (Some(b), "MemTotal in /proc/meminfo".to_string()),
            None => (None, "unknown (give --host-memory-gb)".to_string()),
        },
    };
    let loader = Loader {
        num_workers: count_in("--num-workers", a.num_workers.unwrap_or(0), 0, 4096)?,
        sample_s,
        cpu_cores,
        ranks_per_node,
        pin_memory: a.pin_memory,
        prefetch_factor: count_in("--prefetch-factor", a.prefetch_factor, 1, 1024)?,
        persistent_workers: a.persistent_workers,
        sample_bytes,
        pinned_bytes_per_s: pinned,
        pageable_bytes_per_s: pageable,
        dataset_bytes: a
            .dataset_gb
            .map(|gb| positive("--dataset-gb", gb, "GB").map(|g| g * 1e9))
            .transpose()?,
        host_memory_bytes,
    };
    let choices = match &a.batch_sizes {
        Some(text) => batch_choices(text)?,
        None => Vec::new(),
    };
    Ok(Some(Built {
        loader,
        sources: Sources {
            cpu_cores_from,
            ranks_per_node_from,
            h2d_from,
            host_memory_from,
        },
        choices,
        compute_fixed_s: non_negative("--compute-fixed-ms", a.compute_fixed_ms, "milliseconds")?
            * 1e-3,
        compute_fixed_given: a.compute_fixed_ms > 0.0,
    }))
}

fn size(flag: &str, text: &str) -> Result<f64, Failure> {
    crate::units::parse_size(text)
        .map(|b| b as f64)
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
}

/// `B` or `BxK` items.
fn batch_choices(text: &str) -> Result<Vec<BatchChoice>, Failure> {
    let count = |s: &str, most: usize| {
        s.trim()
            .parse::<usize>()
            .ok()
            .filter(|v| (1..=most).contains(v))
    };
    parse_list(
        "--batch-sizes",
        text,
        |item| match item.split_once(['x', 'X', '*']) {
            Some((b, k)) => Some(BatchChoice {
                batch_size: count(b, 1 << 24)?,
                accumulation: Some(count(k, 4096)?),
            }),
            None => Some(BatchChoice {
                batch_size: count(item, 1 << 24)?,
                accumulation: None,
            }),
        },
        "per-GPU batch sizes B or BxK (K: accumulation, 1 to 4096)",
    )
}

/// Pinned and pageable host-to-device bandwidth: `--h2d-gbps` for the mode configured, the
/// slowest GPU of the --curve record's copy probe, else the stated defaults.
fn copy_bandwidth(a: &LoaderArgs, curve: Option<&Path>) -> Result<(f64, f64, String), Failure> {
    let measured = curve.and_then(measured_copy);
    let (mut pinned, mut pageable, mut from) = match measured {
        Some((p, q)) => (
            p,
            q,
            "the --curve record's host-to-device copy probe (slowest GPU)".to_string(),
        ),
        None => (
            PINNED_DEFAULT_BYTES_PER_S,
            PAGEABLE_DEFAULT_BYTES_PER_S,
            "stated defaults: 20 GB/s pinned, 6 GB/s pageable (PCIe 4.0 x16)".to_string(),
        ),
    };
    if let Some(gbps) = a.h2d_gbps {
        let given = positive("--h2d-gbps", gbps, "GB/s")? * 1e9;
        if a.pin_memory {
            pinned = given;
        } else {
            pageable = given;
        }
        from = format!(
            "--h2d-gbps for {}; the other from {from}",
            if a.pin_memory { "pinned" } else { "pageable" }
        );
    }
    Ok((pinned, pageable, from))
}

/// (pinned, pageable) host-to-device bytes/s of the slowest GPU a record's probe measured.
fn measured_copy(path: &Path) -> Option<(f64, f64)> {
    let bytes = std::fs::read(path).ok()?;
    if !bytes.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let record: RunRecord =
        crate::documents::read::read(&path.display().to_string(), &bytes).ok()?;
    let slowest = |pinned: bool| {
        record
            .calibration
            .copy_bandwidth
            .iter()
            .filter(|c| {
                c.direction == "host-to-device" && c.pinned == pinned && c.bytes_per_s > 0.0
            })
            .map(|c| c.bytes_per_s)
            .min_by(f64::total_cmp)
    };
    Some((slowest(true)?, slowest(false)?))
}

fn mem_total_bytes() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib * 1024.0)
}
