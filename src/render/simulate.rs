//! Simulations for people (the grid of bucket caps × accumulation, or the sharding
//! strategies, and the advice) and as CSV (one row per configuration or strategy).

use crate::documents::{DdpSimulation, FsdpSimulation};
use crate::units::fixed;
use crate::units::format_size;
use std::fmt::Write;

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
        "# {} GPUs, batch {} per GPU; one GPU: {} ms per step = {} it/s (forward {} ms, backward {} ms, optimizer {} ms)",
        doc.world_size,
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
    let _ = writeln!(
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
    for o in &doc.configurations {
        let _ = writeln!(
            out,
            "{:>8} {:>6} {:>8} {:>8} {:>10} {:>11} {:>8} {:>10} {:>6}",
            crate::units::plain(o.bucket_cap_mb),
            o.accumulation,
            no_sync_cell(o.accumulation, o.no_sync),
            o.bucket_bytes.len(),
            fixed(o.step_time_s * 1e3, 1),
            fixed(o.exposed_comm_s * 1e3, 1),
            fixed(o.iters_per_s, 2),
            fixed(o.samples_per_s, 1),
            fixed(o.scaling_efficiency * 100.0, 0)
        );
    }
    for line in &doc.advice {
        let _ = writeln!(out, "* {line}");
    }
    crate::render::safe::display(&out).into_owned()
}

/// One row per configuration shown, SI units in the column names.
pub fn ddp_csv(doc: &DdpSimulation) -> Result<String, csv::Error> {
    let header = [
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
    let rows = doc.configurations.iter().map(|o| {
        [
            o.bucket_cap_mb.to_string(),
            o.accumulation.to_string(),
            o.no_sync.to_string(),
            o.bucket_bytes.len().to_string(),
            o.step_time_s.to_string(),
            o.exposed_comm_s.to_string(),
            o.comm_s.to_string(),
            o.iters_per_s.to_string(),
            o.samples_per_s.to_string(),
            o.scaling_efficiency.to_string(),
        ]
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
        "# model {}: {} parameters; {} GPUs; link: {}",
        doc.model.name, doc.model.params, doc.world_size, doc.link
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
