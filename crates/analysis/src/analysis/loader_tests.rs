//! Unit tests of `loader`: each rule with numbers worked by hand.
use super::*;

fn loader(num_workers: usize) -> Loader {
    Loader {
        num_workers,
        sample_s: 0.01,
        cpu_cores: 20,
        ranks_per_node: 1,
        pin_memory: false,
        prefetch_factor: 2,
        persistent_workers: false,
        sample_bytes: 0.0,
        pinned_bytes_per_s: 20e9,
        pageable_bytes_per_s: 6e9,
        dataset_bytes: None,
        host_memory_bytes: None,
    }
}

/// One rank, one micro-step of 100 ms compute, batch 16, nothing exposed.
fn ddp() -> DdpStep {
    DdpStep {
        step_s: 0.1,
        compute_s: 0.1,
        exposed_comm_s: 0.0,
        micro_compute_s: 0.1,
        accumulation: 1,
        batch_size: 16,
        world_size: 1,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn each_training_process_takes_a_core_from_the_workers() {
    let l = Loader {
        ranks_per_node: 4,
        ..loader(4)
    };
    assert_eq!(l.worker_cores(), 16);
    assert_eq!(l.workers_on_node(), 16);
    assert!(!l.oversubscribed(), "16 workers on 16 free cores fit");
    assert_eq!(l.max_workers_per_rank(), 4);
    assert!(l.with(5, false).oversubscribed());
}

#[test]
fn oversubscribed_workers_slow_in_proportion_plus_the_switch_penalty() {
    assert!(close(loader(19).slowdown(), 1.0));
    // 40 workers on 19 free cores: load 40/19, times 1 + 0.1 x (40/19 - 1).
    let load = 40.0 / 19.0;
    let expected = load * (1.0 + 0.1 * (load - 1.0));
    assert!(close(loader(40).slowdown(), expected));
    assert!((loader(40).slowdown() - 2.338).abs() < 1e-3);
    // The interval of 40 oversubscribed workers: 0.16 s x 2.338 / 40.
    assert!(close(loader(40).interval_s(16), 0.16 * expected / 40.0));
}

#[test]
fn workers_deliver_a_batch_every_batch_time_over_the_workers() {
    assert!(close(loader(4).interval_s(16), 0.04));
    assert!(close(loader(0).interval_s(16), 0.16));
}

#[test]
fn without_workers_loading_adds_to_compute_and_is_data_bound() {
    let s = loader(0).step(&ddp());
    assert!(
        close(s.step_time_s, 0.26),
        "100 ms compute + 160 ms loading"
    );
    assert!(close(s.data_wait_s, 0.16));
    assert_eq!(s.bound_by, Bound::Data);
    assert!(close(s.samples_per_s, 16.0 / 0.26));
    // Loading shorter than compute: still serial, but compute-bound.
    let light = Loader {
        sample_s: 0.005,
        ..loader(0)
    };
    let s = light.step(&ddp());
    assert!(close(s.step_time_s, 0.18));
    assert_eq!(s.bound_by, Bound::Compute);
}

#[test]
fn with_workers_the_step_is_data_bound_when_the_interval_exceeds_compute() {
    // One worker: a batch every 160 ms, the GPU needs one every 100 ms.
    let one = loader(1).step(&ddp());
    assert!(close(one.step_time_s, 0.16));
    assert_eq!(one.bound_by, Bound::Data);
    // Two: every 80 ms, hidden.
    let two = loader(2).step(&ddp());
    assert!(close(two.step_time_s, 0.1));
    assert!(close(two.data_wait_s, 0.0));
    assert_eq!(two.bound_by, Bound::Compute);
    // Accumulation: 8 micro-steps need 8 batches.
    let k8 = DdpStep {
        step_s: 0.8,
        compute_s: 0.8,
        accumulation: 8,
        ..ddp()
    };
    assert!(close(loader(1).step(&k8).step_time_s, 8.0 * 0.16));
}

#[test]
fn exposed_communication_of_half_the_compute_makes_it_comm_bound() {
    let comm = DdpStep {
        step_s: 0.16,
        exposed_comm_s: 0.06,
        ..ddp()
    };
    assert_eq!(loader(8).step(&comm).bound_by, Bound::Comm);
    let hidden = DdpStep {
        step_s: 0.14,
        exposed_comm_s: 0.04,
        ..ddp()
    };
    assert_eq!(loader(8).step(&hidden).bound_by, Bound::Compute);
}

#[test]
fn a_pageable_copy_shows_whole_a_pinned_one_only_past_compute() {
    // 16 samples of 6 MB: 96 MB, 16 ms pageable at 6 GB/s, 4.8 ms pinned at 20 GB/s.
    let paged = Loader {
        sample_bytes: 6e6,
        ..loader(4)
    };
    assert!(close(paged.copy_s(16), 0.016));
    assert!(close(paged.step(&ddp()).step_time_s, 0.116));
    let pinned = paged.with(4, true);
    assert!(close(pinned.copy_s(16), 0.0048));
    assert!(close(pinned.step(&ddp()).step_time_s, 0.1));
    // A pinned copy longer than compute shows its excess: 96 MB at 0.5 GB/s = 192 ms.
    let slow = Loader {
        pinned_bytes_per_s: 0.5e9,
        ..pinned
    };
    assert!(close(slow.step(&ddp()).step_time_s, 0.192));
}

#[test]
fn hiding_workers_differ_with_and_without_pinning() {
    // One worker: 500 ms a batch. Pinned: the GPU takes one every 100 ms -> 5 workers.
    // Pageable: 480 MB at 6 GB/s adds 80 ms -> 180 ms a batch -> 3 workers (167 ms).
    let l = Loader {
        sample_s: 0.5 / 16.0,
        sample_bytes: 3e7,
        ..loader(0)
    };
    assert_eq!(l.hiding_workers(true, &ddp()), Some(5));
    assert_eq!(l.hiding_workers(false, &ddp()), Some(3));
    // On 2 cores (1 for workers) no count hides 500 ms behind 100 ms.
    let small = Loader { cpu_cores: 2, ..l };
    assert_eq!(small.hiding_workers(true, &ddp()), None);
}

#[test]
fn pytorch_warns_when_one_loader_has_more_workers_than_cpus() {
    assert_eq!(loader(20).pytorch_warning(), None);
    let w = loader(40).pytorch_warning().unwrap_or_default();
    assert!(w.starts_with("This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 20,"), "{w}");
}

#[test]
fn every_process_holds_a_dataset_copy_and_prefetched_batches() {
    let l = Loader {
        ranks_per_node: 3,
        sample_bytes: 1e6,
        dataset_bytes: Some(2e9),
        host_memory_bytes: Some(32e9),
        ..loader(6)
    };
    let m = l.memory(16, "given").unwrap_or_else(|| panic!("memory"));
    assert_eq!(m.processes, 21, "3 ranks x (1 + 6 workers)");
    assert!(close(m.dataset_bytes, 42e9));
    assert!(
        close(m.prefetch_bytes, 3.0 * 12.0 * 16e6),
        "3 ranks x 2 x 6 batches of 16 MB"
    );
    // 90% of 32 GB: 3 x (1 + w) x 2 GB + 3 x 2w x 16 MB <= 28.8 GB -> w <= 3.74.
    assert_eq!(l.max_workers_in_memory(16, 0.9), Some(3));
    assert_eq!(
        loader(6).memory(16, ""),
        None,
        "no dataset size, no estimate"
    );
}

#[test]
fn compute_scales_with_the_batch_beyond_its_fixed_part() {
    let c = crate::documents::simulation::Compute {
        forward_s: 0.05,
        backward_s: 0.10,
        optimizer_s: 0.02,
    };
    // 30 ms fixed, 120 ms scaling: batch 16 -> 32 gives 30 + 240 = 270 ms, split 1:2.
    let s = scaled_compute(c, 16, 32, 0.03);
    assert!(close(s.forward_s + s.backward_s, 0.27));
    assert!(close(s.forward_s, 0.09));
    assert!(close(s.optimizer_s, 0.02));
    // Without a fixed part, proportional.
    assert!(close(scaled_compute(c, 16, 32, 0.0).backward_s, 0.2));
}
