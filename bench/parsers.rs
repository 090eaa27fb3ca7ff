//! Parser throughput on large inputs built from corpus files (target: a 100 MB log in well under
//! a second). Prints MB/s per parser besides criterion's timings.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ncclprobe::import::{nccl_log, nccl_tests, topo};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn build(name: &str, source: &str, bytes: usize, dir: &Path) -> PathBuf {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(source),
    )
    .expect("corpus file");
    let body: String = src.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let mut out = String::with_capacity(bytes + body.len());
    while out.len() < bytes {
        out.push_str(&body);
    }
    let p = dir.join(name);
    std::fs::write(&p, out).expect("write");
    p
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let size = 20 << 20;
    let log = build(
        "nccl.log",
        "nccl-debug/12-k8s-8gpu-proxy-socket-recv-failed-init-error.txt",
        size,
        dir.path(),
    );
    let perf = build(
        "perf.txt",
        "nccl-tests/15-a100-leonardo-sendrecv-nthread2-nccl-info-interleaved.txt",
        size,
        dir.path(),
    );
    let topo_file = build(
        "topo.txt",
        "topo/06-h100x8-nv18-8nic-mlx5-pix-gpu-numa-id.txt",
        1 << 20,
        dir.path(),
    );

    let mut group = c.benchmark_group("parsers");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function("nccl_log/20MB", |b| {
        b.iter(|| nccl_log::parse_file(&log).expect("parse"))
    });
    group.bench_function("nccl_tests_text/20MB", |b| {
        b.iter(|| nccl_tests::import_text(&perf).expect("parse"))
    });
    group.throughput(Throughput::Bytes(1 << 20));
    group.bench_function("topo/1MB", |b| {
        b.iter(|| topo::parse_file(&topo_file).expect("parse"))
    });
    group.finish();

    for (name, path, f) in [
        (
            "nccl_log",
            &log,
            (|p: &Path| nccl_log::parse_file(p).map(|_| ())) as fn(&Path) -> Result<(), _>,
        ),
        ("nccl_tests_text", &perf, |p: &Path| {
            nccl_tests::import_text(p).map(|_| ())
        }),
    ] {
        let start = Instant::now();
        f(path).expect("parse");
        let mb_s = size as f64 / 1e6 / start.elapsed().as_secs_f64();
        println!(
            "{name}: {mb_s:.0} MB/s, a 100 MB file in {:.2} s",
            100.0 / mb_s
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
