//! `fleet` at scale: a synthetic fleet of 10,000 nodes × 30 runs × 30 sizes (three planted bad
//! nodes) in a SQLite store and, with `NCCLPROBE_BENCH_POSTGRES=postgres://…` (for instance
//! `$(ci/postgres start)`), in PostgreSQL. Prints how long loading took, the store's bytes per
//! point (target: about 1 KB), and the time `fleet` takes to judge the fleet as a ratio to its
//! 2 s target; criterion then measures the same.
//!
//! `NCCLPROBE_BENCH_NODES`, `_RUNS`, `_SIZES` make the fleet smaller (a store already built for
//! the same shape under target/fleet-bench/ is reused); `NCCLPROBE_BENCH_ENGINES=postgres` (or
//! `sqlite`) measures one engine only.
//!
//! `cargo bench --bench fleet`

use criterion::Criterion;
use ncclprobe::documents::fleet::{FleetFilters, FleetRules};
use ncclprobe::history::fleet::{analyse, FleetOptions};
use ncclprobe::history::synthetic::{self, Fault, Spec};
use ncclprobe::history::{Location, Store};
use std::time::{Duration, Instant};

const TARGET: Duration = Duration::from_secs(2);
const BATCH: usize = 500;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn options() -> FleetOptions {
    FleetOptions {
        filters: FleetFilters {
            since: None,
            sku: None,
            node: None,
        },
        since_unix: f64::NEG_INFINITY,
        rules: FleetRules {
            min_size_bytes: 1 << 20,
            min_ratio: 0.9,
            max_z: -3.5,
            fdr: 0.01,
            max_drift: 0.07,
            min_peers: 5,
        },
    }
}

/// Opens the store, filling it with the fleet when it does not hold it yet.
fn build(location: &Location, spec: &Spec) -> Store {
    let mut store = Store::open(location).expect("open the store");
    let expected = (spec.nodes * spec.runs) as i64;
    let runs = store.counts().expect("count").1;
    if runs >= expected {
        return store;
    }
    assert_eq!(
        runs,
        0,
        "{}: a store half built by an earlier bench; remove it",
        location.display()
    );
    let start = Instant::now();
    let mut batch = Vec::with_capacity(BATCH);
    let mut done = 0usize;
    for e in synthetic::entries(spec) {
        batch.push(e);
        if batch.len() == BATCH {
            store.add_many(&batch).expect("add");
            done += batch.len();
            batch.clear();
            if done.is_multiple_of(50_000) {
                eprintln!(
                    "  {done} documents in {:.0} s",
                    start.elapsed().as_secs_f64()
                );
            }
        }
    }
    store.add_many(&batch).expect("add");
    println!(
        "{}: loaded {} documents in {:.1} s",
        location.display(),
        spec.nodes * spec.runs + spec.nodes,
        start.elapsed().as_secs_f64()
    );
    store
}

fn bytes(location: &Location, store: &mut Store) -> u64 {
    match location {
        Location::Sqlite(path) => ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", path.display())).ok())
            .map(|m| m.len())
            .sum(),
        Location::Postgres(url) => {
            let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
            let _ = store;
            let row = c
                .query_one("SELECT pg_database_size(current_database())", &[])
                .expect("size");
            row.get::<_, i64>(0) as u64
        }
    }
}

fn measure(c: &mut Criterion, name: &str, location: &Location, spec: &Spec) {
    let mut store = build(location, spec);
    let (_, runs, points) = store.counts().expect("count");
    let size = bytes(location, &mut store);
    println!(
        "{name}: {runs} runs, {points} points, {:.2} GB on disk: {:.0} bytes per point (target ~1 KB: ratio {:.2})",
        size as f64 / 1e9,
        size as f64 / points.max(1) as f64,
        size as f64 / points.max(1) as f64 / 1024.0
    );
    let opts = options();
    let start = Instant::now();
    let doc = analyse(&mut store, &opts).expect("fleet");
    let took = start.elapsed();
    let drained: Vec<&str> = doc.drain.iter().map(|d| d.node.as_str()).collect();
    println!(
        "{name}: fleet judged {} nodes in {:.2} s (target {} s: ratio {:.2}); drain list: {drained:?}",
        doc.nodes.len(),
        took.as_secs_f64(),
        TARGET.as_secs(),
        took.as_secs_f64() / TARGET.as_secs_f64()
    );
    c.bench_function(&format!("fleet/{name}"), |b| {
        b.iter(|| analyse(&mut store, &opts).expect("fleet"))
    });
}

fn main() {
    let spec = Spec {
        nodes: env("NCCLPROBE_BENCH_NODES", 10_000),
        runs: env("NCCLPROBE_BENCH_RUNS", 30),
        sizes: env("NCCLPROBE_BENCH_SIZES", 30),
        samples: 20,
        seed: 10_000,
        planted: vec![
            (1234, Fault::SlowLarge),
            (5678, Fault::Drifting),
            (9012, Fault::BadLink),
        ],
        matrices: true,
    };
    let shape = format!("{}x{}x{}", spec.nodes, spec.runs, spec.sizes);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fleet-bench");
    std::fs::create_dir_all(&dir).expect("bench directory");
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .configure_from_args();
    let engines =
        std::env::var("NCCLPROBE_BENCH_ENGINES").unwrap_or_else(|_| "sqlite,postgres".into());
    if engines.contains("sqlite") {
        let sqlite = Location::Sqlite(dir.join(format!("fleet-{shape}.sqlite")));
        measure(&mut c, "sqlite", &sqlite, &spec);
    }
    match std::env::var("NCCLPROBE_BENCH_POSTGRES") {
        Ok(_) if !engines.contains("postgres") => {}
        Ok(base) => {
            let db = format!("fleet_{}", shape.replace('x', "_"));
            let mut admin = postgres::Client::connect(&base, postgres::NoTls).expect("connect");
            let exists = admin
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
                .expect("query")
                .is_some();
            if !exists {
                admin
                    .batch_execute(&format!("CREATE DATABASE {db}"))
                    .expect("create database");
            }
            let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
            measure(
                &mut c,
                "postgres",
                &Location::Postgres(format!("{prefix}/{db}")),
                &spec,
            );
        }
        Err(_) => println!(
            "postgres: not measured (set NCCLPROBE_BENCH_POSTGRES, e.g. to $(ci/postgres start))"
        ),
    }
    c.final_summary();
}
