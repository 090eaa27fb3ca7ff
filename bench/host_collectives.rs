//! Host backend collectives: time per call on 2 thread ranks at small, medium and large sizes,
//! next to a single-thread memcpy of the same size (the ceiling).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ncclprobe::backend::host::world;
use ncclprobe::backend::{Communicator, PointSpec};
use ncclprobe::coll::{Collective, Placement};
use ncclprobe::dtype::{Dtype, RedOp};
use std::time::Duration;

/// Wall time of `iters` calls, slowest rank.
fn run_world(spec: &PointSpec, nranks: usize, iters: u64) -> Duration {
    std::thread::scope(|s| {
        let handles: Vec<_> = world(nranks)
            .into_iter()
            .map(|mut comm| {
                s.spawn(move || {
                    comm.prepare(spec).expect("buffers");
                    comm.run(Placement::OutOfPlace, 1).expect("warm-up");
                    comm.run(Placement::OutOfPlace, iters as usize)
                        .expect("run")
                })
            })
            .collect();
        let slowest = handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .fold(0.0, f64::max);
        Duration::from_secs_f64(slowest)
    })
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("host");
    group.sample_size(10);
    for size in [8usize, 1 << 20, 64 << 20] {
        group.throughput(Throughput::Bytes(size as u64));
        for coll in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::Alltoall,
        ] {
            let spec = PointSpec {
                coll,
                dtype: Dtype::Float,
                op: RedOp::Sum,
                root: 0,
                count: size / 4,
                unalign: 0,
                traffic: Default::default(),
                rotate_within: 0,
            };
            group.bench_with_input(BenchmarkId::new(coll.name(), size), &spec, |b, spec| {
                b.iter_custom(|iters| run_world(spec, 2, iters))
            });
        }
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size];
        group.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, _| {
            b.iter(|| dst.copy_from_slice(std::hint::black_box(&src)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
