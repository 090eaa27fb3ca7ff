//! nccl-tests' `-J` JSON file.

use super::super::text::Input;
use super::super::text::InputError;
use crate::coll::Collective;
use crate::model::{RankInfo, RunRecord};
use std::path::Path;

use super::table::{perf_name, Half, Parsed, Row};
use super::{build, EXPECTED};

/// Import nccl-tests' `-J` JSON (format version 3: string booleans, padded root strings).
pub fn import_json(path: &Path) -> Result<RunRecord, InputError> {
    json_from(Input::open(path)?)
}

/// Import `-J` JSON from an input opened once (held whole: at most `MAX_DOCUMENT_BYTES`).
pub fn json_from(input: Input) -> Result<RunRecord, InputError> {
    use serde_json::Value;
    let name = input.name.clone();
    let text = input.bytes(EXPECTED)?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| InputError::WrongKind {
        path: name.clone(),
        reason: format!("not JSON ({e})"),
        expected: EXPECTED.into(),
    })?;
    let results =
        v.get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| InputError::WrongKind {
                path: name.clone(),
                reason: "JSON without a 'results' list".into(),
                expected: EXPECTED.into(),
            })?;
    let num = |x: Option<&Value>| -> Option<f64> {
        match x? {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    };
    let text_of = |x: Option<&Value>| x.and_then(Value::as_str).map(|s| s.trim().to_string());
    let argv0 = v
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    let named = perf_name()
        .captures(argv0)
        .and_then(|c| Collective::parse(&c[1]));
    let devices = v
        .pointer("/config/devices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ranks: Vec<RankInfo> = devices
        .iter()
        .map(|d| RankInfo {
            rank: num(d.get("rank")).unwrap_or(0.0) as usize,
            host: text_of(d.get("hostname")).unwrap_or_default(),
            pid: num(d.get("pid")).unwrap_or(0.0) as u32,
            device: text_of(d.get("device_info")),
        })
        .collect();
    let mut parsed = Parsed {
        ranks,
        named,
        ..Default::default()
    };
    for (i, r) in results.iter().enumerate() {
        let half = |key: &str| -> Option<Half> {
            let h = r.get(key)?;
            Some(Half {
                time_us: num(h.get("time")).or_else(|| num(h.get("cpu_time")))?,
                algbw_gbps: num(h.get("alg_bw")).unwrap_or(0.0),
                busbw_gbps: num(h.get("bus_bw")).unwrap_or(0.0),
                wrong: num(h.get("nwrong")).map(|w| w as u64),
                ..Half::default()
            })
        };
        let (Some(h0), Some(h1)) = (half("out_of_place"), half("in_place")) else {
            parsed.notes.push(format!(
                "results[{i}]: missing out_of_place/in_place times; skipped"
            ));
            continue;
        };
        parsed.rows.push(Row {
            line: i + 1,
            collective: named,
            size: num(r.get("size")).unwrap_or(0.0) as u64,
            count: num(r.get("count")).unwrap_or(0.0) as u64,
            dtype: text_of(r.get("type")).unwrap_or_else(|| "float".into()),
            redop: text_of(r.get("redop")),
            root: num(r.get("root")).unwrap_or(-1.0) as i64,
            halves: [h0, h1],
        });
    }
    if let Some(nv) = num(v.get("nccl_version")) {
        let code = nv as u64;
        parsed.nccl_version = Some(format!(
            "{}.{}.{}",
            code / 10000,
            (code / 100) % 100,
            code % 100
        ));
    }
    parsed.avg_busbw = num(v.pointer("/average_bus_bandwidth/bandwidth"));
    parsed.out_of_bounds = num(v.pointer("/out_of_bounds/count")).map(|c| c as u64);
    if let Some(errs) = v.get("errors").and_then(Value::as_array) {
        parsed.errors = errs
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    parsed.headers_seen = 1;
    let mut record = build(&name, parsed)?;
    if let Some(info) = record.import.as_mut() {
        info.format = "nccl-tests-json".into();
        // The JSON file is written at the end of the run: a missing end_time means it was cut.
        info.truncated = v.get("end_time").is_none();
    }
    Ok(record)
}
