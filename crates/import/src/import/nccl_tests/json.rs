//! nccl-tests' `-J` JSON file.

use super::super::text::Input;
use super::super::text::InputError;
use crate::coll::Collective;
use crate::model::{RankInfo, RunRecord};
use std::path::Path;

use super::build::{build, EXPECTED};
use super::table::{perf_name, Half, Parsed, Row};

/// Import nccl-tests' `-J` JSON (format version 3: string booleans, padded root strings).
pub fn import_json(path: &Path) -> Result<RunRecord, InputError> {
    json_from(Input::open(path)?)
}

/// Import `-J` JSON from an input opened once (held whole: at most `MAX_DOCUMENT_BYTES`).
pub fn json_from(input: Input) -> Result<RunRecord, InputError> {
    use serde_json::Value;
    let name = input.name.clone();
    let text = input.bytes(EXPECTED)?;
    // nccl-tests streams the file as the run goes and closes it at the end: a run that
    // crashed or was killed leaves a cut document, whose complete rows are still worth having.
    let (v, cut) = match serde_json::from_slice::<Value>(&text) {
        Ok(v) => (v, false),
        Err(e) if e.is_eof() => (salvage(&text), true),
        Err(e) => {
            return Err(InputError::WrongKind {
                path: name.clone(),
                reason: format!("not JSON ({e})"),
                expected: EXPECTED.into(),
            })
        }
    };
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
            group: 0,
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
            // -I: `<placement>_per_iter` beside it (writePerIterReport).
            let each = r.get(format!("{key}_per_iter").as_str());
            let times = each
                .and_then(|e| e.get("times_us"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|t| num(Some(t))).collect())
                .unwrap_or_default();
            Some(Half {
                time_us: num(h.get("time")).or_else(|| num(h.get("cpu_time")))?,
                algbw_gbps: num(h.get("alg_bw")).unwrap_or(0.0),
                busbw_gbps: num(h.get("bus_bw")).unwrap_or(0.0),
                wrong: num(h.get("nwrong")).map(|w| w as u64),
                iter_min_us: each.and_then(|e| num(e.get("min_us"))),
                iter_max_us: each.and_then(|e| num(e.get("max_us"))),
                iter_times_us: times,
                iter_skipped: each
                    .and_then(|e| num(e.get("skipped_iterations")))
                    .map_or(0, |k| k as usize),
                ..Half::default()
            })
        };
        let (Some(h0), Some(h1)) = (half("out_of_place"), half("in_place")) else {
            parsed.notes.push(format!(
                "results[{i}]: missing out_of_place/in_place times; skipped"
            ));
            continue;
        };
        let (size, count, dtype) = sizes_of(&name, i, r, &num, &text_of)?;
        parsed.rows.push(Row {
            line: i + 1,
            collective: named,
            size,
            count,
            dtype,
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
    // util.cu writes end_time last, when the run finishes: without it the run did not.
    let truncated = cut || v.get("end_time").is_none();
    if truncated {
        parsed.notes.push(format!(
            "the JSON file ends before the run did (no end_time{}): {} complete rows kept",
            if cut { ", the document is cut" } else { "" },
            parsed.rows.len()
        ));
    }
    let mut record = build(&name, parsed)?;
    if let Some(info) = record.import.as_mut() {
        info.format = "nccl-tests-json".into();
        info.truncated = truncated;
    }
    if truncated && record.status == crate::model::RunStatus::Complete {
        record.status = crate::model::RunStatus::Truncated;
    }
    Ok(record)
}

/// A row's size or count: absent is 0; below zero is no message nccl-tests could have sent,
/// refused naming it rather than read as 0.
/// A row's size, count and type, refused when the size cannot hold the count: `count`
/// elements are the whole message or one rank's share of it, never more bytes than the size
/// (the run record's rule).
fn sizes_of(
    name: &str,
    i: usize,
    r: &serde_json::Value,
    num: &dyn Fn(Option<&serde_json::Value>) -> Option<f64>,
    text_of: &dyn Fn(Option<&serde_json::Value>) -> Option<String>,
) -> Result<(u64, u64, String), InputError> {
    let (size, count) = (
        count_of(name, i, "size", num(r.get("size")))?,
        count_of(name, i, "count", num(r.get("count")))?,
    );
    let dtype = text_of(r.get("type")).unwrap_or_else(|| "float".into());
    let element = crate::dtype::Dtype::parse(&dtype).map_or(1, |d| d.size_bytes() as u64);
    if count.saturating_mul(element) > size {
        return Err(InputError::WrongKind {
            path: name.to_string(),
            reason: format!(
                "results[{i}]: size {size} B cannot hold count {count} {dtype} elements"
            ),
            expected: EXPECTED.into(),
        });
    }
    Ok((size, count, dtype))
}

fn count_of(name: &str, row: usize, key: &str, v: Option<f64>) -> Result<u64, InputError> {
    match v {
        None => Ok(0),
        // A whole number a size or count can be (u64 past 2^53 is no exact JSON number).
        Some(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= (1u64 << 53) as f64 => {
            Ok(v as u64)
        }
        Some(v) => Err(InputError::WrongKind {
            path: name.to_string(),
            reason: format!("results[{row}].{key} is {v}, not a whole byte or element count"),
            expected: EXPECTED.into(),
        }),
    }
}

/// What a cut nccl-tests JSON document still holds: the top-level values written before the
/// cut (args, nccl_version, config with its devices) and every complete `results` row.
fn salvage(text: &[u8]) -> serde_json::Value {
    use serde_json::{Map, Value};
    let mut out = Map::new();
    let one_value = |at: usize| -> Option<(Value, usize)> {
        let mut values = serde_json::Deserializer::from_slice(text.get(at..)?).into_iter::<Value>();
        let v = values.next()?.ok()?;
        Some((v, at + values.byte_offset()))
    };
    for key in ["args", "nccl_version", "config", "start_time"] {
        let needle = format!("\"{key}\":");
        if let Some(i) = find(text, needle.as_bytes()) {
            if let Some((v, _)) = one_value(i + needle.len()) {
                out.insert(key.to_string(), v);
            }
        }
    }
    let mut rows = Vec::new();
    if let Some(i) = find(text, b"\"results\":[") {
        let mut at = i + b"\"results\":[".len();
        while let Some((row, end)) = one_value(at) {
            rows.push(row);
            at = end;
            while text
                .get(at)
                .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
            {
                at += 1;
            }
        }
    }
    out.insert("results".into(), Value::Array(rows));
    Value::Object(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
