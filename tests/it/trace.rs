//! `ncclprobe trace` (and `diagnose --from`, `simulate ddp --from-trace`) on real profiler
//! traces (tests/corpus/traces, each with its source in INDEX.md), and on Flight Recorder and
//! Inspector records written as PyTorch and NCCL write them.

use crate::common::bin;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn traces(rel: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/traces")
        .join(rel);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".gz"))
        .unwrap()
}

/// A corpus trace's JSON text.
fn gunzip(path: &Path) -> String {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

fn doc(args: &[&str]) -> Value {
    let out = bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn trace_doc(paths: &[&Path], extra: &[&str]) -> Value {
    let mut args: Vec<String> = vec!["trace".into()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--format".into(), "json".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    doc(&refs)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The ResNet-50 pair: with num_workers=0 the steps wait on the loader; with 4 workers they
/// do not, and the what-if of the first predicts the second's step within 15%.
#[test]
fn the_resnet_pair_names_the_data_loader_and_the_what_if_predicts_the_gain() {
    let zero = trace_doc(&[&traces("kineto-tb-plugin/resnet50_num_workers_0")], &[]);
    let four = trace_doc(&[&traces("kineto-tb-plugin/resnet50_num_workers_4")], &[]);
    assert_eq!(zero["kind"], "trace");
    assert_eq!(zero["verdict"]["code"], "data-bound", "{}", zero["verdict"]);
    assert_eq!(
        four["verdict"]["code"], "compute-bound",
        "{}",
        four["verdict"]
    );
    let steps = zero["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 6);
    for s in steps {
        let sum = f(&s["compute_ms"])
            + f(&s["exposed_comm_ms"])
            + f(&s["loader_wait_ms"])
            + f(&s["other_idle_ms"]);
        assert!((sum - f(&s["wall_ms"])).abs() < 0.01, "{s}");
        // The trace's own DataLoader spans are 49-73 ms a step.
        assert!((40.0..75.0).contains(&f(&s["loader_wait_ms"])), "{s}");
    }
    let w = &zero["what_if"];
    let removed = w["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["question"]
                .as_str()
                .unwrap()
                .starts_with("DataLoader wait removed")
        })
        .unwrap();
    let traced_four = f(&four["what_if"]["traced_ms"]);
    let predicted = f(&removed["step_ms"]);
    assert!(
        (predicted / traced_four - 1.0).abs() < 0.15,
        "predicted {predicted} ms, measured {traced_four} ms with 4 workers"
    );
}

/// A 2-rank NCCL trace (rank 0): all-reduce sizes from the kernels' args, busbw by nccl-tests'
/// formula, and a link given turns "not judged" into a verdict.
#[test]
fn nccl_kernels_are_sized_and_held_against_the_link() {
    let t = traces("hta/nccl_parser_config");
    let d = trace_doc(&[&t], &[]);
    let rows = d["collectives"].as_array().unwrap();
    let ar: Vec<&Value> = rows
        .iter()
        .filter(|r| r["collective"] == "all_reduce")
        .collect();
    assert_eq!(ar.len(), 5, "{rows:#?}");
    // 6,637,568 floats: the first all-reduce's "In msg nelems" × 4 bytes.
    let big = ar
        .iter()
        .find(|r| r["size_bytes"] == 6637568u64 * 4)
        .unwrap();
    assert_eq!(big["nranks"], 2);
    let bus = f(&big["size_bytes"]) * 1.0 / (f(&big["fabric_ms"]) / 1e3) / 1e9;
    assert!((f(&big["busbw_gbs"]) - bus).abs() < 0.01);
    assert!(ar.iter().all(|r| r["verdict"] == "not judged"));
    let judged = trace_doc(&[&t], &["--busbw", "200"]);
    let ar: Vec<&Value> = judged["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["collective"] == "all_reduce")
        .collect();
    // One rank's view: slower than the link, but it cannot say whether it waited.
    assert!(
        ar.iter().all(|r| r["verdict"] == "slow or waiting"),
        "{ar:#?}"
    );
    assert!(
        d["what_if"]["buckets"].as_u64().unwrap() >= 4,
        "{}",
        d["what_if"]
    );
}

/// Two ranks of the 128-rank job whose calls do not line up (sampled traces): read together,
/// and said to be unmatched rather than given a straggler.
#[test]
fn a_directory_of_ranks_is_read_and_unmatched_calls_are_said() {
    let dir = tempfile::tempdir().unwrap();
    for rel in ["hta/timeline_analysis", "hta/trace_filter"] {
        let t = traces(rel);
        std::fs::copy(&t, dir.path().join(t.file_name().unwrap())).unwrap();
    }
    let d = trace_doc(&[dir.path()], &[]);
    assert_eq!(d["files"].as_array().unwrap().len(), 2);
    assert_eq!(d["world_size"], 128);
    let ranks: std::collections::BTreeSet<u64> = d["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    assert!(d.get("straggler").is_none());
    assert!(
        d["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("do not line up")),
        "{}",
        d["notes"]
    );
    // The sampled rank-0 trace's all-reduces carry their size only on the c10d annotation.
    assert!(d["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["collective"] == "all_reduce" && r["size_bytes"].as_u64().unwrap() > 1 << 20));
}

fn fr_dump(last_seq: u64, last_state: &str) -> Value {
    let entries: Vec<Value> = (1..=last_seq)
        .map(|seq| {
            serde_json::json!({
                "record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
                "profiling_name": "nccl:all_reduce", "time_created_ns": 1_700_000_000_000_000_000u64 + seq,
                "input_sizes": [[1024, 1024]], "input_dtypes": ["Float"],
                "output_sizes": [[1024, 1024]], "output_dtypes": ["Float"],
                "state": if seq == last_seq { last_state } else { "completed" },
                "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0,
                "retired": false, "timeout_ms": 600000, "is_p2p": false
            })
        })
        .collect();
    serde_json::json!({
        "version": "2.10",
        "comm_lib_version": "2.27.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {"0": {"last_enqueued_collective": last_seq.to_string(), "last_started_collective": "-1", "last_completed_collective": "-1"}},
        "entries": entries
    })
}

/// Flight Recorder dumps of a hung job (rank 3 stopped one collective early), as files named
/// `<prefix><rank>` without extension: the culprit is named in `trace` and in `diagnose`.
#[test]
fn flight_recorder_dumps_name_the_rank_a_hang_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    for rank in 0..4 {
        let d = if rank == 3 {
            fr_dump(41, "completed")
        } else {
            fr_dump(42, "started")
        };
        std::fs::write(
            dir.path().join(format!("nccl_trace_rank_{rank}")),
            d.to_string(),
        )
        .unwrap();
    }
    let d = trace_doc(&[dir.path()], &[]);
    let h = &d["hang"];
    assert_eq!(h["collective_seq_id"], 42, "{d:#}");
    assert_eq!(h["cause"], "missing ranks");
    assert_eq!(h["missing_ranks"], serde_json::json!([3]));
    assert_eq!(d["verdict"]["code"], "hang");
    let diag = doc(&[
        "diagnose",
        "--from",
        &dir.path().display().to_string(),
        "--format",
        "json",
    ]);
    let ids: Vec<&str> = diag["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"trace.hang"), "{ids:?}");
}

/// NCCL Inspector's README records, one object a line as the plugin writes them, judged
/// against a link: the 16 GiB all-reduce at 485 GB/s is at speed against 450 GB/s busbw.
#[test]
fn inspector_records_are_summarised_against_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host-pid1639453.log");
    let rec = |coll: &str, size: u64, us: f64, bus: f64| {
        serde_json::json!({
        "header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1748030377748202u64, "hostname": "example-hostname", "pid": 1639453},
        "coll_perf": {"coll": coll, "coll_sn": 1407, "coll_msg_size_bytes": size, "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 277.2, "coll_busbw_gbs": bus}
    }).to_string()
    };
    let text = [
        rec("AllReduce", 17179869184, 61974.0, 485.119099),
        rec("AllReduce", 17179869184, 61974.0, 485.119099),
    ]
    .join("\n");
    std::fs::write(&path, text).unwrap();
    let d = trace_doc(&[&path], &["--busbw", "450"]);
    let i = &d["inspector"][0];
    assert_eq!(i["collective"], "all_reduce");
    assert_eq!(i["count"], 2);
    assert_eq!(i["verdict"], "at speed", "{i}");
}

/// `simulate ddp --from-trace` prints the what-if; without a model or a trace it says what to
/// give; a file that is none of the formats is refused naming it.
#[test]
fn simulate_from_trace_and_refusals() {
    let t = traces("hta/nccl_parser_config");
    let out = bin()
        .args(["simulate", "ddp", "--from-trace"])
        .arg(&t)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("self-check error") && text.contains("gradient accumulation 2"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    let out = bin().arg("trace").arg(&junk).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("notes.json") && err.contains("not a PyTorch profiler trace"),
        "{err}"
    );
}

/// The 2-rank NCCL trace written out as an Nsight Systems SQLite export (the tables and
/// columns of nsys's schema reference: kernels by `shortName` through `StringIds`, launches
/// joined on `correlationId`, steps and autograd's ops as NVTX push/pop ranges, ns): its steps
/// split exactly as the profiler trace's do.
#[test]
fn an_nsys_export_is_split_as_the_profiler_trace_is() {
    let src = traces("hta/nccl_parser_config");
    let text = gunzip(&src);
    let v: Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("job.sqlite");
    let db = rusqlite::Connection::open(&db_path).unwrap();
    db.execute_batch(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, registersPerThread INTEGER NOT NULL DEFAULT 0);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, text TEXT, globalTid INTEGER, textId INTEGER, eventId INTEGER NOT NULL PRIMARY KEY);
         CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT);",
    )
    .unwrap();
    let pid: i64 = 7 << 24;
    let ns = |us: f64| (us * 1e3).round() as i64;
    let mut names: Vec<String> = Vec::new();
    let id_of = |n: &str, names: &mut Vec<String>| -> i64 {
        names.iter().position(|x| x == n).unwrap_or_else(|| {
            names.push(n.to_string());
            names.len() - 1
        }) as i64
    };
    let tx = db.unchecked_transaction().unwrap();
    let mut event = 0;
    for e in v["traceEvents"].as_array().unwrap() {
        let (Some(ts), Some(dur)) = (e["ts"].as_f64(), e["dur"].as_f64()) else {
            continue;
        };
        let tid = e["tid"].as_i64().unwrap_or(0) & 0xFF_FFFF;
        let corr = e["args"]["correlation"].as_i64();
        match e["cat"].as_str().unwrap_or("") {
            "kernel" => {
                // nsys's shortName: the kernel's name without its parameter list.
                let short = e["name"]
                    .as_str()
                    .unwrap()
                    .split('(')
                    .next()
                    .unwrap()
                    .to_string();
                let id = id_of(&short, &mut names);
                tx.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName) VALUES (?1, ?2, 0, 1, ?3, ?4, ?5, ?6, ?6)",
                    rusqlite::params![ns(ts), ns(ts + dur), e["args"]["stream"].as_i64(), corr, pid, id]).unwrap();
            }
            "gpu_memcpy" | "gpu_memset" => {
                tx.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, streamId, correlationId, globalPid) VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![ns(ts), ns(ts + dur), e["args"]["stream"].as_i64(), corr, pid]).unwrap();
            }
            "cuda_runtime" => {
                let id = id_of(e["name"].as_str().unwrap(), &mut names);
                tx.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue) VALUES (?1, ?2, 0, ?3, ?4, ?5, 0)",
                    rusqlite::params![ns(ts), ns(ts + dur), pid | tid, corr, id]).unwrap();
            }
            "user_annotation" | "cpu_op" => {
                let name = e["name"].as_str().unwrap();
                if name.starts_with("ProfilerStep#") || name.contains("evaluate_function") {
                    event += 1;
                    tx.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, eventId) VALUES (?1, ?2, 59, ?3, ?4, ?5)",
                        rusqlite::params![ns(ts), ns(ts + dur), format!("{name}, seq = {event}"), pid | tid, event]).unwrap();
                }
            }
            _ => {}
        }
    }
    for (i, n) in names.iter().enumerate() {
        tx.execute(
            "INSERT INTO StringIds (id, value) VALUES (?1, ?2)",
            rusqlite::params![i as i64, n],
        )
        .unwrap();
    }
    tx.execute(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, 0, 'NVIDIA A100-PG509-200')",
        [],
    )
    .unwrap();
    tx.commit().unwrap();
    drop(db);
    let nsys = trace_doc(&[&db_path], &[]);
    let kineto = trace_doc(&[&src], &[]);
    assert_eq!(nsys["device"], "NVIDIA A100-PG509-200");
    let (a, b) = (
        nsys["steps"].as_array().unwrap(),
        kineto["steps"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        for k in [
            "wall_ms",
            "compute_ms",
            "exposed_comm_ms",
            "overlapped_comm_ms",
            "backward_ms",
        ] {
            assert!(
                (f(&x[k]) - f(&y[k])).abs() < 0.01,
                "{k}: nsys {x} kineto {y}"
            );
        }
    }
    assert_eq!(nsys["verdict"]["code"], kineto["verdict"]["code"]);
    assert!(
        nsys["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("carry no size")),
        "{}",
        nsys["notes"]
    );
}

/// Rank 0's real trace of the 2-rank job, and the same trace as rank 1 with each NCCL kernel
/// 40% shorter (rank 1 arrived later and waited less): matched call by call, rank 1 is named
/// the straggler and the fabric's time is its kernels'.
#[test]
fn matched_ranks_name_the_straggler_and_the_fabric_time_is_the_last_arrivers() {
    let src = traces("hta/nccl_parser_config");
    let text = gunzip(&src);
    let rank0: Value = serde_json::from_str(&text).unwrap();
    let mut rank1 = rank0.clone();
    rank1["distributedInfo"]["rank"] = 1.into();
    for e in rank1["traceEvents"].as_array_mut().unwrap() {
        if e["cat"] == "kernel" && e["name"].as_str().unwrap().starts_with("nccl") {
            let d = e["dur"].as_f64().unwrap();
            e["dur"] = (d * 0.6).into();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rank-0.json"), rank0.to_string()).unwrap();
    std::fs::write(dir.path().join("rank-1.json"), rank1.to_string()).unwrap();
    let one = trace_doc(&[&dir.path().join("rank-0.json")], &[]);
    let both = trace_doc(&[dir.path()], &[]);
    let s = &both["straggler"];
    assert_eq!(s["rank"], 1, "{both:#}");
    assert_eq!(s["last_in"], s["of"]);
    let row = |d: &Value| {
        d["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["size_bytes"] == 6637568u64 * 4)
            .unwrap()
            .clone()
    };
    let (a, b) = (row(&one), row(&both));
    assert!(
        (f(&b["fabric_ms"]) / f(&a["fabric_ms"]) - 0.6).abs() < 0.01,
        "{a} {b}"
    );
    let diag = doc(&[
        "diagnose",
        "--from",
        &dir.path().display().to_string(),
        "--format",
        "json",
    ]);
    assert!(
        diag["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "trace.straggler"),
        "{diag:#}"
    );
}

/// A value as PyTorch's C++ pickler writes a Flight Recorder dump: protocol 2, strings
/// memoized by value (`BINPUT` once, `BINGET` after), `process_group` a tuple, timestamps
/// `LONG1`, floats big-endian `BINFLOAT`.
fn pickle(v: &Value, out: &mut Vec<u8>, memo: &mut Vec<String>, tuple_key: bool) {
    match v {
        Value::Null => out.push(b'N'),
        Value::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
        Value::Number(n) if n.is_f64() => {
            out.push(b'G');
            out.extend(n.as_f64().unwrap().to_be_bytes());
        }
        Value::Number(n) => {
            out.extend([0x8a, 8]);
            out.extend(
                n.as_i64()
                    .unwrap_or(n.as_u64().unwrap_or(0) as i64)
                    .to_le_bytes(),
            );
        }
        Value::String(s) => {
            if let Some(i) = memo.iter().position(|m| m == s) {
                out.extend([b'h', i as u8]);
            } else {
                out.push(b'X');
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
                if memo.len() < 256 {
                    out.extend([b'q', memo.len() as u8]);
                    memo.push(s.clone());
                }
            }
        }
        Value::Array(a) if tuple_key && a.len() == 2 => {
            pickle(&a[0], out, memo, false);
            pickle(&a[1], out, memo, false);
            out.push(0x86);
        }
        Value::Array(a) => {
            out.extend([b']', b'(']);
            for x in a {
                pickle(x, out, memo, false);
            }
            out.push(b'e');
        }
        Value::Object(m) => {
            out.extend([b'}', b'(']);
            for (k, x) in m {
                pickle(&Value::String(k.clone()), out, memo, false);
                pickle(x, out, memo, k == "process_group");
            }
            out.push(b'u');
        }
    }
}

/// The same hung job as pickled dumps (the default on-disk form, `nccl_trace_rank_<r>`):
/// the culprit is the same.
#[test]
fn pickled_flight_recorder_dumps_are_read_as_the_json_ones() {
    let dir = tempfile::tempdir().unwrap();
    for rank in 0..4 {
        let d = if rank == 3 {
            fr_dump(41, "completed")
        } else {
            fr_dump(42, "started")
        };
        let mut bytes = vec![0x80, 2];
        pickle(&d, &mut bytes, &mut Vec::new(), false);
        bytes.push(b'.');
        std::fs::write(dir.path().join(format!("nccl_trace_rank_{rank}")), bytes).unwrap();
    }
    let d = trace_doc(&[dir.path()], &[]);
    assert!(
        d["files"][0]
            .as_str()
            .unwrap()
            .contains("Flight Recorder dump (pickle)"),
        "{}",
        d["files"]
    );
    assert_eq!(d["hang"]["collective_seq_id"], 42, "{d:#}");
    assert_eq!(d["hang"]["missing_ranks"], serde_json::json!([3]));
}

/// What real directories and hand-edited files hold: an empty rank file is skipped and said,
/// a step without duration is left out rather than called data-bound, a copy of a rank is
/// named rather than matched against itself, ranks come from `.json.gz` names, and CSV of
/// inputs without steps is refused with the verdict.
#[test]
fn odd_records_are_said_not_judged_wrongly() {
    let dir = tempfile::tempdir().unwrap();
    let step = |dur: f64| {
        serde_json::json!({"schemaVersion": 1, "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 100.0, "dur": dur},
            {"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 1, "tid": 1, "ts": 100.0, "dur": "NaN"}
        ]})
    };
    std::fs::write(dir.path().join("rank-0.json"), step(-5.0).to_string()).unwrap();
    std::fs::write(dir.path().join("rank-1.json"), "").unwrap();
    let d = trace_doc(&[dir.path()], &[]);
    assert_eq!(d["verdict"]["code"], "not judged", "{d:#}");
    let notes = d["notes"].to_string();
    assert!(notes.contains("rank-1.json: skipped, is empty"), "{notes}");
    assert!(notes.contains("1 of 1 steps have no duration"), "{notes}");

    let copies = tempfile::tempdir().unwrap();
    let t = traces("hta/nccl_parser_config");
    std::fs::copy(&t, copies.path().join("a.json.gz")).unwrap();
    std::fs::copy(&t, copies.path().join("b.json.gz")).unwrap();
    let d = trace_doc(&[copies.path()], &[]);
    assert!(d.get("straggler").is_none());
    assert!(
        d["notes"].to_string().contains("are both rank 0"),
        "{}",
        d["notes"]
    );

    let fr = tempfile::tempdir().unwrap();
    for rank in [0, 2, 3] {
        let dump = if rank == 2 {
            fr_dump(41, "completed")
        } else {
            fr_dump(42, "started")
        };
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, dump.to_string().as_bytes()).unwrap();
        std::fs::write(
            fr.path().join(format!("nccl_trace_rank_{rank}.json.gz")),
            gz.finish().unwrap(),
        )
        .unwrap();
    }
    let d = trace_doc(&[fr.path()], &[]);
    assert_eq!(d["hang"]["missing_ranks"], serde_json::json!([2]), "{d:#}");
    let out = bin()
        .arg("trace")
        .arg(fr.path())
        .args(["--format", "csv"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never enqueued"));
}
