//! compare and qualify on a 2,000-point record (target: each under 50 ms, end to end through
//! the binary). Criterion times the engines; the end-to-end times, reading the record from
//! disk, are printed with their ratio to the target.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ncclprobe::expect::{self, compare, qualify, versus};
use std::time::{Duration, Instant};

#[path = "records.rs"]
mod records;
use records::record;

fn end_to_end(args: &[&str]) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
            .args(args)
            .output()
            .expect("ncclprobe");
        let took = start.elapsed();
        assert!(
            matches!(out.status.code(), Some(0) | Some(3)),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        best = best.min(took);
    }
    best
}

fn bench(c: &mut Criterion) {
    let r = record();
    let s = expect::Situation::of_record(&r, None, None);
    let choice = expect::choose(expect::shipped(), &s).expect("an A100 expectation");
    c.bench_function("compare vs expectation, 2000 points", |b| {
        b.iter(|| {
            black_box(compare::against_expectation(
                "bench",
                black_box(&r),
                &choice,
            ))
        })
    });
    c.bench_function("compare run vs run, 2000 points", |b| {
        b.iter(|| black_box(versus::against_run("a", &r, "b", black_box(&r), 0.05).unwrap()))
    });
    let rules = vec![
        qualify::Rule::MinBusbw {
            coll: None,
            gbps: 1.0,
            at: qualify::At::Largest,
        },
        qualify::Rule::MaxSkew {
            coll: None,
            ratio: 1.5,
        },
        qualify::Rule::MinRatio {
            coll: None,
            ratio: 0.5,
        },
    ];
    c.bench_function("qualify, 2000 points", |b| {
        b.iter(|| {
            black_box(qualify::qualify(
                "bench",
                black_box(&r),
                &rules,
                Some(&choice),
                None,
                1,
            ))
        })
    });

    let dir = std::env::temp_dir().join(format!("ncclprobe-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("run.json");
    std::fs::write(&path, serde_json::to_vec(&r).expect("json")).expect("write");
    let p = path.to_str().expect("utf-8 path");
    let cases: [(&str, Vec<&str>); 3] = [
        (
            "compare RUN (vs expectation)",
            vec!["compare", p, "--format", "json"],
        ),
        ("compare RUN RUN", vec!["compare", p, p, "--format", "json"]),
        (
            "qualify RUN --min-busbw 1 --max-skew 1.5 --min-ratio 0.5",
            vec![
                "qualify",
                p,
                "--min-busbw",
                "1",
                "--max-skew",
                "1.5",
                "--min-ratio",
                "0.5",
                "--format",
                "json",
            ],
        ),
    ];
    for (name, args) in cases {
        let t = end_to_end(&args);
        println!(
            "end to end, 2000-point record ({} KB): {name}: {:.1} ms (best of 5), {:.2}x of the 50 ms target",
            std::fs::metadata(&path).map(|m| m.len() / 1024).unwrap_or(0),
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / 0.050
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
