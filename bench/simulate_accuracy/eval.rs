//! The simulator held against measured jobs (tests/corpus/training): each case is run through
//! the real binary, as a user would run it, and its prediction set beside the measurement.
//!
//! - **Step-time cases** are two settings of one job. The first setting's measured throughput
//!   calibrates the one unknown, one GPU's compute time per micro-batch (`{compute_ms}` in
//!   its arguments, found by bisection); the second is then predicted and the ratio of the two
//!   throughputs compared with the measured ratio.
//! - **Memory cases** are a measured peak: predicted as the metric the source read
//!   (`allocated`: tensors only; `reserved`: with the allocator's reserve; `nvml`: the whole
//!   process, CUDA context and NCCL buffers included).
//! - **Fit cases** are a setup that ran or ran out of memory on a GPU of stated size.
//!
//! Shared by `bench/simulate_accuracy` (prints the table) and the integration test that holds
//! the table to what it was (tests/it/simulate_accuracy.rs).
#![allow(dead_code)]

use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    #[serde(default)]
    pub step: Vec<StepCase>,
    #[serde(default)]
    pub memory: Vec<MemoryCase>,
    #[serde(default)]
    pub fit: Vec<FitCase>,
    #[serde(default)]
    pub max_batch: Vec<MaxBatchCase>,
}

/// The largest micro-batch that ran and, where the source says, the smallest that did not.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxBatchCase {
    pub id: String,
    pub source: String,
    pub job: String,
    /// Arguments with the GPU's memory stated; `--max-batch` is added.
    pub args: String,
    pub ran_at: u64,
    #[serde(default)]
    pub oom_at: Option<u64>,
    #[serde(default)]
    pub before: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    /// The `ncclprobe` arguments (split on whitespace); `{compute_ms}` is the calibrated compute.
    pub args: String,
    /// Samples per step over all GPUs, for `simulate fsdp` (which reports a step time only).
    #[serde(default)]
    pub samples: Option<f64>,
    /// The same setup as the flags of the simulator before the terms this corpus came with
    /// could state it (for the before/after table; `NCCLPROBE_ACCURACY_BEFORE=1`).
    #[serde(default)]
    pub before: Option<String>,
}

impl Setting {
    fn args(&self) -> &str {
        before_or(&self.args, &self.before)
    }
}

