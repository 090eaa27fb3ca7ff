//! The input pipeline, from what users paste: host memory under pressure, DataLoader workers
//! beyond the CPUs they share, and GPUs that wait for data (low utilisation, memory to spare,
//! and a loader or host that explains it).

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::{Evidence, Hit, Severity};
use crate::diagnose::rules::{host, links, placement};
use crate::import::pastes::{GpuSample, HostMemory};
use std::collections::BTreeMap;

/// RAM in use (without the page cache) from which the host is short of memory. Above it the
/// kernel reclaims hot file pages and swaps; forked DataLoader workers (each touching its
/// copy-on-write copy of the dataset) and pinned batches need the headroom. seeds/001 sat at
/// 94%.
const RAM_PRESSURE: f64 = 0.90;
/// Swap counts as pressure only beside RAM this full, and from this share of the swap: a
/// little swap with RAM to spare is pages pushed out long ago, which cost nothing now (free
/// shows what sits in swap, not the traffic).
const SWAP_RAM_FLOOR: f64 = 0.75;
const SWAP_USED: f64 = 0.10;
/// GPU utilisation (the share of time a kernel ran) below which a training GPU waits for
/// something: a compute-bound step keeps it above 90%, and one that loses half its time is
/// worth a look at the loader.
const LOW_UTIL_PCT: f64 = 50.0;
/// Memory below this share of the GPU is "far from full": room for a larger batch, and no
/// sign that the GPU waits on offloaded weights or the allocator instead.
const ROOM_FRACTION: f64 = 0.75;
/// A GPU with less memory in use holds no training process (a CUDA context alone is
/// 300-500 MiB): an idle GPU is not a starved one.
const IN_USE_MIB: f64 = 256.0;

/// Why one `free` output shows pressure, or none.
fn pressure(m: &HostMemory) -> Option<String> {
    let ram = m.used_fraction();
    let swap = m.swap_used_fraction().unwrap_or(0.0);
    let ram_text = format!("host RAM {:.0}% in use", ram * 100.0);
    if ram >= RAM_PRESSURE && swap >= SWAP_USED {
        Some(format!("{ram_text}, swap {:.0}% used", swap * 100.0))
    } else if ram >= RAM_PRESSURE {
        Some(ram_text)
    } else if ram >= SWAP_RAM_FLOOR && swap >= SWAP_USED {
        Some(format!("{ram_text} and swap {:.0}% used", swap * 100.0))
    } else {
        None
    }
}

pub fn memory_pressure(inp: &Inputs) -> Vec<Hit> {
    inp.pastes
        .iter()
        .flat_map(|p| &p.memory)
        .filter_map(|m| pressure(m).map(|why| (why, m)))
        .take(1)
        .map(|(why, m)| {
            Hit::new(
                format!("{why}: the host is short of memory"),
                m.evidence.clone(),
            )
        })
        .collect()
}

/// The workers the inputs say run per rank, the ranks per node, and the CPUs they share, with
/// the lines; none when the inputs do not say that workers outnumber CPUs.
fn oversubscription(inp: &Inputs) -> Option<(String, Vec<Evidence>)> {
    let ranks = inp.local_ranks();
    let warned_ranks = warned_ranks(inp);
    let (rank_count, ranks_text, mut evidence) = match ranks {
        Some(r) => (
            r.value.max(1),
            format!(" × {} local ranks", r.value),
            vec![r.evidence.clone()],
        ),
        None if warned_ranks.len() > 1 => (
            warned_ranks.len() as u32,
            format!(" × {} local ranks (each warned)", warned_ranks.len()),
            warned_ranks.values().skip(1).cloned().collect(),
        ),
        None => (1, String::new(), Vec::new()),
    };
    // The warning counts the CPUs the warning process could use; `nproc` pasted beside it
    // (a container's quota, another shell) may say fewer: the smaller one is the budget.
    let cores = inp.cores();
    let warned = inp
        .pastes
        .iter()
        .flat_map(|p| &p.worker_warnings)
        .filter_map(|w| w.suggested_max.map(|m| (w, m)))
        .map(|(w, m)| (w, m, cores.filter(|c| c.value < m)))
        .find(|(w, m, fewer)| w.workers * rank_count > fewer.map_or(*m, |c| c.value));
    if let Some((w, suggested, fewer)) = warned {
        evidence.splice(0..0, w.evidence.iter().cloned());
        let cpus_text = match fewer {
            Some(c) => {
                evidence.push(c.evidence.clone());
                format!(
                    "on {} CPUs (nproc; PyTorch suggests at most {suggested}, the CPUs the warning process could use)",
                    c.value
                )
            }
            None => {
                format!("where PyTorch suggests at most {suggested} (the CPUs the process may use)")
            }
        };
        let cpus = fewer.map_or(suggested, |c| c.value);
        let budget = (cpus / rank_count).max(1);
        return Some((
            format!(
                "DataLoader workers oversubscribe the CPUs: {} worker processes per rank{ranks_text} {cpus_text}; at most {budget} per rank fit",
                w.workers
            ),
            evidence,
        ));
    }
    let (workers, cores) = (inp.num_workers()?, cores?);
    if workers.value * rank_count <= cores.value {
        return None;
    }
    evidence.insert(0, workers.evidence.clone());
    evidence.push(cores.evidence.clone());
    Some((
        format!(
            "DataLoader workers oversubscribe the CPUs: num_workers {}{ranks_text} = {} worker processes on {} CPUs; at most {} per rank fit",
            workers.value,
            workers.value * rank_count,
            cores.value,
            (cores.value / rank_count).max(1)
        ),
        evidence,
    ))
}

