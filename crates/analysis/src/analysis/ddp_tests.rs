//! Unit tests of `ddp`, kept beside it.
use super::*;
use crate::analysis::models::preset;
use proptest::prelude::*;

fn setup<'a>(model: &'a Model, curve: &'a Curve, n: usize) -> Setup<'a> {
    Setup {
        model,
        world_size: n,
        batch_size: 32,
        compute: Compute::from_step(0.2, 0.01),
        curve,
        first_bucket_bytes: 1 << 20,
        gradient_as_bucket_view: true,
        hook: Hook::None,
        copy_bytes_per_s: 300e9,
        overlap_slowdown: 0.0,
    }
}

#[test]
fn overlap_slowdown_stretches_backward_by_the_overlapped_communication() {
    // A case worked by hand. Two fp32 tensors of 1 MiB, registered a then b; 2 ranks on a
    // link where 1 MiB takes 80 ms (no latency); forward 50 ms, backward 100 ms, no optimizer.
    // Gradients are ready in reverse registration order in proportion to size: b at 50 ms
    // into backward, a at 100 ms. With 1 MiB buckets each tensor is its own bucket:
    //   bucket b: 50..130 ms, bucket a: 130..210 ms  -> step = 50 + 210 = 260 ms.
    // With σ = 0.1, backward stretches by 0.1 x the communication inside it (50 ms of bucket
    // b's 50..100) to 105 ms; b is ready at 52.5, a at 105:
    //   bucket b: 52.5..132.5, bucket a: 132.5..212.5 -> step = 50 + 212.5 = 262.5 ms.
    let tensor = |name: &str| crate::analysis::models::Tensor {
        name: name.into(),
        numel: 1 << 18,
        elem_bytes: 4,
    };
    let model = Model {
        name: "two".into(),
        tensors: vec![tensor("a.weight"), tensor("b.weight")],
        source: "hand-made".into(),
    };
    // all_reduce on 2 ranks: busbw = algbw, so 1 MiB in 80 ms is 1 MiB / 0.08 s.
    let curve = Curve::AlphaBeta {
        latency_s: 0.0,
        busbw_bytes_per_s: MIB / 0.08,
    };
    let plain = Setup {
        compute: Compute {
            forward_s: 0.05,
            backward_s: 0.1,
            optimizer_s: 0.0,
        },
        ..setup(&model, &curve, 2)
    };
    let config = Config {
        bucket_cap_mb: 1.0,
        accumulation: 1,
        no_sync: true,
    };
    assert_eq!(plain.buckets(1.0).len(), 2);
    let unslowed = plain.evaluate(config).step_time_s;
    assert!((unslowed - 0.260).abs() < 1e-9, "{unslowed}");
    let slowed = Setup {
        overlap_slowdown: 0.1,
        ..plain.clone()
    };
    let got = slowed.evaluate(config).step_time_s;
    assert!((got - 0.2625).abs() < 1e-9, "{got}");

    // One bucket, ready when backward ends: nothing overlaps, σ changes nothing.
    let (model, _) = preset("resnet50").unwrap();
    let plain = setup(&model, &curve, 2);
    let whole = Config {
        bucket_cap_mb: model.grad_bytes() as f64 / MIB + 1.0,
        ..config
    };
    let first = Setup {
        first_bucket_bytes: model.grad_bytes() + 1,
        ..plain.clone()
    };
    let first_slowed = Setup {
        overlap_slowdown: 0.1,
        ..first.clone()
    };
    assert_eq!(
        first.evaluate(whole).step_time_s,
        first_slowed.evaluate(whole).step_time_s
    );
}

#[test]
fn resnet18_buckets_match_a_real_nccl_trace() {
    // pytorch/pytorch#48880: NCCL all-reduce sizes per step for ResNet-18 (ddp.md §1.3.4).
    let (model, _) = preset("resnet18").unwrap();
    let order = ready_times(&model, 1.0);
    let sizes = |cap_mb: u64| -> Vec<u64> {
        assign_buckets(&model, &order, 1 << 20, cap_mb << 20)
            .iter()
            .map(|b| b.bytes)
            .collect()
    };
    assert_eq!(sizes(25), vec![2052000, 28852224, 15853824]);
    assert_eq!(sizes(35), vec![2052000, 38297600, 6408448]);
}

#[test]
fn default_bucket_structure_of_the_language_models() {
    // ddp.md §5.3: BERT-base 14 buckets, first 2.25 MiB (pooler), last 90.9 MiB (word embeddings).
    let (model, _) = preset("bert-base").unwrap();
    let b = assign_buckets(&model, &ready_times(&model, 1.0), 1 << 20, 25 << 20);
    assert_eq!(b.len(), 14);
    assert!((b[0].bytes as f64 / MIB - 2.25).abs() < 0.01);
    assert!((b[13].bytes as f64 / MIB - 90.9).abs() < 0.1);
    assert_eq!(
        b[13].ready_s, 1.0,
        "the embedding bucket is ready when backward ends"
    );
}

