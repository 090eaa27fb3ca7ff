//! Gates and diagnoses a silent fallback cannot pass, on real outputs from the field: a run
//! that fell back to sockets fails `--forbid socket` with its JUnit case naming the line; one
//! whose NCCL built NVLS channels passes `--require nvls`; a gate with nothing to judge by
//! fails; `topo --from` prints the rail map of NCCL's dumps and `diagnose` reads them.

use crate::common;

use common::bin;
use std::path::PathBuf;

fn corpus(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(rel)
}

#[test]
fn a_socket_fallback_fails_forbid_socket_with_its_junit_case() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("q.xml");
    let out = bin()
        .arg("qualify")
        .arg(corpus(
            "nccl-tests/18-eks-karpenter-2node-socket-no-efa-tagged-elided.txt",
        ))
        .args(["--forbid", "socket", "--junit"])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("forbid socket"))
        .expect("a test case for the gate");
    let failure = case
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("failed");
    assert!(failure
        .attribute("message")
        .unwrap()
        .contains("Using network Socket"));
}

#[test]
fn nvls_channels_pass_require_nvls_and_no_evidence_fails() {
    let out = bin()
        .arg("qualify")
        .arg(corpus(
            "nccl-tests/19-eks-p5-h100-2node-efa-nvls-snippet-two-digit-rank-tags.txt",
        ))
        .args(["--require", "nvls", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The same snippet says nothing of the network: a forbid cannot pass on silence.
    let out = bin()
        .arg("qualify")
        .arg(corpus(
            "nccl-tests/19-eks-p5-h100-2node-efa-nvls-snippet-two-digit-rank-tags.txt",
        ))
        .args(["--forbid", "socket"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no line says which network"));
    // A run without NCCL lines at all, and a bad gate.
    let out = bin()
        .arg("qualify")
        .arg(corpus(
            "nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt",
        ))
        .args(["--require", "transport=NET/IB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--log"));
    let out = bin()
        .arg("qualify")
        .arg(corpus(
            "nccl-tests/18-eks-karpenter-2node-socket-no-efa-tagged-elided.txt",
        ))
        .args(["--require", "speed"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn topo_prints_the_rail_map_of_a_system_and_graph_dump() {
    let out = bin()
        .args(["topo", "--from"])
        .arg(corpus(
            "nccl-dumps/03-ibm-vsi-h100x8-nvswitch-8roce-vm-linkwidth0-topo.xml",
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("NCCL system: 2 CPUs, 8 GPUs, 8 NIC ports"),
        "{text}"
    );
    assert!(text.contains("rail map"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("GPU 7")
            && l.contains("mlx5_0 (NET 0)")
            && l.contains("PIX")),
        "{text}"
    );
    // Two dumps of one run read as one; two systems refused.
    let out = bin()
        .args(["topo", "--format", "json", "--from"])
        .arg(corpus("nccl-dumps/90-h100x1-vm-nccl2.28.3-topo.xml"))
        .arg("--from")
        .arg(corpus("nccl-dumps/91-h100x1-vm-nccl2.28.3-graph.xml"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["kind"], "topology");
    assert_eq!(doc["nccl"]["graphs"]["graphs"].as_array().unwrap().len(), 5);
    let out = bin()
        .args(["topo", "--from"])
        .arg(corpus("nccl-dumps/90-h100x1-vm-nccl2.28.3-topo.xml"))
        .arg("--from")
        .arg(corpus(
            "nccl-dumps/03-ibm-vsi-h100x8-nvswitch-8roce-vm-linkwidth0-topo.xml",
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn diagnose_reads_a_dump_and_a_log_together() {
    let out = bin()
        .args(["diagnose", "--format", "json", "--from"])
        .arg(corpus(
            "nccl-dumps/08-ib-host-no-device-socket-over-ipoib-fallback-vs-ib-host-excerpt.log",
        ))
        .arg("--from")
        .arg(corpus("nccl-dumps/02-aws-p5-48xl-h100x8-32efa-topo.xml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"net.socket-fallback"), "{ids:?}");
    assert!(!ids.contains(&"rail.nic-across-socket"), "{ids:?}");
}
