//! Simulations for people (the grid of bucket caps × accumulation, or the sharding
//! strategies, and the advice) and as CSV (one row per configuration or strategy).

use crate::documents::simulation::LoaderSummary;
use crate::documents::{DdpSimulation, FsdpSimulation};
use crate::units::fixed;
use crate::units::format_size;
use std::fmt::Write;

fn gpus(n: usize) -> &'static str {
    if n == 1 {
        "GPU"
    } else {
        "GPUs"
    }
}

fn no_sync_cell(accumulation: usize, no_sync: bool) -> &'static str {
    match (accumulation, no_sync) {
        (1, _) => "-",
        (_, true) => "yes",
        (_, false) => "no",
    }
}

pub fn ddp_table(doc: &DdpSimulation) -> String {
    let mut out = String::new();
    let (m, c) = (&doc.model, &doc.compute);
    let _ = writeln!(
        out,
        "# model {}: {} parameters in {} tensors, {} of gradients ({})",
        m.name,
        m.params,
        m.tensors,
        format_size(m.grad_bytes),
        m.source
    );
    let _ = writeln!(out, "# link: {}", doc.link);
    if doc.overlap_slowdown > 0.0 {
        let _ = writeln!(
            out,
            "# backward slows by {:.0}% of the communication time that overlaps it (--overlap-slowdown)",
            doc.overlap_slowdown * 100.0
        );
    }
    let _ = writeln!(
        out,
        "# {} {}, batch {} per GPU; one GPU: {} ms per step = {} it/s (forward {} ms, backward {} ms, optimizer {} ms)",
        doc.world_size,
        gpus(doc.world_size),
        doc.batch_size,
        fixed(c.step_s() * 1e3, 1),
        fixed(doc.one_gpu.iters_per_s, 2),
        fixed(c.forward_s * 1e3, 1),
        fixed(c.backward_s * 1e3, 1),
        fixed(c.optimizer_s * 1e3, 1)
    );
    let _ = writeln!(
        out,
        "# first iteration (one bucket, no overlap): {} ms",
        fixed(doc.first_iteration_s * 1e3, 1)
    );
    if let Some(l) = &doc.loader {
        loader_header(&mut out, l, doc.batch_size);
    }
    let loaded = doc.loader.is_some();
    let _ = write!(
        out,
        "{:>8} {:>6} {:>8} {:>8} {:>10} {:>11} {:>8} {:>10} {:>6}",
        "cap_MiB",
        "accum",
        "no_sync",
        "buckets",
        "step_ms",
        "exposed_ms",
        "it/s",
        "samples/s",
        "eff%"
    );
    if loaded {
        let _ = write!(out, " {:>9} {:>8}", "data_ms", "bound");
    }
    out.push('\n');
    for o in &doc.configurations {
        // With the loader, the step and the rates are the whole step's; exposed_ms and eff%
        // stay the communication's.
        let (step, iters, samples) = match &o.loader {
            Some(l) => (
                l.step_time_s,
                o.accumulation as f64 / l.step_time_s,
                l.samples_per_s,
            ),
            None => (o.step_time_s, o.iters_per_s, o.samples_per_s),
        };
        let _ = write!(
            out,
            "{:>8} {:>6} {:>8} {:>8} {:>10} {:>11} {:>8} {:>10} {:>6}",
            crate::units::plain(o.bucket_cap_mb),
            o.accumulation,
            no_sync_cell(o.accumulation, o.no_sync),
            o.bucket_bytes.len(),
            fixed(step * 1e3, 1),
            fixed(o.exposed_comm_s * 1e3, 1),
            fixed(iters, 2),
            fixed(samples, 1),
            fixed(o.scaling_efficiency * 100.0, 0)
        );
        if let Some(l) = &o.loader {
            let _ = write!(
                out,
                " {:>9} {:>8}",
                fixed(l.data_interval_s * 1e3, 1),
                l.bound_by.name()
            );
        }
        out.push('\n');
    }
    if let Some(l) = &doc.loader {
        loader_advice(&mut out, l);
        if !doc.advice.is_empty() {
            out.push_str("# communication alone (without the input pipeline):\n");
        }
    }
    for line in &doc.advice {
        let _ = writeln!(
            out,
            "{}",
            crate::term::wrap_to_terminal(&format!("* {line}"), "  ")
        );
    }
    crate::render::safe::display(&out).into_owned()
}

