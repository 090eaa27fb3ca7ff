//! Classes of field input that were misread, each from a fixture in `tests/fixtures/field/`
//! written the way the tool prints it (its source in the fixture's header line), read through
//! the real binary.

use crate::common;

use common::bin;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/field")
        .join(name)
}

fn diagnose(names: &[&str]) -> Value {
    let mut cmd = bin();
    cmd.args(["diagnose", "--format", "json"]);
    for n in names {
        cmd.arg("--from").arg(fixture(n));
    }
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("one JSON document")
}

fn finding<'a>(v: &'a Value, id: &str) -> Option<&'a Value> {
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id)
}

fn title(v: &Value, id: &str) -> String {
    finding(v, id).unwrap_or_else(|| panic!("{id} missing from {}", v["findings"]))["title"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn torch_2_4_queue_lines_behind_launcher_prefixes_and_wraps_name_the_rank_behind() {
    let v = diagnose(&["watchdog-torch24-torchrun-wrapped.log"]);
    let t = title(&v, "watchdog.timeout");
    assert!(
        t.contains("ALLREDUCE did not finish within 600 s (work 12345)"),
        "{t}"
    );
    // Rank 2's line was wrapped: its numbers are read whole.
    assert!(t.contains("rank 2 12345/12344"), "{t}");
    assert!(
        t.contains("ranks [3] are behind: they never enqueued work 12345"),
        "{t}"
    );
    assert!(t.contains("ranks [0, 1, 2] wait inside NCCL"), "{t}");
    let evidence = finding(&v, "watchdog.timeout").unwrap()["evidence"]
        .as_array()
        .unwrap()
        .clone();
    assert!(evidence.iter().any(|e| e["line"] == 6
        && e["text"]
            .as_str()
            .unwrap()
            .contains("last completed NCCL work: 12344.")));
}

#[test]
fn a_lone_queue_line_is_a_watchdog_timeout_with_its_rank_and_numbers() {
    let v = diagnose(&["watchdog-pg-guid-srun.log"]);
    let t = title(&v, "watchdog.timeout");
    assert!(t.contains("work 12345"), "{t}");
    assert!(t.contains("ranks {3} reported it"), "{t}");
    assert!(t.contains("ranks [0, 1, 2] did not"), "{t}");
    assert!(t.contains("rank 3 12345/12344"), "{t}");
    assert!(
        t.contains("ranks [3] wait inside NCCL (last completed < last enqueued)"),
        "{t}"
    );
}

#[test]
fn two_ranks_on_one_bus_id_are_on_two_nodes_whatever_the_host_names_say() {
    let v = diagnose(&["same-busid-one-hostname.log"]);
    assert_eq!(v["facts"]["hosts"], serde_json::json!(["trainer"]));
    assert!(
        finding(&v, "transport.socket-intranode").is_none(),
        "{}",
        v["findings"]
    );
    let internode = finding(&v, "transport.socket-internode").expect("socket between nodes");
    let texts: Vec<&str> = internode["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("3[3] -> 11[3]")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("rank 3 and rank 11 both use busId 18000")),
        "{texts:?}"
    );
    // The network NCCL chose counts once the log spans nodes.
    assert!(v["facts"]["transports"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("NET/Socket")));
}

#[test]
fn p2p_level_loc_disables_p2p_like_p2p_disable() {
    let v = diagnose(&["p2p-level-loc.log"]);
    let t = title(&v, "env.p2p-disabled");
    assert!(t.contains("NCCL_P2P_LEVEL=LOC"), "{t}");
    let f = finding(&v, "env.p2p-disabled").unwrap();
    assert_eq!(f["evidence"][0]["line"], 3);
}

#[test]
fn collnet_channels_alone_place_the_log_on_several_nodes() {
    let v = diagnose(&["collnet-sharp-only.log"]);
    let transports: Vec<&str> = v["facts"]["transports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(transports, vec!["COLLNET/SHARP", "NET/IBext_v8"]);
    assert!(finding(&v, "transport.socket-intranode").is_none());
}

#[test]
fn nic_labels_that_ran_together_are_placed_by_the_diagonal() {
    let v = diagnose(&["topo-nic-labels-run-together.txt"]);
    let devices = v["facts"]["topology"]["devices"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(devices.len(), 18, "{devices:?}");
    assert_eq!(devices[15], "NIC11");
    assert_eq!(devices[16], "NIC12");
    // GPU3's only near NIC sits in the column whose label ran into NIC11's.
    let t = finding(&v, "topo.nic-far-from-gpu").expect("far NIC")["evidence"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(t, "GPU3: nearest NIC NIC12 (mlx5_12) is NODE");
}

#[test]
fn pages_from_mail_archives_are_read_as_the_text_they_wrap() {
    let v = diagnose(&["topo-mail-archive.html"]);
    assert_eq!(v["facts"]["inputs"][0]["kind"], "nvidia-smi topo -m");
    assert_eq!(
        v["facts"]["topology"]["devices"],
        serde_json::json!(["GPU0", "GPU1"])
    );
    assert!(finding(&v, "topo.cross-numa").is_some());
    let v = diagnose(&["nccl-log-mail-archive.html"]);
    assert_eq!(v["facts"]["transports"], serde_json::json!(["NET/Socket"]));
    assert!(finding(&v, "transport.socket-intranode").is_some());
    assert!(finding(&v, "env.shm-disabled").is_some());
}

#[test]
fn mscclpp_test_tables_are_refused_naming_the_tool() {
    for cmd in [vec!["import"], vec!["diagnose", "--from"]] {
        let out = bin()
            .args(&cmd)
            .arg(fixture("mscclpp-test-allreduce.txt"))
            .assert()
            .code(2)
            .get_output()
            .stderr
            .clone();
        let err = String::from_utf8_lossy(&out);
        assert!(err.contains("looks like mscclpp-test output"), "{err}");
        assert!(err.contains("in-place columns first"), "{err}");
    }
}
