//! Unit tests of `perf_json` (nccl-tests' -J format).

use super::*;

#[test]
fn only_a_json_extension_after_the_last_slash_writes_json() {
    for (name, json) in [
        ("out.json", true),
        ("OUT.JSON", true),
        ("runs/r1.Json", true),
        ("out.json.txt", false),
        ("runs.json/out", false),
        ("out.", false),
        ("json", false),
        (".json", true),
        ("out", false),
    ] {
        assert_eq!(is_json_name(name), json, "{name}");
    }
}

#[test]
fn a_taken_name_moves_to_the_first_free_numbered_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("r.json");
    let base = base.to_str().unwrap();
    std::fs::write(base, "earlier run").unwrap();
    std::fs::write(format!("{base}.0"), "earlier run too").unwrap();
    let (claimed, line) = claim(base);
    assert_eq!(claimed, Some(PathBuf::from(format!("{base}.1"))));
    assert_eq!(line, format!("# Writing JSON output to {base}.1"));
    assert_eq!(std::fs::read_to_string(base).unwrap(), "earlier run");
    let missing = dir.path().join("no/such/dir/r.json");
    let (none, line) = claim(missing.to_str().unwrap());
    assert_eq!(none, None);
    assert_eq!(
        line,
        format!(
            "# skipping json output; {} not accessible",
            missing.display()
        )
    );
}

#[test]
fn rank_lines_split_into_ordinal_address_and_name() {
    let rank = |device: Option<&str>| RankInfo {
        rank: 1,
        host: "node7".into(),
        pid: 42,
        device: device.map(str::to_string),
        group: 0,
    };
    let d = Device::of(&rank(Some(" 3 [0000:b8:00] NVIDIA H100 80GB HBM3")));
    assert_eq!(
        (d.device, d.device_hex.as_str(), d.device_info.as_str()),
        (3, "0000:b8:00", "NVIDIA H100 80GB HBM3")
    );
    let host = Device::of(&rank(None));
    assert_eq!(
        (
            host.device,
            host.device_hex.as_str(),
            host.device_info.as_str()
        ),
        (-1, "", "host memory")
    );
}

#[test]
fn c_quirks_survive_serialisation() {
    let placed = Placed {
        time: None,
        cpu_time: Some(CDouble(12.5)),
        alg_bw: CDouble(f64::NAN),
        bus_bw: CDouble(0.0),
        nwrong: None,
    };
    assert_eq!(
        serde_json::to_string(&placed).unwrap(),
        r#"{"cpu_time":12.5,"alg_bw":"nan","bus_bw":0.0,"nwrong":null}"#
    );
    assert_eq!(serde_json::to_string(&CBool(true)).unwrap(), r#""true""#);
}

#[test]
fn per_iteration_figures_follow_compute_iter_stats_and_name_each_process() {
    use crate::model::{IterationTiming, PerIteration};
    let mut p: Point = serde_json::from_value(serde_json::json!({
        "collective": "all_reduce", "nranks": 3, "dtype": "float", "redop": "sum",
        "root": -1, "placement": "out-of-place", "size_bytes": 8, "count": 2,
        "time_s": 1e-6, "algbw_bytes_per_s": 1.0, "busbw_bytes_per_s": 1.0, "wrong": 0,
        "iters_per_sample": 4, "samples_s": [1e-6],
        "stats": crate::stats::summarize(&[1e-6]),
        "stop_reason": "fixed", "per_rank_time_s": [1e-6, 1e-6, 1e-6]
    }))
    .unwrap();
    // Ranks 0 and 1 share a process; rank 2 is another. Calls of 1..4 us, rank 2 slowest
    // on the third call.
    p.per_iteration = Some(PerIteration {
        times_s: vec![4e-6, 1e-6, 9e-6, 2e-6],
        per_rank_s: vec![
            vec![4e-6, 1e-6, 1e-6, 2e-6],
            vec![3e-6, 1e-6, 2e-6, 1e-6],
            vec![1e-6, 1e-6, 9e-6, 1e-6],
        ],
        skipped: 1,
        timing: IterationTiming::HostClock,
    });
    let each = PerIter::of(&p, &[vec![0, 1], vec![2]]).unwrap();
    // After skipping the first call: 1, 9, 2 us; p99 of 3 is the largest (nearest rank).
    assert_eq!(each.skipped_iterations, 1);
    let close = |a: CDouble, b: f64| (a.0 - b).abs() < 1e-9;
    assert!(close(each.min_us, 1.0) && close(each.max_us, 9.0) && close(each.p99_us, 9.0));
    assert!(close(each.p50_us, 2.0), "sorted[n / 2]");
    assert!(close(each.avg_us, 4.0));
    let rows = each.per_process_max_times_us.unwrap();
    let row = |i: usize| rows[i].iter().map(|c| c.0).collect::<Vec<f64>>();
    assert_eq!(rows.len(), 2);
    assert!(row(0)
        .iter()
        .zip([4.0, 1.0, 2.0, 2.0])
        .all(|(a, b)| (a - b).abs() < 1e-9));
    assert!(row(1)
        .iter()
        .zip([1.0, 1.0, 9.0, 1.0])
        .all(|(a, b)| (a - b).abs() < 1e-9));
    // One process: no process rows, as nccl-tests writes them only for nProcs > 1.
    assert!(PerIter::of(&p, &[vec![0, 1, 2]])
        .unwrap()
        .per_process_max_times_us
        .is_none());
}