/// How the loader was configured, each machine figure with where it came from.
fn loader_header(out: &mut String, l: &LoaderSummary, batch_size: usize) {
    let _ = writeln!(
        out,
        "# input pipeline: num_workers={} per rank, {} {} per node ({}), {} {} ({}); pin_memory={}, prefetch_factor={}, persistent_workers={}",
        l.num_workers,
        l.ranks_per_node,
        if l.ranks_per_node == 1 { "rank" } else { "ranks" },
        l.ranks_per_node_from,
        l.cpu_cores,
        if l.cpu_cores == 1 { "core" } else { "cores" },
        l.cpu_cores_from,
        py_bool(l.pin_memory),
        l.prefetch_factor,
        py_bool(l.persistent_workers)
    );
    let copy = if l.batch_bytes > 0.0 {
        let bw = if l.pin_memory {
            l.h2d_pinned_bytes_per_s
        } else {
            l.h2d_pageable_bytes_per_s
        };
        format!(
            "; copy of {} per batch at {} GB/s {} ({}): {} ms",
            format_size(l.batch_bytes as u64),
            fixed(bw / 1e9, 1),
            if l.pin_memory { "pinned" } else { "pageable" },
            l.h2d_from,
            fixed(l.batch_bytes / bw * 1e3, 1)
        )
    } else {
        "; no copy modelled (give --sample-bytes or --batch-bytes)".to_string()
    };
    let _ = writeln!(
        out,
        "# one worker: {} ms per batch of {batch_size}{copy}",
        fixed(l.sample_s * batch_size as f64 * 1e3, 1)
    );
    out.push_str("# step_ms, it/s and samples/s include loading; exposed_ms and eff% are the communication's; data_ms: time between batches a rank receives\n");
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// The loader's verdict, its advice, and the per-GPU batches tried.
fn loader_advice(out: &mut String, l: &LoaderSummary) {
    let bullet =
        |text: &str| crate::term::wrap_to_terminal(&format!("* {text}"), "  ").into_owned();
    let _ = writeln!(out, "{}", bullet(&l.verdict));
    for line in &l.advice {
        let _ = writeln!(out, "{}", bullet(line));
    }
    if l.batch_options.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{:>8} {:>6} {:>10} {:>10} {:>10} {:>8} {:>15} {:>18}",
        "batch",
        "accum",
        "effective",
        "step_ms",
        "samples/s",
        "bound",
        "advised_workers",
        "advised_samples/s"
    );
    for o in &l.batch_options {
        let _ = writeln!(
            out,
            "{:>8} {:>6} {:>10} {:>10} {:>10} {:>8} {:>15} {:>18}",
            o.batch_size,
            o.accumulation,
            o.effective_batch,
            fixed(o.step.step_time_s * 1e3, 1),
            fixed(o.step.samples_per_s, 1),
            o.step.bound_by.name(),
            o.advised_workers
                .map(|w| w.to_string())
                .unwrap_or_else(|| "-".into()),
            o.advised
                .map(|a| fixed(a.samples_per_s, 1))
                .unwrap_or_else(|| "-".into())
        );
    }
}

