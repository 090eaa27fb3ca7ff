//! `-J FILE.json` as an nccl-tests 2.19.6 `*_perf` binary writes it (src/util.cu,
//! jsonOutputInit .. jsonOutputFinalize, format version 3): the same keys in the same order, C's
//! quirks kept where a reader could depend on them (booleans as the strings "true"/"false", the
//! root as the `%6i` text, NaN as "nan", `cpu_time` for `time` under -C).
//!
//! This file is the one JSON ncclprobe writes that is not its own typed document with
//! `schema_version` and `kind`: it is nccl-tests' format, for the scripts that read it.
//!
//! Where ncclprobe differs on purpose: the file is rewritten whole (to a temporary file renamed
//! over it) as rows finish, at most once a second, so a crash or a signal leaves a complete
//! document of the rows so far rather than a cut one; `devices` lists every rank's GPU
//! (nccl-tests' single-process build lists only the first, as parseRankInfo reads one line);
//! strings are escaped rather than cut at the first non-ASCII byte (sanitizeJson).

use crate::model::{Point, RankInfo};
use crate::render::perf::{
    as_reported, footer_figures, iter_stats, local_time, min_bw_json_okay, summarised, PerfStyle,
};
use serde::{Serialize, Serializer};
use std::path::{Path, PathBuf};

/// JSON_FILE_VERSION in src/util.cu.
pub const FILE_VERSION: u32 = 3;

/// Whether nccl-tests writes JSON to `path`: its extension (after the last `.` that no `/`
/// follows, and not at the end) is `json` in any case (src/common.cu, getExtension and
/// classifyOutputFile). Any other name writes nothing, silently.
pub fn is_json_name(path: &str) -> bool {
    let dot = path.rfind('.');
    let slash = path.rfind('/');
    match dot {
        Some(d) if slash.is_none_or(|s| d > s) && d + 1 < path.len() => {
            path[d + 1..].eq_ignore_ascii_case("json")
        }
        _ => false,
    }
}

/// The name [`claim`] would take now: `path`, or the first free `PATH.0`, `PATH.1`, ... (a
/// name is taken when anything, a dangling link included, is there).
pub fn unclaimed(path: &str) -> PathBuf {
    let taken = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let first = PathBuf::from(path);
    if !taken(&first) {
        return first;
    }
    (0u64..)
        .map(|n| PathBuf::from(format!("{path}.{n}")))
        .find(|p| !taken(p))
        .unwrap_or(first)
}

/// Claim the file as jsonOutputInit does: created exclusively, or if the name is taken, the
/// first free `PATH.0`, `PATH.1`, ... (so an earlier run's file is never overwritten). Returns
/// the path claimed (None when it cannot be) and the line nccl-tests prints about it.
pub fn claim(path: &str) -> (Option<PathBuf>, String) {
    let mut attempt = PathBuf::from(path);
    for n in 0u64.. {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&attempt)
        {
            Ok(_) => {
                let line = format!("# Writing JSON output to {}", attempt.display());
                return (Some(attempt), line);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                attempt = PathBuf::from(format!("{path}.{n}"));
            }
            Err(_) => {
                let line = format!(
                    "# skipping json output; {} not accessible",
                    attempt.display()
                );
                return (None, line);
            }
        }
    }
    unreachable!("u64 names run out")
}

/// jsonBool: the strings "true" and "false", not JSON booleans.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CBool(pub bool);

impl CBool {
    pub fn text(self) -> &'static str {
        if self.0 {
            "true"
        } else {
            "false"
        }
    }
}

impl Serialize for CBool {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.text())
    }
}

/// jsonDouble: a number, or the string "nan".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CDouble(pub f64);

impl Serialize for CDouble {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_nan() {
            s.serialize_str("nan")
        } else {
            s.serialize_f64(self.0)
        }
    }
}

