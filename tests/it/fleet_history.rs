//! The fleet history, each test against both engines: a SQLite file, and a real PostgreSQL
//! server (`NCCLPROBE_TEST_POSTGRES`, started by `ci/test` through `ci/postgres start`; a
//! database of its own per test). Backend meant: none measures on a GPU; runs come from the
//! synthetic fleet (`history::synthetic`) and the host backend.

use crate::common;

use ncclprobe::history::synthetic::{self, Fault, Spec};
use ncclprobe::history::{Location, Store};
use predicates::prelude::PredicateBooleanExt;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

static DATABASES: AtomicUsize = AtomicUsize::new(0);

/// Each engine's store for one test: a new SQLite file, a new PostgreSQL database.
pub(crate) fn stores(dir: &std::path::Path, test: &str) -> Vec<String> {
    let base = std::env::var("NCCLPROBE_TEST_POSTGRES").unwrap_or_else(|_| {
        panic!(
            "NCCLPROBE_TEST_POSTGRES is not set: these tests need a PostgreSQL server too; `ci/test` starts one (by hand: export NCCLPROBE_TEST_POSTGRES=$(ci/postgres start))"
        )
    });
    let name = format!(
        "t_{test}_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::SeqCst)
    );
    let mut admin = postgres::Client::connect(&base, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create the test database");
    let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
    vec![
        dir.join(format!("{test}.sqlite")).display().to_string(),
        format!("{prefix}/{name}"),
    ]
}

fn spec() -> Spec {
    Spec {
        nodes: 48,
        runs: 10,
        sizes: 26,
        samples: 20,
        seed: 29,
        planted: vec![
            (7, Fault::SlowLarge),
            (23, Fault::Drifting),
            (41, Fault::BadLink),
        ],
        matrices: true,
    }
}

fn fill(store: &str, spec: &Spec) {
    let mut s = Store::open(&Location::parse(store).unwrap()).expect("open the store");
    for e in synthetic::entries(spec) {
        s.add(&e).expect("add");
    }
}

#[test]
fn the_drain_list_names_exactly_the_three_planted_nodes() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path(), "three") {
        fill(&store, &spec());
        let out = common::bin()
            .args(["fleet", "--history", &store, "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let drained: BTreeSet<&str> = doc["drain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["node"].as_str().unwrap())
            .collect();
        assert_eq!(
            drained,
            BTreeSet::from(["gpu00007", "gpu00023", "gpu00041"]),
            "{store}: {:#}",
            doc["drain"]
        );
        let checks = |node: &str| -> BTreeSet<String> {
            doc["drain"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["node"] == node)
                .flat_map(|d| d["reasons"].as_array().unwrap().iter())
                .map(|r| r["check"].as_str().unwrap().to_string())
                .collect()
        };
        assert!(
            checks("gpu00007").contains("below-peers"),
            "{:?}",
            checks("gpu00007")
        );
        assert!(
            !checks("gpu00007").contains("drift"),
            "{:?}",
            checks("gpu00007")
        );
        assert!(
            checks("gpu00023").contains("drift"),
            "{:?}",
            checks("gpu00023")
        );
        assert!(
            checks("gpu00041").contains("link"),
            "{:?}",
            checks("gpu00041")
        );
        assert!(
            checks("gpu00041").contains("health"),
            "{:?}",
            checks("gpu00041")
        );
        assert_eq!(doc["nodes"].as_array().unwrap().len(), 48);
        // The other formats say the same.
        let run = |format: &str| {
            let o = common::bin()
                .args(["fleet", "--history", &store, "--format", format])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(3));
            String::from_utf8(o.stdout).unwrap()
        };
        let junit = run("junit");
        assert_eq!(junit.matches("<testcase").count(), 48, "{junit}");
        assert_eq!(junit.matches("<failure").count(), 3, "{junit}");
        let csv = run("csv");
        assert!(
            csv.starts_with("node,sku,check,what,evidence,since"),
            "{csv}"
        );
        for node in ["gpu00007", "gpu00023", "gpu00041"] {
            assert!(
                csv.contains(node) && run("markdown").contains(node),
                "{node}"
            );
        }
        assert!(!csv.contains("gpu00008"));
        // The page: drain list first, a heat map row per node.
        let page = dir.path().join("fleet.html");
        let _ = std::fs::remove_file(&page);
        common::bin()
            .args(["fleet", "--history", &store, "--html"])
            .arg(&page)
            .assert()
            .code(3);
        let html = std::fs::read_to_string(&page).unwrap();
        let drain_at = html.find("id=\"drain\"").unwrap();
        assert!(drain_at < html.find("Ratio to peers").unwrap());
        // A cell per node, its ratio printed in it; the scale's legend centred on the threshold.
        assert_eq!(html.matches("class=\"cell\"").count(), 48);
        assert!(html.contains("% drain threshold"), "legend");
        let cells: Vec<&str> = html.split("class=\"cell\">").skip(1).collect();
        assert!(cells
            .iter()
            .all(|c| c.split('<').next().unwrap().ends_with('%')));
        // Trends: a point per run, a line through them, the bandwidth axis and the dates.
        assert!(html.contains("<polyline") && html.contains("<circle"));
        assert!(html.contains(" GB/s</text>"), "axis");
        assert!(html.matches(">20").count() >= 2, "dates on the axis");
        assert!(html.contains("Drain 3 of 48 nodes"), "verdict first");
    }
}

