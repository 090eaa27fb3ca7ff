//! A memory plan for people (the verdict first, the largest terms, the changes that fit,
//! ranked) and as CSV (one row per term and per change).

use crate::documents::memory::{Budget, Change, MemoryPlan, Observed, Trainable};
use crate::units::size_text;
use std::fmt::Write;

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes in GiB, two decimals.
pub fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / GIB)
}

/// A signed size: what a change adds (+) or removes (-).
pub fn signed(bytes: f64) -> String {
    if bytes.abs() < 0.5 {
        "0".into()
    } else {
        let sign = if bytes > 0.0 { "+" } else { "-" };
        format!("{sign}{}", crate::units::format_size(bytes.abs() as u64))
    }
}

/// "fits, 1.20 GiB to spare" / "does NOT fit: 0.48 GiB short" / "capacity unknown".
pub fn verdict(budget: &Budget) -> String {
    match (budget.headroom_bytes, &budget.capacity_bytes) {
        (Some(h), Some(c)) if h >= 0.0 => format!(
            "fits: {} of {}, {} to spare",
            gib(budget.total_bytes),
            gib(*c),
            gib(h)
        ),
        (Some(h), Some(c)) => format!(
            "does NOT fit: {} needed, {} there, {} short",
            gib(budget.total_bytes),
            gib(*c),
            gib(-h)
        ),
        _ => format!("{} needed (capacity unknown)", gib(budget.total_bytes)),
    }
}

fn budget_lines(out: &mut String, title: &str, b: &Budget) {
    let source = b
        .capacity_source
        .as_deref()
        .map(|s| format!(" (capacity: {s})"))
        .unwrap_or_default();
    let _ = writeln!(out, "{title}: {}{source}", verdict(b));
    for t in &b.terms {
        let _ = writeln!(out, "  {:>11}  {:<28} {}", gib(t.bytes), t.name, t.basis);
    }
}

/// Which parameters train, in words: "full fine-tune", "LoRA r=8 on q,v".
pub fn trainable(t: &Trainable) -> String {
    match t {
        Trainable::Full => "full fine-tune".to_string(),
        Trainable::Lora { rank, modules } => format!("LoRA r={rank} on {}", modules.join(",")),
        Trainable::Params { params } => format!("{params} trainable parameters"),
    }
}

/// The plan's answer in one line, first on the screen: what does not fit and by how much, or
/// that everything fits, or that nothing could be judged (no capacity known). "GPU: fits"
/// beside a host that is short would be the opposite of the truth.
pub fn answer(doc: &MemoryPlan) -> String {
    let short = |b: &Budget| b.headroom_bytes.filter(|h| *h < 0.0).map(|h| gib(-h));
    let spare = |b: &Budget| b.headroom_bytes.filter(|h| *h >= 0.0).map(gib);
    match (short(&doc.gpu), short(&doc.host)) {
        (Some(g), Some(h)) => format!("DOES NOT FIT: the GPU is {g} short and the host (per node) {h}"),
        (Some(g), None) => format!("DOES NOT FIT: the GPU is {g} short"),
        (None, Some(h)) => format!(
            "DOES NOT FIT: the host (per node) is {h} short{}",
            spare(&doc.gpu).map(|g| format!("; the GPU fits, {g} to spare")).unwrap_or_default()
        ),
        (None, None) => match (spare(&doc.gpu), spare(&doc.host)) {
            (Some(g), Some(h)) => format!("FITS: {g} to spare on the GPU, {h} on the host (per node)"),
            (Some(g), None) => format!("FITS on the GPU, {g} to spare (the host's capacity unknown)"),
            _ => "NOT JUDGED: the GPU's capacity is unknown (give --gpu-memory-gb, or --oom with the error)".to_string(),
        },
    }
}

pub fn table(doc: &MemoryPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", answer(doc));
    let (m, s) = (&doc.model, &doc.setup);
    let _ = writeln!(
        out,
        "# model {}: {} parameters ({} trainable), {} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {} ({})",
        m.name, m.params, m.trainable_params, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab, m.source
    );
    let trainable = trainable(&s.trainable);
    let _ = writeln!(
        out,
        "# {} GPU{}, {} per node, {} (offload optimizer: {}, parameters: {}), {} precision, {trainable}; seq {} x micro-batch {}, checkpointing {}, FlashAttention {}, logits {}",
        s.world_size, if s.world_size == 1 { "" } else { "s" }, s.gpus_per_node, s.strategy.name(), s.offload_optimizer.name(), s.offload_params.name(), s.precision.name(),
        s.seq_len, s.micro_batch, s.checkpointing.name(), if s.flash_attention { "on" } else { "off" }, s.logits.name()
    );
    if let Some(o) = &doc.observed {
        observed_lines(&mut out, o, &doc.gpu);
    }
    budget_lines(&mut out, "GPU", &doc.gpu);
    budget_lines(&mut out, "host (per node)", &doc.host);
    let t = &doc.traffic;
    let time = t
        .comm_s
        .map(|s| format!(", {:.1} ms on the link", s * 1e3))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "traffic per GPU per step: {} on the NCCL bus{time}, {} host<->GPU",
        crate::units::format_size(t.bus_bytes_per_gpu as u64),
        crate::units::format_size(t.host_device_bytes_per_gpu as u64)
    );
    if let Some(link) = &doc.link {
        let _ = writeln!(out, "# link: {link}");
    }
    if !doc.changes.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            if doc.changes.iter().any(|c| c.fits) {
                "changes, cheapest that fit first:"
            } else {
                "changes (none fits, alone or in pairs), closest first:"
            }
        );
        for (i, c) in doc.changes.iter().enumerate() {
            let head = shortfall(c);
            let comm = c
                .added_comm_s
                .map(|s| format!(", {:+.1} ms", s * 1e3))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{:>2}. [{}] {}: {head}; NCCL {}{comm}, PCIe {} per step\n      cost: {}",
                i + 1,
                if c.fits { "fits" } else { "still short" },
                c.change,
                signed(c.added_bus_bytes_per_gpu),
                signed(c.added_host_device_bytes_per_gpu),
                c.cost
            );
        }
    }
    for n in &doc.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// The out-of-memory error the plan was held against: how short the failed allocation was,
