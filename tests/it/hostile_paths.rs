//! The output-path guard and special files, end to end (host backend, no GPU): an output
//! aimed at an input, two outputs on one file, two documents on stdout, stdin read twice and
//! unwritable paths are refused with exit 2 before any work; `-` and `/dev/stdout` are stdout;
//! a FIFO, `/dev/fd/N` or a process substitution gets the record once, in place, within
//! `--timeout`.

use crate::common;

use common::bin;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FAST: [&str; 12] = [
    "--backend",
    "host",
    "--ranks",
    "2",
    "--min-samples",
    "6",
    "--max-samples",
    "8",
    "-b",
    "8",
    "-e",
    "64",
];

/// A run record made by importing a real nccl-tests output (no measuring).
fn record(dir: &Path) -> PathBuf {
    let paste = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let json = dir.join("run.json");
    bin()
        .arg("import")
        .arg(&paste)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    json
}

/// Runs the command; exit code and stderr.
fn refused(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_output_aimed_at_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path());
    let before = std::fs::read(&run).unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&run, &link).unwrap();
    let hard = dir.path().join("hard.json");
    std::fs::hard_link(&run, &hard).unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nmin_busbw = 1.0\n").unwrap();
    let rules_before = std::fs::read(&rules).unwrap();
    let paste = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/nccl-tests/04-hgx-h100-2node-ib-cx7-nvls-mpi-warnings.txt");
    let copy = dir.path().join("paste.txt");
    std::fs::copy(&paste, &copy).unwrap();
    let copy_before = std::fs::read(&copy).unwrap();
    let r = run.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["report", r, "-o", r],
        vec!["report", r, "-o", link.to_str().unwrap()],
        vec!["report", r, "--markdown", hard.to_str().unwrap()],
        vec!["qualify", r, "--junit", r],
        vec![
            "qualify",
            r,
            "--rules",
            rules.to_str().unwrap(),
            "--junit",
            rules.to_str().unwrap(),
        ],
        vec![
            "import",
            copy.to_str().unwrap(),
            "--json",
            copy.to_str().unwrap(),
        ],
        vec![
            "import",
            copy.to_str().unwrap(),
            "--csv",
            copy.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let (code, stderr) = refused(bin().args(&args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("would overwrite the input"),
            "{args:?}: {stderr}"
        );
    }
    let (code, stderr) = refused(
        bin()
            .arg("sweep")
            .args(FAST)
            .arg("--min-busbw")
            .arg("0.001")
            .arg("--rules")
            .arg(&rules)
            .arg("--json")
            .arg(&rules),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--json"), "{stderr}");
    assert_eq!(std::fs::read(&run).unwrap(), before);
    assert_eq!(std::fs::read(&rules).unwrap(), rules_before);
    assert_eq!(std::fs::read(&copy).unwrap(), copy_before);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn two_outputs_on_one_file_are_refused_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x");
    let x = x.to_str().unwrap();
    let cases: [&[&str]; 4] = [
        &["--junit", x, "--json", x, "--min-busbw", "0.001"],
        &["--report", x, "--json", x],
        &["--markdown", x, "--csv", x],
        &["--report", x, "--markdown", x],
    ];
    for args in cases {
        let started = Instant::now();
        let (code, stderr) = refused(bin().arg("sweep").args(FAST).args(args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("one would overwrite the other"),
            "{args:?}: {stderr}"
        );
        assert!(!Path::new(x).exists(), "{args:?}: nothing is written");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}

#[test]
fn a_plot_is_not_replaced_by_another_output() {
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path());
    let plots = dir.path().join("plots");
    bin()
        .arg("report")
        .arg(&run)
        .arg("--png-dir")
        .arg(&plots)
        .assert()
        .success();
    let png = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "png"))
        .expect("the report drew a plot");
    let before = std::fs::read(&png).unwrap();
    let (code, stderr) = refused(
        bin()
            .arg("report")
            .arg(&run)
            .arg("--png-dir")
            .arg(&plots)
            .arg("-o")
            .arg(&png),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("one would overwrite the other"), "{stderr}");
    assert_eq!(std::fs::read(&png).unwrap(), before);
}

