//! Findings from a training job's own records (`diagnose --from TRACE`): the part its steps
//! lost time to, a collective slower than the link, the rank the others waited for, and the
//! collective a hang stopped at — each with the trace's steps or calls as evidence.

// mutual import with crate::diagnose::rules: these rows are the table's, kept in a file of
// their own beside their checks, and the table chains them.
use super::Rule;
use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::{Evidence, Hit, Severity};
use crate::documents::trace::TraceDocument;

const SRC_TRACE: &str = "ncclprobe trace (the step split as Holistic Trace Analysis counts it, https://github.com/facebookresearch/HolisticTraceAnalysis: kernel-interval unions per step; exposed communication = NCCL kernels with no compute beside them); PyTorch profiler docs, https://pytorch.org/docs/stable/profiler.html";

fn ev(file: &str, text: String) -> Evidence {
    Evidence {
        file: file.to_string(),
        line: 0,
        text,
    }
}

/// The worst steps of a trace, as evidence (at most three).
fn steps_ev(
    file: &str,
    doc: &TraceDocument,
    part: fn(&crate::documents::trace::StepBreakdown) -> f64,
    what: &str,
) -> Vec<Evidence> {
    let mut steps: Vec<_> = doc.steps.iter().collect();
    steps.sort_by(|a, b| part(b).total_cmp(&part(a)));
    steps
        .into_iter()
        .take(3)
        .map(|s| {
            ev(
                file,
                format!(
                    "rank {} step {}: {what} {:.1} ms of a {:.1} ms step",
                    s.rank,
                    s.step,
                    part(s),
                    s.wall_ms
                ),
            )
        })
        .collect()
}

fn by_verdict(
    inp: &Inputs,
    code: &str,
    part: fn(&crate::documents::trace::StepBreakdown) -> f64,
    what: &str,
) -> Vec<Hit> {
    inp.traces
        .iter()
        .filter(|(_, d)| d.verdict.code == code)
        .map(|(file, d)| {
            let mut e = vec![ev(file, d.verdict.summary.clone())];
            e.extend(steps_ev(file, d, part, what));
            Hit::new(format!("{file}: {}", code.replace('-', " ")), e)
        })
        .collect()
}

fn data_bound(inp: &Inputs) -> Vec<Hit> {
    by_verdict(inp, "data-bound", |s| s.loader_wait_ms, "DataLoader wait")
}

fn exposed(inp: &Inputs) -> Vec<Hit> {
    by_verdict(
        inp,
        "communication-exposed",
        |s| s.exposed_comm_ms,
        "exposed communication",
    )
}

fn host_bound(inp: &Inputs) -> Vec<Hit> {
    by_verdict(inp, "host-bound", |s| s.other_idle_ms, "GPU idle")
}

fn slow(inp: &Inputs) -> Vec<Hit> {
    inp.traces
        .iter()
        .flat_map(|(file, d)| {
            let rows: Vec<_> = d.collectives.iter().filter(|c| c.verdict == "slow").collect();
            (!rows.is_empty()).then(|| {
                let e = rows
                    .iter()
                    .map(|c| ev(file, format!("{} of {} on {} ranks: {:.3} ms (fabric) where the link says {:.3} ms, {:.1} GB/s busbw, {} calls", c.collective, crate::units::format_size(c.size_bytes), c.nranks, c.fabric_ms, c.expected_ms.unwrap_or(0.0), c.busbw_gbs, c.count)))
                    .collect();
                Hit::new(format!("{file}: {} collective(s) ran slower than the link given", rows.len()), e)
            })
        })
        .collect()
}

fn straggler(inp: &Inputs) -> Vec<Hit> {
    inp.traces
        .iter()
        .filter_map(|(file, d)| {
            let s = d.straggler.as_ref()?;
            Some(Hit::new(
                format!("{file}: rank {} held the collectives up", s.rank),
                vec![ev(file, format!("rank {} arrived last in {} of {} matched NCCL calls; the others waited a median {:.2} ms for it", s.rank, s.last_in, s.of, s.late_ms))],
            ))
        })
        .collect()
}

fn hang(inp: &Inputs) -> Vec<Hit> {
    inp.traces
        .iter()
        .filter_map(|(file, d)| {
            let h = d.hang.as_ref()?;
            let mut e = vec![ev(file, h.summary.clone())];
            e.extend(
                h.states
                    .iter()
                    .take(16)
                    .map(|s| ev(file, format!("rank {s}"))),
            );
            Some(Hit::new(
                format!(
                    "{file}: hang at {} #{} ({})",
                    h.profiling_name, h.collective_seq_id, h.cause
                ),
                e,
            ))
        })
        .collect()
}

