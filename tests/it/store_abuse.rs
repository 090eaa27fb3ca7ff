//! The history store under abuse (`../shared/reviews/2026-12-01-hostile.md`, D1, D3, D14,
//! D18, D20–D23, D35–D38): outputs aimed at the store refused before anything runs; another
//! program's database, an unknown schema and a damaged file left as they are; readers that
//! neither wait for a writer nor create a store; `history check` that finds what is wrong;
//! names both engines keep alike; one measurement one run, its latest verdict with it.

use crate::common::{self, bin};
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;
use std::path::{Path, PathBuf};

/// A two-rank host record, as `sweep --json` writes it.
fn record(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    common::host_sweep(2)
        .args(["-b", "8", "-e", "1K", "-q", "--json"])
        .arg(&path)
        .assert()
        .success();
    path
}

/// A SQLite store holding `record` as node `node`.
fn store_with(dir: &Path, name: &str, record: &Path, node: &str) -> PathBuf {
    let store = dir.join(name);
    bin()
        .args(["history", "add"])
        .arg(record)
        .arg("--history")
        .arg(&store)
        .args(["--node-name", node])
        .assert()
        .success();
    store
}

#[test]
fn an_output_aimed_at_the_store_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    let store = store_with(dir.path(), "fleet.sqlite", &run, "n1");
    let before = std::fs::read(&store).unwrap();
    // D1, D35: the page on the store, on its WAL, or on stdout beside the table.
    let mut wal = store.clone().into_os_string();
    wal.push("-wal");
    for html in [store.clone().into_os_string(), wal, "-".into()] {
        bin()
            .arg("fleet")
            .arg("--history")
            .arg(&store)
            .arg("--html")
            .arg(&html)
            .assert()
            .code(2)
            .stdout("")
            .stderr(
                contains("would overwrite the input --history")
                    .or(contains("stdout can carry one document")),
            );
    }
    assert_eq!(
        std::fs::read(&store).unwrap(),
        before,
        "the store is untouched"
    );
    // D3: a sweep's record on the store, a store that is a directory, a store in a directory
    // that does not exist: refused before a point is measured (no record, no progress).
    let json = dir.path().join("fleet.sqlite");
    common::host_sweep(2)
        .args(["-b", "8", "-e", "64", "--json"])
        .arg(&json)
        .arg("--history")
        .arg(&store)
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("would overwrite the input --history"));
    assert_eq!(std::fs::read(&store).unwrap(), before);
    let cases = [
        (dir.path().to_path_buf(), "is a directory"),
        (dir.path().join("no/such/h.sqlite"), "does not exist"),
    ];
    for (target, why) in cases {
        let out = dir.path().join("never.json");
        common::host_sweep(2)
            .args(["-b", "8", "-e", "64", "--json"])
            .arg(&out)
            .arg("--history")
            .arg(&target)
            .assert()
            .code(2)
            .stdout("")
            .stderr(contains(why));
        assert!(
            !out.exists(),
            "refused before measuring: no record for {target:?}"
        );
    }
    assert!(!dir.path().join("no").exists(), "no directory was created");
}

#[test]
fn a_run_the_store_cannot_take_is_saved_and_named() {
    let dir = tempfile::tempdir().unwrap();
    // No --json and a server that refuses connections: the run is saved where it is said.
    let out = common::host_sweep(2)
        .current_dir(dir.path())
        .args(["-b", "8", "-e", "64", "-q"])
        .args(["--history", "postgres://fleet@127.0.0.1:9/ncclprobe"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let saved: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    let name = saved[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("ncclprobe-run-"), "{name}");
    assert!(
        err.contains(&format!("the run is saved in ./{name}"))
            && err.contains("ncclprobe history add"),
        "{err}"
    );
    // What was saved is the run: another store takes it.
    let other = store_with(dir.path(), "later.sqlite", &saved[0], "n1");
    assert!(other.exists());
    // With --json the record itself is the way back, and nothing else is written.
    let dir2 = tempfile::tempdir().unwrap();
    let json = dir2.path().join("r.json");
    let out = common::host_sweep(2)
        .current_dir(dir2.path())
        .args(["-b", "8", "-e", "64", "-q", "--json"])
        .arg(&json)
        .args(["--history", "postgres://fleet@127.0.0.1:9/ncclprobe"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("the run is in {}", json.display())),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir2.path()).unwrap().count(), 1);
}

#[test]
fn another_programs_database_is_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    let foreign = dir.path().join("app.db");
    let c = rusqlite::Connection::open(&foreign).unwrap();
    c.execute_batch(
        "CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');",
    )
    .unwrap();
    drop(c);
    let before = std::fs::read(&foreign).unwrap();
    let commands: [Vec<std::ffi::OsString>; 3] = [
        vec!["fleet".into(), "--history".into(), foreign.clone().into()],
        vec![
            "history".into(),
            "check".into(),
            "--history".into(),
            foreign.clone().into(),
        ],
        vec![
            "history".into(),
            "add".into(),
            run.clone().into(),
            "--history".into(),
            foreign.clone().into(),
        ],
    ];
    for args in commands {
        bin()
            .args(&args)
            .assert()
            .code(2)
            .stderr(contains("not an ncclprobe history").and(contains("users")));
    }
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "not a byte changed"
    );
    assert!(
        !dir.path().join("app.db-wal").exists(),
        "never switched to WAL"
    );
    // A file that is not SQLite at all is refused as well, and named.
    let text = dir.path().join("notes.sqlite");
    std::fs::write(&text, "my notes, not a database\n").unwrap();
    bin()
        .args(["history", "add"])
        .arg(&run)
        .arg("--history")
        .arg(&text)
        .assert()
        .code(2)
        .stderr(contains("notes.sqlite").and(contains("not a SQLite database")));
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "my notes, not a database\n"
    );
}