#[test]
fn stdout_carries_one_document_and_dash_is_stdout_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path());
    for args in [
        &["--markdown", "-", "--json", "-"][..],
        &["--format", "json", "--markdown", "-"],
        &["--csv", "-", "--junit", "-", "--min-busbw", "0.001"],
    ] {
        let (code, stderr) = refused(bin().arg("sweep").args(FAST).args(args));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("stdout can carry one document"), "{stderr}");
    }
    // `-` is stdout, never a file named `-`.
    let out = bin()
        .current_dir(dir.path())
        .args([
            "qualify",
            "run.json",
            "--min-busbw",
            "0.001",
            "--junit",
            "-",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("<?xml"), "{stdout}");
    assert!(stdout.contains("<testsuites"), "{stdout}");
    let out = bin()
        .current_dir(dir.path())
        .args(["report", "run.json", "-o", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("<html"));
    assert!(!dir.path().join("-").exists(), "no file named -");
    let (code, stderr) = refused(bin().args(["compare", "-", "-"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("both read stdin"), "{stderr}");
}

#[test]
fn dev_stdout_redirected_to_a_file_gets_the_record_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    let exe = env!("CARGO_BIN_EXE_ncclprobe");
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{exe}' sweep {} --json /dev/stdout > '{}'",
            FAST.join(" "),
            f.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    let record: ncclprobe::model::RunRecord =
        serde_json::from_slice(&std::fs::read(&f).unwrap()).expect("f holds the record alone");
    assert_eq!(record.status, ncclprobe::model::RunStatus::Complete);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["f"], "no `f (deleted)` beside it");
}

#[test]
fn a_process_substitution_gets_the_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("through-pipe.json");
    let exe = env!("CARGO_BIN_EXE_ncclprobe");
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{exe}' sweep {} --json >(cat > '{}'); wait",
            FAST.join(" "),
            f.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    // The substitution's `cat` may finish a moment after the shell.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if serde_json::from_str::<serde_json::Value>(&text).is_ok() || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let record: ncclprobe::model::RunRecord =
        serde_json::from_str(&text).expect("one whole record, written once");
    assert_eq!(record.status, ncclprobe::model::RunStatus::Complete);
}

#[test]
fn a_fifo_nobody_reads_ends_the_run_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let started = Instant::now();
    let (code, stderr) = refused(
        bin()
            .arg("sweep")
            .args(FAST)
            .args(["--timeout", "2", "--json"])
            .arg(&fifo),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("nothing took the output within 2 s"),
        "{stderr}"
    );
    // Generous: the sweep itself, then 2 s of waiting, on a busy machine.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn unwritable_outputs_are_named_in_words_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "mine").unwrap();
    let json = dir.path().join("run.json");
    let (code, stderr) = refused(
        bin()
            .arg("sweep")
            .args(FAST)
            .arg("--json")
            .arg(&json)
            .arg("--png-dir")
            .arg(&file),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is a file, not a directory"), "{stderr}");
    assert!(!json.exists(), "refused before measuring");
    let (code, stderr) = refused(bin().arg("doctor").arg("-o").arg(&file));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is a file, not a directory"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    let missing = dir.path().join("no/such/dir/run.json");
    let (code, stderr) = refused(bin().arg("sweep").args(FAST).arg("--json").arg(&missing));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    let (code, stderr) = refused(bin().arg("sweep").args(FAST).arg("--csv").arg(dir.path()));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");
}

#[test]
fn a_report_that_cannot_be_written_is_exit_1_as_every_write_failure() {
    if !Path::new("/dev/full").exists() {
        panic!("this test needs /dev/full (Linux)");
    }
    let dir = tempfile::tempdir().unwrap();
    let run = record(dir.path());
    let (code, stderr) = refused(bin().arg("report").arg(&run).args(["-o", "/dev/full"]));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("/dev/full"), "{stderr}");
}

#[test]
fn dev_stdout_through_a_pipe_is_stdout_and_a_lost_stdout_ends_the_sweep() {
    let exe = env!("CARGO_BIN_EXE_ncclprobe");
    let fast = FAST.join(" ");
    // Through a pipe, /dev/stdout is the pipe: the record alone, and one document only.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("'{exe}' sweep {fast} --json /dev/stdout | cat"))
        .output()
        .unwrap();
    let record: ncclprobe::model::RunRecord =
        serde_json::from_slice(&out.stdout).expect("stdout holds the record alone");
    assert_eq!(record.status, ncclprobe::model::RunStatus::Complete);
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{exe}' sweep {fast} --json /dev/fd/1 --csv - | cat; exit ${{PIPESTATUS[0]}}"
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stdout can carry one document"));
    // A full stdout loses the record sent there: exit 1, said.
    if Path::new("/dev/full").exists() {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("'{exe}' sweep {fast} --json - > /dev/full"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write to stdout"));
    }
    // A reader gone: the run finishes its record and ends with 141.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(exe)
        .arg("sweep")
        .args(FAST)
        .arg("--json")
        .arg(&json)
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(141));
    let record = common::read_record(&json);
    assert_eq!(record.status, ncclprobe::model::RunStatus::Complete);
}

#[test]
fn doctor_refuses_stdout_and_a_launcher_that_is_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = refused(bin().current_dir(dir.path()).args(["doctor", "-o", "-"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("-o -"), "{stderr}");
    assert!(!dir.path().join("-").exists());
    let (code, stderr) = refused(bin().current_dir(dir.path()).args([
        "doctor",
        "--backend",
        "mpi",
        "--launcher",
        "/nonexistent/mpirun",
        "-o",
        "d",
    ]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--launcher"), "{stderr}");
    assert!(!dir.path().join("d").exists());
}