/// One row per configuration shown, SI units in the column names. With the input pipeline
/// modelled, step_time_s, iters_per_s and samples_per_s are the whole step's (as in the
/// table), comm_step_time_s keeps the step without loading, and data_interval_s and bound
/// are added; exposed_comm_s, comm_s and scaling_efficiency stay the communication's.
pub fn ddp_csv(doc: &DdpSimulation) -> Result<String, csv::Error> {
    let mut header = vec![
        "bucket_cap_mb",
        "accumulation",
        "no_sync",
        "buckets",
        "step_time_s",
        "exposed_comm_s",
        "comm_s",
        "iters_per_s",
        "samples_per_s",
        "scaling_efficiency",
    ];
    let loaded = doc.loader.is_some();
    if loaded {
        header.extend(["comm_step_time_s", "data_interval_s", "bound"]);
    }
    let rows = doc.configurations.iter().map(|o| {
        let (step, iters, samples) = match &o.loader {
            Some(l) => (
                l.step_time_s,
                o.accumulation as f64 / l.step_time_s,
                l.samples_per_s,
            ),
            None => (o.step_time_s, o.iters_per_s, o.samples_per_s),
        };
        let mut row = vec![
            o.bucket_cap_mb.to_string(),
            o.accumulation.to_string(),
            o.no_sync.to_string(),
            o.bucket_bytes.len().to_string(),
            step.to_string(),
            o.exposed_comm_s.to_string(),
            o.comm_s.to_string(),
            iters.to_string(),
            samples.to_string(),
            o.scaling_efficiency.to_string(),
        ];
        if loaded {
            row.push(o.step_time_s.to_string());
            match &o.loader {
                Some(l) => {
                    row.push(l.data_interval_s.to_string());
                    row.push(l.bound_by.name().to_string());
                }
                None => row.extend([String::new(), String::new()]),
            }
        }
        row
    });
    super::csv::table(&header, rows)
}

fn fits_cell(fits: Option<bool>) -> &'static str {
    match fits {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

pub fn fsdp_table(doc: &FsdpSimulation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# model {}: {} parameters; {} {}; link: {}",
        doc.model.name,
        doc.model.params,
        doc.world_size,
        gpus(doc.world_size),
        doc.link
    );
    let _ = writeln!(
        out,
        "{:>24} {:>12} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
        "strategy",
        "bus_GB/gpu",
        "comm_ms",
        "exposed_ms",
        "step_ms",
        "wts_GB",
        "grads_GB",
        "optim_GB",
        "total_GB",
        "fits"
    );
    for row in &doc.strategies {
        let e = &row.estimate;
        let _ = writeln!(
            out,
            "{:>24} {:>12} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
            e.strategy.name(),
            fixed(e.bus_bytes_per_gpu / 1e9, 2),
            fixed(e.comm_s * 1e3, 1),
            fixed(e.exposed_comm_s * 1e3, 1),
            fixed(e.step_time_s * 1e3, 1),
            fixed(e.weights_bytes_per_gpu / 1e9, 2),
            fixed(e.grads_bytes_per_gpu / 1e9, 2),
            fixed(e.optimizer_bytes_per_gpu / 1e9, 2),
            fixed(e.total_bytes_per_gpu / 1e9, 2),
            fits_cell(row.fits)
        );
    }
    out.push_str("* activations are an input (--activations-gb), not modelled; communication volumes per ZeRO §7: DDP and ZeRO-1/2 move 2Ψ, ZeRO-3/FULL_SHARD 3Ψ\n");
    crate::render::safe::display(&out).into_owned()
}

/// One row per strategy; `fits` empty when no GPU memory was given.
pub fn fsdp_csv(doc: &FsdpSimulation) -> Result<String, csv::Error> {
    let header = [
        "strategy",
        "bus_bytes_per_gpu",
        "comm_s",
        "exposed_comm_s",
        "step_time_s",
        "weights_bytes_per_gpu",
        "grads_bytes_per_gpu",
        "optimizer_bytes_per_gpu",
        "total_bytes_per_gpu",
        "fits",
    ];
    let rows = doc.strategies.iter().map(|row| {
        let e = &row.estimate;
        [
            e.strategy.name().to_string(),
            e.bus_bytes_per_gpu.to_string(),
            e.comm_s.to_string(),
            e.exposed_comm_s.to_string(),
            e.step_time_s.to_string(),
            e.weights_bytes_per_gpu.to_string(),
            e.grads_bytes_per_gpu.to_string(),
            e.optimizer_bytes_per_gpu.to_string(),
            e.total_bytes_per_gpu.to_string(),
            row.fits.map(|f| f.to_string()).unwrap_or_default(),
        ]
    });
    super::csv::table(&header, rows)
}
