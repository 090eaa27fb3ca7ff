//! `simulate ddp`'s input pipeline flags turned into the loader model: each value checked,
//! and what the flags leave out read from this machine (cores, MemTotal) or from the --curve
//! record's host-to-device copy probe, with where each came from said in the document.

use crate::analysis::loader::{Loader, PAGEABLE_DEFAULT_BYTES_PER_S, PINNED_DEFAULT_BYTES_PER_S};
use crate::analysis::loader_plan::{BatchChoice, Sources};
use crate::cli::LoaderArgs;
use crate::exit::Failure;
use crate::flags::{count_in, parse_list, positive_at_most};
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

/// The largest time a loader flag takes, in ms (under three hours: anything longer is a typo).
const MAX_MS: f64 = 1e7;
/// The largest memory or dataset, in GB (a petabyte).
const MAX_GB: f64 = 1e6;
/// The largest host-to-device bandwidth, in GB/s.
const MAX_GBPS: f64 = 1e4;
/// The largest sample or batch copied to the GPU, in bytes (a terabyte).
const MAX_COPY_BYTES: f64 = 1e12;

/// PyTorch's DataLoader refuses these with num_workers=0 (torch/utils/data/dataloader.py,
/// `DataLoader.__init__`); the messages quote its ValueError.
fn pytorch_rules(a: &LoaderArgs, num_workers: usize) -> Result<(), Failure> {
    if num_workers > 0 {
        return Ok(());
    }
    if a.prefetch_factor.is_some() {
        return Err(Failure::usage(
            "--prefetch-factor needs --num-workers above 0: PyTorch's DataLoader raises ValueError(\"prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.\")",
        ));
    }
    if a.persistent_workers {
        return Err(Failure::usage(
            "--persistent-workers needs --num-workers above 0: PyTorch's DataLoader raises ValueError(\"persistent_workers option needs num_workers > 0\")",
        ));
    }
    Ok(())
}

/// The part of a micro-step's compute that does not grow with the batch: below the forward
/// and backward it is part of (else nothing would scale, and a larger batch would be free).
fn compute_fixed(a: &LoaderArgs, micro_compute_s: f64) -> Result<f64, Failure> {
    let fixed_ms = a.compute_fixed_ms;
    if fixed_ms == 0.0 {
        return Ok(0.0);
    }
    let fixed_ms = positive_at_most("--compute-fixed-ms", fixed_ms, "milliseconds", MAX_MS)?;
    let micro_ms = micro_compute_s * 1e3;
    if fixed_ms >= micro_ms {
        return Err(Failure::usage(format!(
            "--compute-fixed-ms: {} ms must be less than one micro-step's forward and backward ({} ms: --compute-ms less --optimizer-ms, or --forward-ms plus --backward-ms), of which it is the part that does not grow with the batch",
            crate::units::plain(fixed_ms),
            crate::units::plain(micro_ms)
        )));
    }
    Ok(fixed_ms * 1e-3)
}

/// The loader, or `None` when no data time was given (and no other loader flag either).
pub fn build(
    a: &LoaderArgs,
    world_size: usize,
    batch_size: usize,
    micro_compute_s: f64,
    curve: Option<&Path>,
) -> Result<Option<Built>, Failure> {
    let ms = |flag: &str, v: f64| positive_at_most(flag, v, "milliseconds", MAX_MS);
    let sample_s = match (a.data_ms, a.sample_ms) {
        (Some(v), _) => ms("--data-ms", v)? * 1e-3 / batch_size as f64,
        (None, Some(v)) => ms("--sample-ms", v)? * 1e-3,
        (None, None) if a.beyond_data_time() => {
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
    let num_workers =
        match a.num_workers_list().map_err(Failure::usage)?.as_slice() {
            [] => 0,
            [n] => count_in("--num-workers", *n, 0, 4096)?,
            _ => return Err(Failure::usage(
                "--num-workers: one value here (`simulate ddp` takes a list and simulates each)",
            )),
        };
    pytorch_rules(a, num_workers)?;
    let sample_bytes = match (&a.sample_bytes, &a.batch_bytes) {
        (Some(s), _) => size("--sample-bytes", s)?,
        (None, Some(b)) => size("--batch-bytes", b)? / batch_size as f64,
        (None, None) => 0.0,
    };
    let (pinned, pageable, h2d_from) = copy_bandwidth(a, curve)?;
    let (host_memory_bytes, host_memory_from) = match a.host_memory_gb {
        Some(gb) => (
            Some(positive_at_most("--host-memory-gb", gb, "GB", MAX_GB)? * 1e9),
            "--host-memory-gb".into(),
        ),
        None => match mem_total_bytes() {
            Some(b) => (Some(b), "MemTotal in /proc/meminfo".to_string()),
            None => (None, "unknown (give --host-memory-gb)".to_string()),
        },
    };
    let loader = Loader {
        num_workers,
        sample_s,
        cpu_cores,
        ranks_per_node,
        pin_memory: a.pin_memory,
        prefetch_factor: count_in("--prefetch-factor", a.prefetch_factor.unwrap_or(2), 1, 1024)?,
        persistent_workers: a.persistent_workers,
        sample_bytes,
        pinned_bytes_per_s: pinned,
        pageable_bytes_per_s: pageable,
        dataset_bytes: a
            .dataset_gb
            .map(|gb| positive_at_most("--dataset-gb", gb, "GB", MAX_GB).map(|g| g * 1e9))
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
        compute_fixed_s: compute_fixed(a, micro_compute_s)?,
        compute_fixed_given: a.compute_fixed_ms > 0.0,
    }))
}

/// A size copied to the GPU: above zero (0 bytes would model no copy while claiming one)
/// and at most a terabyte.
fn size(flag: &str, text: &str) -> Result<f64, Failure> {
    let bytes = crate::units::parse_size(text)
        .map(|b| b as f64)
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))?;
    if bytes > 0.0 && bytes <= MAX_COPY_BYTES {
        Ok(bytes)
    } else {
        Err(Failure::usage(format!(
            "{flag}: must be from 1 byte to 1T, got {text}"
        )))
    }
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
        let given = positive_at_most("--h2d-gbps", gbps, "GB/s", MAX_GBPS)? * 1e9;
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
