//! The changes that make a setup fit, cheapest first: each is applied to the setup and
//! planned again, so its memory and the communication it adds come from the same accounting
//! as the plan's. When no single change fits, pairs of them are tried.

use super::setup::{Estimate, Setup};
use crate::analysis::curve::Curve;
use crate::documents::memory::{Change, Checkpointing, Logits, Offload, Trainable};
use crate::documents::simulation::Strategy;

/// A candidate: the changed setup, the change in words, what it costs, and its rank (lower
/// is cheaper: what changes no result before what changes the training).
struct Candidate {
    setup: Setup,
    change: String,
    cost: String,
    rank: u32,
}

fn candidates(base: &Setup) -> Vec<Candidate> {
    let mut out = Vec::new();
    let mut add = |rank: u32, change: String, cost: &str, f: &dyn Fn(&mut Setup)| {
        let mut setup = base.clone();
        f(&mut setup);
        if setup != *base && setup.invalid().is_none() {
            out.push(Candidate {
                setup,
                change,
                cost: cost.into(),
                rank,
            });
        }
    };
    add(
        0,
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into(),
        "none (less memory stranded by the caching allocator)",
        &|s| s.expandable_segments = true,
    );
    add(1, "--logits fused (a chunked or fused cross entropy)".into(),
        "a loss kernel that never holds the full fp32 logits (e.g. Liger's fused linear cross entropy); same result",
        &|s| s.logits = Logits::Fused);
    if !base.flash_attention {
        add(
            2,
            "--flash-attention".into(),
            "none where the GPU and the model support it; faster",
            &|s| s.flash_attention = true,
        );
        add(
            3,
            "--checkpointing selective".into(),
            "recomputes the attention scores: a few % more compute",
            &|s| s.checkpointing = Checkpointing::Selective,
        );
    }
    add(
        5,
        "--checkpointing full".into(),
        "recomputes every layer's forward in backward: about a third more compute per step",
        &|s| s.checkpointing = Checkpointing::Full,
    );
    let mut mb = base.micro_batch / 2;
    while mb >= 1 {
        let k = base.micro_batch / mb;
        add(4, format!("--micro-batch {mb}"),
            &format!("{k}x the gradient accumulation for the same effective batch; smaller kernels run less efficiently"),
            &|s| s.micro_batch = mb);
        mb /= 2;
    }
    if base.strategy != Strategy::FullShard || base.offload_optimizer == Offload::None {
        add(6, "ZeRO-3 with the optimizer offloaded to CPU".into(),
            "optimizer step on the CPU; host RAM for 16 B per trainable parameter; gradients and weights cross PCIe every step",
            &|s| {
                s.strategy = Strategy::FullShard;
                s.offload_optimizer = Offload::Cpu;
            });
    }
    add(
        7,
        "ZeRO-3 with the optimizer and the parameters offloaded to CPU".into(),
        "as optimizer offload, and every weight crosses PCIe twice per step: the slowest setup",
        &|s| {
            s.strategy = Strategy::FullShard;
            s.offload_optimizer = Offload::Cpu;
            s.offload_params = Offload::Cpu;
        },
    );
    if matches!(base.trainable, Trainable::Full) {
        for (rank, modules) in [(8, "q,v"), (16, "q,k,v,o"), (64, "q,k,v,o,gate,up,down")] {
            let list: Vec<String> = modules.split(',').map(String::from).collect();
            let adapters = base.shape.lora_params(rank, &list);
            add(8, format!("--lora-rank {rank} --lora-modules {modules}"),
                &format!("trains {adapters} adapter parameters instead of the whole model: fine-tuning quality can differ"),
                &|s| s.trainable = Trainable::Lora { rank, modules: list.clone() });
            // LoRA's usual setup: no sharding or offload left to pay for.
            add(8, format!("--lora-rank {rank} --lora-modules {modules} without ZeRO or offload"),
                &format!("trains {adapters} adapter parameters; no offload traffic; fine-tuning quality can differ"),
                &|s| {
                    s.trainable = Trainable::Lora { rank, modules: list.clone() };
                    s.strategy = Strategy::NoShard;
                    s.offload_optimizer = Offload::None;
                    s.offload_params = Offload::None;
                });
        }
    }
    let mut seq = base.seq_len / 2;
    while seq >= 128 {
        add(
            9,
            format!("--seq-len {seq}"),
            &format!(
                "trains on {seq} tokens instead of {}: longer samples truncated or split",
                base.seq_len
            ),
            &|s| s.seq_len = seq,
        );
        seq /= 2;
    }
    out
}

fn fits(e: &Estimate) -> bool {
    e.gpu.fits() != Some(false) && e.host.fits() != Some(false)
}

fn judged(c: &Candidate, base: &Estimate, curve: Option<&Curve>) -> (Change, u32) {
    let e = c.setup.estimate(curve);
    let change = Change {
        change: c.change.clone(),
        cost: c.cost.clone(),
        gpu_total_bytes: e.gpu.total_bytes,
        gpu_headroom_bytes: e.gpu.headroom_bytes,
        host_headroom_bytes: e.host.headroom_bytes,
        host_total_bytes: e.host.total_bytes,
        fits: fits(&e),
        added_bus_bytes_per_gpu: e.traffic.bus_bytes_per_gpu - base.traffic.bus_bytes_per_gpu,
        added_host_device_bytes_per_gpu: e.traffic.host_device_bytes_per_gpu
            - base.traffic.host_device_bytes_per_gpu,
        added_comm_s: e
            .traffic
            .comm_s
            .zip(base.traffic.comm_s)
            .map(|(a, b)| a - b),
    };
    (change, c.rank)
}

/// The changes, those that fit first (cheapest first; of one kind, the least drastic), then
/// the rest by how close they come. A setup that fits gets no changes.
pub fn changes(base: &Setup, estimate: &Estimate, curve: Option<&Curve>) -> Vec<Change> {
    if fits(estimate) {
        return Vec::new();
    }
    let singles = candidates(base);
    let mut judged_all: Vec<(Change, u32)> =
        singles.iter().map(|c| judged(c, estimate, curve)).collect();
    if !judged_all.iter().any(|(c, _)| c.fits) {
        // Pairs: the first change, then each other kind of change on top of it.
        for first in &singles {
            for second in candidates(&first.setup) {
                if second.rank <= first.rank {
                    continue;
                }
                let pair = Candidate {
                    change: format!("{} + {}", first.change, second.change),
                    cost: format!("{}; {}", first.cost, second.cost),
                    rank: first.rank.max(second.rank) * 10 + first.rank.min(second.rank),
                    setup: second.setup,
                };
                judged_all.push(judged(&pair, estimate, curve));
            }
        }
    }
    let headroom = |c: &Change| c.gpu_headroom_bytes.unwrap_or(f64::INFINITY);
    judged_all.sort_by(|(a, ra), (b, rb)| {
        b.fits
            .cmp(&a.fits)
            .then_with(|| {
                if a.fits {
                    ra.cmp(rb)
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            // Fitting: the least drastic of a kind (least headroom); not: the closest.
            .then_with(|| {
                if a.fits {
                    headroom(a).total_cmp(&headroom(b))
                } else {
                    headroom(b).total_cmp(&headroom(a))
                }
            })
    });
    // Of the changes that fit, one per kind (the cheapest of its kind), so the list reads as
    // a ranking of different remedies; those that do not fit, the closest few.
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut misses = 0;
    for (c, rank) in judged_all {
        if c.fits {
            if seen.insert(rank) {
                out.push(c);
            }
        } else if misses < 3 {
            misses += 1;
            out.push(c);
        }
    }
    out
}
