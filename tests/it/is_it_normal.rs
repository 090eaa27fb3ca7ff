//! "Is my number normal?": `compare` answers from what the run shows and what the user states
//! (`--hardware`), conditionally when the NICs are unknown, and `compare BEFORE AFTER` says
//! which sizes moved. Corpus runs from tests/corpus (each with its source on line 1).

use crate::common;

use common::bin;
use serde_json::Value;
use std::path::PathBuf;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests")
        .join(name)
}

/// `compare ARGS --format json`: its document, once it exited with `code`; stderr too.
fn compare_doc(args: &[&str], code: i32) -> (Value, String) {
    let out = bin()
        .arg("compare")
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

/// A comparison that reached no verdict (the readings per NIC count, an average without its
/// sizes): printed, exit 2, and stderr says it was not judged.
fn conditional_json(args: &[&str]) -> Value {
    let (doc, err) = compare_doc(args, 2);
    assert!(err.contains("not judged"), "{err}");
    doc
}

fn compare_json(args: &[&str]) -> Value {
    compare_doc(args, 0).0
}

#[test]
fn a_multi_node_run_with_its_nics_unknown_gets_a_conditional_answer() {
    // 2 x 8 A100 over RoCE (OCI), nothing but host names and GPU names in the paste.
    let run = corpus("28-oci-2node-a100x16-rocev2-cluster-network-10g.txt");
    let doc = conditional_json(&[run.to_str().unwrap()]);
    assert_eq!(doc["baseline"]["kind"], "conditional");
    assert_eq!(doc["points"].as_array().unwrap().len(), 0);
    let readings = doc["nic_readings"].as_array().unwrap();
    let counts: Vec<u64> = readings
        .iter()
        .map(|r| r["nics_per_node"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 4, 8]);
    // 191.8 GB/s over 2 nodes: 47.9 per NIC with 4 (NDR 400), 24.0 with 8 (HDR 200).
    assert_eq!(readings[2]["matches"], "NDR 400G near line rate");
    assert_eq!(readings[3]["matches"], "HDR 200G near line rate");
    let summary = doc["summary"].as_str().unwrap();
    assert!(summary.contains("over 2 nodes = "), "{summary}");
    assert!(summary.contains("one fact settles it"), "{summary}");
    // Two nodes are said to be no fabric test.
    let warnings = doc["warnings"].to_string();
    assert!(
        warnings.contains("2 nodes are not a fabric test"),
        "{warnings}"
    );
    // The citations of the per-NIC rule travel with the answer.
    let citation = doc["baseline"]["citation"].as_str().unwrap();
    assert!(citation.contains("nccl-tests/issues/119") && citation.contains("issues/267"));
}

#[test]
fn nics_named_on_the_command_line_leave_only_their_speed_open() {
    // mpirun ... -x NCCL_IB_HCA=mlx5_0:1,...,mlx5_7:1 above the table: 8 NICs per node.
    let run = corpus("04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let doc = conditional_json(&[run.to_str().unwrap()]);
    assert_eq!(doc["baseline"]["kind"], "conditional");
    let readings = doc["nic_readings"].as_array().unwrap();
    assert_eq!(readings.len(), 1);
    assert_eq!(readings[0]["nics_per_node"], 8);
    // 468.5 / 8 = 58.6 GB/s per NIC: above NDR's 48, which two nodes' tree allows.
    let matches = readings[0]["matches"].as_str().unwrap();
    assert!(
        matches.contains("1.22x NDR 400G (possible only on 2 nodes"),
        "{matches}"
    );
    assert!(doc["summary"]
        .as_str()
        .unwrap()
        .contains("the NICs' speed settles it"));
    // What the table assumed is what the line above it says: 8 NICs known, their speed not.
    let why = doc["baseline"]["why"].as_str().unwrap();
    assert!(!why.contains("no NIC count"), "{why}");
    assert!(
        why.contains("with 8 NICs per node (from the log's NCCL_IB_HCA)")
            && why.contains("speed not known"),
        "{why}"
    );
}

#[test]
fn stated_hardware_gives_a_definite_verdict_and_is_shown_as_stated() {
    let run = corpus("04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let doc = compare_json(&[
        run.to_str().unwrap(),
        "--hardware",
        "2 nodes x 8 H100 SXM, 8x400G IB per node",
    ]);
    assert_eq!(doc["baseline"]["kind"], "expectation");
    assert_eq!(doc["baseline"]["id"], "ib-ndr-400");
    let why = doc["baseline"]["why"].as_str().unwrap();
    assert!(why.contains("(stated)"), "{why}");
    let stated: Vec<&str> = doc["stated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        stated,
        [
            "2 node(s)",
            "8 x H100 SXM per node",
            "8 x 400 Gb/s InfiniBand NICs per node"
        ]
    );
    // 8 x 48 GB/s, and two nodes allow up to 2x: the 469 GB/s plateau is ok.
    let top = doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["size_bytes"] == 17179869184u64 && p["placement"] == "out-of-place")
        .unwrap();
    assert_eq!(top["verdict"], "ok");
    let expected = top["expected_busbw_bytes_per_s"].as_f64().unwrap() / 1e9;
    assert!((expected - 384.0).abs() < 5.0, "{expected}");
    // The table says where each fact came from.
    let out = bin()
        .args(["compare", run.to_str().unwrap(), "--hardware", "8x400G IB"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("# stated: 8 x 400 Gb/s InfiniBand NICs per node"),
        "{table}"
    );
}

#[test]
fn hardware_that_does_not_parse_is_refused_with_the_accepted_forms() {
    let run = corpus("04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    bin()
        .args([
            "compare",
            run.to_str().unwrap(),
            "--hardware",
            "8x fast NICs",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--hardware: `8x fast NICs`"))
        .stderr(predicates::str::contains("8x400G IB per node"));
}

/// An nccl-tests all_reduce log on 8 ranks of one host, busbw per size from `busbw`.
fn log(busbw: impl Fn(u64) -> f64) -> String {
    let mut text = String::from("# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 8 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n");
    for r in 0..8 {
        text += &format!(
            "#  Rank {r:2} Group  0 Pid   1000 on     node-a device {r:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3\n",
            0x19 + r
        );
    }
    text += "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n";
    let mut size = 8u64;
    while size <= 256 << 20 {
        let bus = busbw(size);
        let alg = bus / 1.75;
        let us = size as f64 / (alg * 1e9) * 1e6;
        text += &format!(
            "{size:>12}  {:>12}     float     sum      -1  {us:8.2}  {alg:6.2}  {bus:6.2}       0  {us:8.2}  {alg:6.2}  {bus:6.2}       0\n",
            size / 4
        );
        size *= 2;
    }
    text
}

#[test]
fn a_regression_confined_to_a_size_range_is_named_with_its_ratio() {
    // The same curve, except 256 KiB to 2 MiB at half the bandwidth (an LL/LL128 range after
    // an upgrade, say).
    let curve = |size: u64| (size as f64 / 1e6).clamp(0.01, 360.0) * 2.0;
    let before = log(curve);
    let after = log(|size| {
        let b = curve(size);
        if (256 << 10..=2 << 20).contains(&size) {
            b / 2.0
        } else {
            b
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (b, a) = (dir.path().join("before.txt"), dir.path().join("after.txt"));
    std::fs::write(&b, before).unwrap();
    std::fs::write(&a, after).unwrap();
    let doc = compare_json(&[b.to_str().unwrap(), a.to_str().unwrap()]);
    let summary = doc["summary"].as_str().unwrap();
    assert!(
        summary.contains(
            "all_reduce: 8 B-128 KiB within 5%; 256 KiB-2 MiB: 0.50x regression; 4 MiB and up within 5%."
        ),
        "{summary}"
    );
}

#[test]
fn a_single_node_run_takes_the_stated_node_and_keeps_a_definite_verdict() {
    // An A100 DGX all_gather whose paste names neither the GPU nor the collective.
    let run = corpus("05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let doc = compare_json(&[
        run.to_str().unwrap(),
        "--collective",
        "all_gather",
        "--hardware",
        "8x A100 SXM4, NVSwitch",
    ]);
    assert_eq!(doc["baseline"]["kind"], "expectation");
    assert_eq!(doc["baseline"]["id"], "a100-sxm4-nvswitch-8");
    assert!(doc["baseline"]["why"]
        .as_str()
        .unwrap()
        .contains("NVSwitch inside the node (stated)"));
    assert!(doc["nic_readings"].is_null());
    assert!(!doc["points"].as_array().unwrap().is_empty());
}

#[test]
fn small_message_latency_is_said_only_of_small_messages_and_one_size_says_so() {
    use ncclprobe::coll::Collective;
    use ncclprobe::dtype::Dtype;
    use ncclprobe::model::Headline;
    use ncclprobe::render::table::headline;
    let h = |sizes: Vec<u64>, small: u64| Headline {
        collective: Collective::AllReduce,
        dtype: Dtype::Float,
        redop: None,
        plateau_busbw_bytes_per_s: 100e9,
        plateau_sizes_bytes: sizes,
        small_latency_s: 20e-6,
        small_size_bytes: small,
        avg_busbw_bytes_per_s: 50e9,
    };
    let swept = headline(&h(vec![1 << 28, 1 << 29], 8));
    assert!(
        swept.ends_with("small-message latency 20.00 us at 8 B"),
        "{swept}"
    );
    let large_only = headline(&h(vec![1 << 28, 1 << 29], 1 << 20));
    assert!(
        large_only.ends_with("smallest size 1 MiB takes 20.00 us (no small message measured)"),
        "{large_only}"
    );
    let one = headline(&h(vec![5120], 5120));
    assert_eq!(
        one,
        "# ncclprobe all_reduce float: one size only, 5 KiB: busbw 100.00 GB/s, 20.00 us per call"
    );
}

#[test]
fn a_paste_of_only_the_summary_imports_and_its_average_is_judged_over_its_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let paste = dir.path().join("summary.txt");
    std::fs::write(
        &paste,
        "$ mpirun -np 16 -H n1:8,n2:8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 139.56\n",
    )
    .unwrap();
    // Import keeps it: no points, the average, the sizes and the ranks of the command line.
    let json = dir.path().join("r.json");
    bin()
        .args([
            "import",
            paste.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .assert()
        .success();
    let r = common::read_record(&json);
    assert!(r.points.is_empty());
    assert_eq!(r.backend.nranks, 16);
    let info = r.import.unwrap();
    assert_eq!(info.reported_avg_busbw_gbps, Some(139.56));
    assert_eq!(info.sizes.map(|s| s.sizes().len()), Some(31));
    assert_eq!(
        info.collective,
        Some(ncclprobe::coll::Collective::AllReduce)
    );
    // Judged against the expectation's mean over the same 31 sizes.
    let doc = compare_json(&[
        paste.to_str().unwrap(),
        "--hardware",
        "2 nodes x 8 H100 SXM, 8x400G IB per node",
    ]);
    assert_eq!(doc["baseline"]["id"], "ib-ndr-400");
    let summary = doc["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("nccl-tests' average bus bandwidth 139.56 GB/s over 31 sizes from 8 B to 8 GiB (all_reduce, 16 ranks) against "),
        "{summary}"
    );
    assert!(
        summary.contains("expected as the mean over the same sizes"),
        "{summary}"
    );
    // The same lines without their '#' (hand-copied, or behind a launcher's tag) read alike.
    std::fs::write(
        &paste,
        "$ mpirun -np 16 -H n1:8,n2:8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1\n[1,0]<stdout>:Out of bounds values : 0 OK\nAvg bus bandwidth    : 139.56 \n",
    )
    .unwrap();
    let bare = compare_json(&[
        paste.to_str().unwrap(),
        "--hardware",
        "2 nodes x 8 H100 SXM, 8x400G IB per node",
    ]);
    assert_eq!(bare["summary"], doc["summary"]);
    // Without the sizes it says what it needs; with nothing at all, exit 2 naming it.
    std::fs::write(
        &paste,
        "# nThread 1 nGpus 8\n# Avg bus bandwidth    : 95.3\n",
    )
    .unwrap();
    let doc = conditional_json(&[
        paste.to_str().unwrap(),
        "--collective",
        "all_reduce",
        "--hardware",
        "8x H100 SXM",
    ]);
    assert!(doc["summary"]
        .as_str()
        .unwrap()
        .contains("judging it needs the sizes it averaged"));
    std::fs::write(&paste, "# Avg bus bandwidth    : 95.3\n").unwrap();
    bin()
        .args(["compare", paste.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "holds only nccl-tests' summary lines",
        ));
}

#[test]
fn a_fleet_floor_is_used_by_name_and_never_chosen_over_a_typical_figure() {
    let run = corpus("05-a100-dgx-allgather-old-format-no-redop-column.txt");
    let run = run.to_str().unwrap();
    let chosen = compare_json(&[
        run,
        "--collective",
        "all_gather",
        "--hardware",
        "8x A100 SXM4, NVSwitch",
    ]);
    assert_eq!(chosen["baseline"]["id"], "a100-sxm4-nvswitch-8");
    let floor = compare_json(&[
        run,
        "--collective",
        "all_gather",
        "--profile",
        "azure-nd-a100-v4",
    ]);
    assert_eq!(floor["baseline"]["provenance"], "production-threshold");
    assert!(floor["baseline"]["citation"]
        .as_str()
        .unwrap()
        .contains("azurehpc-health-checks"));
}

#[test]
fn report_and_doctor_refuse_hardware_that_does_not_parse_before_anything_else() {
    let run = corpus("28-oci-2node-a100x16-rocev2-cluster-network-10g.txt");
    bin()
        .args([
            "report",
            run.to_str().unwrap(),
            "--hardware",
            "two fast nodes",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--hardware: `two fast nodes`"));
    // doctor would measure first; a bad statement ends it at once.
    let dir = tempfile::tempdir().unwrap();
    bin()
        .args([
            "doctor",
            "--backend",
            "host",
            "--hardware",
            "8x fast NICs",
            "-o",
        ])
        .arg(dir.path().join("out"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--hardware: `8x fast NICs`"));
    assert!(!dir.path().join("out").exists());
    // A report of the same run with its NICs stated holds it against them.
    let out = bin()
        .args([
            "report",
            run.to_str().unwrap(),
            "--hardware",
            "16x100G RoCE per node",
        ])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{md}");
    assert!(md.contains("roce-100") || md.contains("RoCE"), "{md}");
}
