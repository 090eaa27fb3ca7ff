//! Every file of the field corpus (tests/corpus, copied from shared/corpus, each with its source
//! on line 1): imported, parsed or rejected with a reason, and the findings each one yields.

use crate::common;

use common::bin;
use ncclprobe::coll::Collective;
use ncclprobe::import::{nccl_log, nccl_tests, topo};
use ncclprobe::model::RunStatus;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn corpus(dir: &str, prefix: &str) -> PathBuf {
    crate::common::corpus_file(dir, prefix)
}

fn all(dir: &str) -> Vec<PathBuf> {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(base)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// (file prefix, status, collective, ranks, points, truncated)
type ImportCase = (
    &'static str,
    RunStatus,
    Option<Collective>,
    usize,
    usize,
    bool,
);
const NCCL_TESTS: &[ImportCase] = &[
    (
        "01-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        16,
        6,
        false,
    ),
    (
        "03-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        4,
        14,
        false,
    ),
    (
        "04-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        16,
        64,
        false,
    ),
    (
        "05-",
        RunStatus::Complete,
        Some(Collective::Unknown),
        8,
        68,
        false,
    ),
    (
        "07-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        2,
        56,
        false,
    ),
    (
        "08-",
        RunStatus::Complete,
        Some(Collective::AllGather),
        2,
        56,
        false,
    ),
    (
        "09-",
        RunStatus::Complete,
        Some(Collective::Reduce),
        1,
        56,
        false,
    ),
    (
        "10-",
        RunStatus::Complete,
        Some(Collective::Alltoall),
        2,
        56,
        false,
    ),
    (
        "11-",
        RunStatus::Truncated,
        Some(Collective::Sendrecv),
        8,
        8,
        true,
    ),
    ("14-", RunStatus::Failed, None, 8, 0, true),
    (
        "15-",
        RunStatus::Complete,
        Some(Collective::Sendrecv),
        2,
        58,
        false,
    ),
    ("16-", RunStatus::Failed, None, 16, 0, true),
    (
        "18-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        2,
        62,
        false,
    ),
    (
        "19-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        16,
        2,
        false,
    ),
    (
        "21-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        6,
        2,
        false,
    ),
    (
        "24-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        2,
        58,
        false,
    ),
    ("25-", RunStatus::Truncated, None, 2, 0, true),
    (
        "26-",
        RunStatus::Complete,
        Some(Collective::Alltoall),
        1,
        2,
        false,
    ),
    (
        "28-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        16,
        2,
        false,
    ),
    ("29-", RunStatus::Truncated, None, 0, 0, true),
    // Unnamed, bandwidths too small for their ratio, but 128 B of 4 floats = 8 ranks of a
    // reduce-scatter: the source says reduce_scatter_perf on 2 nodes x 4 GPUs.
    (
        "31-",
        RunStatus::Truncated,
        Some(Collective::ReduceScatter),
        8,
        14,
        true,
    ),
    // Two footers and nothing else: two processes of a non-MPI build, no rows to read.
    ("40-", RunStatus::Truncated, None, 0, 0, false),
    ("41-", RunStatus::Truncated, None, 4, 0, true),
    // nccl-tests 2.20's banner with its git hash, columns by whitespace.
    (
        "42-",
        RunStatus::Truncated,
        Some(Collective::AllReduce),
        2,
        8,
        true,
    ),
    (
        "44-",
        RunStatus::Complete,
        Some(Collective::AllReduce),
        24,
        12,
        false,
    ),
];

/// Files the reader refuses, with what it says: a header retyped without its `#`.
const NCCL_TESTS_REFUSED: &[(&str, &str)] =
    &[("43-", "no nccl-tests table, header or device lines")];

#[test]
fn every_nccl_tests_file_imports_as_expected() {
    assert_eq!(
        all("nccl-tests").len(),
        NCCL_TESTS.len() + NCCL_TESTS_REFUSED.len(),
        "a corpus file without an expectation"
    );
    for &(prefix, says) in NCCL_TESTS_REFUSED {
        let e = nccl_tests::import_text(&corpus("nccl-tests", prefix)).unwrap_err();
        assert!(e.to_string().contains(says), "{prefix}: {e}");
    }
    for &(prefix, status, coll, nranks, points, truncated) in NCCL_TESTS {
        let path = corpus("nccl-tests", prefix);
        let r = nccl_tests::import_text(&path).unwrap_or_else(|e| panic!("{prefix}: {e}"));
        let info = r.import.as_ref().unwrap();
        assert_eq!(r.status, status, "{prefix} status");
        assert_eq!(r.points.len(), points, "{prefix} points");
        assert_eq!(
            r.backend.nranks, nranks,
            "{prefix} ranks ({})",
            info.nranks_from
        );
        assert_eq!(info.truncated, truncated, "{prefix} truncated");
        let colls: BTreeSet<Collective> = r.points.iter().map(|p| p.collective).collect();
        assert_eq!(
            colls.into_iter().next(),
            coll,
            "{prefix} collective ({})",
            info.collective_from
        );
        assert!(r.points.iter().all(|p| p.nranks == nranks), "{prefix}");
    }
}

#[test]
fn nccl_tests_values_are_read_exactly() {
    // 07: the 1 GiB row, both placements.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "07-")).unwrap();
    let last = &r.points[r.points.len() - 2..];
    assert_eq!(last[0].size_bytes, 1073741824);
    assert_eq!(last[0].count, 268435456);
    assert!((last[0].time_s - 268588e-6).abs() < 1e-12);
    assert!((last[1].time_s - 268461e-6).abs() < 1e-12);
    assert_eq!(last[0].wrong, Some(0));
    assert_eq!(
        r.import.as_ref().unwrap().reported_avg_busbw_gbps,
        Some(2.05774)
    );
    // 03: old format, the error column is not a count.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "03-")).unwrap();
    assert!(!r.points.is_empty());
    assert!(r.points.iter().all(|p| p.wrong.is_none()));
    assert!(r.notes.iter().any(|n| n.contains("'error' column")));
    // 10: alltoall in-place #wrong N/A.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "10-")).unwrap();
    let in_place: Vec<_> = r
        .points
        .iter()
        .filter(|p| p.placement == ncclprobe::coll::Placement::InPlace)
        .collect();
    assert!(!in_place.is_empty());
    assert!(in_place.iter().all(|p| p.wrong.is_none()));
    // 14: the error lines are kept with line numbers.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "14-")).unwrap();
    assert!(
        r.import.unwrap().errors[0].contains("CUDA-capable device(s) is/are busy or unavailable")
    );
    // 16: the row cut by the error is reported.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "16-")).unwrap();
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("row interrupted by an error message")));
    // 04 and 15: versions.
    let r = nccl_tests::import_text(&corpus("nccl-tests", "15-")).unwrap();
    assert_eq!(
        r.backend.library_versions.get("nccl").map(String::as_str),
        Some("2.22.3+cuda12.2")
    );
}

