//! Live `topo` and `diagnose` through NVML, on machines without a GPU: the TEST DOUBLE
//! (doubles/gpu/src/nvml.rs) answers as `libnvidia-ml.so.1` for a machine described in its
//! environment variables. What sysfs adds (CPU affinity, RDMA NICs) comes from a fixture tree
//! given as `NCCLPROBE_SYSFS_ROOT`, never from the machine the tests run on: a GPU host's
//! NICs would add rows, its GPUs affinities.

use crate::common;

use common::Machine;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Two NVLink pairs on two sockets, P2P not supported across them; a process holding memory on
/// GPUs 0 and 1; GPU 3 on a x8 link.
const LINKS: &str = "0-1:NV4,2-3:NV4,0-2:SYS/CNS,0-3:SYS/CNS,1-2:SYS/CNS,1-3:SYS/CNS";

fn probe(dir: &Path, args: &[&str]) -> Output {
    probe_links(dir, args, LINKS)
}

fn probe_links(dir: &Path, args: &[&str], links: &str) -> Output {
    probe_on(&Machine::bare(), dir, args, links)
}

/// The four-GPU machine of `LINKS` with `links`, whose sysfs is `machine`'s.
fn probe_on(machine: &Machine, dir: &Path, args: &[&str], links: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("NCCLPROBE_SYSFS_ROOT", machine.sys())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env("NCCLPROBE_TEST_DOUBLE_LINKS", links)
        .env(
            "NCCLPROBE_TEST_DOUBLE_PROCS",
            "4242:0:1073741824,4242:1:524288000,777:2:1024",
        )
        .env("NCCLPROBE_TEST_DOUBLE_PCIE_WIDTH", "3:8")
        .env("CUDA_VISIBLE_DEVICES", "0,1,2,3")
        .output()
        .expect("run ncclprobe")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn live_topo_reads_nvlinks_pcie_ancestors_and_p2p_status() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let out = probe(d.path(), &["topo", "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "from,to,link");
    assert_eq!(rows.len(), 1 + 12, "{csv}");
    for row in [
        "GPU0,GPU1,NV4",
        "GPU1,GPU0,NV4",
        "GPU2,GPU3,NV4",
        "GPU0,GPU2,SYS",
        "GPU3,GPU1,SYS",
    ] {
        assert!(rows.contains(&row), "{row} missing in\n{csv}");
    }

    let out = probe(d.path(), &["topo", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The typed reader refuses unknown fields: the document is exactly what the README says.
    let doc: ncclprobe::documents::TopologyDocument =
        serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(doc.kind, ncclprobe::documents::Kind::Topology);
    assert_eq!(doc.source, "(live)");
    let p2p = &doc.topology.p2p;
    assert_eq!(p2p.len(), 12);
    let code = |a: &str, b: &str| {
        p2p.iter()
            .find(|c| c.0 == a && c.1 == b)
            .map(|c| c.2.clone())
    };
    assert_eq!(code("GPU0", "GPU1").as_deref(), Some("OK"));
    assert_eq!(code("GPU2", "GPU0").as_deref(), Some("CNS"));
}

/// RDMA NICs join the matrix as nvidia-smi shows them, placed by the PCI tree of the sysfs
/// given: mlx5_0 beside GPU0 under one root port, mlx5_1 beside GPU2; GPUs 0-1 on NUMA node 0,
/// 2-3 on node 1.
#[test]
fn rdma_nics_in_sysfs_join_the_topology() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let machine = Machine::bare()
        .gpu("17", "0000:18:00.0", 0, "0-15")
        .gpu("27", "0000:28:00.0", 0, "0-15")
        .gpu("37", "0000:38:00.0", 1, "16-31")
        .gpu("47", "0000:48:00.0", 1, "16-31")
        .rdma_nic("mlx5_0", "17", "0000:19:00.0", 0)
        .rdma_nic("mlx5_1", "37", "0000:39:00.0", 1);
    let out = probe_on(&machine, d.path(), &["topo", "--format", "csv"], LINKS);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    // 12 GPU pairs, each GPU with each NIC both ways, the NICs with each other.
    assert_eq!(rows.len(), 12 + 4 * 2 * 2 + 2, "{csv}");
    for row in [
        "GPU0,GPU1,NV4",
        "GPU0,NIC0,PIX",
        "NIC0,GPU0,PIX",
        "GPU1,NIC0,NODE",
        "GPU2,NIC0,SYS",
        "GPU2,NIC1,PIX",
        "GPU3,NIC1,NODE",
        "NIC0,NIC1,SYS",
    ] {
        assert!(rows.contains(&row), "{row} missing in\n{csv}");
    }
    let out = probe_on(&machine, d.path(), &["topo", "--format", "json"], LINKS);
    let doc: ncclprobe::documents::TopologyDocument =
        serde_json::from_str(&text(&out.stdout)).unwrap();
    let t = &doc.topology;
    assert_eq!(t.nic_names["NIC0"], "mlx5_0");
    assert_eq!(t.nic_names["NIC1"], "mlx5_1");
    assert_eq!(t.info["GPU0"].cpu_affinity.as_deref(), Some("0-15"));
    assert_eq!(t.info["GPU3"].numa_affinity.as_deref(), Some("1"));
}

#[test]
fn live_diagnose_finds_what_nvml_shows() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let out = probe(d.path(), &["diagnose", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    let findings = v["findings"].as_array().unwrap();
    let find = |id: &str| {
        findings
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {v:#}"))
    };
    let evidence = |id: &str| find(id)["evidence"].to_string();
    assert!(
        evidence("gpu.process-on-multiple-gpus").contains("PID 4242 holds memory on GPUs [0, 1]")
    );
    assert!(!evidence("gpu.process-on-multiple-gpus").contains("777"));
    assert!(evidence("p2p.unavailable").contains("NVML P2P read status: GPU0 -> GPU2 CNS"));
    assert!(evidence("topo.cross-numa").contains("GPU1 <-> GPU3: SYS"));
    assert!(evidence("pcie.downgraded").contains("PCIe width x8 of x16 (NVML)"));
    assert_eq!(find("pcie.downgraded")["severity"], "warning");
    // NVML answered: the facts say which GPUs it saw and the driver version.
    assert!(v.to_string().contains("535.00 (test double)"), "{v:#}");
}

fn finding_ids(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_gpu_with_fewer_active_nvlinks_than_its_siblings_has_links_down() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let args = ["diagnose", "--format", "json"];
    let healthy = probe_links(d.path(), &args, LINKS);
    assert!(!finding_ids(&healthy).contains(&"nvlink.down".to_string()));

    // GPUs 2 and 3 lost two of their four links to each other.
    let degraded = "0-1:NV4,2-3:NV2,0-2:SYS/CNS,0-3:SYS/CNS,1-2:SYS/CNS,1-3:SYS/CNS";
    let out = probe_links(d.path(), &args, degraded);
    assert!(finding_ids(&out).contains(&"nvlink.down".to_string()));
    let v: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "nvlink.down")
        .unwrap();
    assert_eq!(f["severity"], "error");
    let evidence = f["evidence"].to_string();
    assert!(
        evidence.contains(
            "GPU 2 ncclprobe test double GPU (00000000:38:00.0): 2 active NVLinks, 4 on other GPUs"
        ),
        "{evidence}"
    );
    assert!(evidence.contains("GPU 3"), "{evidence}");
    assert!(!evidence.contains("GPU 0"), "{evidence}");
}

#[test]
fn without_nvml_topo_says_so_and_exits_5() {
    let d = common::test_double_dir(&[]);
    // No NVML and no NVIDIA GPU in sysfs, on any machine: NVML is opened from the double's
    // directory (where it is missing) and sysfs is a tree without PCI devices.
    let machine = Machine::bare();
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .arg("topo")
        .env("LD_LIBRARY_PATH", d.path())
        .env("NCCLPROBE_NVML_LIBRARY", d.path().join("libnvidia-ml.so.1"))
        .env("NCCLPROBE_SYSFS_ROOT", machine.sys())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("NVML unavailable (libnvidia-ml.so.1"), "{err}");
}

/// An HGX machine: every NVLink goes to an NVSwitch (its remote PCI info is the switch, never
/// the peer GPU) and, the GPUs being Hopper, link state comes from the field value NCCL reads
/// on sm90. `nvidia-smi topo -m` shows NV18 between every pair.
fn nvswitch_machine(d: &Path, args: &[&str], switch_links: &str) -> Output {
    let machine = Machine::bare();
    Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(args)
        .env("LD_LIBRARY_PATH", d)
        .env("NCCLPROBE_SYSFS_ROOT", machine.sys())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "8")
        .env("NCCLPROBE_TEST_DOUBLE_NVSWITCH", switch_links)
        .env("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        .output()
        .expect("run ncclprobe")
}

#[test]
fn nvlinks_through_nvswitches_are_nvlinks() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let out = nvswitch_machine(d.path(), &["topo", "--format", "csv"], "18");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let pairs: Vec<&str> = csv
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("GPU"))
        .collect();
    assert_eq!(pairs.len(), 8 * 7, "{csv}");
    assert!(pairs.iter().all(|l| l.ends_with(",NV18")), "{csv}");
    // All 18 links up on every GPU: no finding.
    let out = nvswitch_machine(d.path(), &["diagnose", "--format", "json"], "18");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !v["findings"].to_string().contains("nvlink.down"),
        "{}",
        v["findings"]
    );
}