#[test]
fn no_sync_reproduces_the_accelerate_measurement() {
    // huggingface/accelerate gradient_synchronization.md (ddp.md §6): bert-base-cased,
    // batch 16 per GPU, accumulation 4, seconds per batch:
    //   2x T4 in one node:     0.50 without no_sync, 0.41 with no_sync()
    //   2 nodes x 1 T4:        2.00 without no_sync, 0.91 with no_sync()
    // Neither the T4 compute time nor either link is published. The single-node pair fixes
    // both (compute per micro-batch and the link); the multi-node baseline fixes the
    // multi-node link; the simulator then predicts the multi-node no_sync() time.
    //
    // What the source supports, with its own spread: in the multi-node table the variant
    // that wraps only backward in no_sync() does the same communication as the baseline and
    // took 2.13 s against 2.00 s, so any one multi-node figure is uncertain by 6.5%
    // (2 significant digits add ±0.005 s). The absolute prediction (0.79 s against 0.91 s,
    // -14%) misses by more than that: it carries the compute time from the single-node VM to
    // the multi-node VMs, which the source does not measure (0.91 s implies 0.55 s of compute
    // per batch there, 0.38 s on the single node). So the test holds the model to what the
    // spread allows: the no_sync() time lies between the compute floor and the measured
    // time plus its spread, and no_sync() speeds the multi-node run up by at least the
    // measured factor less the spread (2.00 / (0.91 x 1.065) = 2.06x); the advice rests on it.
    let (model, _) = preset("bert-base").unwrap();
    let per_batch = |compute_s: f64, busbw: f64, no_sync: bool| {
        let curve = Curve::AlphaBeta {
            latency_s: 20e-6,
            busbw_bytes_per_s: busbw,
        };
        let s = Setup {
            batch_size: 16,
            compute: Compute::from_step(compute_s, 0.0),
            ..setup(&model, &curve, 2)
        };
        s.evaluate(Config {
            bucket_cap_mb: 25.0,
            accumulation: 4,
            no_sync,
        })
        .step_time_s
            / 4.0
    };
    // The bandwidth at which the baseline (no no_sync) takes `target` seconds per batch.
    let fit_busbw = |compute_s: f64, target: f64| {
        let (mut lo, mut hi) = (1e6f64, 1e12f64);
        for _ in 0..200 {
            let mid = (lo * hi).sqrt();
            if per_batch(compute_s, mid, false) > target {
                lo = mid
            } else {
                hi = mid
            }
        }
        hi
    };
    // Single node: with = c + e/4 and without = c + e for the same exposed time e, so
    // c = (4 * 0.41 - 0.50) / 3 = 0.38 s; the link follows from the baseline.
    let compute_s = (4.0 * 0.41 - 0.50) / 3.0;
    let single = fit_busbw(compute_s, 0.50);
    assert!(
        (per_batch(compute_s, single, true) - 0.41).abs() < 0.005,
        "the single-node fit is self-consistent"
    );
    // Multi-node: same GPUs and model, slower link fitted to the 2.00 s baseline.
    let multi = fit_busbw(compute_s, 2.00);
    assert!(multi < single);
    let predicted = per_batch(compute_s, multi, true);
    let spread = (2.13 - 2.00) / 2.00;
    assert!(
        predicted > compute_s && predicted < 0.91 * (1.0 + spread) + 0.005,
        "predicted {predicted:.3} s per batch with no_sync, measured 0.91 (spread {spread:.3})"
    );
    let speedup = 2.00 / predicted;
    assert!(
        speedup >= 2.00 / (0.91 * (1.0 + spread) + 0.005),
        "no_sync speed-up {speedup:.2}x, measured 2.20x"
    );
}

