//! PyTorch's Flight Recorder dumps (a positive `TORCH_NCCL_TRACE_BUFFER_SIZE` or
//! `TORCH_FR_BUFFER_SIZE`, dumped on a timeout or on demand): per rank, the last collectives each process group
//! enqueued, with their sizes, types, state (`scheduled`, `started`, `completed`) and, with
//! `TORCH_NCCL_ENABLE_TIMING=1`, durations. The JSON form (`_dump_nccl_trace_json`) and the
//! pickle form (the default file dump) hold the same keys; both are read into one shape.
//! The rank is the number the file name ends in (`<prefix><rank>`, as PyTorch's analyzer
//! takes it), or the one the dump states.

use super::types::{bad, TraceError};
use crate::coll::Collective;
use serde_json::Value;
use std::collections::BTreeMap;

/// One collective (or point-to-point call) one rank enqueued.
#[derive(Debug, Clone, PartialEq)]
pub struct FlightEntry {
    pub record_id: Option<u64>,
    /// The process group's name (`process_group[0]`, or `pg_id`).
    pub group: String,
    pub group_desc: Option<String>,
    pub collective_seq_id: Option<u64>,
    pub p2p_seq_id: Option<u64>,
    pub is_p2p: bool,
    /// `nccl:all_reduce`, `nccl:send 1->2`, ...
    pub profiling_name: String,
    pub coll: Collective,
    pub input_sizes: Vec<Vec<u64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<u64>>,
    pub state: String,
    pub time_created_ns: Option<u64>,
    pub duration_ms: Option<f64>,
    pub timeout_ms: Option<u64>,
}

impl FlightEntry {
    /// Bytes of the inputs (elements × dtype), where the dtypes are known.
    pub fn input_bytes(&self) -> Option<u64> {
        let mut total = 0;
        for (shape, dtype) in self.input_sizes.iter().zip(&self.input_dtypes) {
            let size = super::kineto::torch_dtype_bytes(dtype)?;
            let elems = shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d))?;
            total = elems.checked_mul(size)?.checked_add(total)?;
        }
        Some(total)
    }
}

/// A process group as the dump's `pg_config` states it.
#[derive(Debug, Clone, PartialEq)]
pub struct FlightGroup {
    pub name: String,
    pub desc: Option<String>,
    pub ranks: Vec<usize>,
}

/// One rank's dump.
#[derive(Debug, Clone, PartialEq)]
pub struct FlightRank {
    pub source: String,
    pub rank: Option<usize>,
    pub version: Option<String>,
    pub groups: BTreeMap<String, FlightGroup>,
    pub entries: Vec<FlightEntry>,
    /// Entries left out for lacking their name, state, group or sequence number.
    pub dropped: usize,
}

/// A count or an id: a non-negative whole number (as a number or a string), nothing else.
fn u64_of(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..9.0e15).contains(f))
                .map(|f| f as u64)
        })
        .or_else(|| v.as_str()?.trim().parse().ok())
}

fn str_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn sizes(v: &Value) -> Vec<Vec<u64>> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    s.as_array()
                        .map(|d| d.iter().filter_map(u64_of).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `[0, 1, 2]` as a list, or as the string PyTorch writes (`"[0, 1, 2]"`).
fn ranks_of(v: &Value) -> Vec<usize> {
    match v {
        Value::Array(a) => a.iter().filter_map(u64_of).map(|r| r as usize).collect(),
        Value::String(s) => s
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|t| t.trim().parse().ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// One entry, or none when it lacks what matching needs (its name, state, group, number).
fn entry(e: &Value) -> Option<FlightEntry> {
    let profiling_name = str_of(&e["profiling_name"]).filter(|n| !n.is_empty())?;
    str_of(&e["state"]).filter(|n| !n.is_empty())?;
    let (group, group_desc) = match &e["process_group"] {
        Value::Array(a) => (a.first().and_then(str_of), a.get(1).and_then(str_of)),
        other => (str_of(other), None),
    };
    let group = group.or_else(|| str_of(&e["pg_id"]))?;
    Some(FlightEntry {
        record_id: u64_of(&e["record_id"]),
        group,
        group_desc,
        collective_seq_id: u64_of(&e["collective_seq_id"]),
        p2p_seq_id: u64_of(&e["p2p_seq_id"]),
        is_p2p: e["is_p2p"]
            .as_bool()
            .unwrap_or(profiling_name.contains("send") || profiling_name.contains("recv")),
        coll: super::kineto::c10d_collective(&profiling_name),
        profiling_name,
        input_sizes: sizes(&e["input_sizes"]),
        input_dtypes: e["input_dtypes"]
            .as_array()
            .map(|a| a.iter().filter_map(str_of).collect())
            .unwrap_or_default(),
        output_sizes: sizes(&e["output_sizes"]),
        state: str_of(&e["state"])?,
        time_created_ns: u64_of(&e["time_created_ns"]),
        duration_ms: e["duration_ms"].as_f64(),
        timeout_ms: u64_of(&e["timeout_ms"]),
    })
}

/// The number a file name ends in (`nccl_trace_rank_12` → 12).
pub fn rank_from_name(name: &str) -> Option<usize> {
    let base = std::path::Path::new(name)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    // `nccl_trace_rank_2.json.gz`: the compression first, then the format.
    let base = base.strip_suffix(".gz").unwrap_or(&base);
    let base = base
        .strip_suffix(".json")
        .or_else(|| base.strip_suffix(".pkl"))
        .unwrap_or(base);
    let digits: String = base
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.chars().rev().collect::<String>().parse().ok()
}

/// One rank's dump from its parsed value.
pub fn from_value(name: &str, v: &Value) -> Result<FlightRank, TraceError> {
    // A dump with nothing recorded leaves `entries` out.
    let none = Vec::new();
    let entries = match v.get("entries").map(|e| e.as_array()) {
        Some(Some(e)) => e,
        Some(None) => {
            return Err(bad(
                name,
                "is not a Flight Recorder dump: its entries are not a list",
            ))
        }
        None if v.get("pg_config").is_some() || v.get("version").is_some() => &none,
        None => {
            return Err(bad(
                name,
                "is not a Flight Recorder dump (it has no entries)",
            ))
        }
    };
    let kept: Vec<FlightEntry> = entries.iter().filter_map(entry).collect();
    let kept_len = kept.len();
    let mut groups = BTreeMap::new();
    if let Some(cfg) = v["pg_config"].as_object() {
        for (key, g) in cfg {
            let name = str_of(&g["name"]).unwrap_or_else(|| key.clone());
            groups.insert(
                name.clone(),
                FlightGroup {
                    name,
                    desc: str_of(&g["desc"]),
                    ranks: ranks_of(&g["ranks"]),
                },
            );
        }
    }
    Ok(FlightRank {
        source: name.to_string(),
        rank: u64_of(&v["rank"])
            .map(|r| r as usize)
            .or_else(|| rank_from_name(name)),
        version: str_of(&v["version"]),
        groups,
        entries: kept,
        dropped: entries.len() - kept_len,
    })
}

pub fn read_json(name: &str, reader: impl std::io::Read) -> Result<FlightRank, TraceError> {
    let buf = super::types::read_whole(name, reader)?;
    let v: Value =
        serde_json::from_slice(&buf).map_err(|e| bad(name, format!("is not JSON: {e}")))?;
    from_value(name, &v)
}

pub fn read_pickle(name: &str, reader: impl std::io::Read) -> Result<FlightRank, TraceError> {
    let v = super::pickle::read(reader).map_err(|e| bad(name, e))?;
    from_value(name, &v)
}
