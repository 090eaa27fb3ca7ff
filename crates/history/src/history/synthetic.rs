//! A synthetic fleet for tests and the scale benchmark: nodes of one SKU measuring all_reduce
//! over a range of sizes, run after run, with node-to-node spread, run-to-run and
//! sample-to-sample noise, and nodes planted with a known fault: slow at large sizes, drifting
//! over time, a bad NVLink. Deterministic (a seeded generator), so a test knows what it planted.
//! Test data only: nothing in a command reads it.

use super::entry::{Entry, Identity, LinkRow};
use crate::coll::{Collective, Placement};
use crate::dtype::{Dtype, RedOp};
use crate::model::{self, Point, RunRecord, Source};

/// A planted fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 25 % slower at 64 MiB and larger, every run.
    SlowLarge,
    /// Loses bandwidth run after run, 25 % by its last run.
    Drifting,
    /// One NVLink (GPU3 link 4) at 45 % in the pair matrix, its error counters growing, and
    /// large messages 15 % slower.
    BadLink,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub nodes: usize,
    pub runs: usize,
    /// Sizes: 8 bytes doubling, this many.
    pub sizes: usize,
    pub samples: usize,
    pub seed: u64,
    /// (node index, fault).
    pub planted: Vec<(usize, Fault)>,
    /// A pair matrix per node after its last run.
    pub matrices: bool,
}

pub const SKU: &str = "8x NVIDIA H100 80GB HBM3";
const NRANKS: usize = 8;
/// all_reduce plateau and latency of a healthy node.
const PEAK_BUSBW: f64 = 360e9;
const LATENCY_S: f64 = 25e-6;
const START_UNIX: i64 = 1_790_000_000;
const DAY: i64 = 86_400;

/// splitmix64 and Box-Muller: enough randomness for noise, reproducible everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

pub fn node_name(i: usize) -> String {
    format!("gpu{i:05}")
}

fn fault_of(spec: &Spec, node: usize) -> Option<Fault> {
    spec.planted
        .iter()
        .find(|(n, _)| *n == node)
        .map(|(_, f)| *f)
}

fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Node `node`'s run `run` as a run record.
pub fn run_record(spec: &Spec, node: usize, run: usize) -> RunRecord {
    let mut rng = Rng::new(spec.seed ^ ((node as u64) << 20) ^ run as u64);
    // The node's own constant factor must not depend on the run.
    let node_factor = 1.0 + 0.02 * Rng::new(spec.seed ^ (node as u64) << 20).normal();
    let run_factor = 1.0 + 0.01 * rng.normal();
    let fault = fault_of(spec, node);
    let mut r = RunRecord::blank(Source::Measured, "nccl", "synthetic fleet".into());
    r.started_at = rfc3339(START_UNIX + DAY * run as i64 + node as i64);
    r.finished_at = Some(r.started_at.clone());
    r.status = model::RunStatus::Complete;
    r.command_line = vec!["ncclprobe".into(), "sweep".into()];
    r.backend.nranks = NRANKS;
    r.backend.hosts = vec![node_name(node)];
    r.backend
        .library_versions
        .insert("nccl".into(), "2.21.5 (libnccl.so.2)".into());
    r.backend
        .library_versions
        .insert("cuda-driver".into(), "12.4 (libcuda.so.1)".into());
    r.gpu_health = (0..NRANKS as u32)
        .map(|g| {
            let mut s = model::health::GpuState {
                index: g,
                name: "NVIDIA H100 80GB HBM3".into(),
                bus_id: format!("00000000:{:02X}:00.0", 0x18 + g),
                uuid: Some(format!("GPU-{node:08x}-0000-4000-8000-{g:012x}")),
                pcie_gen: Some((5, 5)),
                pcie_width: Some((16, 16)),
                ..Default::default()
            };
            if fault == Some(Fault::BadLink) && g == 3 {
                s.health.nvlink_errors = vec![model::health::NvLinkErrors {
                    link: 4,
                    crc_flit: 40 * (run as u64 + 1),
                    replay: 3 * (run as u64 + 1),
                    ..Default::default()
                }];
            }
            s
        })
        .collect();
    let progress = if spec.runs > 1 {
        run as f64 / (spec.runs - 1) as f64
    } else {
        1.0
    };
    for k in 0..spec.sizes {
        let size = 8u64 << k;
        let mut busbw = PEAK_BUSBW * node_factor * run_factor;
        match fault {
            Some(Fault::SlowLarge) if size >= 64 << 20 => busbw *= 0.75,
            Some(Fault::Drifting) => busbw *= 1.0 - 0.25 * progress,
            Some(Fault::BadLink) if size >= 16 << 20 => busbw *= 0.85,
            _ => {}
        }
        let factor = Collective::AllReduce.busbw_factor(NRANKS);
        let time = LATENCY_S + size as f64 * factor / busbw;
        let samples: Vec<f64> = (0..spec.samples)
            .map(|_| time * (1.0 + 0.02 * rng.normal().abs()))
            .collect();
        let stats = crate::stats::summarize(&samples);
        let t = stats.median_s;
        r.points.push(Point {
            collective: Collective::AllReduce,
            nranks: NRANKS,
            dtype: Dtype::Float,
            redop: Some(RedOp::Sum),
            root: -1,
            placement: Placement::OutOfPlace,
            size_bytes: size,
            count: size / 4,
            time_s: t,
            algbw_bytes_per_s: size as f64 / t,
            busbw_bytes_per_s: size as f64 / t * factor,
            wrong: Some(0),
            iters_per_sample: 1,
            samples_s: samples,
            stats,
            stop_reason: crate::stats::StopReason::Fixed,
            per_rank_time_s: Vec::new(),
            nccl_model_time_s: None,
            arrivals: None,
            cost: None,
            per_iteration: None,
            nccl_algo: None,
        });
    }
    r.headlines = model::headlines(&r.points);
    r
}