#[test]
fn seed_002_two_gpus_are_slower_than_one() {
    // seeds/002: 2x RTX 4090 over WSL2 sockets; curve 4 MB 9 ms, 40 MB 83 ms, 200 MB 390 ms;
    // one GPU 4.9 it/s at batch 128 on a BERT-sized model; two GPUs measured 1.4 it/s.
    let (model, _) = preset("bert-base").unwrap();
    let curve = crate::analysis::curve::from_points(
        Collective::AllReduce,
        2,
        vec![
            (4_000_000, 9e-3),
            (40_000_000, 83e-3),
            (200_000_000, 390e-3),
        ],
        "seed 002".into(),
    )
    .unwrap();
    let s = Setup {
        batch_size: 128,
        compute: Compute::from_step(1.0 / 4.9, 0.0),
        ..setup(&model, &curve, 2)
    };
    let grid = s.grid(&[1.0, 5.0, 10.0, 25.0, 50.0, 100.0], &[1, 2, 4, 8]);
    let default = s.evaluate(Config {
        bucket_cap_mb: 25.0,
        accumulation: 1,
        no_sync: true,
    });
    assert!(default.iters_per_s < 4.9, "{}", default.iters_per_s);
    assert!(
        (default.iters_per_s - 1.4).abs() < 0.5,
        "seed observed 1.4 it/s, model {}",
        default.iters_per_s
    );
    let advice = advice(&s, &grid, 25.0);
    assert!(
        advice[0].starts_with("2 GPUs over this link are slower than 1"),
        "{advice:?}"
    );
    assert!(
        advice[1].contains("with no_sync() wrapping forward and backward"),
        "{advice:?}"
    );
}

#[test]
fn first_iteration_has_no_overlap() {
    let (model, _) = preset("resnet50").unwrap();
    let curve = Curve::AlphaBeta {
        latency_s: 10e-6,
        busbw_bytes_per_s: 5e9,
    };
    let s = setup(&model, &curve, 2);
    let steady = s.evaluate(Config {
        bucket_cap_mb: 25.0,
        accumulation: 1,
        no_sync: true,
    });
    assert!(s.first_iteration_s() > steady.step_time_s);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn more_bandwidth_never_makes_a_step_slower(
        bw in 0.1f64..100.0, factor in 1.0f64..10.0, cap in 0.5f64..200.0, k in 1usize..8, no_sync: bool, n in 2usize..9,
    ) {
        let (model, _) = preset("bert-base").unwrap();
        let slow = Curve::AlphaBeta { latency_s: 20e-6, busbw_bytes_per_s: bw * 1e9 };
        let fast = Curve::AlphaBeta { latency_s: 20e-6, busbw_bytes_per_s: bw * factor * 1e9 };
        let config = Config { bucket_cap_mb: cap, accumulation: k, no_sync };
        let t_slow = setup(&model, &slow, n).evaluate(config).step_time_s;
        let t_fast = setup(&model, &fast, n).evaluate(config).step_time_s;
        prop_assert!(t_fast <= t_slow + 1e-12);
    }

    #[test]
    fn no_sync_never_communicates_more(bw in 0.1f64..100.0, cap in 0.5f64..200.0, k in 1usize..16) {
        let (model, _) = preset("resnet50").unwrap();
        let curve = Curve::AlphaBeta { latency_s: 20e-6, busbw_bytes_per_s: bw * 1e9 };
        let s = setup(&model, &curve, 2);
        let with = s.evaluate(Config { bucket_cap_mb: cap, accumulation: k, no_sync: true });
        let without = s.evaluate(Config { bucket_cap_mb: cap, accumulation: k, no_sync: false });
        prop_assert!(with.comm_s <= without.comm_s + 1e-12);
        prop_assert!(with.step_time_s <= without.step_time_s + 1e-12);
    }

    #[test]
    fn overlap_slowdown_never_makes_a_step_faster_nor_costs_more_than_sigma_times_comm(
        bw in 0.1f64..100.0, cap in 0.5f64..200.0, sigma in 0.0f64..1.0, n in 2usize..9,
    ) {
        let (model, _) = preset("bert-base").unwrap();
        let curve = Curve::AlphaBeta { latency_s: 20e-6, busbw_bytes_per_s: bw * 1e9 };
        let plain = setup(&model, &curve, n);
        let slowed = Setup { overlap_slowdown: sigma, ..plain.clone() };
        let config = Config { bucket_cap_mb: cap, accumulation: 1, no_sync: true };
        let (a, b) = (plain.evaluate(config), slowed.evaluate(config));
        prop_assert!(b.step_time_s >= a.step_time_s - 1e-12);
        // Backward stretches by at most σ × the communication inside it, and the
        // all-reduces shift by no more than that.
        prop_assert!(b.step_time_s <= a.step_time_s + sigma * a.comm_s + 1e-9);
    }

    #[test]
    fn a_cap_as_large_as_the_model_gives_one_bucket(extra in 0u64..1000) {
        for name in ["resnet18", "bert-base", "gpt2"] {
            let (model, _) = preset(name).unwrap();
            let cap = model.grad_bytes() + extra * (1 << 20);
            let b = assign_buckets(&model, &ready_times(&model, 1.0), cap, cap);
            prop_assert_eq!(b.len(), 1);
            prop_assert_eq!(b[0].bytes, model.grad_bytes());
        }
    }
}
