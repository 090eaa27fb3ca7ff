//! Output files and signals under abuse: nothing that is not ours is clobbered, nothing
//! measured is lost, and an interrupted run says so.

use crate::common;

use common::{bin, read_record};
use ncclprobe::model::RunStatus;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAST: [&str; 8] = [
    "--backend",
    "host",
    "--ranks",
    "2",
    "--min-samples",
    "6",
    "--max-samples",
    "8",
];

/// A character device like /dev/null (1, 3) of this test's own, so that a regression replaces
/// a node in a temporary directory rather than the machine's /dev/null. Creating one needs
/// root (as CI runs); otherwise /dev/null itself, which only root could replace.
fn char_device(dir: &Path, name: &str, minor: u64) -> std::path::PathBuf {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let node = dir.join(name);
    match mknod(
        &node,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, minor),
    ) {
        Ok(()) => node,
        Err(_) => Path::new("/dev").join(name),
    }
}

fn null_device(dir: &Path) -> std::path::PathBuf {
    char_device(dir, "null", 3)
}

#[test]
fn a_device_node_is_written_through_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let null = null_device(dir.path());
    bin()
        .args(["sweep", "-b", "8", "-e", "64", "--json"])
        .arg(&null)
        .arg("--csv")
        .arg(&null)
        .args(FAST)
        .assert()
        .code(2); // two outputs on one path
    bin()
        .args(["sweep", "-b", "8", "-e", "64", "--json"])
        .arg(&null)
        .args(FAST)
        .assert()
        .success();
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(&null).unwrap().file_type();
    assert!(
        kind.is_char_device(),
        "{} must stay a device",
        null.display()
    );
}

#[test]
fn a_full_device_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let full = char_device(dir.path(), "full", 7);
    let out = bin()
        .args(["sweep", "-b", "8", "-e", "64", "--csv"])
        .arg(&full)
        .args(FAST)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&*full.to_string_lossy()), "{stderr}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&full)
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn a_symlinked_output_keeps_its_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("results/run.json");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    let link = dir.path().join("latest.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    bin()
        .args(["sweep", "-b", "8", "-e", "64", "--json"])
        .arg(&link)
        .args(FAST)
        .assert()
        .success();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(read_record(&real).points.len(), 8);
}

#[test]
fn two_outputs_on_one_path_or_two_documents_on_stdout_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("same.out");
    let out = bin()
        .args(["sweep", "-b", "8", "-e", "64", "--json"])
        .arg(&same)
        .arg("--csv")
        .arg(dir.path().join(".").join("same.out"))
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one would overwrite the other"));
    assert!(!same.exists(), "nothing was run");
    for args in [
        &["--json", "-", "--csv", "-"][..],
        &["--format", "json", "--csv", "-"][..],
    ] {
        let out = bin()
            .args(["sweep", "-b", "8", "-e", "64"])
            .args(args)
            .args(FAST)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn stale_temporary_files_are_cleaned_and_none_are_left() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let stale = dir.path().join(".run.json.tmp.4194305");
    std::fs::write(&stale, b"{").unwrap();
    bin()
        .args(["sweep", "-b", "8", "-e", "64", "--json"])
        .arg(&json)
        .args(FAST)
        .assert()
        .success();
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["run.json".to_string()]);
}

/// Start a long sweep, wait until its record holds a point, send `signal`.
fn interrupt(
    signal: nix::sys::signal::Signal,
) -> (std::process::Output, std::path::PathBuf, tempfile::TempDir) {
    common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let child = Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(["sweep", "-b", "1K", "-e", "64K", "--timeout", "60"])
        .args(["--inject-fault", "stall:1:32K", "--json"])
        .arg(&json)
        .args(FAST)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !has_points(&json, 10) {
        assert!(Instant::now() < deadline, "the sweep never reached 16 KiB");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    (child.wait_with_output().unwrap(), json, dir)
}

fn has_points(json: &Path, n: usize) -> bool {
    std::fs::read(json)
        .ok()
        .and_then(|b| serde_json::from_slice::<ncclprobe::model::RunRecord>(&b).ok())
        .is_some_and(|r| r.points.len() >= n)
}

#[test]
fn ctrl_c_closes_the_record_as_interrupted_and_exits_130() {
    let (out, json, _dir) = interrupt(nix::sys::signal::Signal::SIGINT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted by SIGINT"), "{stderr}");
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::Interrupted);
    assert!(r.finished_at.is_some());
    assert_eq!(r.points.len(), 10, "every finished point is kept");
}

#[test]
fn sigterm_closes_the_record_as_interrupted_and_exits_143() {
    let (out, json, _dir) = interrupt(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read_record(&json).status, RunStatus::Interrupted);
}

/// A reader that went away: every command stops quietly with 141 (as a tool killed by SIGPIPE),
/// never a panic; a full disk is exit 1 with a message.
#[test]
fn a_closed_stdout_ends_a_command_quietly_and_a_full_one_says_so() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let run = corpus.to_str().unwrap();
    let commands: [&[&str]; 4] = [
        &["baselines"],
        &["baselines", "--format", "json"],
        &["compare", run],
        &["import", run],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        if std::path::Path::new("/dev/full").exists() {
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_ncclprobe"))
                .args(args)
                .stdout(full)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains("cannot write to stdout"),
                "{args:?}: {stderr}"
            );
        }
    }
}
