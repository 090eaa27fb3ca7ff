//! The input pipeline laid over a DDP grid: each configuration's step with loading, the
//! configuration trained with (its verdict), the smallest num_workers that hides loading with
//! and without pin_memory, oversubscription and memory, and the per-GPU batches to try.

use super::ddp::{Config, Outcome, Setup};
use super::loader::{scaled_compute, Bound, DdpStep, Loader, LoaderStep};
use crate::documents::simulation::{BatchOption, LoaderSummary};

/// Where the machine's numbers came from, in words, for the document.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub cpu_cores_from: String,
    pub ranks_per_node_from: String,
    pub h2d_from: String,
    pub host_memory_from: String,
}

/// A per-GPU batch to try: with its own accumulation, or keeping the effective batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchChoice {
    pub batch_size: usize,
    pub accumulation: Option<usize>,
}

pub struct Plan<'a> {
    pub setup: &'a Setup<'a>,
    pub loader: &'a Loader,
    pub default_cap_mb: f64,
    /// The accumulation trained with.
    pub accumulation: usize,
    /// Per micro-step compute that does not grow with the batch.
    pub compute_fixed_s: f64,
    /// Whether the user gave the fixed part (else compute is taken as proportional).
    pub compute_fixed_given: bool,
    pub batch_choices: &'a [BatchChoice],
    pub sources: Sources,
}

/// Host memory above this fraction is pressure (page cache squeezed out, swap next).
const MEMORY_PRESSURE: f64 = 0.9;

/// The most workers per rank whose processes' memory stays under the pressure mark at this
/// batch, when the dataset and the host's memory are known (0 when even none fit).
fn memory_cap(loader: &Loader, batch_size: usize) -> Option<usize> {
    loader.dataset_bytes?;
    loader.host_memory_bytes?;
    Some(
        loader
            .max_workers_in_memory(batch_size, MEMORY_PRESSURE)
            .unwrap_or(0),
    )
}