#[test]
fn nodes_no_peer_judged_are_listed_as_such_not_coloured() {
    // Six nodes of six SKUs (the corpus's logs): nobody has a peer to be held against.
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("fleet.sqlite");
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/nccl-tests");
    let logs = [
        "01-h200-2node-baremetal-socket-ifname.txt",
        "04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt",
        "07-2080ti-x2-pcie-no-p2p-allreduce.txt",
    ];
    let mut add = common::bin();
    add.args(["history", "add"]).arg("--history").arg(&store);
    for l in logs {
        add.arg(corpus.join(l));
    }
    add.assert().success();
    let out = common::bin()
        .args(["fleet", "--history"])
        .arg(&store)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Nothing judged is no verdict: exit 2, and stderr says why.
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(
            "drain list: empty (0 of 3 nodes judged (against peers or their own past); not judged: "
        ),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not judged"));
    let out = common::bin()
        .args(["fleet", "--format", "junit", "--history"])
        .arg(&store)
        .output()
        .unwrap();
    let junit = String::from_utf8_lossy(&out.stdout);
    assert_eq!(junit.matches("<skipped").count(), 3, "{junit}");
    let page = dir.path().join("fleet.html");
    common::bin()
        .args(["fleet", "--history"])
        .arg(&store)
        .arg("--html")
        .arg(&page)
        .assert()
        .code(2);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("id=\"unjudged\">Not judged (3)"), "{html}");
    assert_eq!(html.matches("class=\"cell\"").count(), 0, "{html}");
    assert!(
        html.contains("<div class=\"state\">Not judged</div>"),
        "{html}"
    );
}

#[test]
fn a_healthy_fleet_drains_nobody() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path(), "healthy") {
        let healthy = Spec {
            planted: Vec::new(),
            ..spec()
        };
        fill(&store, &healthy);
        let out = common::bin()
            .args(["fleet", "--history", &store])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{store}: {text}");
        assert!(
            text.contains(
                "drain list: empty (48 of 48 nodes judged (against peers or their own past))"
            ),
            "{text}"
        );
    }
}

/// Run records of 64 nodes, one file each.
fn records(dir: &std::path::Path, nodes: usize) -> Vec<std::path::PathBuf> {
    let s = Spec {
        nodes,
        runs: 1,
        sizes: 12,
        ..spec()
    };
    (0..nodes)
        .map(|n| {
            let path = dir.join(format!("run{n}.json"));
            let r = synthetic::run_record(&s, n, 0);
            std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
            path
        })
        .collect()
}

#[test]
fn sixty_four_writers_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = records(dir.path(), 64);
    for store in stores(dir.path(), "writers") {
        let bin = assert_cmd::cargo::cargo_bin("ncclprobe");
        let children: Vec<_> = files
            .iter()
            .map(|f| {
                std::process::Command::new(&bin)
                    .args(["history", "add", "--history", &store])
                    .arg(f)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{store}: {err}");
            assert!(!err.contains("locked"), "{err}");
        }
        let mut s = Store::open(&Location::parse(&store).unwrap()).unwrap();
        assert_eq!(s.counts().unwrap(), (64, 64, 64 * 12), "{store}");
        assert!(s.check().unwrap().is_empty());
        // The same document again adds nothing.
        common::bin()
            .args(["history", "add", "--history", &store])
            .arg(&files[0])
            .assert()
            .success()
            .stdout(predicates::str::contains("already kept as run"));
        assert_eq!(s.counts().unwrap().1, 64);
    }
}