/// The arguments to run: the `before` form when the table is made for an older binary.
fn before_or<'a>(args: &'a str, before: &'a Option<String>) -> &'a str {
    match (std::env::var_os("NCCLPROBE_ACCURACY_BEFORE"), before) {
        (Some(_), Some(b)) => b,
        _ => args,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCase {
    pub id: String,
    pub source: String,
    pub job: String,
    /// Why the link figure given is this one.
    pub link: String,
    /// Measured throughput of the two settings, in `unit`.
    pub measured: [f64; 2],
    pub unit: String,
    /// Units per sample (tokens per sequence for tokens/s).
    #[serde(default = "one")]
    pub per_sample: f64,
    /// The measured throughput is per GPU.
    #[serde(default)]
    pub per_gpu: bool,
    pub base: Setting,
    pub other: Setting,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryCase {
    pub id: String,
    pub source: String,
    pub job: String,
    pub args: String,
    pub measured: f64,
    /// GB (1e9), GiB, MB (1e6) or MiB, as the source prints it (see each case's note).
    pub unit: String,
    /// allocated, reserved or nvml.
    pub metric: String,
    #[serde(default)]
    pub before: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitCase {
    pub id: String,
    pub source: String,
    pub job: String,
    /// Arguments with the GPU's memory stated (--gpu-memory-gb or --gpu-memory-gib).
    pub args: String,
    pub fits: bool,
    #[serde(default)]
    pub before: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

fn one() -> f64 {
    1.0
}

pub fn load(dir: &Path) -> Corpus {
    let mut all = Corpus {
        step: Vec::new(),
        memory: Vec::new(),
        fit: Vec::new(),
        max_batch: Vec::new(),
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("tests/corpus/training is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a corpus file");
        let c: Corpus = toml::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a training corpus file: {e}", f.display()));
        all.step.extend(c.step);
        all.memory.extend(c.memory);
        all.fit.extend(c.fit);
        all.max_batch.extend(c.max_batch);
    }
    all
}

/// `{compute_ms}`, or `{compute_ms*F}` for a micro-batch F times the calibrated one's.
fn with_compute(arg: &str, compute_ms: f64) -> String {
    let Some(rest) = arg.strip_prefix("{compute_ms") else {
        return arg.to_string();
    };
    let factor = match rest.strip_suffix('}') {
        Some("") => 1.0,
        Some(f) => f
            .strip_prefix('*')
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{arg}: {{compute_ms}} or {{compute_ms*F}}")),
        None => panic!("{arg}: an unclosed {{compute_ms"),
    };
    format!("{:.6}", compute_ms * factor)
}

/// One simulation through the binary; its JSON document.
fn simulate(bin: &Path, dir: &Path, args: &str, compute_ms: f64) -> Value {
    let argv: Vec<String> = args
        .split_whitespace()
        .map(|a| with_compute(a, compute_ms))
        .chain(["--format".to_string(), "json".to_string()])
        .collect();
    let out = Command::new(bin)
        .args(&argv)
        .current_dir(dir)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .output()
        .expect("the ncclprobe binary runs");
    // 3: the plan's verdict that the setup does not fit (the document is still printed).
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "ncclprobe {}: exit {:?}\n{}",
        argv.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON document")
}

/// Throughput in the case's unit for one setting at a compute time.
fn throughput(bin: &Path, dir: &Path, case: &StepCase, s: &Setting, compute_ms: f64) -> f64 {
    let doc = simulate(bin, dir, s.args(), compute_ms);
    let world = doc["world_size"].as_f64().unwrap_or(1.0);
    let samples_per_s = match doc["simulator"].as_str() {
        Some("ddp") => doc["configurations"][0]["samples_per_s"]
            .as_f64()
            .expect("a DDP configuration"),
        Some("fsdp") => {
            let step = doc["strategies"][0]["estimate"]["step_time_s"]
                .as_f64()
                .expect("an FSDP estimate");
            s.samples
                .expect("an fsdp setting states its samples per step")
                / step
        }
        other => panic!("{}: not a step simulation: {other:?}", case.id),
    };
    let per_gpu = if case.per_gpu { world } else { 1.0 };
    samples_per_s * case.per_sample / per_gpu
}

#[derive(Debug, Clone)]
pub struct StepRow {
    pub id: String,
    pub measured_ratio: f64,
    pub predicted_ratio: f64,
    pub compute_ms: f64,
    /// The first setting's predicted throughput at the calibrated compute.
    pub base_predicted: f64,
}

impl StepRow {
    pub fn error(&self) -> f64 {
        self.predicted_ratio / self.measured_ratio - 1.0
    }
}

/// Calibrate on the first setting (geometric bisection on the compute time), predict the second.
pub fn step_row(bin: &Path, dir: &Path, case: &StepCase) -> StepRow {
    let target = case.measured[0];
    let (mut lo, mut hi) = (1e-3f64, 1e7f64);
    for _ in 0..48 {
        let mid = (lo * hi).sqrt();
        // Throughput falls as compute grows.
        if throughput(bin, dir, case, &case.base, mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi / lo < 1.0 + 1e-5 {
            break;
        }
    }
    let compute_ms = (lo * hi).sqrt();
    let base = throughput(bin, dir, case, &case.base, compute_ms);
    let other = throughput(bin, dir, case, &case.other, compute_ms);
    StepRow {
        id: case.id.clone(),
        measured_ratio: case.measured[1] / case.measured[0],
        predicted_ratio: other / base,
        compute_ms,
        base_predicted: base,
    }
}

#[derive(Debug, Clone)]
pub struct MemoryRow {
    pub id: String,
    pub measured_gb: f64,
    pub predicted_gb: f64,
}

impl MemoryRow {
    pub fn error(&self) -> f64 {
        self.predicted_gb / self.measured_gb - 1.0
    }
}

fn to_bytes(value: f64, unit: &str) -> f64 {
    value
        * match unit {
            "GB" => 1e9,
            "GiB" => (1u64 << 30) as f64,
            "MB" => 1e6,
            "MiB" => (1u64 << 20) as f64,
            other => panic!("unit {other}: GB, GiB, MB or MiB"),
        }
}

/// The plan's GPU total as the source's metric reads it.
fn as_metric(doc: &Value, metric: &str) -> f64 {
    let terms = doc["gpu"]["terms"].as_array().expect("the GPU's terms");
    let outside_allocator = ["CUDA context", "NCCL buffers"];
    terms
        .iter()
        .filter(|t| {
            let name = t["name"].as_str().unwrap_or("");
            match metric {
                "nvml" => true,
                "reserved" => !outside_allocator.contains(&name),
                "allocated" => !outside_allocator.contains(&name) && name != "allocator reserve",
                other => panic!("metric {other}: allocated, reserved or nvml"),
            }
        })
        .map(|t| t["bytes"].as_f64().unwrap_or(0.0))
        .sum()
}

pub fn memory_row(bin: &Path, dir: &Path, case: &MemoryCase) -> MemoryRow {
    let doc = simulate(bin, dir, before_or(&case.args, &case.before), 0.0);
    MemoryRow {
        id: case.id.clone(),
        measured_gb: to_bytes(case.measured, &case.unit) / 1e9,
        predicted_gb: as_metric(&doc, &case.metric) / 1e9,
    }
}

#[derive(Debug, Clone)]
pub struct FitRow {
    pub id: String,
    pub fits: bool,
    pub predicted: bool,
    pub total_gb: f64,
    pub capacity_gb: f64,
}

pub fn fit_row(bin: &Path, dir: &Path, case: &FitCase) -> FitRow {
    let doc = simulate(bin, dir, before_or(&case.args, &case.before), 0.0);
    let total = doc["gpu"]["total_bytes"].as_f64().expect("a GPU total");
    let capacity = doc["gpu"]["capacity_bytes"]
        .as_f64()
        .unwrap_or_else(|| panic!("{}: the case states no GPU memory", case.id));
    FitRow {
        id: case.id.clone(),
        fits: case.fits,
        predicted: total <= capacity,
        total_gb: total / 1e9,
        capacity_gb: capacity / 1e9,
    }
}

#[derive(Debug, Clone)]
pub struct MaxBatchRow {
    pub id: String,
    pub ran_at: u64,
    pub oom_at: Option<u64>,
    /// None when the binary has no --max-batch (an older one).
    pub predicted: Option<u64>,
}

impl MaxBatchRow {
    pub fn right(&self) -> bool {
        self.predicted
            .is_some_and(|p| p >= self.ran_at && self.oom_at.is_none_or(|o| p < o))
    }
}

pub fn max_batch_row(bin: &Path, dir: &Path, case: &MaxBatchCase) -> MaxBatchRow {
    let args = before_or(&case.args, &case.before);
    let with = format!("{args} --max-batch");
    let predicted = if std::env::var_os("NCCLPROBE_ACCURACY_BEFORE").is_some() {
        // An older planner had no search: the largest of 1..=64 its plan says fits.
        (1..=64u64)
            .take_while(|&mb| {
                let doc = simulate(bin, dir, &format!("{args} --micro-batch {mb}"), 0.0);
                doc["gpu"]["total_bytes"].as_f64() <= doc["gpu"]["capacity_bytes"].as_f64()
            })
            .last()
            .or(Some(0))
    } else {
        simulate(bin, dir, &with, 0.0)["max_micro_batch"]["micro_batch"].as_u64()
    };
    MaxBatchRow {
        id: case.id.clone(),
        ran_at: case.ran_at,
        oom_at: case.oom_at,
        predicted,
    }
}

pub struct Table {
    pub steps: Vec<StepRow>,
    pub memory: Vec<MemoryRow>,
    pub fits: Vec<FitRow>,
    pub max_batch: Vec<MaxBatchRow>,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

impl Table {
    /// Mean absolute error of the step-time ratios.
    pub fn ratio_mae(&self) -> f64 {
        mean(self.steps.iter().map(|r| r.error().abs()))
    }
    /// Mean absolute error of the peaks.
    pub fn peak_mae(&self) -> f64 {
        mean(self.memory.iter().map(|r| r.error().abs()))
    }
    /// The share of fit cases called right.
    pub fn fit_accuracy(&self) -> f64 {
        mean(
            self.fits
                .iter()
                .map(|r| if r.fits == r.predicted { 1.0 } else { 0.0 }),
        )
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("step-time cases (throughput of the second setting / the first)\n");
        s.push_str(&format!(
            "{:<24} {:>9} {:>9} {:>8} {:>11}\n",
            "case", "measured", "predicted", "error", "compute ms"
        ));
        for r in &self.steps {
            s.push_str(&format!(
                "{:<24} {:>9.3} {:>9.3} {:>+7.1}% {:>11.2}\n",
                r.id,
                r.measured_ratio,
                r.predicted_ratio,
                r.error() * 100.0,
                r.compute_ms
            ));
        }
        s.push_str("\nmemory cases (peak per GPU, GB)\n");
        s.push_str(&format!(
            "{:<24} {:>9} {:>9} {:>8}\n",
            "case", "measured", "predicted", "error"
        ));
        for r in &self.memory {
            s.push_str(&format!(
                "{:<24} {:>9.2} {:>9.2} {:>+7.1}%\n",
                r.id,
                r.measured_gb,
                r.predicted_gb,
                r.error() * 100.0
            ));
        }
        s.push_str("\nfit cases\n");
        s.push_str(&format!(
            "{:<24} {:>8} {:>9} {:>9} {:>9}\n",
            "case", "measured", "predicted", "total GB", "of GB"
        ));
        let word = |b: bool| if b { "fits" } else { "OOM" };
        for r in &self.fits {
            s.push_str(&format!(
                "{:<24} {:>8} {:>9} {:>9.2} {:>9.2}{}\n",
                r.id,
                word(r.fits),
                word(r.predicted),
                r.total_gb,
                r.capacity_gb,
                if r.fits == r.predicted { "" } else { "  WRONG" }
            ));
        }
        s.push_str("\nlargest micro-batch\n");
        s.push_str(&format!(
            "{:<24} {:>8} {:>8} {:>9}\n",
            "case", "ran at", "OOM at", "predicted"
        ));
        for r in &self.max_batch {
            s.push_str(&format!(
                "{:<24} {:>8} {:>8} {:>9}{}\n",
                r.id,
                r.ran_at,
                r.oom_at.map_or("-".to_string(), |o| o.to_string()),
                r.predicted.map_or("-".to_string(), |p| p.to_string()),
                if r.right() { "" } else { "  WRONG" }
            ));
        }
        s.push_str(&format!(
            "\nstep-time ratios: {} cases, mean absolute error {:.1}% (target 15%)\n",
            self.steps.len(),
            self.ratio_mae() * 100.0
        ));
        s.push_str(&format!(
            "memory peaks: {} cases, mean absolute error {:.1}% (target 10%)\n",
            self.memory.len(),
            self.peak_mae() * 100.0
        ));
        s.push_str(&format!(
            "fit/no-fit: {} cases, {:.0}% right (target 95%)\n",
            self.fits.len(),
            self.fit_accuracy() * 100.0
        ));
        s.push_str(&format!(
            "largest micro-batch: {} cases, {} right\n",
            self.max_batch.len(),
            self.max_batch.iter().filter(|r| r.right()).count()
        ));
        s
    }
}

/// Every case of the corpus, in file order.
pub fn evaluate(bin: &Path, dir: &Path) -> Table {
    let c = load(dir);
    Table {
        steps: c.step.iter().map(|k| step_row(bin, dir, k)).collect(),
        memory: c.memory.iter().map(|k| memory_row(bin, dir, k)).collect(),
        fits: c.fit.iter().map(|k| fit_row(bin, dir, k)).collect(),
        max_batch: c
            .max_batch
            .iter()
            .map(|k| max_batch_row(bin, dir, k))
            .collect(),
    }
}