/// The run's parameters and its GPUs (writeDeviceReport).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Config {
    pub nthreads: i64,
    pub ngpus: i64,
    pub minimum_bytes: u64,
    pub maximum_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_factor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_bytes: Option<u64>,
    pub warmup_iters: i64,
    pub iterations: i64,
    pub aggregated_iterations: i64,
    pub validation: i64,
    pub graph: i64,
    pub blocking_collectives: CBool,
    pub per_iter_timing: CBool,
    pub per_iter_skip: i64,
    pub parallel_init: CBool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<Device>>,
}

/// One rank's line of `# Using devices` (jsonRankInfo).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Device {
    pub rank: usize,
    pub group: i64,
    pub pid: u32,
    pub hostname: String,
    /// The CUDA ordinal; -1 for the host backend's ranks, which have no GPU.
    pub device: i64,
    /// `0000:18:00`: domain, bus and device as the rank line shows them.
    pub device_hex: String,
    pub device_info: String,
}

impl Device {
    /// From the rank line's parts; the device text is `%2d [%04x:%02x:%02x] %s`.
    pub fn of(rank: &RankInfo) -> Device {
        let text = rank.device.as_deref().unwrap_or("host memory").trim();
        let parsed = text.split_once(' ').and_then(|(ordinal, rest)| {
            let ordinal: i64 = ordinal.trim().parse().ok()?;
            let (hex, info) = rest.trim_start().strip_prefix('[')?.split_once(']')?;
            Some((ordinal, hex.to_string(), info.trim_start().to_string()))
        });
        let (device, device_hex, device_info) =
            parsed.unwrap_or((-1, String::new(), text.to_string()));
        Device {
            rank: rank.rank,
            group: 0,
            pid: rank.pid,
            hostname: rank.host.clone(),
            device,
            device_hex,
            device_info,
        }
    }
}

/// One placement's figures (writeBenchmarkLineBody). Exactly one of `time`/`cpu_time` is set.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Placed {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<CDouble>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<CDouble>,
    pub alg_bw: CDouble,
    pub bus_bw: CDouble,
    /// null when the run did not check (-c 0).
    pub nwrong: Option<CDouble>,
}

impl Placed {
    fn of(p: &Point, cputime: bool) -> Placed {
        let us = Some(CDouble(p.time_s * 1e6));
        Placed {
            time: us.filter(|_| !cputime),
            cpu_time: us.filter(|_| cputime),
            alg_bw: CDouble(p.algbw_bytes_per_s / 1e9),
            bus_bw: CDouble(p.busbw_bytes_per_s / 1e9),
            nwrong: p.wrong.map(|w| CDouble(w as f64)),
        }
    }
}

/// One row of the table (writeBenchmarkLinePreamble .. writeBenchmarkLineTerminator).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: String,
    pub redop: String,
    /// `%6i` of the root: `"    -1"` for collectives without one.
    pub root: String,
    pub out_of_place: Option<Placed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_place_per_iter: Option<PerIter>,
    pub in_place: Placed,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_place_per_iter: Option<PerIter>,
    /// -n: the timed calls per placement.
    pub actual_iterations: i64,
    pub experiment_name: String,
}

/// -I's figures for one placement (writePerIterReport), in microseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PerIter {
    pub skipped_iterations: usize,
    pub min_us: CDouble,
    pub max_us: CDouble,
    pub avg_us: CDouble,
    pub p50_us: CDouble,
    pub p95_us: CDouble,
    pub p99_us: CDouble,
    pub stdev_us: CDouble,
    pub cv_pct: CDouble,
    /// Every call, the slowest process's time.
    pub times_us: Vec<CDouble>,
    /// With more than one process: per process, its slowest rank's time of every call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_process_max_times_us: Option<Vec<Vec<CDouble>>>,
}

