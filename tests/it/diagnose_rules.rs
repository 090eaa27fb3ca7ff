//! Findings that no corpus file shows, from small inputs written the way the tools print them.

use crate::common;

use common::bin;
use predicates::str::contains;
use serde_json::Value;
use std::collections::BTreeSet;

fn ids(files: &[(&str, &str)]) -> (BTreeSet<String>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args(["diagnose", "--format", "json"]);
    for (name, body) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        cmd.arg("--from").arg(p);
    }
    let out = cmd.assert().success().get_output().stdout.clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    (
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect(),
        v,
    )
}

const SHM_OFF_LOG: &str = "\
box:101:101 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1
box:101:101 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1
box:101:101 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1
box:101:101 [0] NCCL INFO comm 0x55d0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
box:101:101 [0] NCCL INFO Channel 00/0 : 0[1000] -> 1[2000] via NET/Socket/0
box:102:102 [1] NCCL INFO Channel 00/0 : 1[2000] -> 0[1000] via NET/Socket/0
box:101:101 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-vyWQlM to 9637892 bytes
box:101:101 [0] NCCL INFO Error while creating shared memory segment /dev/shm/nccl-vyWQlM (size 9637888)
";

#[test]
fn environment_switches_sockets_inside_one_host_and_shm_failures() {
    let (found, v) = ids(&[("nccl.log", SHM_OFF_LOG)]);
    for id in [
        "env.shm-disabled",
        "env.p2p-disabled",
        "env.ib-disabled",
        "transport.socket-intranode",
        "devshm.failure",
    ] {
        assert!(found.contains(id), "{id} missing from {found:?}");
    }
    // The /dev/shm line is the catalogue's too, but devshm.failure says it: no second finding,
    // and no generic one.
    assert!(
        !found.contains("nccl.shm-transport") && !found.contains("nccl.error"),
        "{found:?}"
    );
    let shm = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "env.shm-disabled")
        .unwrap();
    assert_eq!(shm["evidence"][0]["line"], 1);
    assert!(shm["source"]
        .as_str()
        .unwrap()
        .contains("docs.nvidia.com/deeplearning/nccl"));
    assert_eq!(v["facts"]["transports"], serde_json::json!(["NET/Socket"]));
    // The same text through the typed reader, which refuses unknown fields.
    let doc: ncclprobe::documents::DiagnosisDocument = serde_json::from_value(v).unwrap();
    assert_eq!(doc.kind, ncclprobe::documents::Kind::Diagnosis);
    assert_eq!(doc.schema_version, 1);
    assert_eq!(doc.facts.transports, vec!["NET/Socket".to_string()]);
}

const SMI_SEED_000: &str = "\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|   0  NVIDIA GeForce RTX 4090        Off | 00000000:01:00.0 Off |                  Off |
|   1  NVIDIA GeForce RTX 4090        Off | 00000000:02:00.0 Off |                  Off |
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|    0   N/A  N/A      3301      C   python train.py --task a                  18000MiB |
|    0   N/A  N/A      3302      C   python train.py --task b                    600MiB |
|    1   N/A  N/A      3302      C   python train.py --task b                  17000MiB |
+---------------------------------------------------------------------------------------+
";

#[test]
fn a_process_on_two_gpus() {
    let (found, v) = ids(&[("smi.txt", SMI_SEED_000)]);
    assert_eq!(
        found,
        [
            "env.cuda-visible-devices-unset",
            "gpu.process-on-multiple-gpus"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    );
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "gpu.process-on-multiple-gpus")
        .unwrap();
    assert_eq!(f["severity"], "error");
    assert!(f["evidence"][0]["text"]
        .as_str()
        .unwrap()
        .contains("PID 3302"));
}

#[test]
fn wrong_results_in_a_table() {
    let table = "\
# nThread 1 nGpus 2 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    12.00    0.09    0.09      0    12.00    0.09    0.09      0
        2048           512     float     sum      -1    13.00    0.16    0.16      3    13.00    0.16    0.16      0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 0.125
";
    let (found, _) = ids(&[("perf.txt", table)]);
    assert_eq!(found, ["result.wrong".to_string()].into_iter().collect());
}

#[test]
fn bad_files_are_refused_with_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, &[u8], &str)] = &[
        ("empty.log", b"", "empty file"),
        (
            "binary.log",
            b"\x7fELF\x02\x01\x01\x00\x00\x00",
            "binary data",
        ),
        (
            "notes.txt",
            b"just some notes\nnothing to see\n",
            "expected an NCCL_DEBUG=INFO log",
        ),
    ];
    for (name, body, message) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        bin()
            .args(["diagnose", "--from"])
            .arg(&p)
            .assert()
            .code(2)
            .stderr(contains(*name))
            .stderr(contains(*message));
        bin()
            .arg("import")
            .arg(&p)
            .assert()
            .code(2)
            .stderr(contains(*name));
    }
    bin()
        .args(["diagnose", "--from", "/nonexistent/file.log"])
        .assert()
        .code(2)
        .stderr(contains("/nonexistent/file.log"));
}

#[test]
fn fail_on_turns_findings_into_exit_code_3() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nccl.log");
    std::fs::write(&p, SHM_OFF_LOG).unwrap();
    bin()
        .args(["diagnose", "--fail-on", "error", "--from"])
        .arg(&p)
        .assert()
        .code(3);
}

#[test]
fn live_diagnose_reports_without_a_gpu() {
    // This machine has no NVIDIA driver: diagnose says so and still reports what it can.
    bin()
        .arg("diagnose")
        .env("NCCL_SHM_DISABLE", "1")
        .assert()
        .success()
        .stdout(contains("(this machine)"))
        .stdout(contains("env.shm-disabled"));
}

