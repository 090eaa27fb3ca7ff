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
    rank: Option<usize>,
    #[serde(default)]
    n_ranks: Option<usize>,
    #[serde(default)]
    nnodes: Option<usize>,
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
        let comm = match h.id {
            Some(serde_json::Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        out.push(InspectorRecord {
            source: name.to_string(),
            comm,
            rank: h.rank,
            nranks: h.n_ranks.unwrap_or(0),
            nnodes: h.nnodes,
            host: raw.metadata.and_then(|m| m.hostname),
            coll: Collective::parse(&p.coll).unwrap_or(Collective::Unknown),
            seq: p.coll_sn,
            size_bytes: p.coll_msg_size_bytes,
            time_us: p.coll_exec_time_us,
            timing_source: p.coll_timing_source,
            busbw_gbs: p.coll_busbw_gbs,
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