impl PerIter {
    /// `processes`: the ranks of each process, in the order of the device list.
    fn of(p: &Point, processes: &[Vec<usize>]) -> Option<PerIter> {
        let each = p.per_iteration.as_ref()?;
        let s = iter_stats(summarised(each));
        let us = |v: f64| CDouble(v * 1e6);
        let rows = (processes.len() > 1).then(|| {
            processes
                .iter()
                .map(|ranks| {
                    (0..each.times_s.len())
                        .map(|i| {
                            let t = ranks
                                .iter()
                                .filter_map(|r| each.per_rank_s.get(*r)?.get(i).copied())
                                .fold(f64::NEG_INFINITY, f64::max);
                            us(t)
                        })
                        .collect()
                })
                .collect()
        });
        Some(PerIter {
            skipped_iterations: each.skipped,
            min_us: us(s.min),
            max_us: us(s.max),
            avg_us: us(s.avg),
            p50_us: us(s.p50),
            p95_us: us(s.p95),
            p99_us: us(s.p99),
            stdev_us: us(s.stdev),
            cv_pct: CDouble(s.cv_pct),
            times_us: each.times_s.iter().map(|t| us(*t)).collect(),
            per_process_max_times_us: rows,
        })
    }
}

impl Row {
    pub fn of(
        out_of_place: &Point,
        in_place: &Point,
        iters: i64,
        cputime: bool,
        processes: &[Vec<usize>],
    ) -> Row {
        let p = out_of_place;
        Row {
            size: p.size_bytes,
            count: p.count,
            dtype: p.dtype.name().to_string(),
            redop: p.redop.map(|o| o.name()).unwrap_or("none").to_string(),
            root: format!("{:6}", p.root),
            out_of_place: Some(Placed::of(out_of_place, cputime)),
            out_of_place_per_iter: PerIter::of(out_of_place, processes),
            in_place: Placed::of(in_place, cputime),
            in_place_per_iter: PerIter::of(in_place, processes),
            actual_iterations: iters,
            experiment_name: String::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutOfBounds {
    pub count: usize,
    pub okay: CBool,
}

/// `okay` is "unchecked" without NCCL_TESTS_MIN_BW, else "true"/"false".
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AverageBusBandwidth {
    pub bandwidth: CDouble,
    pub okay: String,
}

/// The whole file, in nccl-tests' key order.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Document {
    pub version: u32,
    pub start_time: String,
    pub args: Vec<String>,
    pub env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<Row>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_bounds: Option<OutOfBounds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_bus_bandwidth: Option<AverageBusBandwidth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
}

/// The document and the file it is kept in.
pub struct Writer {
    path: PathBuf,
    /// The ranks of each process (host and pid), in rank order of their first rank.
    processes: Vec<Vec<usize>>,
    pub doc: Document,
    /// The first write error, reported once.
    failed: bool,
    /// When the file was last rewritten: rows rewrite it at most once a second.
    written: Option<std::time::Instant>,
    /// -N 0: only this many of the latest rows are kept.
    keep_last: Option<usize>,
}

impl Writer {
    /// A document begun now, for the file `claim` returned.
    pub fn new(path: &Path, args: Vec<String>, env: Vec<String>) -> Writer {
        Writer {
            path: path.to_path_buf(),
            processes: Vec::new(),
            doc: Document {
                version: FILE_VERSION,
                start_time: local_time(),
                args,
                env,
                nccl_version: None,
                config: None,
                results: None,
                out_of_bounds: None,
                average_bus_bandwidth: None,
                errors: None,
                end_time: None,
            },
            failed: false,
            written: None,
            keep_last: None,
        }
    }

    /// The banner's part: NCCL's version code and the run's parameters (writeDeviceReport).
    pub fn set_config(&mut self, style: &PerfStyle, min_bytes: u64, nccl_version: i64) {
        let factor = style.step_factor > 1;
        self.doc.nccl_version = Some(nccl_version);
        self.doc.config = Some(Config {
            nthreads: style.nthreads,
            ngpus: style.ngpus,
            minimum_bytes: min_bytes,
            maximum_bytes: style.max_bytes,
            step_factor: factor.then_some(style.step_factor),
            step_bytes: (!factor).then_some(style.step_bytes),
            warmup_iters: style.warmup_iters,
            iterations: style.iters,
            aggregated_iterations: style.agg_iters,
            validation: style.validation,
            graph: style.graph,
            blocking_collectives: CBool(style.blocking != 0),
            per_iter_timing: CBool(style.per_iter_skip.is_some()),
            per_iter_skip: style.per_iter_skip.unwrap_or(0) as i64,
            parallel_init: CBool(style.parallel_init),
            devices: None,
        });
        self.flush();
    }

    /// `# Using devices`: one entry per rank.
    pub fn set_devices(&mut self, ranks: &[RankInfo]) {
        let mut seen: Vec<(&str, u32)> = Vec::new();
        self.processes.clear();
        for r in ranks {
            let key = (r.host.as_str(), r.pid);
            match seen.iter().position(|k| *k == key) {
                Some(i) => self.processes[i].push(r.rank),
                None => {
                    seen.push(key);
                    self.processes.push(vec![r.rank]);
                }
            }
        }
        if let Some(config) = self.doc.config.as_mut() {
            config.devices = Some(ranks.iter().map(Device::of).collect());
        }
        self.flush();
    }

    /// One finished row (the results list opens with the table's header).
    pub fn push_row(&mut self, style: &PerfStyle, out_of_place: &Point, in_place: &Point) {
        let row = Row::of(
            &as_reported(style, out_of_place),
            &as_reported(style, in_place),
            style.iters,
            style.report_cputime,
            &self.processes,
        );
        let results = self.doc.results.get_or_insert_with(Vec::new);
        results.push(row);
        if let Some(n) = self.keep_last {
            let over = results.len().saturating_sub(n);
            results.drain(..over);
        }
        // The whole document is rewritten each time: with thousands of rows (-d all -o all,
        // -N) a rewrite per row would cost more than the rows, so at most one a second; the
        // footer and the end always write.
        if self
            .written
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1))
        {
            self.flush();
        }
    }