/// The ranks whose loaders warned, told apart by their launcher prefixes, each with its first
/// warning: every local rank runs a loader of its own on the same CPUs.
fn warned_ranks(inp: &Inputs) -> BTreeMap<u32, Evidence> {
    let mut ranks = BTreeMap::new();
    for w in inp.pastes.iter().flat_map(|p| &p.worker_warnings) {
        if let (Some(rank), Some(e)) = (w.rank, w.evidence.first()) {
            ranks.entry(rank).or_insert_with(|| e.clone());
        }
    }
    ranks
}

pub fn oversubscribed(inp: &Inputs) -> Vec<Hit> {
    oversubscription(inp)
        .map(|(title, evidence)| Hit::new(title, evidence))
        .into_iter()
        .collect()
}

/// Per GPU: its mean utilisation over the samples, its last memory reading, and its rows.
struct Gpu<'a> {
    util_pct: Option<f64>,
    samples: Vec<&'a GpuSample>,
}

fn per_gpu(inp: &Inputs) -> BTreeMap<(usize, u32), Gpu<'_>> {
    let mut gpus: BTreeMap<(usize, u32), Gpu> = BTreeMap::new();
    // GPU indices are per input: two files may show two machines.
    for (i, p) in inp.pastes.iter().enumerate() {
        for s in &p.gpus {
            let g = gpus.entry((i, s.gpu)).or_insert(Gpu {
                util_pct: None,
                samples: Vec::new(),
            });
            g.samples.push(s);
        }
    }
    for g in gpus.values_mut() {
        let utils: Vec<f64> = g.samples.iter().filter_map(|s| s.util_pct).collect();
        g.util_pct = (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64);
    }
    gpus
}

impl Gpu<'_> {
    fn memory(&self) -> (Option<f64>, Option<f64>) {
        let last = self
            .samples
            .iter()
            .rev()
            .find(|s| s.memory_used_mib.is_some());
        (
            last.and_then(|s| s.memory_used_mib),
            last.and_then(|s| s.memory_total_mib),
        )
    }

    /// Something runs on it: memory beyond a bare context, or (dmon without `fb`) unknown;
    /// not when its table lists no process and it ran no kernel (a GPU that computes has a
    /// process, even one a container's nvidia-smi cannot list).
    fn in_use(&self) -> bool {
        let idle = self
            .samples
            .iter()
            .any(|s| s.no_process_listed && s.util_pct == Some(0.0));
        !idle && self.memory().0.is_none_or(|used| used >= IN_USE_MIB)
    }

    fn waiting(&self) -> bool {
        let room = match self.memory() {
            (Some(used), Some(total)) if total > 0.0 => used / total < ROOM_FRACTION,
            _ => true,
        };
        self.util_pct.is_some_and(|u| u < LOW_UTIL_PCT) && room
    }
}

/// Findings about communication that would keep a GPU idle as surely as a slow loader.
fn communication_explains(inp: &Inputs) -> bool {
    [
        links::socket_intranode,
        links::socket_internode,
        links::p2p_unavailable,
        placement::wsl2,
        placement::process_on_multiple_gpus,
        host::watchdog_timeout,
        host::nccl_error,
    ]
    .iter()
    .any(|check| !check(inp).is_empty())
}