#[test]
fn readers_neither_wait_for_a_writer_nor_create_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    let store = store_with(dir.path(), "h.sqlite", &run, "n1");
    // A writer holds the write lock for the whole test.
    let writer = rusqlite::Connection::open(&store).unwrap();
    writer
        .execute_batch("BEGIN IMMEDIATE; INSERT INTO meta VALUES ('held', 'yes');")
        .unwrap();
    let started = std::time::Instant::now();
    bin()
        .args(["history", "check", "--history"])
        .arg(&store)
        .assert()
        .success()
        .stdout(contains("1 nodes, 1 runs"));
    bin()
        .args(["fleet", "--history"])
        .arg(&store)
        .assert()
        .stderr(contains("locked").not());
    // The writer would wait 120 s; the readers took none of it (a wide margin for a busy VM).
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    writer.execute_batch("ROLLBACK").unwrap();
    // A typo is an error naming the file, and no store appears there.
    let typo = dir.path().join("h.sqlte");
    for args in [
        vec!["fleet", "--history"],
        vec!["history", "check", "--history"],
    ] {
        bin()
            .args(&args)
            .arg(&typo)
            .assert()
            .code(2)
            .stderr(contains("h.sqlte").and(contains("no history store there")));
    }
    bin()
        .arg("qualify")
        .arg(&run)
        .arg("--against-fleet")
        .arg(&typo)
        .assert()
        .code(2)
        .stderr(contains("no history store there"));
    assert!(!typo.exists());
}

/// Each way a store is damaged, and the problem `history check` must say (exit 3).
#[test]
fn history_check_reports_damage_with_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    let damage: [(&str, &str, &str); 4] = [
        (
            "orphan",
            "PRAGMA foreign_keys=OFF; DELETE FROM nodes;",
            "1 run belongs to no node",
        ),
        (
            "document",
            "UPDATE runs SET document = x'00ff00ff';",
            "stored document does not decode",
        ),
        (
            "samples",
            "UPDATE points SET samples = x'0102030405';",
            "samples that are not whole",
        ),
        (
            "table",
            "DROP TABLE headlines;",
            "the table headlines is missing",
        ),
    ];
    for (name, sql, problem) in damage {
        let store = store_with(dir.path(), &format!("{name}.sqlite"), &run, "n1");
        let c = rusqlite::Connection::open(&store).unwrap();
        c.execute_batch(sql).unwrap();
        drop(c);
        bin()
            .args(["history", "check", "--history"])
            .arg(&store)
            .assert()
            .code(3)
            .stdout(contains("problem: ").and(contains(problem)));
    }
    // A file cut short: SQLite's "malformed" is the problem found, not a failure to look.
    let whole = store_with(dir.path(), "whole.sqlite", &run, "n1");
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.sqlite");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    bin()
        .args(["history", "check", "--history"])
        .arg(&cut)
        .assert()
        .code(3)
        .stdout(contains("problem:"));
    // A healthy store has none.
    bin()
        .args(["history", "check", "--history"])
        .arg(&whole)
        .assert()
        .success()
        .stdout(contains("problem").not());
}

#[test]
fn schema_versions_that_are_not_numbers_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    for (i, version) in ["-1", "abc", "2.5", "", "9999999999999999999999"]
        .iter()
        .enumerate()
    {
        let store = store_with(dir.path(), &format!("v{i}.sqlite"), &run, "n1");
        let c = rusqlite::Connection::open(&store).unwrap();
        c.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
            [version],
        )
        .unwrap();
        drop(c);
        let why = if version.len() > 5 {
            "newer ncclprobe"
        } else {
            "unknown history schema"
        };
        for args in [
            vec!["fleet", "--history"],
            vec!["history", "check", "--history"],
        ] {
            bin()
                .args(&args)
                .arg(&store)
                .assert()
                .code(2)
                .stderr(contains(why));
        }
        bin()
            .args(["history", "add"])
            .arg(&run)
            .arg("--history")
            .arg(&store)
            .args(["--node-name", "n2"])
            .assert()
            .code(2)
            .stderr(contains(why));
        let c = rusqlite::Connection::open(&store).unwrap();
        let runs: i64 = c
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(runs, 1, "version {version:?}: nothing was added");
    }
}

