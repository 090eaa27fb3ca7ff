//! Rendering a report from a 2,000-point record (target: under 1 s on one core, with its plots
//! drawn to PNG and SVG and the HTML and Markdown filled). Criterion times the renderer; the
//! end-to-end time through the binary, reading the record and writing every file, is printed
//! with its ratio to the target.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ncclprobe::render::report::Destinations;
use ncclprobe::report::output::{render, write_all};
use ncclprobe::report::{Documents, Named};
use std::time::{Duration, Instant};

#[path = "records.rs"]
mod records;
use records::record;

fn bench(c: &mut Criterion) {
    let mut docs = Documents::default();
    docs.runs.push(Named {
        file: "run.json".into(),
        doc: record(),
    });
    docs.compare_runs_without_comparison();
    let plots = render(&docs, "bench", &Destinations::default())
        .expect("renders")
        .plots
        .len();
    c.bench_function(
        &format!("report: 2000 points, {plots} plots (PNG+SVG), HTML and Markdown"),
        |b| {
            b.iter(|| {
                black_box(
                    render(black_box(&docs), "bench", &Destinations::default()).expect("renders"),
                )
            })
        },
    );

    let dir = std::env::temp_dir().join(format!("ncclprobe-report-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let run = dir.join("run.json");
    std::fs::write(&run, serde_json::to_vec(&docs.runs[0].doc).expect("json")).expect("write");
    let dest = Destinations {
        html: Some(dir.join("report.html")),
        markdown: Some(dir.join("summary.md")),
        png_dir: Some(dir.join("plots")),
        svg: true,
    };
    let rendered = render(&docs, "bench", &dest).expect("renders");
    write_all(&rendered, &dest).expect("writes");
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let out = std::process::Command::new("taskset")
            .args(["-c", "0", env!("CARGO_BIN_EXE_ncclprobe"), "report"])
            .arg(&run)
            .arg("-o")
            .arg(dir.join("e2e.html"))
            .arg("--markdown")
            .arg(dir.join("e2e.md"))
            .arg("--png-dir")
            .arg(dir.join("e2e"))
            .output()
            .expect("taskset and ncclprobe");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        best = best.min(start.elapsed());
    }
    println!(
        "end to end on one core (taskset -c 0), best of 5: ncclprobe report RUN -o --markdown --png-dir ({plots} plots): {:.0} ms, {:.2}x the 1 s target",
        best.as_secs_f64() * 1e3,
        best.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
