//! Statistics cost per point: summarising samples and the adaptive stop decision.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ncclprobe::stats::{summarize, StopRule};

fn samples(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 1e-3 * (1.0 + ((i * 7919) % 101) as f64 / 1000.0))
        .collect()
}

fn bench(c: &mut Criterion) {
    for n in [6usize, 50, 200] {
        let s = samples(n);
        c.bench_function(&format!("summarize/{n}"), |b| {
            b.iter(|| summarize(black_box(&s)))
        });
    }
    let rule = StopRule {
        min_samples: 6,
        max_samples: 200,
        target_rel_ci: Some(0.001),
        budget_s: 1e9,
    };
    let s = samples(50);
    c.bench_function("stop_rule/50", |b| {
        b.iter(|| rule.decide(black_box(&s), 0.0))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
