//! NCCL Inspector's JSON output (NVIDIA/nccl `plugins/profiler/inspector`, `NCCL_INSPECTOR_ENABLE=1`):
//! one object per collective per communicator, concatenated, with the communicator's
//! `header` (`id`, `rank`, `n_ranks`, `nnodes`), `metadata` (`hostname`, `pid`,
//! `dump_timestamp_us`, format version) and `coll_perf` (`coll`, `coll_sn`,
//! `coll_msg_size_bytes`, `coll_exec_time_us`, `coll_timing_source`, `coll_algobw_gbs`,
//! `coll_busbw_gbs`). Read as a stream of objects; P2P records and others are counted, not kept.

use super::types::{bad, TraceError};
use crate::coll::Collective;
use serde::Deserialize;

/// One collective as Inspector timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct InspectorRecord {
    pub source: String,
    /// The communicator's id.
    pub comm: String,
    pub rank: Option<usize>,
    pub nranks: usize,
    pub nnodes: Option<usize>,
    pub host: Option<String>,
    pub coll: Collective,
    pub seq: Option<u64>,
    pub size_bytes: u64,
    pub time_us: f64,
    /// `kernel_gpu`, `kernel_cpu` or `collective_cpu`: how far the time can be trusted.
    pub timing_source: Option<String>,
    pub busbw_gbs: Option<f64>,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    header: Option<Header>,
    #[serde(default)]
    metadata: Option<Meta>,
    #[serde(default)]
    coll_perf: Option<Perf>,
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    id: Option<serde_json::Value>,
    #[serde(default)]
    rank: Option<serde_json::Value>,
    #[serde(default)]
    n_ranks: Option<serde_json::Value>,
    #[serde(default)]
    nnodes: Option<serde_json::Value>,
}

/// A count as a number or a string ("8"), nothing else.
fn count(v: Option<serde_json::Value>) -> Option<usize> {
    match v? {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|n| *n <= 1 << 24)
    .map(|n| n as usize)
}

/// A time that is one: above zero and under ten days.
fn timed(us: f64) -> bool {
    us > 0.0 && us < 1e12
}

/// A message size that is one (under a PiB).
fn sized(bytes: u64) -> bool {
    bytes < 1 << 50
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    hostname: Option<String>,
}

#[derive(Deserialize)]
struct Perf {
    coll: String,
    #[serde(default)]
    coll_sn: Option<u64>,
    coll_msg_size_bytes: u64,
    coll_exec_time_us: f64,
    #[serde(default)]
    coll_timing_source: Option<String>,
    #[serde(default)]
    coll_busbw_gbs: Option<f64>,
}

/// Every collective record of one Inspector output file.
pub fn read(name: &str, reader: impl std::io::Read) -> Result<Vec<InspectorRecord>, TraceError> {
    let mut out = Vec::new();
    let stream = serde_json::Deserializer::from_reader(reader).into_iter::<Raw>();
    for (i, raw) in stream.enumerate() {
        let raw = raw.map_err(|e| bad(name, format!("record {}: {e}", i + 1)))?;
        let (Some(h), Some(p)) = (raw.header, raw.coll_perf) else {
            continue;
        };
        if !timed(p.coll_exec_time_us) || !sized(p.coll_msg_size_bytes) {
            continue;
        }
        let comm = match h.id {
            Some(serde_json::Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        out.push(InspectorRecord {
            source: name.to_string(),
            comm,
            rank: count(h.rank),
            nranks: count(h.n_ranks).unwrap_or(0),
            nnodes: count(h.nnodes),
            host: raw.metadata.and_then(|m| m.hostname),
            coll: Collective::parse(&p.coll).unwrap_or(Collective::Unknown),
            seq: p.coll_sn,
            size_bytes: p.coll_msg_size_bytes,
            time_us: p.coll_exec_time_us,
            timing_source: p.coll_timing_source,
            busbw_gbs: p.coll_busbw_gbs.filter(|b| b.is_finite() && *b >= 0.0),
        });
    }
    if out.is_empty() {
        return Err(bad(
            name,
            "holds no Inspector collective record (coll_perf)",
        ));
    }
    Ok(out)
}

/// `key="value",...` of a Prometheus text line, unescaped (`\"`, `\\`, `\n`).
fn labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches([',', ' ']).to_string(), value));
        rest = &after[end..];
    }
    out
}

/// The bytes a `message_size` bucket stands for: the middle of `"4-5GB"` (1024-based units,
/// as the plugin prints `"%.0f-%.0f%s"`), or the size itself in the older per-call files
/// (`"2.00GB"`).
pub fn bucket_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "B" => 1u64,
        "KB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return None,
    } as f64;
    let value = match num.split_once('-') {
        Some((lo, hi)) => (lo.parse::<f64>().ok()? + hi.parse::<f64>().ok()?) / 2.0,
        None => num.parse::<f64>().ok()?,
    };
    Some((value * scale) as u64)
}