#[test]
fn csv_lists_every_piece_of_evidence_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nccl.log");
    std::fs::write(&log, SHM_OFF_LOG).unwrap();
    let out = bin()
        .args(["diagnose", "--format", "csv", "--from"])
        .arg(&log)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let mut reader = csv::Reader::from_reader(&out[..]);
    let headers = reader.headers().unwrap().clone();
    assert_eq!(
        headers.iter().collect::<Vec<_>>(),
        vec!["id", "severity", "title", "file", "line", "evidence"]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let shm = rows
        .iter()
        .find(|r| &r[0] == "env.shm-disabled")
        .expect("env.shm-disabled row");
    assert_eq!(&shm[1], "warning");
    assert_eq!(&shm[4], "1", "the evidence line number");
    assert!(shm[5].contains("NCCL_SHM_DISABLE set by environment to 1"));
    // Errors come first, as in the table.
    assert_eq!(&rows[0][1], "error");
}

/// Each cause NCCL names in its own words, as NCCL prints it and as PyTorch repeats it after
/// "Last error:" (no NCCL prefix there).
#[test]
fn errors_whose_cause_nccl_names_are_explained_with_their_fix() {
    let memlock = "\
gpu-7:301:355 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.7<0>
gpu-7:301:355 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory
gpu-7:301:355 [0] NCCL INFO transport/net_ib.cc:1013 -> 2
gpu-7:301:301 [0] NCCL INFO init.cc:1450 -> 2
";
    let (found, v) = ids(&[("memlock.log", memlock)]);
    assert!(found.contains("ib.memlock"), "{found:?}");
    let f = finding(&v, "ib.memlock");
    assert!(f["fix"].as_str().unwrap().contains("ulimit -l"), "{f}");
    assert_eq!(f["evidence"][0]["line"], 2);

    let duplicate = "\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000
";
    let (found, v) = ids(&[("train.log", duplicate)]);
    assert!(found.contains("gpu.duplicate"), "{found:?}");
    assert!(
        finding(&v, "gpu.duplicate")["title"]
            .as_str()
            .unwrap()
            .contains("ranks 0 and 1 (device 1a000)"),
        "{v}"
    );

    let no_interface = "\
node3:88:88 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9
node3:88:88 [0] NCCL WARN Bootstrap : no socket interface found
node3:88:88 [0] NCCL INFO init.cc:1380 -> 3
";
    let (found, v) = ids(&[("nccl.log", no_interface)]);
    assert!(found.contains("bootstrap.no-interface"), "{found:?}");
    let title = finding(&v, "bootstrap.no-interface")["title"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(title.contains("NCCL_SOCKET_IFNAME=eth9"), "{title}");

    // The first failure (status 12) is named, not the flush (5) that follows it.
    let completion = "\
node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)
node-2:5776:5902 [0] NCCL INFO transport/net.cc:1134 -> 6
node-2:5776:5903 [1] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.6<40112> with error 5, opcode 0, len 0, vendor err 249 (Recv)
";
    let (found, v) = ids(&[("nccl.log", completion)]);
    assert!(found.contains("ib.completion-error"), "{found:?}");
    let f = finding(&v, "ib.completion-error");
    let title = f["title"].as_str().unwrap();
    assert!(
        title.contains("10.2.0.5")
            && title.contains("transport retry counter exceeded (status 12)"),
        "{title}"
    );
    assert!(!title.contains("10.2.0.6"), "{title}");
    assert_eq!(f["severity"], "error");
    // Only flushes: a warning that sends the reader to the first failure.
    let flushed = completion.lines().nth(2).unwrap();
    let (_, v) = ids(&[("nccl.log", flushed)]);
    let f = finding(&v, "ib.completion-error");
    assert_eq!(f["severity"], "warning");
    assert!(
        f["title"].as_str().unwrap().contains("earlier failure"),
        "{f}"
    );

    // PyTorch's report of a remote error, with NCCL's last error: a peer or the network.
    let remote = "\
[rank9]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5
[rank9]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
[rank9]: Last error:
[rank9]: NET/IB : Got completion from peer 10.5.0.34<33956> with error 12, opcode 0, len 1, vendor err 129 (Recv)
";
    let (found, v) = ids(&[("train.log", remote)]);
    assert!(
        found.contains("nccl.remote-error") && found.contains("ib.completion-error"),
        "{found:?}"
    );
    assert!(finding(&v, "nccl.remote-error")["title"]
        .as_str()
        .unwrap()
        .contains("point at the network"));
    // A socket peer that closed, with no network error: a process went away.
    let closed = "w-3:91:140 [2] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer w-0<44012>\n";
    let (found, v) = ids(&[("nccl.log", closed)]);
    assert!(found.contains("nccl.remote-error"), "{found:?}");
    assert!(finding(&v, "nccl.remote-error")["title"]
        .as_str()
        .unwrap()
        .contains("another process exited"));

    let oom = "h100-1:12:12 [3] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'\n";
    let (found, _) = ids(&[("nccl.log", oom)]);
    assert!(found.contains("cuda.out-of-memory"), "{found:?}");

    // None of them on a healthy IB log.
    let healthy = "\
gpu-7:301:355 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.7<0>
gpu-7:301:355 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.7<0>
gpu-7:301:355 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
";
    let (found, _) = ids(&[("nccl.log", healthy)]);
    for id in [
        "ib.memlock",
        "gpu.duplicate",
        "bootstrap.no-interface",
        "ib.completion-error",
        "cuda.out-of-memory",
        "nccl.remote-error",
    ] {
        assert!(!found.contains(id), "{id} on a healthy log: {found:?}");
    }
}

fn finding<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {v}"))
}