#[test]
fn a_gpu_with_links_down_behind_nvswitches_is_named() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let out = nvswitch_machine(d.path(), &["topo", "--format", "csv"], "18,3:16");
    let csv = text(&out.stdout);
    assert!(csv.lines().any(|l| l == "GPU3,GPU5,NV16"), "{csv}");
    assert!(csv.lines().any(|l| l == "GPU0,GPU5,NV18"), "{csv}");
    let out = nvswitch_machine(d.path(), &["diagnose", "--format", "json"], "18,3:16");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let down = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "nvlink.down")
        .expect("nvlink.down");
    let evidence = down["evidence"].to_string();
    assert!(
        evidence.contains("GPU 3") && evidence.contains("16 active NVLinks, 18 on other GPUs"),
        "{evidence}"
    );
    assert!(!evidence.contains("GPU 0"), "{evidence}");
}

/// Health counters through NVML: a healthy machine raises none of their findings; planted
/// counters (uncorrectable ECC, a pending row remap, PCIe replays, NVLink CRC errors, thermal
/// slowdown, persistence off) each raise theirs, naming the GPU and the figure.
#[test]
fn health_counters_become_findings_with_the_gpu_and_the_figure() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let ids = |out: &Output| -> Vec<String> {
        let doc: Value = serde_json::from_slice(&out.stdout).expect("diagnosis JSON");
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    };
    let health = [
        "gpu.ecc-uncorrectable",
        "gpu.memory-repair",
        "pcie.replays",
        "nvlink.errors",
        "gpu.throttled",
        "gpu.persistence-off",
    ];
    let out = probe(d.path(), &["diagnose", "--format", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = ids(&out);
    assert!(
        health.iter().all(|h| !found.contains(&h.to_string())),
        "{found:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(["diagnose", "--format", "json"])
        .env("LD_LIBRARY_PATH", d.path())
        .env("NCCLPROBE_SYSFS_ROOT", Machine::bare().sys())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env("NCCLPROBE_TEST_DOUBLE_LINKS", LINKS)
        .env(
            "NCCLPROBE_TEST_DOUBLE_HEALTH",
            "1:ecc_unc=2,remap_unc=1,remap_pending=1;2:replay=40,throttle=0x41;0:nvlink_crc=12,persistence=0",
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let found = ids(&out);
    for h in health {
        assert!(found.contains(&h.to_string()), "{h} in {found:?}");
    }
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let evidence = |id: &str| -> String {
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["evidence"][0]["text"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert!(
        evidence("gpu.ecc-uncorrectable").starts_with("GPU1 (00000000:28:00.0): 2 uncorrectable")
    );
    assert!(evidence("pcie.replays").contains("PCIe replay counter 40"));
    assert!(
        evidence("nvlink.errors").starts_with("GPU0")
            && evidence("nvlink.errors").contains("CRC flit 12")
    );
    assert!(evidence("gpu.throttled").contains("HW thermal slowdown"));
}

/// A sweep keeps each GPU's health as the run starts; `--max-ecc-uncorrected` and
/// `--require-link-width` fail on the GPU the double makes sick (uncorrectable ECC errors on
/// GPU 1, GPU 3 trained to x8), each a JUnit case naming it; `qualify` later judges the record
/// alone, on a machine without NVML.
#[test]
fn health_gates_judge_the_counters_the_record_kept() {
    let d = common::test_double_dir(&["libnvidia-ml.so.1"]);
    let dir = tempfile::tempdir().unwrap();
    let (json, junit) = (dir.path().join("run.json"), dir.path().join("q.xml"));
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args([
            "sweep",
            "--backend",
            "host",
            "-b",
            "1K",
            "-e",
            "4K",
            "-n",
            "2",
            "-w",
            "1",
        ])
        .args([
            "--max-ecc-uncorrected",
            "0",
            "--require-link-width",
            "--junit",
        ])
        .arg(&junit)
        .arg("--json")
        .arg(&json)
        .env("LD_LIBRARY_PATH", d.path())
        .env("NCCLPROBE_SYSFS_ROOT", Machine::bare().sys())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env("NCCLPROBE_TEST_DOUBLE_LINKS", LINKS)
        .env("NCCLPROBE_TEST_DOUBLE_PCIE_WIDTH", "3:8")
        .env("NCCLPROBE_TEST_DOUBLE_HEALTH", "1:ecc_unc=2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let failure = |name: &str| -> String {
        let case = doc
            .descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("a test case {name} in {xml}"));
        case.children()
            .find(|n| n.has_tag_name("failure"))
            .and_then(|n| n.attribute("message"))
            .unwrap_or_else(|| panic!("{name} failed in {xml}"))
            .to_string()
    };
    let ecc = failure("max-ecc-uncorrected 0");
    assert!(
        ecc.contains("GPU1 (00000000:28:00.0): 2 uncorrectable ECC errors"),
        "{ecc}"
    );
    assert!(!ecc.contains("GPU0"), "{ecc}");
    let width = failure("require-link-width max");
    assert!(
        width.contains("GPU3 (00000000:48:00.0): PCIe x8 of x16"),
        "{width}"
    );

    let record: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(record["gpu_health"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        record["gpu_health"][1]["health"]["ecc_uncorrected_volatile"],
        2
    );
    // The record alone, where NVML cannot be read: the same verdicts; x8 is enough when
    // stated; the ECC gate still fails on GPU 1.
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .arg("qualify")
        .arg(&json)
        .args(["--require-link-width=8", "--format", "json"])
        .env("NCCLPROBE_NVML_LIBRARY", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .arg("qualify")
        .arg(&json)
        .args(["--max-ecc-uncorrected", "1"])
        .env("NCCLPROBE_NVML_LIBRARY", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("GPU1"), "{}", text(&out.stdout));
}