#[test]
fn import_cli_writes_record_and_csv_that_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("r.json"), dir.path().join("r.csv"));
    bin()
        .arg("import")
        .arg(corpus("nccl-tests", "18-"))
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success();
    let record = common::read_record(&json);
    let (header, rows) = common::csv_rows(&csv);
    assert_eq!(header[0], "collective");
    assert_eq!(rows.len(), record.points.len());
    for (row, p) in rows.iter().zip(&record.points) {
        assert_eq!(row[2].parse::<u64>().unwrap(), p.size_bytes);
        assert!((row[8].parse::<f64>().unwrap() - p.time_s * 1e6).abs() < 1e-3);
    }
}

/// (file prefix, devices, ordered pairs, legend, a pair and its link)
type TopoCase = (
    &'static str,
    usize,
    usize,
    &'static str,
    (&'static str, &'static str, &'static str),
);
const TOPOS: &[TopoCase] = &[
    ("01-", 2, 2, "new", ("GPU0", "GPU1", "PIX")),
    ("02-", 2, 2, "new", ("GPU0", "GPU1", "NV2")),
    ("04-", 8, 56, "new", ("GPU0", "GPU7", "NV18")),
    ("05-", 2, 2, "new", ("GPU1", "GPU0", "PHB")),
    ("06-", 16, 240, "new", ("GPU4", "NIC4", "PIX")),
    ("07-", 2, 2, "new", ("GPU0", "NIC0", "PHB")),
    ("09-", 7, 42, "old", ("GPU2", "GPU3", "PHB")),
    ("10-", 4, 12, "old", ("GPU0", "GPU3", "SYS")),
    ("11-", 5, 20, "old", ("mlx4_0", "GPU2", "PHB")),
    ("13-", 8, 56, "new", ("GPU0", "GPU3", "NV4")),
    ("14-", 2, 2, "new", ("GPU0", "GPU1", "NODE")),
    ("17-", 4, 12, "new", ("GPU2", "GPU3", "NV12")),
    ("18-", 4, 12, "new", ("GPU3", "GPU0", "NV6")),
    ("20-", 21, 420, "new", ("GPU0", "NIC4", "PIX")),
];

#[test]
fn every_topo_file_parses() {
    assert_eq!(all("topo").len(), TOPOS.len());
    for &(prefix, devices, pairs, legend, (a, b, link)) in TOPOS {
        let t =
            topo::parse_file(&corpus("topo", prefix)).unwrap_or_else(|e| panic!("{prefix}: {e}"));
        assert_eq!(t.devices.len(), devices, "{prefix} devices {:?}", t.devices);
        assert_eq!(t.links.len(), pairs, "{prefix} pairs");
        assert_eq!(t.legend, legend, "{prefix}");
        assert_eq!(t.link(a, b), Some(link), "{prefix} {a}-{b}");
        assert!(t.problems.is_empty(), "{prefix}: {:?}", t.problems);
    }
    let t = topo::parse_file(&corpus("topo", "06-")).unwrap();
    assert_eq!(t.nic_names.get("NIC7").map(String::as_str), Some("mlx5_7"));
    assert_eq!(t.info["GPU4"].numa_affinity.as_deref(), Some("1"));
    let t = topo::parse_file(&corpus("topo", "18-")).unwrap();
    assert_eq!(t.info["GPU2"].gpu_numa_id.as_deref(), Some("20"));
    assert_eq!(t.info["GPU0"].numa_affinity.as_deref(), Some("0,5-11"));
    let t = topo::parse_file(&corpus("topo", "01-")).unwrap();
    assert_eq!(t.p2p.len(), 2, "the -p2p matrix after the legend");
    assert_eq!(t.info["GPU1"].cpu_affinity.as_deref(), Some("24-47,72-95"));
    // Empty affinity cells in a tab-separated paste: the N/A is the GPU NUMA ID.
    let t = topo::parse_file(&corpus("topo", "20-")).unwrap();
    assert_eq!(t.info["GPU0"].gpu_numa_id.as_deref(), Some("N/A"));
    assert_eq!(t.info["GPU0"].cpu_affinity, None);
}

#[test]
fn topo_cli_csv() {
    let out = bin()
        .args(["topo", "--format", "csv", "--from"])
        .arg(corpus("topo", "10-"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("from,to,link"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 12);
    assert!(rows.contains(&"GPU0,GPU1,SYS"), "SOC is read as SYS");
}

#[test]
fn every_nccl_debug_log_parses() {
    for path in all("nccl-debug") {
        let facts =
            nccl_log::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(facts.is_log());
    }
    let f = nccl_log::parse_file(&corpus("nccl-debug", "19-")).unwrap();
    assert_eq!(f.transport_names(), vec!["NET/IB", "P2P/IPC"]);
    assert!(!f.gdr_disabled.is_empty());
    let f = nccl_log::parse_file(&corpus("nccl-debug", "16-")).unwrap();
    assert_eq!(f.transport_names(), vec!["SHM"]);
    assert_eq!(
        f.ranks.get(&0).and_then(|r| r.bus_id.clone()).as_deref(),
        Some("73000")
    );
    let f = nccl_log::parse_file(&corpus("nccl-debug", "04-")).unwrap();
    assert_eq!(f.nccl_version.as_deref(), Some("2.18.5+cuda11.8"));
    assert_eq!(
        f.env.get("NCCL_SOCKET_IFNAME").map(|(v, _)| v.as_str()),
        Some("eth0")
    );
    let f = nccl_log::parse_file(&corpus("nccl-debug", "11-")).unwrap();
    assert!(!f.watchdog.is_empty());
    assert!(f
        .watchdog
        .iter()
        .all(|w| w.op == "_REDUCE_SCATTER_BASE" && w.timeout_ms == Some(600000)));
    let f = nccl_log::parse_file(&corpus("nccl-debug", "03-")).unwrap();
    assert_eq!(
        (f.nranks, f.nnodes, f.local_ranks),
        (Some(2), Some(2), Some(1))
    );
}

fn findings(files: &[PathBuf]) -> (BTreeSet<String>, Value) {
    let mut cmd = bin();
    cmd.args(["diagnose", "--format", "json"]);
    for f in files {
        cmd.arg("--from").arg(f);
    }
    let out = cmd.assert().success().get_output().stdout.clone();
    let v: Value =
        serde_json::from_slice(&out).expect("diagnose --format json prints one JSON document");
    let ids = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    (ids, v)
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn findings_from_the_corpus() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: &[Case] = &[
        (&[("nccl-debug", "01-")], &["nccl.nvml"]),
        (
            &[("nccl-debug", "03-")],
            &[
                "p2p.unavailable",
                "result.truncated",
                "transport.socket-internode",
            ],
        ),
        (&[("nccl-debug", "04-")], &["wsl2"]),
        (
            &[("nccl-debug", "06-")],
            &["nccl.topology", "p2p.unavailable"],
        ),
        (
            &[("nccl-debug", "07-")],
            &["nccl-tests.failure", "nccl.topology", "wsl2"],
        ),
        (&[("nccl-debug", "09-")], &["watchdog.timeout"]),
        (&[("nccl-debug", "11-")], &["watchdog.timeout"]),
        (&[("nccl-debug", "12-")], &["nccl.proxy"]),
        // An old release's WARN that libibverbs is missing (an INFO from 2.18): no error.
        (&[("nccl-debug", "13-")], &["nccl.choices"]),
        (&[("nccl-debug", "15-")], &["p2p.unavailable"]),
        (&[("nccl-debug", "16-")], &["p2p.unavailable"]),
        (&[("nccl-debug", "17-")], &["nccl.p2p"]),
        (&[("nccl-debug", "19-")], &["transport.gdr-disabled"]),
        (&[("nccl-tests", "11-")], &["result.truncated"]),
        (&[("nccl-tests", "14-")], &["nccl-tests.failure"]),
        (
            &[("nccl-tests", "16-")],
            &["nccl-tests.failure", "result.truncated"],
        ),
        (&[("nccl-tests", "25-")], &["result.truncated", "wsl2"]),
        (&[("topo", "01-")], &["p2p.unavailable"]),
        (&[("topo", "10-")], &["topo.cross-numa"]),
        // A KVM guest whose one NIC hangs off the host bridge: no GPUDirect RDMA by default.
        (&[("topo", "07-")], &["topo.nic-far-from-gpu"]),
        // Two sockets, one mlx4 NIC: SYS from GPU0/1, PHB from GPU2/3.
        (
            &[("topo", "11-")],
            &["topo.cross-numa", "topo.nic-far-from-gpu"],
        ),
        // Every GPU has a PIX or PXB NIC.
        (&[("topo", "06-")], &[]),
        (&[("topo", "13-")], &[]),
        (&[("topo", "17-")], &["topo.cross-numa"]),
        // No P2P behind one switch: 4.0 GB/s is what that path gives (0.89x of it); the
        // missing P2P is the finding, not the bandwidth.
        (
            &[("nccl-tests", "07-"), ("topo", "01-")],
            &["p2p.unavailable"],
        ),
        // Two 4090s in a container at 2.2 GB/s: 0.12x of even host-memory SHM.
        (&[("nccl-tests", "24-")], &["result.below-expected"]),
        (&[("nccl-tests", "21-"), ("topo", "09-")], &[]),
        // The driver's Xid events in kernel logs.
        (&[("kernel-logs", "01-")], &["gpu.xid"]),
        (&[("kernel-logs", "02-")], &["gpu.xid"]),
        (&[("kernel-logs", "03-")], &["gpu.xid"]),
        (&[("kernel-logs", "04-")], &["gpu.xid"]),
    ];
    for (inputs, expected) in cases {
        let files: Vec<PathBuf> = inputs.iter().map(|(d, p)| corpus(d, p)).collect();
        let (ids, _) = findings(&files);
        assert_eq!(ids, set(expected), "{inputs:?}");
    }
}

#[test]
fn watchdog_names_the_ranks_that_did_not_report() {
    let (_, v) = findings(&[corpus("nccl-debug", "11-")]);
    let title = v["findings"][0]["title"].as_str().unwrap();
    assert!(
        title.contains("_REDUCE_SCATTER_BASE did not finish within 600 s"),
        "{title}"
    );
    let (_, v) = findings(&[corpus("nccl-debug", "09-")]);
    let f = &v["findings"][0];
    assert!(f["evidence"][0]["line"].as_u64().unwrap() > 1);
    assert!(f["evidence"][0]["file"].as_str().unwrap().ends_with(".txt"));
}

#[test]
fn facts_have_the_documented_keys() {
    let (_, v) = findings(&[corpus("nccl-debug", "19-"), corpus("nccl-debug", "04-")]);
    let facts = &v["facts"];
    for key in ["nccl_version", "transports", "env", "hosts", "ranks"] {
        assert!(facts.get(key).is_some(), "facts.{key}");
    }
    assert_eq!(facts["nccl_version"], "2.18.5+cuda11.8");
    assert!(facts["transports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "NET/IB"));
    assert_eq!(facts["env"]["NCCL_SOCKET_IFNAME"], "eth0");
}

/// What a maintainer reads in each kernel log: the application's Xid 13 and 109 are
/// information; cleanup Xids that name an NVLink5 Xid as their cause are the link's error; a GPU
/// that fell off the bus without an Xid number is Xid 79; a fatal NVLink5 Xid outranks the
/// non-fatal ones and the contained ECC error beside it.
#[test]
fn xid_events_in_kernel_logs_are_weighed_as_nvidia_catalogs_them() {
    let finding = |prefix: &str| -> Value {
        let (_, v) = findings(&[corpus("kernel-logs", prefix)]);
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "gpu.xid")
            .cloned()
            .expect("gpu.xid")
    };
    let texts = |f: &Value| -> Vec<String> {
        f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    };
    let app = finding("01-");
    assert_eq!(app["severity"], "info", "{app}");
    let t = texts(&app);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(
        t.iter()
            .any(|e| e.starts_with("Xid 13 on 0000:cb:00, 3 times")),
        "{t:?}"
    );
    assert!(
        t.iter().any(|e| e.starts_with("Xid 109 on 0000:cb:00:")),
        "{t:?}"
    );

    let cleanup = finding("02-");
    assert_eq!(cleanup["severity"], "error", "{cleanup}");
    let t = texts(&cleanup);
    assert_eq!(t.len(), 4, "one line per GPU: {t:?}");
    assert!(
        t.iter()
            .all(|e| e.contains("cleanup after an earlier hardware Xid")),
        "{t:?}"
    );
    assert!(
        t.iter()
            .any(|e| e.starts_with("Xid 45 on 0000:dc:00, 2 times")),
        "{t:?}"
    );

    let fell = finding("03-");
    assert_eq!(fell["severity"], "error");
    assert!(
        fell["title"]
            .as_str()
            .unwrap()
            .contains("Xid 79 (GPU has fallen off the bus) on 0000:b3:00"),
        "{fell}"
    );
    assert_eq!(fell["evidence"][0]["line"], 2);

    let nvlink5 = finding("04-");
    assert_eq!(nvlink5["severity"], "error");
    assert!(
        nvlink5["title"]
            .as_str()
            .unwrap()
            .starts_with("The NVIDIA driver reported Xid 149 (NVLink5 link error"),
        "{nvlink5}"
    );
    let t = texts(&nvlink5);
    assert!(
        t.iter()
            .any(|e| e.starts_with("Xid 145 on 0018:01:00: NVLink5 non-fatal")),
        "{t:?}"
    );
    assert!(
        t.iter()
            .any(|e| e.starts_with("Xid 94 on 0000:9b:00: contained ECC error")),
        "{t:?}"
    );
}