/// Node `node`'s pair matrix as the store keeps it (one-way, 64 MiB, every ordered GPU pair).
pub fn matrix_entry(spec: &Spec, node: usize) -> Entry {
    let mut rng = Rng::new(spec.seed ^ 0x6d61_7472 ^ node as u64);
    let bad = fault_of(spec, node) == Some(Fault::BadLink);
    let size = 64i64 << 20;
    let mut links = Vec::new();
    for a in 0..NRANKS {
        for b in 0..NRANKS {
            if a == b {
                continue;
            }
            let mut bw = 370e9 * (1.0 + 0.015 * rng.normal());
            if bad && ((a, b) == (3, 4) || (a, b) == (4, 3)) {
                bw *= 0.45;
            }
            links.push(LinkRow {
                src: format!("GPU{a}"),
                dst: format!("GPU{b}"),
                direction: "one-way".into(),
                size_bytes: size,
                bandwidth: bw,
                time_s: size as f64 / bw,
            });
        }
    }
    let at = START_UNIX + DAY * spec.runs as i64 + node as i64;
    Entry {
        digest: format!("synthetic-matrix-{}-{node}", spec.seed),
        kind: "matrix",
        origin: "add".into(),
        source_file: None,
        identity: Identity {
            node: node_name(node),
            sku: SKU.into(),
            gpus: Vec::new(),
        },
        started_at: rfc3339(at),
        started_unix: at as f64,
        status: "complete".into(),
        passed: None,
        tool_version: crate::buildinfo::tool_info().version,
        driver: None,
        cuda: None,
        nccl: None,
        backend: "nccl".into(),
        nranks: NRANKS as i64,
        hosts: vec![node_name(node)],
        env: Default::default(),
        health: Default::default(),
        document: Vec::new(),
        points: Vec::new(),
        gates: Vec::new(),
        headlines: Vec::new(),
        links,
    }
}

/// Every document of the fleet, node by node, run by run, in the order nodes would add them.
pub fn entries(spec: &Spec) -> impl Iterator<Item = Entry> + '_ {
    (0..spec.runs)
        .flat_map(move |run| (0..spec.nodes).map(move |node| (node, run)))
        .map(move |(node, run)| {
            let r = run_record(spec, node, run);
            super::entry::from_run(&r, "add", None, &Default::default())
                .unwrap_or_else(|e| panic!("synthetic run {node}/{run}: {e}"))
        })
        .chain(
            (0..spec.nodes)
                .filter(move |_| spec.matrices)
                .map(move |node| matrix_entry(spec, node)),
        )
}
