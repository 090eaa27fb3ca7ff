//! Unit tests of `loader_plan`: the loader laid over a DDP grid.
use super::*;
use crate::analysis::curve::Curve;
use crate::analysis::models::preset;
use crate::documents::simulation::{Compute, Hook};

fn plan_for<'a>(setup: &'a Setup<'a>, loader: &'a Loader, choices: &'a [BatchChoice]) -> Plan<'a> {
    Plan {
        setup,
        loader,
        default_cap_mb: 25.0,
        accumulation: 8,
        compute_fixed_s: 0.03,
        compute_fixed_given: true,
        batch_choices: choices,
        sources: Sources::default(),
    }
}

fn loader(num_workers: usize) -> Loader {
    Loader {
        num_workers,
        // 850 ms a batch of 16 for one worker.
        sample_s: 0.85 / 16.0,
        cpu_cores: 32,
        ranks_per_node: 3,
        pin_memory: false,
        prefetch_factor: 2,
        persistent_workers: false,
        sample_bytes: 6e5,
        pinned_bytes_per_s: 20e9,
        pageable_bytes_per_s: 6e9,
        dataset_bytes: None,
        host_memory_bytes: None,
    }
}

#[test]
fn seed_001_is_data_bound_and_six_pinned_workers_hide_loading() {
    let (model, _) = preset("resnet50").unwrap_or_else(|e| panic!("preset: {e}"));
    let curve = Curve::AlphaBeta {
        latency_s: 20e-6,
        busbw_bytes_per_s: 10e9,
    };
    let setup = Setup {
        model: &model,
        world_size: 3,
        batch_size: 16,
        compute: Compute::from_step(0.15, 0.0),
        curve: &curve,
        first_bucket_bytes: 1 << 20,
        gradient_as_bucket_view: false,
        hook: Hook::None,
        copy_bytes_per_s: 300e9,
        overlap_slowdown: 0.0,
    };
    let l = loader(0);
    let choices = [BatchChoice {
        batch_size: 32,
        accumulation: Some(2),
    }];
    let mut grid = setup.grid(&[25.0], &[8]);
    let summary = plan_for(&setup, &l, &choices).apply(&mut grid);
    assert!(grid
        .iter()
        .all(|o| o.loader.is_some_and(|s| s.bound_by == Bound::Data)));
    assert_eq!(summary.current.bound_by, Bound::Data);
    // 850 / 6 = 142 ms <= 150 ms of compute; 850 / 5 = 170 ms is not.
    assert_eq!(summary.hiding_workers_pinned, Some(6));
    assert!(
        summary
            .advice
            .iter()
            .any(|a| a.starts_with("raise num_workers to 6 with pin_memory=True")),
        "{:?}",
        summary.advice
    );
    // 16 x 8 then 32 x 2; with 6 pinned workers the larger batch amortises the fixed 30 ms.
    assert_eq!(summary.batch_options.len(), 2);
    let (now, big) = (&summary.batch_options[0], &summary.batch_options[1]);
    assert_eq!((now.effective_batch, big.effective_batch), (384, 192));
    let rate = |o: &BatchOption| o.advised.map(|a| a.samples_per_s).unwrap_or(0.0);
    assert!(
        rate(big) > 1.02 * rate(now),
        "{} vs {}",
        rate(big),
        rate(now)
    );
    assert!(summary
        .advice
        .iter()
        .any(|a| a.starts_with("batch 32 x accumulation 2 raises throughput")));
}

#[test]
fn a_batch_that_does_not_divide_the_samples_per_step_is_said_and_skipped() {
    let (model, _) = preset("resnet18").unwrap_or_else(|e| panic!("preset: {e}"));
    let curve = Curve::AlphaBeta {
        latency_s: 0.0,
        busbw_bytes_per_s: 10e9,
    };
    let setup = Setup {
        model: &model,
        world_size: 1,
        batch_size: 16,
        compute: Compute::from_step(0.15, 0.0),
        curve: &curve,
        first_bucket_bytes: 1 << 20,
        gradient_as_bucket_view: true,
        hook: Hook::None,
        copy_bytes_per_s: 300e9,
        overlap_slowdown: 0.0,
    };
    let l = loader(8);
    // 16 x 8 = 128 per GPU: 32 keeps it with accumulation 4; 48 does not divide it.
    let choices = [
        BatchChoice {
            batch_size: 32,
            accumulation: None,
        },
        BatchChoice {
            batch_size: 48,
            accumulation: None,
        },
    ];
    let mut grid = setup.grid(&[25.0], &[8]);
    let summary = plan_for(&setup, &l, &choices).apply(&mut grid);
    let kept: Vec<(usize, usize)> = summary
        .batch_options
        .iter()
        .map(|o| (o.batch_size, o.accumulation))
        .collect();
    assert_eq!(kept, vec![(16, 8), (32, 4)]);
    assert!(summary
        .advice
        .iter()
        .any(|a| a.starts_with("batch 48 does not divide the 128 samples")));
}
