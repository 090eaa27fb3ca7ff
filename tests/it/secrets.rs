//! Credentials never written: not in a record's command line or environment, not in the
//! document a fleet store keeps, not in a bundle's environment; and a password need not be on
//! the command line at all (PGPASSWORD, the password file). `../shared/reviews` D5, D6, D9.

use crate::common::bin;
use std::io::Read;

const PW: &str = "S3cretPW-do-not-keep";

fn stored_documents(sqlite: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open(sqlite).unwrap();
    let mut q = db.prepare("SELECT document FROM runs").unwrap();
    let blobs: Vec<Vec<u8>> = q
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    blobs
        .into_iter()
        .map(|b| {
            let mut text = String::new();
            flate2::read::DeflateDecoder::new(&b[..])
                .read_to_string(&mut text)
                .unwrap();
            text
        })
        .collect()
}

#[test]
fn a_record_and_the_store_keep_no_credential() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    // The store named by a URL with a password: unreachable here, and the record written anyway.
    let url = format!("postgres://fleet:{PW}@127.0.0.1:9/ncclprobe");
    let out = crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "4K"])
        .args(["-n", "2", "-w", "1", "--samples", "3", "-q", "--json"])
        .arg(&record)
        .args(["--history", &url])
        .env("NCCL_DB_URL", format!("postgresql://u:{PW}@db/x"))
        .env("NCCL_FAKE_TOKEN", PW)
        .env("NCCL_DEBUG_SUBSYS", "INIT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains(PW), "{err}");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(!text.contains(PW), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(
        doc["command_line"]
            .to_string()
            .contains("fleet:<redacted>@127.0.0.1"),
        "{doc}"
    );
    assert_eq!(doc["env"]["NCCL_FAKE_TOKEN"], "<redacted>");
    assert_eq!(doc["env"]["NCCL_DB_URL"], "postgresql://u:<redacted>@db/x");
    assert_eq!(doc["env"]["NCCL_DEBUG_SUBSYS"], "INIT");
    // An older record that still holds one: the store keeps it redacted.
    let mut old = doc.clone();
    old["command_line"] = serde_json::json!(["ncclprobe", "sweep", "--history", url]);
    old["env"]["NCCL_FAKE_TOKEN"] = PW.into();
    let older = dir.path().join("older.json");
    std::fs::write(&older, old.to_string()).unwrap();
    let store = dir.path().join("fleet.sqlite");
    bin()
        .args(["history", "add"])
        .arg(&older)
        .arg("--history")
        .arg(&store)
        .assert()
        .success();
    let docs = stored_documents(&store);
    assert_eq!(docs.len(), 1);
    assert!(!docs[0].contains(PW), "{}", docs[0]);
}

#[test]
fn any_postgres_spelling_is_a_server_and_never_a_file_named_after_it() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        format!("POSTGRES://fleet:{PW}@127.0.0.1:9/x"),
        format!("postgresql://127.0.0.1:9/x?user=fleet&password={PW}"),
        format!("host=127.0.0.1 port=9 user=fleet password={PW} dbname=ncclprobe"),
    ] {
        let out = bin()
            .args(["history", "check", "--history", &store])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{store}: {err}");
        assert!(!err.contains(PW), "{err}");
        assert!(err.contains("127.0.0.1"), "{err}");
        // Nothing was created under the working directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{store}");
    }
}

#[test]
fn a_bundles_environment_names_secrets_without_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("b");
    let out = bin()
        .args(["bundle", "--no-run", "-o"])
        .arg(&out_dir)
        .env("NVIDIA_API_KEY", PW)
        .env("TORCH_HUB_TOKEN", PW)
        .env("UCX_PASSWORD", PW)
        .env("OMPI_MCA_pw", PW)
        .env("NCCL_DB_URL", format!("postgres://u:{PW}@h/db"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env = std::fs::read_to_string(out_dir.join("environment.txt")).unwrap();
    assert!(!env.contains(PW), "{env}");
    assert!(env.contains("NVIDIA_API_KEY=<redacted>"), "{env}");
    assert!(
        env.contains("NCCL_DB_URL=postgres://u:<redacted>@h/db"),
        "{env}"
    );
}

#[test]
fn a_record_dated_in_the_future_is_refused_by_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run.json");
    crate::common::host_sweep(2)
        .args(["-b", "1K", "-e", "4K"])
        .args(["-n", "2", "-w", "1", "--samples", "3", "-q", "--json"])
        .arg(&record)
        .assert()
        .success();
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    doc["started_at"] = "2099-01-01T00:00:00Z".into();
    std::fs::write(&record, doc.to_string()).unwrap();
    let out = bin()
        .args(["history", "add"])
        .arg(&record)
        .arg("--history")
        .arg(dir.path().join("fleet.sqlite"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in the future"), "{err}");
}

#[test]
fn one_log_added_twice_or_after_a_touch_is_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/07-2080ti-x2-pcie-no-p2p-allreduce.txt");
    let copy = dir.path().join("copy.txt");
    std::fs::copy(&log, &copy).unwrap();
    let store = dir.path().join("fleet.sqlite");
    for f in [&log, &copy, &log] {
        let out = bin()
            .args(["history", "add"])
            .arg(f)
            .arg("--history")
            .arg(&store)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(stored_documents(&store).len(), 1);
}