/// what it was, and how far the step's peak lies beyond it.
fn observed_lines(out: &mut String, o: &Observed, gpu: &Budget) {
    let gpu_name = o.gpu.map_or("the GPU".into(), |g| format!("GPU {g}"));
    let free = o
        .free_bytes
        .map(|f| format!(" with {} free", size_text(f)))
        .unwrap_or_default();
    let short = match o.short_at_failure_bytes {
        Some(s) if s > 0.0 => format!(": {} short at that allocation", size_text(s)),
        Some(_) => ": less than was free, so the free memory was in pieces".into(),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "observed ({}): {gpu_name} failed to allocate {}{free}{short}; the process held {} ({})",
        o.source,
        size_text(o.requested_bytes),
        gib(o.in_use_bytes),
        o.in_use_basis
    );
    let what = o.matched.as_deref().map_or_else(
        || "matches no tensor the model counts; taken as the step's peak".to_string(),
        |m| format!("is {m}"),
    );
    let _ = writeln!(
        out,
        "  the allocation {what}; the model counts {} there: {} unexplained, carried into every figure below",
        gib(o.modelled_before_bytes),
        gib(o.unexplained_bytes)
    );
    if let Some(peak) = to_the_peak(o, gpu) {
        let _ = writeln!(out, "  {peak}");
    }
}

/// Where the failed allocation matched a tensor: how far the step's peak lies beyond it, "from
/// there to the step's peak the model adds 4.53 GiB (the failed allocation included): 4.29 GiB
/// short at the peak".
pub fn to_the_peak(o: &Observed, gpu: &Budget) -> Option<String> {
    o.matched.as_ref()?;
    let beyond = gpu.total_bytes - o.in_use_bytes - o.other_processes_bytes;
    let peak = match gpu.headroom_bytes {
        Some(h) if h < 0.0 => format!(": {} short at the peak", gib(-h)),
        Some(h) => format!(": {} to spare at the peak", gib(h)),
        None => String::new(),
    };
    Some(format!(
        "from there to the step's peak the model adds {} (the failed allocation included){peak}",
        gib(beyond.max(0.0))
    ))
}

/// What a change leaves on the GPU, and on the host where the host is short: "GPU 20.1 GiB
/// (3.5 GiB to spare); host 60.0 GiB needed, 46.6 GiB there, 13.4 GiB short".
pub fn shortfall(c: &Change) -> String {
    let gpu = match c.gpu_headroom_bytes {
        Some(h) if h >= 0.0 => format!("GPU {} ({} to spare)", gib(c.gpu_total_bytes), gib(h)),
        Some(h) => format!(
            "GPU {} needed, {} there, {} short",
            gib(c.gpu_total_bytes),
            gib(c.gpu_total_bytes + h),
            gib(-h)
        ),
        None => format!("GPU {}", gib(c.gpu_total_bytes)),
    };
    match c.host_headroom_bytes {
        Some(h) if h < 0.0 => format!(
            "{gpu}; host {} needed, {} there, {} short",
            gib(c.host_total_bytes),
            gib(c.host_total_bytes + h),
            gib(-h)
        ),
        _ => gpu,
    }
}

/// `section,name,bytes,fits,detail`: the GPU's and host's terms, then the changes.
pub fn csv(doc: &MemoryPlan) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(["section", "name", "bytes", "fits", "detail"]);
    for (section, b) in [("gpu", &doc.gpu), ("host", &doc.host)] {
        let fits = b.fits().map(|f| f.to_string()).unwrap_or_default();
        let _ = w.write_record([
            section,
            "total",
            &format!("{:.0}", b.total_bytes),
            &fits,
            "",
        ]);
        if let (Some(c), Some(h)) = (b.capacity_bytes, b.headroom_bytes) {
            let source = b.capacity_source.clone().unwrap_or_default();
            let _ = w.write_record([section, "capacity", &format!("{c:.0}"), "", &source]);
            let _ = w.write_record([section, "headroom", &format!("{h:.0}"), "", ""]);
        }
        for t in &b.terms {
            let _ = w.write_record([section, &t.name, &format!("{:.0}", t.bytes), "", &t.basis]);
        }
    }
    if let Some(o) = &doc.observed {
        for (name, bytes) in [
            ("requested", Some(o.requested_bytes)),
            ("free", o.free_bytes),
            ("capacity", o.capacity_bytes),
            ("in use", Some(o.in_use_bytes)),
            ("other memory", Some(o.other_processes_bytes)),
            ("modelled before", Some(o.modelled_before_bytes)),
            ("unexplained", Some(o.unexplained_bytes)),
        ] {
            if let Some(bytes) = bytes {
                let _ = w.write_record(["observed", name, &format!("{bytes:.0}"), "", &o.source]);
            }
        }
    }
    for c in &doc.changes {
        let _ = w.write_record([
            "change",
            &c.change,
            &format!("{:.0}", c.gpu_total_bytes),
            &c.fits.to_string(),
            &c.cost,
        ]);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}