/// Every GPU that runs something waits (low utilisation, memory to spare). With the loader
/// or the host to blame it is a warning; with nothing in the inputs to explain it, loading is
/// still the usual cause and it is said as info; a communication finding that explains it
/// takes its place. A busy GPU among them means the job is not starved of data.
pub fn starved(inp: &Inputs) -> Vec<Hit> {
    let gpus = per_gpu(inp);
    let used: Vec<&Gpu> = gpus.values().filter(|g| g.in_use()).collect();
    if used.is_empty() || !used.iter().all(|g| g.waiting()) {
        return Vec::new();
    }
    let mut causes: Vec<String> = Vec::new();
    let mut evidence: Vec<Evidence> = used
        .iter()
        .flat_map(|g| g.samples.iter().take(2).map(|s| s.evidence.clone()))
        .take(8)
        .collect();
    if let Some(hit) = memory_pressure(inp).into_iter().next() {
        causes.push(hit.title.replace(": the host is short of memory", ""));
        evidence.extend(hit.evidence);
    }
    if let Some((_, lines)) = oversubscription(inp) {
        causes.push("DataLoader workers oversubscribe the CPUs".into());
        evidence.extend(lines);
    } else if let Some(w) = inp.num_workers().filter(|w| w.value == 0) {
        causes.push("num_workers 0 loads every batch in the training process".into());
        evidence.push(w.evidence.clone());
    }
    if causes.is_empty() && communication_explains(inp) {
        return Vec::new();
    }
    let utils: Vec<String> = used
        .iter()
        .filter_map(|g| Some(format!("{:.0}%", g.util_pct?)))
        .collect();
    let memory: Vec<String> = used
        .iter()
        .filter_map(|g| match g.memory() {
            (Some(u), Some(t)) if t > 0.0 => Some(format!("{:.0}%", 100.0 * u / t)),
            _ => None,
        })
        .collect();
    let memory_text = if memory.is_empty() {
        String::new()
    } else {
        format!(" with memory {} used", memory.join(", "))
    };
    let head = format!(
        "GPU utilisation {}{memory_text}: the GPUs wait for data",
        utils.join(", ")
    );
    evidence.dedup();
    if causes.is_empty() {
        let title = format!("{head} (nothing else in the inputs explains the idle time)");
        return vec![Hit::new(title, evidence).with_severity(Severity::Info)];
    }
    vec![Hit::new(format!("{head}; {}", causes.join("; ")), evidence)]
}

/// Reserved-but-unallocated memory from which fragmentation is worth naming: PyTorch's own
/// message suggests expandable_segments then.
const FRAGMENTED_FRACTION: f64 = 0.05;

fn gib(bytes: f64) -> String {
    if bytes >= 1024f64.powi(3) {
        format!("{:.2} GiB", bytes / 1024f64.powi(3))
    } else {
        format!("{:.0} MiB", bytes / 1024f64.powi(2))
    }
}

/// PyTorch's CUDA out-of-memory error, with what it says of the GPU's memory.
pub fn gpu_out_of_memory(inp: &Inputs) -> Vec<Hit> {
    let Some(oom) = inp.pastes.iter().find_map(|p| p.first_oom()) else {
        return Vec::new();
    };
    let gpu = oom.gpu.map_or(String::new(), |g| format!(" on GPU {g}"));
    let mut title = format!(
        "CUDA out of memory{gpu}: tried to allocate {}",
        gib(oom.tried_bytes)
    );
    if let (Some(free), Some(total)) = (oom.free_bytes, oom.total_bytes) {
        title += &format!(" with {} free of {}", gib(free), gib(total));
    }
    let total = oom.total_bytes.unwrap_or(f64::INFINITY);
    if let Some(r) = oom
        .reserved_unallocated_bytes
        .filter(|r| *r >= oom.tried_bytes || *r >= FRAGMENTED_FRACTION * total)
    {
        title += &format!(
            "; {} reserved but unallocated (fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
            gib(r)
        );
    }
    vec![Hit::new(title, vec![oom.evidence.clone()])]
}

#[cfg(test)]
#[path = "loader_tests.rs"]
mod tests;