#[test]
fn names_are_validated_alike_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
    let with_host = |doc: &mut serde_json::Value, host: &str| {
        doc["backend"]["hosts"] = serde_json::json!([host]);
        for r in doc["backend"]["ranks"].as_array_mut().unwrap() {
            r["host"] = serde_json::json!(host);
        }
    };
    with_host(&mut doc, "a\u{0}b");
    let nul = dir.path().join("nul.json");
    std::fs::write(&nul, serde_json::to_vec(&doc).unwrap()).unwrap();
    with_host(&mut doc, &"h".repeat(1 << 20));
    let big = dir.path().join("big.json");
    std::fs::write(&big, serde_json::to_vec(&doc).unwrap()).unwrap();
    for store in crate::fleet_history::stores(dir.path(), "names") {
        for (file, why) in [(&nul, "NUL character"), (&big, "bytes long")] {
            bin()
                .args(["history", "add"])
                .arg(file)
                .args(["--history", &store])
                .assert()
                .code(2)
                .stderr(contains(why).and(contains("--node-name")));
        }
        // A blank --sku is no SKU stated, as a blank --node-name is no node stated.
        bin()
            .args(["history", "add"])
            .arg(&run)
            .args(["--history", &store, "--node-name", "n1", "--sku", " "])
            .assert()
            .success()
            .stdout(contains("(node n1, host (2 ranks)"));
    }
}

#[test]
fn nccl_tests_output_on_stdin_is_added_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let store = dir.path().join("k.sqlite");
    for expected in ["kept as run 1", "already kept as run 1"] {
        bin()
            .args(["history", "add", "-", "--history"])
            .arg(&store)
            .pipe_stdin(&log)
            .unwrap()
            .assert()
            .success()
            .stdout(contains(expected));
    }
    // The same log from a copy and after a touch is still that one run.
    let copy = dir.path().join("copy.txt");
    std::fs::copy(&log, &copy).unwrap();
    bin()
        .args(["history", "add"])
        .arg(&copy)
        .arg("--history")
        .arg(&store)
        .assert()
        .success()
        .stdout(contains("already kept as run 1"));
}

#[test]
fn blank_and_default_stores_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path(), "run.json");
    bin()
        .args(["history", "add"])
        .arg(&run)
        .args(["--history", " "])
        .assert()
        .code(2)
        .stderr(contains("a blank name"));
    // `--history` alone is the default file, named on stderr; a reader does not create it.
    let data = dir.path().join("data");
    bin()
        .env("XDG_DATA_HOME", &data)
        .args(["fleet", "--history"])
        .assert()
        .code(2)
        .stderr(contains("the default store").and(contains("no history store there")));
    assert!(!data.exists());
    bin()
        .env("XDG_DATA_HOME", &data)
        .args(["history", "add"])
        .arg(&run)
        .arg("--history")
        .assert()
        .success()
        .stderr(contains(format!(
            "the default store {}",
            data.join("ncclprobe/history.sqlite").display()
        )));
    assert!(data.join("ncclprobe/history.sqlite").exists());
}

#[test]
fn a_rejudged_run_is_one_run_with_its_latest_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("hd.json");
    let store = dir.path().join("hd.sqlite");
    common::host_sweep(2)
        .args(["-b", "8", "-e", "1K", "-q", "--json"])
        .arg(&json)
        .arg("--history")
        .arg(&store)
        .assert()
        .success();
    bin()
        .args(["history", "add"])
        .arg(&json)
        .arg("--history")
        .arg(&store)
        .assert()
        .success()
        .stdout(contains("already kept as run 1"));
    let verdicts = [("0.000001", 0), ("1000000", 3)];
    for (min, code) in verdicts {
        bin()
            .arg("qualify")
            .arg(&json)
            .args(["--min-busbw", min, "--at-size", "1K", "--history"])
            .arg(&store)
            .assert()
            .code(code)
            .stderr(contains("already in").and(contains("as run 1")));
    }
    let c = rusqlite::Connection::open(&store).unwrap();
    let (runs, passed): (i64, Option<i64>) = c
        .query_row("SELECT COUNT(*), MAX(passed) FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(
        (runs, passed),
        (1, Some(0)),
        "one run, with the later (failing) verdict"
    );
}
