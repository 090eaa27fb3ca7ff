//! A document as the store keeps it: who ran it (node, SKU, GPUs), with what (driver, CUDA,
//! NCCL, ncclprobe, the environment's `NCCL_*`/`CUDA_*`/transport choices), when, each point's
//! statistics and raw samples, gate results, pair links and the GPUs' health counters.

use crate::documents::matrix::MatrixDocument;
use crate::model::RunRecord;
use serde::Serialize;
use sha2::Digest;
use std::collections::BTreeMap;
use std::io::Write;

/// What the user said about the machine, over what the document says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stated {
    pub node: Option<String>,
    pub sku: Option<String>,
}

/// Which machine a document is from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Identity {
    /// The host name (or the hosts, `+`-joined, of a run that spans several).
    pub node: String,
    /// `8x NVIDIA H100 80GB HBM3`: the GPUs' count and model.
    pub sku: String,
    /// The GPUs' UUIDs (NVML), else their PCI bus ids.
    pub gpus: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PointRow {
    pub collective: String,
    pub dtype: String,
    pub redop: Option<String>,
    pub placement: String,
    pub root: i64,
    pub nranks: i64,
    pub size_bytes: i64,
    pub time_s: f64,
    pub busbw: f64,
    pub algbw: f64,
    pub ci_low_s: Option<f64>,
    pub ci_high_s: Option<f64>,
    pub wrong: Option<i64>,
    pub samples: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateRow {
    pub rule: String,
    pub collective: Option<String>,
    pub size_bytes: Option<i64>,
    pub measured: Option<f64>,
    pub required: Option<f64>,
    pub unit: String,
    pub passed: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HeadlineRow {
    pub collective: String,
    pub dtype: String,
    pub plateau_busbw: f64,
    pub latency_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LinkRow {
    pub src: String,
    pub dst: String,
    pub direction: String,
    pub size_bytes: i64,
    pub bandwidth: f64,
    pub time_s: f64,
}

/// The health counters a fleet judges, summed over the machine's GPUs (what the `health`
/// column keeps, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HealthSummary {
    /// Uncorrectable ECC errors since the driver loaded.
    #[serde(default)]
    pub ecc_uncorrected: u64,
    /// NVLink replay, recovery and CRC counts, by `GPUn link m`.
    #[serde(default)]
    pub nvlink_errors: BTreeMap<String, u64>,
    /// GPUs whose PCIe link runs narrower or slower than it can (`GPUn: x8 of x16`).
    #[serde(default)]
    pub pcie_degraded: Vec<String>,
    /// Row remappings that failed or wait for a reset.
    #[serde(default)]
    pub remap_pending: u64,
}

/// One document, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub digest: String,
    /// `run` or `matrix`.
    pub kind: &'static str,
    /// The command that stored it (`sweep`, `qualify`, `matrix`, `doctor`, `add`).
    pub origin: String,
    pub source_file: Option<String>,
    pub identity: Identity,
    pub started_at: String,
    pub started_unix: f64,
    pub status: String,
    /// The gate's verdict, when the document carries one.
    pub passed: Option<bool>,
    pub tool_version: String,
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
    pub backend: String,
    pub nranks: i64,
    pub hosts: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub health: HealthSummary,
    /// The document itself, deflated (its points' samples are kept once, in `points`).
    pub document: Vec<u8>,
    pub points: Vec<PointRow>,
    pub gates: Vec<GateRow>,
    pub headlines: Vec<HeadlineRow>,
    pub links: Vec<LinkRow>,
}

pub use crate::model::unix_time;

/// How far ahead of this machine's clock a document's start may be (clocks of a fleet differ
/// by seconds, not by this much).
const CLOCK_SKEW_S: f64 = 600.0;

/// A start in the future would be a node's "latest" run for ever, hiding every later one: such
/// a document is refused, named with its time (D19 of the hostile review).
fn not_in_the_future(what: &str, started_at: &str, started_unix: f64) -> Result<(), String> {
    let now = unix_time(&crate::model::now_rfc3339()).unwrap_or(f64::INFINITY);
    if started_unix > now + CLOCK_SKEW_S {
        return Err(format!(
            "{what}: started_at {started_at} is in the future (this machine's clock says {}); a store would take it as the node's latest run for ever: fix the clock that wrote it",
            crate::model::now_rfc3339()
        ));
    }
    Ok(())
}

fn digest(bytes: &[u8]) -> String {
    let hash = sha2::Sha256::digest(bytes);
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

/// The version a `library_versions` entry starts with (`2.21.5 (/path/libnccl.so.2)` → `2.21.5`).
fn version_of(record_versions: &BTreeMap<String, String>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| record_versions.get(*k))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
}

/// The CUDA driver's version (`cuda-driver` as a sweep names it).
fn driver_of(versions: &BTreeMap<String, String>) -> Option<String> {
    version_of(versions, &["cuda-driver", "driver"])
}

/// The model name in an imported rank's device (`0 [0000:19:00] NVIDIA H800` → `NVIDIA H800`).
fn device_model(device: &str) -> &str {
    let t = device.trim();
    match t.find(']') {
        Some(i) => t[i + 1..].trim(),
        None => t.trim_start_matches(|c: char| c.is_ascii_digit()).trim(),
    }
}

/// `8x NVIDIA H100 80GB HBM3`; several models are listed by count, most first.
fn sku_of(models: &[String]) -> Option<String> {
    if models.is_empty() {
        return None;
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in models.iter().filter(|m| !m.is_empty()) {
        *counts.entry(m.as_str()).or_default() += 1;
    }
    let mut by: Vec<(&str, usize)> = counts.into_iter().collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = by.iter().map(|(m, n)| format!("{n}x {m}")).collect();
    (!parts.is_empty()).then(|| parts.join(" + "))
}

/// `--sku` as given, trimmed; a blank one is no SKU stated (as a blank `--node-name` is).
fn stated_sku(stated: &Stated) -> Option<String> {
    stated
        .sku
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The longest node or SKU name a store keeps (host names stop at 253 bytes; both engines
/// index these columns, and PostgreSQL's index rows stop near 8 KiB).
pub const MAX_NAME_BYTES: usize = 512;

/// A node or SKU name both engines store alike: no NUL (PostgreSQL's text cannot hold one),
/// no longer than [`MAX_NAME_BYTES`].
fn storable(field: &str, name: String) -> Result<String, String> {
    if name.contains('\0') {
        return Err(format!(
            "the {field} name {:?} holds a NUL character, which no store keeps: name it with --{}",
            crate::secrets::redact(&name.replace('\0', "\\0"))
                .chars()
                .take(80)
                .collect::<String>(),
            if field == "node" { "node-name" } else { "sku" }
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "the {field} name is {} bytes long, more than the {MAX_NAME_BYTES} a store keeps (it starts {:?}): name it with --{}",
            name.len(),
            name.chars().take(40).collect::<String>(),
            if field == "node" { "node-name" } else { "sku" }
        ));
    }
    Ok(name)
}

fn node_of(hosts: &[String], stated: &Stated, what: &str) -> Result<String, String> {
    if let Some(n) = stated.node.as_deref().filter(|n| !n.trim().is_empty()) {
        return Ok(n.trim().to_string());
    }
    let mut unique: Vec<&String> = hosts.iter().filter(|h| !h.is_empty()).collect();
    unique.sort();
    unique.dedup();
    match unique.len() {
        0 => Err(format!(
            "{what} names no host: say which node it is from with --node-name"
        )),
        _ => Ok(unique
            .iter()
            .map(|h| h.as_str())
            .collect::<Vec<_>>()
            .join("+")),
    }
}

fn health_of(record: &RunRecord) -> HealthSummary {
    let mut h = HealthSummary::default();
    for g in &record.gpu_health {
        h.ecc_uncorrected += g.health.ecc_uncorrected_volatile.unwrap_or(0);
        if let Some(r) = g.health.remapped_rows {
            h.remap_pending += u64::from(r.pending) + u64::from(r.failure);
        }
        for l in &g.health.nvlink_errors {
            let n = l.replay + l.recovery + l.crc_flit + l.crc_data;
            if n > 0 {
                h.nvlink_errors
                    .insert(format!("GPU{} link {}", g.index, l.link), n);
            }
        }
        let degraded = |x: Option<(u32, u32)>| x.is_some_and(|(cur, max)| cur < max);
        if degraded(g.pcie_width) || degraded(g.pcie_gen) {
            let (w, wm) = g.pcie_width.unwrap_or_default();
            let (gen, gm) = g.pcie_gen.unwrap_or_default();
            h.pcie_degraded
                .push(format!("GPU{}: Gen{gen} x{w} of Gen{gm} x{wm}", g.index));
        }
    }
    h
}

/// A run record (measured, imported, gated) as the store keeps it.
/// A record's command line and environment as a store keeps them: credentials redacted.
fn redact_run(r: &mut RunRecord) {
    for a in r.command_line.iter_mut() {
        *a = crate::secrets::redact(a);
    }
    for (k, v) in r.env.iter_mut() {
        *v = crate::secrets::kept_value(k, v);
    }
}

pub fn from_run(
    record: &RunRecord,
    origin: &str,
    source_file: Option<&str>,
    stated: &Stated,
) -> Result<Entry, String> {
    let what = source_file.unwrap_or("the run");
    let hosts: Vec<String> = if record.backend.hosts.is_empty() {
        record
            .backend
            .ranks
            .iter()
            .map(|r| r.host.clone())
            .collect()
    } else {
        record.backend.hosts.clone()
    };
    let node = node_of(&hosts, stated, what)?;
    let models: Vec<String> = if record.gpu_health.is_empty() {
        let node_hosts = hosts.first().cloned().unwrap_or_default();
        record
            .backend
            .ranks
            .iter()
            .filter(|r| r.host == node_hosts)
            .filter_map(|r| r.device.as_deref().map(|d| device_model(d).to_string()))
            .collect()
    } else {
        record.gpu_health.iter().map(|g| g.name.clone()).collect()
    };
    let sku = stated_sku(stated)
        .or_else(|| sku_of(&models))
        .unwrap_or_else(|| format!("{} ({} ranks)", record.backend.name, record.backend.nranks));
    let (node, sku) = (storable("node", node)?, storable("SKU", sku)?);
    let gpus = record
        .gpu_health
        .iter()
        .map(|g| g.uuid.clone().unwrap_or_else(|| g.bus_id.clone()))
        .collect();
    let started_unix = unix_time(&record.started_at).ok_or_else(|| {
        format!(
            "{what}: started_at {:?} is not an RFC 3339 time",
            record.started_at
        )
    })?;
    not_in_the_future(what, &record.started_at, started_unix)?;
    // One measurement is one run however it reaches the store (sweep --history, history add
    // of its record, an nccl-tests log imported twice): the digest is of what was measured,
    // where and when, never of the file's bytes, its import time or who added it.
    let measured = serde_json::json!({
        "source": record.source,
        "started_at": match record.source {
            crate::model::Source::Measured => Some(&record.started_at),
            crate::model::Source::Imported => None,
        },
        "node": &node,
        "hosts": &hosts,
        "nranks": record.backend.nranks,
        "points": &record.points,
    });
    let json = serde_json::to_vec(&measured).map_err(|e| e.to_string())?;
    let mut stripped = record.clone();
    for p in stripped.points.iter_mut() {
        p.samples_s.clear();
    }
    // A shared store never keeps a credential (an older record may carry one).
    redact_run(&mut stripped);
    let kept = serde_json::to_vec(&stripped).map_err(|e| e.to_string())?;
    let q = record.qualification.as_ref();
    Ok(Entry {
        digest: digest(&json),
        kind: "run",
        origin: origin.to_string(),
        source_file: source_file.map(str::to_string),
        identity: Identity { node, sku, gpus },
        started_at: record.started_at.clone(),
        started_unix,
        status: record.status.name().to_string(),
        passed: q.map(|q| q.passed),
        tool_version: record.tool.version.clone(),
        driver: driver_of(&record.backend.library_versions),
        cuda: version_of(&record.backend.library_versions, &["cuda", "cuda-runtime"]),
        nccl: version_of(&record.backend.library_versions, &["nccl"]),
        backend: record.backend.name.clone(),
        nranks: record.backend.nranks as i64,
        hosts,
        env: record.env.clone(),
        health: health_of(record),
        document: deflate(&kept),
        points: record.points.iter().map(point_row).collect(),
        gates: q
            .map(|q| q.results.iter().map(gate_row).collect())
            .unwrap_or_default(),
        headlines: record
            .headlines
            .iter()
            .map(|h| HeadlineRow {
                collective: h.collective.name().to_string(),
                dtype: h.dtype.name().to_string(),
                plateau_busbw: h.plateau_busbw_bytes_per_s,
                latency_s: h.small_latency_s.is_finite().then_some(h.small_latency_s),
            })
            .collect(),
        links: Vec::new(),
    })
}

fn point_row(p: &crate::model::Point) -> PointRow {
    let finite = |v: f64| v.is_finite().then_some(v);
    PointRow {
        collective: p.collective.name().to_string(),
        dtype: p.dtype.name().to_string(),
        redop: p.redop.map(|r| r.name().to_string()),
        placement: p.placement.name().to_string(),
        root: p.root,
        nranks: p.nranks as i64,
        size_bytes: p.size_bytes as i64,
        time_s: p.time_s,
        busbw: p.busbw_bytes_per_s,
        algbw: p.algbw_bytes_per_s,
        ci_low_s: finite(p.stats.ci_low_s),
        ci_high_s: finite(p.stats.ci_high_s),
        wrong: p.wrong.map(|w| w as i64),
        samples: p.samples_s.clone(),
    }
}

fn gate_row(r: &crate::documents::qualification::RuleResult) -> GateRow {
    GateRow {
        rule: r.rule.clone(),
        collective: r.collective.map(|c| c.name().to_string()),
        size_bytes: r.size_bytes.map(|s| s as i64),
        measured: r.measured,
        required: r.required,
        unit: r.unit.clone(),
        passed: r.passed,
        message: r.message.clone(),
    }
}

/// A pair matrix as the store keeps it: each pair's bandwidth at each size, as a link.
pub fn from_matrix(
    doc: &MatrixDocument,
    origin: &str,
    source_file: Option<&str>,
    stated: &Stated,
) -> Result<Entry, String> {
    let what = source_file.unwrap_or("the matrix");
    let hosts: Vec<String> = doc.endpoints.iter().map(|e| e.host.clone()).collect();
    let node = node_of(&hosts, stated, what)?;
    let models: Vec<String> = doc
        .endpoints
        .iter()
        .filter_map(|e| e.device.as_deref().map(|d| device_model(d).to_string()))
        .collect();
    let sku = stated_sku(stated)
        .or_else(|| sku_of(&models))
        .unwrap_or_else(|| format!("{} ({} ranks)", doc.backend.name, doc.backend.nranks));
    let (node, sku) = (storable("node", node)?, storable("SKU", sku)?);
    let started_unix = unix_time(&doc.started_at).ok_or_else(|| {
        format!(
            "{what}: started_at {:?} is not an RFC 3339 time",
            doc.started_at
        )
    })?;
    not_in_the_future(what, &doc.started_at, started_unix)?;
    let mut kept = doc.clone();
    for a in kept.command_line.iter_mut() {
        *a = crate::secrets::redact(a);
    }
    let json = serde_json::to_vec(&kept).map_err(|e| e.to_string())?;
    let label = |i: usize| {
        doc.endpoints
            .get(i)
            .map_or_else(|| format!("#{i}"), |e| e.label.clone())
    };
    Ok(Entry {
        digest: digest(&json),
        kind: "matrix",
        origin: origin.to_string(),
        source_file: source_file.map(str::to_string),
        identity: Identity {
            node,
            sku,
            gpus: Vec::new(),
        },
        started_at: doc.started_at.clone(),
        started_unix,
        status: doc.status.name().to_string(),
        passed: None,
        tool_version: doc.tool.version.clone(),
        driver: driver_of(&doc.backend.library_versions),
        cuda: version_of(&doc.backend.library_versions, &["cuda", "cuda-runtime"]),
        nccl: version_of(&doc.backend.library_versions, &["nccl"]),
        backend: doc.backend.name.clone(),
        nranks: doc.backend.nranks as i64,
        hosts,
        env: doc.env.clone(),
        health: HealthSummary::default(),
        document: deflate(&json),
        points: Vec::new(),
        gates: Vec::new(),
        headlines: Vec::new(),
        links: doc
            .measurements
            .iter()
            .filter(|m| m.bw_bytes_per_s.is_finite())
            .map(|m| LinkRow {
                src: label(m.from),
                dst: label(m.to),
                direction: m.direction.name().to_string(),
                size_bytes: m.size_bytes as i64,
                bandwidth: m.bw_bytes_per_s,
                time_s: m.time_s,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sku_counts_models_and_devices_lose_their_index() {
        assert_eq!(device_model("0 [0000:19:00] NVIDIA H800"), "NVIDIA H800");
        let m = vec!["NVIDIA H100 80GB HBM3".to_string(); 8];
        assert_eq!(sku_of(&m).unwrap(), "8x NVIDIA H100 80GB HBM3");
        let mixed = vec!["A".to_string(), "B".to_string(), "B".to_string()];
        assert_eq!(sku_of(&mixed).unwrap(), "2x B + 1x A");
        assert!(sku_of(&[]).is_none());
    }

    #[test]
    fn a_node_is_stated_or_named_by_the_document() {
        let hosts = vec!["gpu07".to_string(), "gpu07".to_string()];
        assert_eq!(node_of(&hosts, &Stated::default(), "x").unwrap(), "gpu07");
        let stated = Stated {
            node: Some("rack3-n5".into()),
            sku: None,
        };
        assert_eq!(node_of(&hosts, &stated, "x").unwrap(), "rack3-n5");
        assert!(node_of(&[], &Stated::default(), "x")
            .unwrap_err()
            .contains("--node"));
        let two = vec!["b".to_string(), "a".to_string()];
        assert_eq!(node_of(&two, &Stated::default(), "x").unwrap(), "a+b");
    }

    #[test]
    fn times_are_read_as_unix_seconds() {
        assert_eq!(unix_time("1970-01-01T00:01:00Z"), Some(60.0));
        assert!(unix_time("yesterday").is_none());
    }
}