#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature (ci/test builds with --all-features)"
)]
fn a_writer_killed_mid_transaction_leaves_the_store_consistent() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let files = records(dir.path(), 2);
    for store in stores(dir.path(), "killed") {
        common::bin()
            .args(["history", "add", "--history", &store])
            .arg(&files[0])
            .assert()
            .success();
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ncclprobe"))
            .args(["history", "add", "--history", &store])
            .arg(&files[1])
            .env("NCCLPROBE_TEST_HISTORY_STALL", "60")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("holding a transaction"), "{line}");
        child.kill().unwrap();
        child.wait().unwrap();
        let check = common::bin()
            .args(["history", "check", "--history", &store])
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&check.stdout);
        assert_eq!(check.status.code(), Some(0), "{store}: {text}");
        assert!(
            text.contains("1 nodes, 1 runs, 12 points"),
            "{store}: {text}"
        );
        // The store takes the killed writer's run afterwards.
        common::bin()
            .args(["history", "add", "--history", &store])
            .arg(&files[1])
            .timeout(std::time::Duration::from_secs(60))
            .assert()
            .success()
            .stdout(predicates::str::contains("kept as run"));
    }
}

#[test]
fn a_store_laid_out_by_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = records(dir.path(), 1);
    for store in stores(dir.path(), "newer") {
        Store::open(&Location::parse(&store).unwrap()).unwrap();
        match Location::parse(&store).unwrap() {
            Location::Sqlite(p) => {
                let c = rusqlite::Connection::open(p).unwrap();
                c.execute(
                    "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                    [],
                )
                .unwrap();
            }
            Location::Postgres(url) => {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                c.execute(
                    "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
                    &[],
                )
                .unwrap();
            }
        }
        common::bin()
            .args(["history", "add", "--history", &store])
            .arg(&files[0])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(
                "newer ncclprobe (history schema 99",
            ));
    }
}

#[test]
fn an_older_store_is_migrated_forward() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path(), "older") {
        let loc = Location::parse(&store).unwrap();
        Store::open_at(&loc, 1).unwrap();
        let mut s = Store::open(&loc).unwrap();
        let e = synthetic::entries(&Spec {
            nodes: 1,
            runs: 1,
            ..spec()
        })
        .next()
        .unwrap();
        s.add(&e).unwrap();
        assert_eq!(s.counts().unwrap().1, 1);
    }
}

#[test]
fn a_full_disk_ends_with_an_error_and_the_runs_json_is_kept() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.sqlite");
    Store::open(&Location::Sqlite(db.clone())).unwrap();
    let json = dir.path().join("run.json");
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("ncclprobe"));
    cmd.args([
        "sweep",
        "--backend",
        "host",
        "-n",
        "2",
        "-b",
        "8",
        "-e",
        "64",
    ])
    .args(["--min-samples", "3", "--max-samples", "3", "--json"])
    .arg(&json)
    .arg("--history")
    .arg(&db);
    // Files may grow to 40 KB: the run's JSON fits, SQLite's shared-memory index (32 KB)
    // fits, the write-ahead log of a whole run does not: the store's disk is "full".
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 40 << 10,
                rlim_max: 40 << 10,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("history:") && err.contains("full.sqlite"),
        "{err}"
    );
    // The output is whole: the lines after the table came before the store's error.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("# ncclprobe all_reduce sum float"),
        "{stdout}"
    );
    let record: ncclprobe::model::RunRecord =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(record.status, ncclprobe::model::RunStatus::Complete);
    // Nothing half-written: the store is consistent and holds no run.
    let mut s = Store::open(&Location::Sqlite(db)).unwrap();
    assert!(s.check().unwrap().is_empty());
    assert_eq!(s.counts().unwrap().1, 0);
}

#[test]
fn qualify_against_the_fleet_fails_the_slow_node_and_passes_a_healthy_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec();
    let last = s.runs - 1;
    let slow = dir.path().join("slow.json");
    let healthy = dir.path().join("healthy.json");
    std::fs::write(
        &slow,
        serde_json::to_vec(&synthetic::run_record(&s, 7, last)).unwrap(),
    )
    .unwrap();
    std::fs::write(
        &healthy,
        serde_json::to_vec(&synthetic::run_record(&s, 8, last)).unwrap(),
    )
    .unwrap();
    for store in stores(dir.path(), "qualify") {
        // Too few peers is a failure, never a pass: a store that holds one other node.
        let few = dir.path().join("few.sqlite");
        let _ = std::fs::remove_file(&few);
        let one = synthetic::entries(&s)
            .find(|e| e.identity.node != synthetic::node_name(8))
            .unwrap();
        Store::open(&Location::Sqlite(few.clone()))
            .unwrap()
            .add(&one)
            .unwrap();
        common::bin()
            .arg("qualify")
            .arg(&healthy)
            .arg("--against-fleet")
            .arg(&few)
            .assert()
            .code(2)
            .stdout("")
            .stderr(
                predicates::str::contains("NOT JUDGED")
                    .and(predicates::str::contains("needs 5 to judge against")),
            );
        fill(&store, &s);
        let out = common::bin()
            .arg("qualify")
            .arg(&slow)
            .args(["--against-fleet", &store, "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let q: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let failed: Vec<u64> = q["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["rule"] == "fleet-peers" && r["passed"] == false)
            .map(|r| r["size_bytes"].as_u64().unwrap())
            .collect();
        // Slow from 64 MiB up: exactly those sizes fail.
        assert!(
            !failed.is_empty() && failed.iter().all(|s| *s >= 64 << 20),
            "{failed:?}"
        );
        let ok = common::bin()
            .arg("qualify")
            .arg(&healthy)
            .args(["--against-fleet", &store])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&ok.stdout);
        assert_eq!(ok.status.code(), Some(0), "{store}: {text}");
        assert!(
            text.contains("not significantly below its 8x NVIDIA H100 80GB HBM3 peers"),
            "{text}"
        );
    }
}

