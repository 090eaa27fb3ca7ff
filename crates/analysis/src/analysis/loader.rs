//! The input pipeline in a training step: PyTorch DataLoader workers of every rank on a node
//! sharing its cores, loading in the training process when there are none, the batch's
//! host-to-device copy (pinned or pageable), and the host memory each worker's dataset copy
//! takes. Pure: the command layer reads the machine and hands the numbers in.
//!
//! The rules, each held by a unit test:
//! - Each training process keeps one core busy driving its GPU; workers share the rest.
//!   While more workers are runnable than those cores, each runs slower in proportion (time
//!   slicing) and a further `CONTEXT_SWITCH_PENALTY` per extra runnable process per core
//!   (switches, cold caches and TLBs).
//! - With workers, a rank gets a batch every `batch time × slowdown / workers`. Prefetching
//!   keeps `prefetch_factor × workers` batches in flight; in a steady state that never limits
//!   the rate (Little's law: that many in flight over one batch time each is at least the
//!   workers' own rate), it only absorbs jitter.
//! - With `num_workers=0` the training process loads each batch itself, serially with compute.
//! - A pinned batch is copied with `non_blocking=True` beside compute: only what the copy takes
//!   beyond the micro-step's compute shows. A pageable batch is staged through a bounce buffer
//!   by the CPU and the copy blocks: all of it shows, every micro-step.
//! - A step is data-bound when the loader's batches take longer than compute plus exposed
//!   communication; communication-bound when exposed communication is at least half the
//!   compute; compute-bound otherwise.

pub use crate::documents::simulation::{Bound, LoaderMemory, LoaderStep};

/// Extra slowdown per extra runnable process per core beyond one: what context switches and
/// refilled caches cost a CPU-bound worker that is time-sliced (a documented estimate, not a
/// measurement; 40 workers on 19 free cores run 2.1 × 1.11 slower each).
pub const CONTEXT_SWITCH_PENALTY: f64 = 0.1;
/// Host-to-device bandwidth without a measurement: PCIe 4.0 x16 pinned copies reach about
/// 20-25 GB/s, pageable ones 5-10 GB/s (the CPU stages them through a pinned bounce buffer).
pub const PINNED_DEFAULT_BYTES_PER_S: f64 = 20e9;
pub const PAGEABLE_DEFAULT_BYTES_PER_S: f64 = 6e9;
/// A step is communication-bound when exposed communication is at least this part of compute.
pub const COMM_BOUND_FRACTION: f64 = 0.5;
/// The most workers per rank the advice searches.
pub const MAX_WORKERS: usize = 256;

/// The loader as configured on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Loader {
    pub num_workers: usize,
    /// One worker's time per sample.
    pub sample_s: f64,
    pub cpu_cores: usize,
    pub ranks_per_node: usize,
    pub pin_memory: bool,
    pub prefetch_factor: usize,
    pub persistent_workers: bool,
    /// Bytes of one sample copied to the GPU (0 when unknown: no copy is modelled).
    pub sample_bytes: f64,
    pub pinned_bytes_per_s: f64,
    pub pageable_bytes_per_s: f64,
    pub dataset_bytes: Option<f64>,
    pub host_memory_bytes: Option<f64>,
}

/// What DDP alone gives for one optimizer step (no input pipeline).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DdpStep {
    pub step_s: f64,
    /// Forward, backward and optimizer of the step's micro-steps on one GPU.
    pub compute_s: f64,
    pub exposed_comm_s: f64,
    /// Forward and backward of one micro-step.
    pub micro_compute_s: f64,
    pub accumulation: usize,
    /// Per-GPU micro-batch.
    pub batch_size: usize,
    pub world_size: usize,
}

impl Loader {
    /// The same loader with other workers or pinning (for the advice).
    pub fn with(&self, num_workers: usize, pin_memory: bool) -> Loader {
        Loader {
            num_workers,
            pin_memory,
            ..self.clone()
        }
    }

    /// Cores left to workers: one per training process is taken.
    pub fn worker_cores(&self) -> usize {
        self.cpu_cores.saturating_sub(self.ranks_per_node).max(1)
    }

    pub fn workers_on_node(&self) -> usize {
        self.num_workers.saturating_mul(self.ranks_per_node)
    }

    /// The most workers per rank that do not oversubscribe the node.
    pub fn max_workers_per_rank(&self) -> usize {
        (self.worker_cores() / self.ranks_per_node.max(1)).max(1)
    }

    pub fn oversubscribed(&self) -> bool {
        self.workers_on_node() > self.worker_cores()
    }

    /// How much slower each worker runs than alone on a core.
    pub fn slowdown(&self) -> f64 {
        let load = self.workers_on_node() as f64 / self.worker_cores() as f64;
        if load <= 1.0 {
            1.0
        } else {
            load * (1.0 + CONTEXT_SWITCH_PENALTY * (load - 1.0))
        }
    }

    /// One worker's time for a batch.
    pub fn batch_s(&self, batch_size: usize) -> f64 {
        self.sample_s * batch_size as f64
    }

    /// Time between batches one rank receives.
    pub fn interval_s(&self, batch_size: usize) -> f64 {
        if self.num_workers == 0 {
            self.batch_s(batch_size)
        } else {
            self.batch_s(batch_size) * self.slowdown() / self.num_workers as f64
        }
    }