    /// -N 0: keep only the last `rows` rows (one walk of the sizes), not every walk's.
    pub fn keep_last(&mut self, rows: usize) {
        self.keep_last = Some(rows.max(1));
    }

    /// The summary after the table (writeResultFooter).
    pub fn set_footer(&mut self, style: &PerfStyle, points: &[Point]) {
        let (failed_checks, average, _) = footer_figures(style, points);
        self.doc.results.get_or_insert_with(Vec::new);
        self.doc.out_of_bounds = Some(OutOfBounds {
            count: failed_checks,
            okay: CBool(failed_checks == 0),
        });
        self.doc.average_bus_bandwidth = Some(AverageBusBandwidth {
            bandwidth: CDouble(average),
            okay: match min_bw_json_okay(style, average) {
                None => "unchecked".into(),
                Some(ok) => CBool(ok).text().into(),
            },
        });
        self.flush();
    }

    /// The end (writeErrors, jsonOutputFinalize): the error the run ended on, if any, and
    /// the time.
    pub fn finish(&mut self, error: Option<&str>) {
        self.doc.errors = Some(error.map(str::to_string).into_iter().collect());
        self.doc.end_time = Some(local_time());
        self.flush();
    }

    /// Rewrite the file with the document as it stands. nccl-tests does not stop a run for its
    /// JSON, so neither does this: the first failure is said on stderr and the run goes on.
    pub fn flush(&mut self) {
        self.written = Some(std::time::Instant::now());
        let text = match serde_json::to_vec(&self.doc) {
            Ok(t) => t,
            Err(e) => return self.fail(&e.to_string()),
        };
        if let Err(e) = crate::render::record::write_atomic(&self.path, &text) {
            self.fail(&e.to_string());
        }
    }

    fn fail(&mut self, why: &str) {
        if !self.failed {
            eprintln!("ncclprobe: -J {}: {why}", self.path.display());
            self.failed = true;
        }
    }
}

#[cfg(test)]
#[path = "perf_json_tests.rs"]
mod tests;