pub static RULES: &[Rule] = &[
    Rule {
        id: "trace.hang",
        severity: Severity::Error,
        explanation: "Flight Recorder dumps of the ranks, matched by process group and collective sequence number, show the first collective not completed everywhere. Ranks that never enqueued it are the ones everybody waits for (the NCCL watchdog times out on the others); ranks that enqueued a different collective, size or dtype under the same number run a different program order; every rank inside it with none finished points at NCCL or the fabric.",
        fix: "For missing ranks, look at what those ranks were doing (py-spy dump of the process, its last log lines, an exception, a data loader stall, a rank-dependent branch). For a mismatch, make every rank call the same collectives in the same order with the same shapes. Stuck in NCCL: rerun with NCCL_DEBUG=INFO and check the links (ncclprobe matrix, ncclprobe diagnose) of the ranks in the group.",
        source: "PyTorch Flight Recorder tutorial (https://docs.pytorch.org/tutorials/prototype/flight_recorder_tutorial.html) and its analyzer torch/distributed/flight_recorder (missing ranks, collective type, size, dtype and state mismatches)",
        check: hang,
    },
    Rule {
        id: "trace.slow-collective",
        severity: Severity::Error,
        explanation: "Matched across every rank's trace, the last rank to arrive waits least, so its kernel time is what the fabric took; that time is well above what the link given (this machine's sweep, or a busbw) says the same collective and size take: the fabric or NCCL's configuration is slow during training, not the overlap.",
        fix: "Measure the link as the job uses it (ncclprobe sweep on the same nodes, the same NCCL environment) and compare; check for another job sharing the fabric, NCCL_ALGO/NCCL_PROTO or NCCL_IB_* settings the job sets, and the links (ncclprobe matrix).",
        source: SRC_TRACE,
        check: slow,
    },
    Rule {
        id: "trace.data-bound",
        severity: Severity::Warning,
        explanation: "The GPU sat idle while the host waited in the DataLoader's __next__: each step starts only when its batch arrives, so the loader, not the GPU or the fabric, sets the step time.",
        fix: "Raise DataLoader num_workers (the what-if says how many keep up), with pin_memory=True and persistent_workers=True; move decoding and augmentation off the training process (DALI, pre-processed shards); `ncclprobe simulate ddp --from-trace TRACE` shows the step without the wait.",
        source: SRC_TRACE,
        check: data_bound,
    },
    Rule {
        id: "trace.exposed-communication",
        severity: Severity::Warning,
        explanation: "NCCL kernels ran with no compute beside them for a notable share of the step: communication added to the step instead of hiding behind backward. Whether the collectives themselves were slow is told apart only with a link given (--curve) and every rank's trace.",
        fix: "Start all-reduces earlier and smaller (DDP bucket_cap_mb; FSDP backward/forward prefetch), accumulate gradients with no_sync() to all-reduce less often, or use a faster link; `ncclprobe simulate ddp --from-trace TRACE` shows what each would give this job.",
        source: SRC_TRACE,
        check: exposed,
    },
    Rule {
        id: "trace.straggler",
        severity: Severity::Warning,
        explanation: "In the NCCL calls matched across the ranks' traces one rank arrived last most of the time: the others' kernels wait for it, so its own delay (slower GPU, more data, host work, a throttled clock) becomes everybody's.",
        fix: "Look at that rank's GPU and host: clocks and throttling (nvidia-smi -q -d PERFORMANCE), its data shard, other processes on its CPUs; compare its compute time per step with the others' in this trace.",
        source: SRC_TRACE,
        check: straggler,
    },
    Rule {
        id: "trace.host-bound",
        severity: Severity::Info,
        explanation: "The GPU sat idle for much of each step for reasons other than the DataLoader: kernel launches slower than the kernels, host-side Python between them, or synchronisations (.item(), .cpu(), cuda.synchronize()) that drain the queue.",
        fix: "Look at the gaps in the trace's GPU timeline; remove host synchronisations from the step, batch small ops (torch.compile, CUDA graphs), and raise the per-GPU batch so each kernel does more.",
        source: SRC_TRACE,
        check: host_bound,
    },
];