    /// The host-to-device copy of one batch.
    pub fn copy_s(&self, batch_size: usize) -> f64 {
        let bytes = self.sample_bytes * batch_size as f64;
        if bytes <= 0.0 {
            return 0.0;
        }
        bytes
            / if self.pin_memory {
                self.pinned_bytes_per_s
            } else {
                self.pageable_bytes_per_s
            }
    }

    /// The copy time a micro-step shows: all of a pageable copy, a pinned one past compute.
    fn shown_copy_s(&self, ddp: &DdpStep) -> f64 {
        let copy = self.copy_s(ddp.batch_size);
        if self.pin_memory {
            (copy - ddp.micro_compute_s).max(0.0)
        } else {
            copy
        }
    }

    /// One optimizer step with loading.
    pub fn step(&self, ddp: &DdpStep) -> LoaderStep {
        let k = ddp.accumulation.max(1) as f64;
        let interval = self.interval_s(ddp.batch_size);
        let gpu_s = ddp.step_s + k * self.shown_copy_s(ddp);
        let gpu_work = ddp.compute_s + ddp.exposed_comm_s;
        let (step, data_bound) = if self.num_workers == 0 {
            let loading = k * interval;
            (gpu_s + loading, loading + gpu_s - ddp.step_s > gpu_work)
        } else {
            let paced = k * interval;
            (gpu_s.max(paced), paced > gpu_s)
        };
        let bound_by = if data_bound {
            Bound::Data
        } else if ddp.exposed_comm_s >= COMM_BOUND_FRACTION * ddp.compute_s {
            Bound::Comm
        } else {
            Bound::Compute
        };
        let samples = k * (ddp.batch_size * ddp.world_size) as f64;
        LoaderStep {
            data_interval_s: interval,
            data_wait_s: step - ddp.step_s,
            step_time_s: step,
            samples_per_s: samples / step,
            bound_by,
        }
    }

    /// The smallest num_workers (with this pinning) whose step is not data-bound.
    pub fn hiding_workers(&self, pin_memory: bool, ddp: &DdpStep) -> Option<usize> {
        (1..=MAX_WORKERS).find(|&w| self.with(w, pin_memory).step(ddp).bound_by != Bound::Data)
    }

    /// PyTorch's `_check_worker_number_rationality`: each DataLoader warns when it creates
    /// more workers than `len(os.sched_getaffinity(0))`. It counts one process's workers,
    /// not the node's.
    pub fn pytorch_warning(&self) -> Option<String> {
        (self.num_workers > self.cpu_cores).then(|| {
            format!(
                "This DataLoader will create {} worker processes in total. Our suggested max number of worker in current system is {}, which is smaller than what this DataLoader is going to create.",
                self.num_workers, self.cpu_cores
            )
        })
    }

    /// Host memory of the node's training processes and workers (each with the dataset, as
    /// copy-on-write pages are touched) and the batches in flight.
    pub fn memory(&self, batch_size: usize, host_memory_from: &str) -> Option<LoaderMemory> {
        let dataset = self.dataset_bytes?;
        let processes = self.ranks_per_node * (1 + self.num_workers);
        let in_flight = self.prefetch_factor.max(1) * self.num_workers.max(1);
        let prefetch =
            (self.ranks_per_node * in_flight) as f64 * self.sample_bytes * batch_size as f64;
        let dataset_total = processes as f64 * dataset;
        Some(LoaderMemory {
            processes,
            dataset_bytes: dataset_total,
            prefetch_bytes: prefetch,
            total_bytes: dataset_total + prefetch,
            host_memory_bytes: self.host_memory_bytes,
            host_memory_from: host_memory_from.to_string(),
        })
    }

    /// The most workers per rank whose memory fits in `fraction` of the host's.
    pub fn max_workers_in_memory(&self, batch_size: usize, fraction: f64) -> Option<usize> {
        let host = self.host_memory_bytes?;
        self.dataset_bytes?;
        (0..=MAX_WORKERS)
            .take_while(|&w| {
                self.with(w, self.pin_memory)
                    .memory(batch_size, "")
                    .is_some_and(|m| m.total_bytes <= fraction * host)
            })
            .last()
    }
}

/// The compute of one micro-step at another batch: the part over `fixed_s` scales with the
/// batch, `fixed_s` does not; the optimizer step stays as it is.
pub fn scaled_compute(
    compute: crate::documents::simulation::Compute,
    at_batch: usize,
    batch: usize,
    fixed_s: f64,
) -> crate::documents::simulation::Compute {
    let fb = compute.forward_s + compute.backward_s;
    let fixed = fixed_s.min(fb);
    let scaled = fixed + (fb - fixed) * batch as f64 / at_batch.max(1) as f64;
    let ratio = if fb > 0.0 { scaled / fb } else { 1.0 };
    crate::documents::simulation::Compute {
        forward_s: compute.forward_s * ratio,
        backward_s: compute.backward_s * ratio,
        optimizer_s: compute.optimizer_s,
    }
}

#[cfg(test)]
#[path = "loader_tests.rs"]
mod tests;