#[test]
fn sweep_matrix_qualify_and_nccl_tests_output_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let json = dir.path().join("sweep.json");
    for store in stores(dir.path(), "kept") {
        // Host backend: ranks are threads of this process.
        common::bin()
            .args([
                "sweep",
                "--backend",
                "host",
                "--ranks",
                "2",
                "-b",
                "8",
                "-e",
                "1K",
            ])
            .args([
                "--min-samples",
                "3",
                "--max-samples",
                "3",
                "--history",
                &store,
            ])
            .args(["--node-name", "bench-a", "--json"])
            .arg(&json)
            .assert()
            .success()
            .stderr(
                predicates::str::contains("kept in").and(predicates::str::contains("node bench-a")),
            );
        common::bin()
            .args([
                "matrix",
                "--backend",
                "host",
                "--ranks",
                "2",
                "--history",
                &store,
            ])
            .args([
                "--node-name",
                "bench-a",
                "--min-samples",
                "3",
                "--max-samples",
                "3",
            ])
            .assert()
            .success()
            .stderr(predicates::str::contains("kept in"));
        // The gate's verdict goes in with the run it judged: that run, not a new one.
        common::bin()
            .arg("qualify")
            .arg(&json)
            .args([
                "--min-busbw",
                "0.000001",
                "--history",
                &store,
                "--node-name",
                "bench-a",
            ])
            .assert()
            .success()
            .stderr(
                predicates::str::contains("already in").and(predicates::str::contains(
                    "the verdict kept with it is now this one",
                )),
            );
        common::bin()
            .args(["history", "add", "--history", &store])
            .arg(&log)
            .assert()
            .success()
            .stdout(predicates::str::contains("kept as run"));
        let mut s = Store::open(&Location::parse(&store).unwrap()).unwrap();
        let runs = s.runs_since(f64::NEG_INFINITY, None).unwrap();
        // The sweep, the matrix, the nccl-tests log; the qualified run is the sweep's.
        assert_eq!(runs.len(), 3, "{store}");
        assert_eq!(runs.iter().filter(|r| r.matrix).count(), 1);
        assert_eq!(runs.iter().filter(|r| r.passed == Some(true)).count(), 1);
        let nodes: BTreeSet<&str> = runs.iter().map(|r| &*r.node).collect();
        assert!(nodes.contains("bench-a") && nodes.len() == 2, "{nodes:?}");
        assert!(s.check().unwrap().is_empty());
    }
}

#[test]
fn run_ids_beyond_one_chunk_read_every_point_once() {
    // 2,100 runs: the reader's ids go a chunk of 2,000 at a time, the last chunk padded with its
    // own last id; no point may go missing or come twice.
    let spec = Spec {
        nodes: 70,
        runs: 30,
        sizes: 2,
        samples: 3,
        seed: 3,
        planted: Vec::new(),
        matrices: false,
    };
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path(), "chunks") {
        let mut s = Store::open(&Location::parse(&store).unwrap()).unwrap();
        let entries: Vec<_> = synthetic::entries(&spec).collect();
        s.add_many(&entries).unwrap();
        let runs: Vec<i64> = s
            .runs_since(0.0, None)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(runs.len(), 2_100, "{store}");
        let points = s.points_of(&runs).unwrap();
        let keys: BTreeSet<(i64, i64)> = points.iter().map(|p| (p.run_id, p.size_bytes)).collect();
        assert_eq!(points.len(), 2_100 * 2, "{store}");
        assert_eq!(keys.len(), points.len(), "{store}: a point came twice");
        let samples = s.samples_of(&runs).unwrap();
        assert_eq!(samples.len(), points.len(), "{store}");
        assert!(samples.values().all(|v| v.len() == 3), "{store}");
    }
}