/// NCCL Inspector's Prometheus textfile (`NCCL_INSPECTOR_PROM_DUMP=1`,
/// `nccl_inspector_metrics_<GPU-UUID>.prom`): per communicator, collective, size bucket and
/// algorithm, the mean time (`nccl_collective_exec_time_microseconds`) and the geometric mean
/// busbw (`nccl_bus_bandwidth_gbs`) since the last dump. Point-to-point lines are left out.
pub fn read_prom(
    name: &str,
    reader: impl std::io::Read,
) -> Result<Vec<InspectorRecord>, TraceError> {
    use std::collections::BTreeMap;
    let bytes = super::types::read_whole(name, reader)?;
    // Label sets (the metric's own name aside) to (busbw, time).
    type Pair = (Option<f64>, Option<f64>);
    let mut by: BTreeMap<Vec<(String, String)>, Pair> = BTreeMap::new();
    for line in String::from_utf8_lossy(&bytes).lines() {
        let line = line.trim();
        let Some((metric, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((inner, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let slot = match metric {
            "nccl_bus_bandwidth_gbs" => 0,
            "nccl_collective_exec_time_microseconds" => 1,
            _ => continue,
        };
        let mut l = labels(inner);
        l.sort();
        let e = by.entry(l).or_default();
        if slot == 0 {
            e.0 = Some(value);
        } else {
            e.1 = Some(value);
        }
    }
    let out: Vec<InspectorRecord> = by
        .into_iter()
        .filter_map(|(l, (bus, time))| {
            let get = |k: &str| l.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
            let nranks = get("nranks")
                .or_else(|| get("n_ranks"))?
                .parse()
                .ok()
                .filter(|n| *n <= 1 << 24)?;
            Some(InspectorRecord {
                source: name.to_string(),
                comm: get("comm_name")
                    .or_else(|| get("comm_id"))
                    .unwrap_or_default(),
                rank: get("rank").and_then(|r| r.parse().ok()),
                nranks,
                nnodes: get("n_nodes").and_then(|n| n.parse().ok()),
                host: get("node").or_else(|| get("hostname")),
                coll: Collective::parse(&get("collective")?).unwrap_or(Collective::Unknown),
                seq: get("coll_sn").and_then(|n| n.parse().ok()),
                size_bytes: bucket_bytes(&get("message_size")?).filter(|b| sized(*b))?,
                time_us: time.filter(|t| timed(*t))?,
                timing_source: None,
                busbw_gbs: bus.filter(|b| b.is_finite() && *b >= 0.0),
            })
        })
        .collect();
    if out.is_empty() {
        return Err(bad(name, "holds no NCCL Inspector collective metric (nccl_bus_bandwidth_gbs with nccl_collective_exec_time_microseconds)"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// The README's example (NVIDIA/nccl plugins/profiler/inspector/README.md), twice.
    const README: &str = r#"{"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
  "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
    "dump_timestamp_us": 1748030377748202, "hostname": "example-hostname", "pid": 1639453},
  "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
    "coll_exec_time_us": 61974, "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}
{"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
  "metadata": {"hostname": "example-hostname"},
  "coll_perf": {"coll": "ReduceScatter", "coll_sn": 1231, "coll_msg_size_bytes": 2147483648,
    "coll_exec_time_us": 41057, "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 418.439467,
    "coll_busbw_gbs": 366.134533, "event_trace_ts": {"coll_start_ts": 1}}}"#;

    /// The README's Prometheus lines (NVIDIA/nccl plugins/profiler/inspector/README.md).
    #[test]
    fn prometheus_textfiles_are_read_and_p2p_lines_left_out() {
        let text = r#"nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"} 678.263
nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",message_size="4-5GB",algo_proto="Ring_ll"} 9498.47
nccl_p2p_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",comm_name="DP Group 0",n_nodes="1",nranks="4",p2p_operation="Send",message_size="512-513MB"} 464.9
"#;
        let r = super::read_prom("m.prom", text.as_bytes()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].coll, crate::coll::Collective::AllReduce);
        assert_eq!(r[0].size_bytes, (4.5 * (1u64 << 30) as f64) as u64);
        assert_eq!(
            (r[0].nranks, r[0].time_us, r[0].busbw_gbs),
            (4, 9498.47, Some(678.263))
        );
        assert_eq!(r[0].host.as_deref(), Some("nvl72004-T01"));
        assert_eq!(super::bucket_bytes("0B"), Some(0));
        assert_eq!(super::bucket_bytes("2.00GB"), Some(2 << 30));
    }

    #[test]
    fn concatenated_records_are_read() {
        let r = super::read("x", README.as_bytes()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].coll, crate::coll::Collective::AllReduce);
        assert_eq!(r[0].size_bytes, 17179869184);
        assert_eq!(r[0].nranks, 8);
        assert_eq!(r[1].coll, crate::coll::Collective::ReduceScatter);
        assert_eq!(r[1].timing_source.as_deref(), Some("kernel_gpu"));
        assert_eq!(r[1].host.as_deref(), Some("example-hostname"));
    }
}
