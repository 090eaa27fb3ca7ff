//! TLS to a PostgreSQL store (issue 44), against the real server `ci/postgres` starts with
//! `ssl=on` and a certificate authority it made (`NCCLPROBE_TEST_POSTGRES_CA`): the role
//! `tls_only` may connect over TLS only, so a run kept as that role went over TLS; the
//! certificate names 127.0.0.1 and localhost, not 127.0.0.2, which the server answers too.

use crate::common::{self, bin};
use predicates::prelude::PredicateBooleanExt;
use predicates::str::contains;

/// The server's address and port, the authority's file, and a new database `tls_only` owns.
fn server(test: &str) -> (String, String, String) {
    let base = std::env::var("NCCLPROBE_TEST_POSTGRES").unwrap_or_else(|_| {
        panic!("NCCLPROBE_TEST_POSTGRES is not set: `ci/test` starts the server (by hand: export NCCLPROBE_TEST_POSTGRES=$(ci/postgres start))")
    });
    let ca = std::env::var("NCCLPROBE_TEST_POSTGRES_CA").unwrap_or_else(|_| {
        panic!("NCCLPROBE_TEST_POSTGRES_CA is not set: the TLS tests need the test server's certificate authority (export NCCLPROBE_TEST_POSTGRES_CA=$(ci/postgres ca))")
    });
    let mut admin = postgres::Client::connect(&base, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"));
    admin
        .batch_execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tls_only') THEN CREATE ROLE tls_only LOGIN; END IF; END $$",
        )
        .unwrap();
    let db = format!("tls_{test}_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE DATABASE {db} OWNER tls_only"))
        .unwrap();
    let port = base
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap()
        .to_string();
    (port, ca, db)
}

#[test]
fn a_run_is_kept_over_tls_and_a_wrong_server_is_refused() {
    let (port, ca, db) = server("kept");
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.json");
    common::host_sweep(2)
        .args(["-b", "8", "-e", "1K", "-q", "--json"])
        .arg(&run)
        .assert()
        .success();
    let url = |host: &str, query: &str| format!("postgres://tls_only@{host}:{port}/{db}?{query}");
    // verify-full: the chain to the test authority and the name; tls_only proves TLS was used.
    let full = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    bin()
        .args(["history", "add"])
        .arg(&run)
        .args(["--history", &full, "--node-name", "tls-node"])
        .assert()
        .success()
        .stdout(contains("kept as run 1 (node tls-node"));
    // The libpq key=value form, verify-ca, by name.
    let kv = format!(
        "host=localhost port={port} user=tls_only dbname={db} sslmode=verify-ca sslrootcert={ca}"
    );
    bin()
        .args(["history", "check", "--history", &kv])
        .assert()
        .success()
        .stdout(contains("1 nodes, 1 runs"));
    // 127.0.0.2 is not a name in the certificate: verify-full refuses it, verify-ca does not.
    bin()
        .args(["history", "check", "--history"])
        .arg(url(
            "127.0.0.2",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ))
        .assert()
        .code(1)
        .stderr(contains("certificate not valid for name \"127.0.0.2\""));
    bin()
        .args(["history", "check", "--history"])
        .arg(url(
            "127.0.0.2",
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        ))
        .assert()
        .success();
    // Another authority: the server is not the one trusted.
    let other = dir.path().join("other-ca.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=someone else", "-keyout"])
        .arg(dir.path().join("other.key"))
        .arg("-out")
        .arg(&other)
        .output()
        .expect("openssl makes the other authority");
    assert!(made.status.success());
    bin()
        .args(["history", "check", "--history"])
        .arg(url(
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={}", other.display()),
        ))
        .assert()
        .code(1)
        .stderr(contains("invalid peer certificate").and(contains("UnknownIssuer")));
    // A checked mode with no root to check against says what to give.
    bin()
        .args(["history", "check", "--history"])
        .arg(url("127.0.0.1", "sslmode=verify-full"))
        .env("HOME", dir.path())
        .env_remove("PGSSLROOTCERT")
        .assert()
        .code(1)
        .stderr(contains("no root certificate").and(contains("sslrootcert=FILE")));
    // PGSSLMODE and PGSSLROOTCERT, as libpq reads them.
    bin()
        .args(["history", "check", "--history"])
        .arg(url("127.0.0.1", ""))
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", &ca)
        .assert()
        .success();
}

#[test]
fn a_server_that_insists_on_tls_is_a_clear_error_without_it() {
    let (port, _, db) = server("insists");
    let out = bin()
        .args(["history", "check", "--history"])
        .arg(format!(
            "postgres://tls_only@127.0.0.1:{port}/{db}?sslmode=disable"
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no encryption")
            && err.contains("TLS only")
            && err.contains("sslmode=require"),
        "{err}"
    );
    // And an unknown sslmode is refused by name, before anything connects.
    bin()
        .args(["history", "check", "--history"])
        .arg(format!(
            "postgres://tls_only@127.0.0.1:{port}/{db}?sslmode=verify-everything"
        ))
        .assert()
        .code(1)
        .stderr(contains("sslmode=verify-everything: not one of"));
}
