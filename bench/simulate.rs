//! DDP simulator speed: one configuration of a 7B model, and a 20 caps × 8 accumulations grid
//! for bert-base (target ≥ 100k configurations/s on one core). Prints configurations/s.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ncclprobe::analysis::curve::Curve;
use ncclprobe::analysis::ddp::{Compute, Config, Hook, Setup};
use ncclprobe::analysis::models::preset;
use std::time::Instant;

fn setup<'a>(model: &'a ncclprobe::analysis::models::Model, curve: &'a Curve) -> Setup<'a> {
    Setup {
        model,
        world_size: 8,
        batch_size: 32,
        compute: Compute::from_step(0.3, 0.01),
        curve,
        first_bucket_bytes: 1 << 20,
        gradient_as_bucket_view: true,
        hook: Hook::None,
        copy_bytes_per_s: 300e9,
        overlap_slowdown: 0.0,
    }
}

fn bench(c: &mut Criterion) {
    let curve = Curve::AlphaBeta {
        latency_s: 20e-6,
        busbw_bytes_per_s: 20e9,
    };
    let (llama, _) = preset("llama2-7b").expect("preset");
    let s = setup(&llama, &curve);
    c.bench_function("ddp/llama2-7b/one-config", |b| {
        b.iter(|| {
            s.evaluate(black_box(Config {
                bucket_cap_mb: 25.0,
                accumulation: 4,
                no_sync: true,
            }))
        })
    });

    let (bert, _) = preset("bert-base").expect("preset");
    let s = setup(&bert, &curve);
    let caps: Vec<f64> = (1..=20).map(|i| i as f64 * 10.0).collect();
    let accs: Vec<usize> = (1..=8).collect();
    c.bench_function("ddp/bert-base/grid-20x8", |b| {
        b.iter(|| s.grid(black_box(&caps), black_box(&accs)))
    });

    // The figure the target is stated in.
    let configs = s.grid(&caps, &accs).len();
    let start = Instant::now();
    let mut rounds = 0;
    while start.elapsed().as_secs_f64() < 2.0 {
        black_box(s.grid(&caps, &accs));
        rounds += 1;
    }
    let per_s = (rounds * configs) as f64 / start.elapsed().as_secs_f64();
    println!("bert-base grid: {configs} configurations per grid, {per_s:.0} configurations/s (target >= 100000)");
}

criterion_group!(benches, bench);
criterion_main!(benches);