/// The smallest num_workers with `pin_memory` that hides loading and fits in memory (when
/// the memory is modelled): what a batch is advised to run with.
fn advised_workers(loader: &Loader, pin_memory: bool, ddp: &DdpStep) -> Option<usize> {
    let hiding = loader.hiding_workers(pin_memory, ddp)?;
    match memory_cap(loader, ddp.batch_size) {
        Some(cap) if hiding > cap => None,
        _ => Some(hiding),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What DDP gives an outcome of `setup`, without loading.
pub fn ddp_step(setup: &Setup, o: &Outcome) -> DdpStep {
    DdpStep {
        step_s: o.step_time_s,
        compute_s: setup.one_gpu_step_s(o.accumulation),
        exposed_comm_s: o.exposed_comm_s,
        micro_compute_s: setup.compute.forward_s + setup.compute.backward_s,
        accumulation: o.accumulation,
        batch_size: setup.batch_size,
        world_size: setup.world_size,
    }
}

fn ms(s: f64) -> String {
    format!("{:.0} ms", s * 1e3)
}

impl Plan<'_> {
    fn trained(&self, setup: &Setup, accumulation: usize) -> DdpStep {
        let o = setup.evaluate(Config {
            bucket_cap_mb: self.default_cap_mb,
            accumulation,
            no_sync: true,
        });
        ddp_step(setup, &o)
    }

    /// Every configuration's step with loading; the summary with its advice.
    pub fn apply(&self, grid: &mut [Outcome]) -> LoaderSummary {
        let (setup, loader) = (self.setup, self.loader);
        for o in grid.iter_mut() {
            o.loader = Some(loader.step(&ddp_step(setup, o)));
        }
        let now = self.trained(setup, self.accumulation);
        let current = loader.step(&now);
        let pinned = loader.hiding_workers(true, &now);
        let pageable = loader.hiding_workers(false, &now);
        let mut advice = Vec::new();
        self.oversubscription(&mut advice);
        self.hiding(&now, &current, pinned, pageable, &mut advice);
        self.memory_advice(&mut advice);
        let batch_options = self.batch_options(&mut advice);
        LoaderSummary {
            num_workers: loader.num_workers,
            sample_s: loader.sample_s,
            cpu_cores: loader.cpu_cores,
            cpu_cores_from: self.sources.cpu_cores_from.clone(),
            ranks_per_node: loader.ranks_per_node,
            ranks_per_node_from: self.sources.ranks_per_node_from.clone(),
            pin_memory: loader.pin_memory,
            prefetch_factor: loader.prefetch_factor,
            persistent_workers: loader.persistent_workers,
            h2d_pinned_bytes_per_s: loader.pinned_bytes_per_s,
            h2d_pageable_bytes_per_s: loader.pageable_bytes_per_s,
            h2d_from: self.sources.h2d_from.clone(),
            batch_bytes: loader.sample_bytes * setup.batch_size as f64,
            worker_slowdown: loader.slowdown(),
            pytorch_warning: loader.pytorch_warning(),
            memory: loader.memory(setup.batch_size, &self.sources.host_memory_from),
            hiding_workers_pinned: pinned,
            hiding_workers_pageable: pageable,
            batch_options,
            current,
            verdict: self.verdict(&now, &current),
            advice,
        }
    }

    fn verdict(&self, now: &DdpStep, current: &LoaderStep) -> String {
        let l = self.loader;
        let need = (now.step_s) / now.accumulation.max(1) as f64;
        let how = if l.num_workers == 0 {
            format!(
                "num_workers=0 loads each batch in the training process ({} per batch of {}), serially with compute",
                ms(current.data_interval_s),
                now.batch_size
            )
        } else {
            format!(
                "{} per rank {} a batch every {}",
                plural(l.num_workers, "worker", "workers"),
                if l.num_workers == 1 {
                    "delivers"
                } else {
                    "deliver"
                },
                ms(current.data_interval_s)
            )
        };
        format!(
            "{}-bound at bucket_cap_mb={}, batch {} x accumulation {}: {how}; the GPU takes one every {} (compute and exposed communication); {} per step, {:.0} samples/s",
            current.bound_by.name(),
            self.default_cap_mb,
            now.batch_size,
            now.accumulation,
            ms(need),
            ms(current.step_time_s),
            current.samples_per_s
        )
    }

    fn oversubscription(&self, advice: &mut Vec<String>) {
        let l = self.loader;
        if l.oversubscribed() {
            advice.push(format!(
                "oversubscribed: {} x {} = {} on {} ({} left after the training processes): each worker runs {:.1}x slower than alone; use at most {} per rank",
                plural(l.num_workers, "worker", "workers"),
                plural(l.ranks_per_node, "rank", "ranks"),
                plural(l.workers_on_node(), "worker process", "worker processes"),
                plural(l.cpu_cores, "core", "cores"),
                l.worker_cores(),
                l.slowdown(),
                plural(l.max_workers_per_rank(), "worker", "workers")
            ));
        }
        if let Some(w) = l.pytorch_warning() {
            advice.push(format!(
                "PyTorch warns of this itself (more workers than sched_getaffinity's {}): \"{w}\"",
                plural(l.cpu_cores, "CPU", "CPUs")
            ));
        }
    }

    fn hiding(
        &self,
        now: &DdpStep,
        current: &LoaderStep,
        pinned: Option<usize>,
        pageable: Option<usize>,
        advice: &mut Vec<String>,
    ) {
        let l = self.loader;
        let speed = |w: usize, pin: bool| {
            let s = l.with(w, pin).step(now);
            format!(
                "{:.0} samples/s, {:.1}x today",
                s.samples_per_s,
                s.samples_per_s / current.samples_per_s
            )
        };
        let cap = memory_cap(l, now.batch_size);
        let fits = |w: usize| cap.is_none_or(|c| w <= c);
        match (pinned, pageable) {
            (Some(p), q) if fits(p) => {
                let pageable_copy = l.with(0, false).copy_s(now.batch_size);
                let without = match q {
                    Some(q) if !fits(q) => format!(
                        "without pin_memory num_workers={q} would hide it, but does not fit in host memory"
                    ),
                    Some(q) if pageable_copy > 0.0 => format!(
                        "without pin_memory num_workers={q} ({}: the pageable copy of {} per batch is not hidden)",
                        speed(q, false),
                        ms(pageable_copy)
                    ),
                    Some(q) => format!(
                        "without pin_memory num_workers={q} ({}; no copy modelled: give --sample-bytes)",
                        speed(q, false)
                    ),
                    None => "without pin_memory no num_workers hides it".into(),
                };
                let verb = if current.bound_by == Bound::Data {
                    "raise num_workers to"
                } else if l.num_workers > p {
                    "num_workers can drop to"
                } else {
                    "the smallest num_workers that hides loading is"
                };
                advice.push(format!(
                    "{verb} {p} with pin_memory=True ({}); {without}",
                    speed(p, true)
                ));
            }
            (Some(p), _) => advice.push(self.hiding_past_memory(p, cap.unwrap_or(0), now.batch_size)),
            (None, _) => advice.push(format!(
                "no num_workers up to {} hides loading on {}: a batch takes one worker {}, the GPU needs one every {}; make __getitem__ cheaper (cache decoded samples), or give the loader more cores",
                super::loader::MAX_WORKERS,
                plural(l.cpu_cores, "core", "cores"),
                ms(l.batch_s(now.batch_size)),
                ms(now.step_s / now.accumulation.max(1) as f64)
            )),
        }
    }

    /// The workers that would hide loading need more host memory than there is.
    fn hiding_past_memory(&self, hiding: usize, cap: usize, batch_size: usize) -> String {
        let l = self.loader;
        let gb = |b: f64| format!("{:.1} GB", b / 1e9);
        let need = l
            .with(hiding, true)
            .memory(batch_size, "")
            .map_or(0.0, |m| m.total_bytes);
        let fit = match cap {
            0 => "not even num_workers=0 fits".to_string(),
            1 => "at most 1 worker per rank fits".to_string(),
            c => format!("at most {c} workers per rank fit"),
        };
        format!(
            "no num_workers both hides loading and fits in host memory: num_workers={hiding} with pin_memory=True would hide it, but {} x (1 + {hiding}) processes, each with its own copy of the {} dataset, need {} of the host's {} ({fit} under 90%); load the dataset lazily (memory-map it, or read each sample in __getitem__) so the workers do not each hold a copy, or make __getitem__ cheaper",
            plural(l.ranks_per_node, "rank", "ranks"),
            gb(l.dataset_bytes.unwrap_or(0.0)),
            gb(need),
            gb(l.host_memory_bytes.unwrap_or(0.0))
        )
    }

    fn memory_advice(&self, advice: &mut Vec<String>) {
        let l = self.loader;
        let batch = self.setup.batch_size;
        let Some(m) = l.memory(batch, &self.sources.host_memory_from) else {
            return;
        };
        let gb = |b: f64| format!("{:.1} GB", b / 1e9);
        let Some(host) = m.host_memory_bytes else {
            return;
        };
        if m.total_bytes <= MEMORY_PRESSURE * host {
            return;
        }
        let fits = l
            .max_workers_in_memory(batch, MEMORY_PRESSURE)
            .map(|w| {
                format!(
                    "at most {} per rank {} under 90%",
                    plural(w, "worker", "workers"),
                    if w == 1 { "stays" } else { "stay" }
                )
            })
            .unwrap_or_else(|| "even without workers it does not fit: load the dataset lazily (memory-map it) instead of holding it in Python objects".into());
        advice.push(format!(
            "host memory: {} x (1 + {}) = {} each end up with their own copy of the {} dataset (fork shares it copy-on-write, but reference counts write to every page they read){}: {} of {} ({}); {fits}",
            plural(l.ranks_per_node, "rank", "ranks"),
            plural(l.num_workers, "worker", "workers"),
            plural(m.processes, "process", "processes"),
            gb(l.dataset_bytes.unwrap_or(0.0)),
            if l.persistent_workers { ", held across epochs with persistent_workers" } else { "" },
            gb(m.total_bytes),
            gb(host),
            m.host_memory_from
        ));
    }
}

impl Plan<'_> {
    /// The batch trained with, then each `--batch-sizes` choice: its step with the loader as
    /// configured, and with the workers (pinned) that hide loading at that batch and fit in
    /// memory, when some do.
    fn batch_options(&self, advice: &mut Vec<String>) -> Vec<BatchOption> {
        if self.batch_choices.is_empty() {
            return Vec::new();
        }
        let setup = self.setup;
        let per_gpu = setup.batch_size * self.accumulation;
        let mut choices = vec![BatchChoice {
            batch_size: setup.batch_size,
            accumulation: Some(self.accumulation),
        }];
        for c in self.batch_choices {
            let k = match c.accumulation {
                Some(k) => k,
                None if per_gpu.is_multiple_of(c.batch_size) => per_gpu / c.batch_size,
                None => {
                    advice.push(format!(
                        "batch {} does not divide the {per_gpu} samples per GPU per optimizer step: give it as {}xK",
                        c.batch_size, c.batch_size
                    ));
                    continue;
                }
            };
            if !choices
                .iter()
                .any(|d| d.batch_size == c.batch_size && d.accumulation == Some(k))
            {
                choices.push(BatchChoice {
                    batch_size: c.batch_size,
                    accumulation: Some(k),
                });
            }
        }
        let options: Vec<BatchOption> = choices
            .iter()
            .map(|c| self.option(c.batch_size, c.accumulation.unwrap_or(1)))
            .collect();
        self.batch_advice(&options, advice);
        options
    }

    fn option(&self, batch_size: usize, accumulation: usize) -> BatchOption {
        let setup = Setup {
            batch_size,
            compute: scaled_compute(
                self.setup.compute,
                self.setup.batch_size,
                batch_size,
                self.compute_fixed_s,
            ),
            ..self.setup.clone()
        };
        let ddp = self.trained(&setup, accumulation);
        // Each batch's own: a larger batch takes longer to load and gives the GPU longer to
        // take it, so the workers that hide loading differ from the batch trained with's.
        let advised = advised_workers(self.loader, true, &ddp);
        BatchOption {
            batch_size,
            accumulation,
            effective_batch: batch_size * accumulation * setup.world_size,
            step: self.loader.step(&ddp),
            advised_workers: advised,
            advised: advised.map(|w| self.loader.with(w, true).step(&ddp)),
        }
    }

    fn batch_advice(&self, options: &[BatchOption], advice: &mut Vec<String>) {
        let Some(now) = options.first() else {
            return;
        };
        // Held with the loader that hides loading when there is one: a larger batch does not
        // fix a starved loader, it only amortises what does not grow with the batch.
        let rate = |o: &BatchOption| o.advised.unwrap_or(o.step).samples_per_s;
        let Some(best) = options[1..]
            .iter()
            .max_by(|a, b| rate(a).total_cmp(&rate(b)))
        else {
            return;
        };
        let with = match (best.advised_workers, now.advised_workers) {
            (Some(b), Some(n)) if b == n => {
                format!(" (both with num_workers={b} and pin_memory)")
            }
            (Some(b), Some(n)) => format!(
                " (with pin_memory and each batch's own num_workers: {b} at {} x {}, {n} at {} x {})",
                best.batch_size, best.accumulation, now.batch_size, now.accumulation
            ),
            _ => String::new(),
        };
        let effective = if best.effective_batch == now.effective_batch {
            String::new()
        } else {
            format!(
                "; the effective batch is {} instead of {}: the learning rate may need tuning again",
                best.effective_batch, now.effective_batch
            )
        };
        let verb = if rate(best) > 1.02 * rate(now) {
            "raises"
        } else {
            "does not raise"
        };
        advice.push(format!(
            "batch {} x accumulation {} {verb} throughput: {:.0} samples/s against {:.0} at {} x {}{with}{effective}",
            best.batch_size,
            best.accumulation,
            rate(best),
            rate(now),
            now.batch_size,
            now.accumulation
        ));
        if !self.compute_fixed_given {
            advice.push("compute is taken as proportional to the batch (one point, --compute-ms at --batch-size, was given): --compute-fixed-ms adds the per micro-step part that does not grow with it; GPU memory for the larger batch is not checked here".into());
        }
    }
}

#[cfg(test)]
#[path = "loader_plan_tests.rs"]
mod tests;
