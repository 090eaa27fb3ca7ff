//! How fast and in how little memory a large profiler trace is read: a trace of
//! `NCCLPROBE_TRACE_MB` MB (1024 by default) is made by repeating the steps of a corpus trace
//! (the 2-rank NCCL job, its timestamps shifted by one trace's span per copy), written to a
//! temporary file, and read as `ncclprobe trace` reads it. Prints MB/s and the process's peak
//! resident memory; the targets are 1 GB in 10 s and under 500 MB on a 2-core machine.
//! With `NCCLPROBE_TRACE_RANKS=N` the file is then read as a directory of N ranks (hard
//! links of it), in parallel as `ncclprobe trace DIR` reads them.

use ncclprobe::import::trace::{kineto, open_reader, read_job};
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::Instant;

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let mb: u64 = std::env::var("NCCLPROBE_TRACE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/traces/hta/nccl_parser_config/nccl_data.json.gz");
    let mut text = String::new();
    open_reader(&src)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let lo = events
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::MAX, f64::min);
    let hi = events
        .iter()
        .filter_map(|e| Some(e["ts"].as_f64()? + e["dur"].as_f64().unwrap_or(0.0)))
        .fold(0.0, f64::max);
    let span = hi - lo;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pt.trace.json");
    let mut out = BufWriter::new(std::fs::File::create(&path).unwrap());
    write!(
        out,
        "{{\"schemaVersion\": 1, \"distributedInfo\": {}, \"traceEvents\": [",
        v["distributedInfo"]
    )
    .unwrap();
    let mut written = 0u64;
    let mut copy = 0u64;
    let mut first = true;
    while written < mb << 20 {
        for e in events {
            let mut e = e.clone();
            if let Some(ts) = e["ts"].as_f64() {
                e["ts"] = serde_json::json!(ts + span * copy as f64);
            }
            if let Some(c) = e["args"]["correlation"].as_u64() {
                e["args"]["correlation"] = serde_json::json!(c + copy * 10_000_000);
            }
            let line = e.to_string();
            if !first {
                out.write_all(b",\n").unwrap();
            }
            first = false;
            out.write_all(line.as_bytes()).unwrap();
            written += line.len() as u64 + 2;
        }
        copy += 1;
    }
    out.write_all(b"]}\n").unwrap();
    out.flush().unwrap();
    drop(out);
    let size = std::fs::metadata(&path).unwrap().len() as f64 / 1e6;
    let before = peak_rss_mb();
    let start = Instant::now();
    let trace = kineto::read("big", open_reader(&path).unwrap()).unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "trace_read: {size:.0} MB ({} copies, {} events, {} kernels, {} steps) in {secs:.2} s = {:.0} MB/s; peak RSS {:.0} MB (before reading {:.0} MB, while writing the file)",
        copy,
        trace.events,
        trace.kernels.len(),
        trace.steps.len(),
        size / secs,
        peak_rss_mb(),
        before
    );
    let ranks: usize = std::env::var("NCCLPROBE_TRACE_RANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if ranks > 1 {
        let ranks_dir = dir.path().join("ranks");
        std::fs::create_dir(&ranks_dir).unwrap();
        for r in 0..ranks {
            std::fs::hard_link(&path, ranks_dir.join(format!("rank-{r}.pt.trace.json"))).unwrap();
        }
        let start = Instant::now();
        let job = read_job(&[ranks_dir]).unwrap();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "trace_read: {ranks} ranks of {size:.0} MB ({} read) in {secs:.2} s = {:.0} MB/s on {} threads; peak RSS {:.0} MB",
            job.ranks.len(),
            size * ranks as f64 / secs,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            peak_rss_mb()
        );
    }
}
