//! `ncclprobe doctor` under abuse, through the real binary: flags refused before any step, an
//! output directory that is not its own refused and left as it was, a rerun that leaves nothing
//! of the run before it, a hung launcher ended by the one timeout rule (with everything it
//! started), and a signal passed on to the sweep with a partial report and exit 130/143.

use crate::common;

use common::Machine;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// doctor on this machine's fixture (no GPU, no NVML, none of the host's NCCL variables).
fn doctor(machine: &Machine) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    common::without_host_settings(&mut cmd);
    machine.apply(&mut cmd);
    cmd.env("NCCLPROBE_CUDA_DRIVER", "none")
        .env("NCCLPROBE_NVML_LIBRARY", "none")
        .arg("doctor");
    cmd
}

/// A short host-backend doctor into `out`.
fn host_doctor(machine: &Machine, out: &Path) -> Command {
    let mut cmd = doctor(machine);
    cmd.args(["--backend", "host", "--ranks", "2", "-e", "1K", "-o"])
        .arg(out);
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The directory's entries, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The names the marker lists.
fn marker(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(".ncclprobe-doctor")).unwrap();
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(String::from)
        .collect();
    names.sort();
    names
}

/// Wait for `child`, killing it (and failing) past `limit`.
fn wait_within(mut child: Child, limit: Duration, what: &str) -> (Output, Duration) {
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?}; stderr: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process is still there (a zombie waiting for its parent counts as gone).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

/// Processes (not zombies) whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = text(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && alive(pid) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Wait until no process mentions `needle` (killed processes take a moment to be reaped).
fn none_left_mentioning(needle: &str) -> Vec<String> {
    let started = Instant::now();
    loop {
        let left = processes_mentioning(needle);
        if left.is_empty() || started.elapsed() > Duration::from_secs(10) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn doctor_refuses_bad_flags_before_any_step() {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cases: &[(&[&str], &str)] = &[
        (&["--launcher", ""], "--launcher"),
        (&["--launcher", "   "], "--launcher"),
        (&["--np", "0"], "--np"),
        (&["--ranks", "0"], "--ranks"),
        (&["-g", "0"], "-g/--ngpus"),
        (&["-b", "1M", "-e", "8"], "-b/--minbytes"),
        (&["-b=-5"], "-b/--minbytes"),
        (&["-f", "1"], "-f/--stepfactor"),
        (&["--timeout=0"], "--timeout"),
        (&["--timeout=-2"], "--timeout"),
        (&["--timeout=nan"], "--timeout"),
        (&["--timeout=inf"], "--timeout"),
        (&["--point-budget=0"], "--point-budget"),
        (&["--point-budget=-1"], "--point-budget"),
        (&["--point-budget=inf"], "--point-budget"),
        (&["--model", "nosuch", "--compute-ms", "10"], "--model"),
        (&["--model", "resnet18", "--compute-ms=-3"], "--compute-ms"),
        (&["--model", "resnet18", "--compute-ms=nan"], "--compute-ms"),
        (
            &[
                "--model",
                "resnet18",
                "--compute-ms",
                "3",
                "--batch-size",
                "0",
            ],
            "--batch-size",
        ),
        (&["--compute-ms", "3"], "--compute-ms"),
    ];
    for (flags, named) in cases {
        let started = Instant::now();
        let output = doctor(&machine)
            .args(["--backend", "host"])
            .args(*flags)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("ncclprobe: {named}")),
            "{flags:?} names {named}: {stderr}"
        );
        assert!(
            !stderr.contains("doctor ["),
            "{flags:?}: no step ran: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{flags:?}: no verdict");
        assert!(!out.exists(), "{flags:?}: nothing written");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{flags:?}: refused at once"
        );
    }
}

#[test]
fn doctor_refuses_an_output_that_is_not_a_directory() {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let fifo = dir.path().join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let cases: [(PathBuf, String); 3] = [
        (
            file.clone(),
            format!("-o {} is a file, not a directory", file.display()),
        ),
        (
            fifo.clone(),
            format!("-o {} is a FIFO, not a directory", fifo.display()),
        ),
        (
            file.join("report"),
            format!(
                "-o {}: {} is a file, not a directory",
                file.join("report").display(),
                file.display()
            ),
        ),
    ];
    for (out, said) in cases {
        let output = host_doctor(&machine, &out).output().unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end(), format!("ncclprobe: {said}"));
        assert!(!stderr.contains("os error"), "in words: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn doctor_refuses_a_non_empty_directory_it_did_not_write() {
    use std::os::unix::fs::FileTypeExt;
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("thesis.md"), "chapter 1").unwrap();
    // A FIFO under the name doctor writes its record to: never opened, never replaced.
    nix::unistd::mkfifo(&out.join("run.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let before = entries(&out);
    let output = host_doctor(&machine, &out).output().unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "ncclprobe: -o {} is not empty and was not written by ncclprobe doctor: run.json, thesis.md; choose a new or empty directory",
            out.display()
        )
    );
    assert_eq!(entries(&out), before, "nothing added or removed");
    assert_eq!(
        std::fs::read_to_string(out.join("thesis.md")).unwrap(),
        "chapter 1"
    );
    assert!(std::fs::metadata(out.join("run.json"))
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn a_second_doctor_run_leaves_nothing_of_the_first_and_keeps_what_is_not_its_own() {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    // The first run simulates DDP: simulation.json and its plots.
    let first = host_doctor(&machine, &out)
        .args(["--model", "resnet18", "--compute-ms", "40"])
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(out.join("simulation.json").exists());
    assert!(out.join("ddp-simulation.png").exists());
    // The marker lists every file the run left, and only those.
    let mut listed = marker(&out);
    listed.push(".ncclprobe-doctor".into());
    listed.sort();
    assert_eq!(entries(&out), listed);

    // The second run does not: nothing of the first is left beside its report.
    let second = host_doctor(&machine, &out).output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    for gone in [
        "simulation.json",
        "ddp-simulation.png",
        "ddp-simulation.svg",
    ] {
        assert!(!out.join(gone).exists(), "{gone} of the first run is left");
    }
    let mut listed = marker(&out);
    assert!(listed.contains(&"run.json".to_string()), "{listed:?}");
    assert!(!listed.contains(&"simulation.json".to_string()));
    listed.push(".ncclprobe-doctor".into());
    listed.sort();
    assert_eq!(entries(&out), listed);

    // A file of the user's beside a doctor report: refused, and nothing is touched.
    std::fs::write(out.join("my-notes.txt"), "keep me").unwrap();
    let before = entries(&out);
    let run_before = std::fs::read(out.join("run.json")).unwrap();
    let third = host_doctor(&machine, &out).output().unwrap();
    let stderr = text(&third.stderr);
    assert_eq!(third.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("did not write: my-notes.txt"),
        "names what is in the way: {stderr}"
    );
    assert!(!stderr.contains("doctor ["), "no step ran: {stderr}");
    assert_eq!(entries(&out), before);
    assert_eq!(std::fs::read(out.join("run.json")).unwrap(), run_before);
    assert_eq!(
        std::fs::read_to_string(out.join("my-notes.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn a_hung_launcher_is_ended_after_twice_the_timeout_with_all_it_started() {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let launcher = dir.path().join("hung-mpirun");
    let pids = dir.path().join("pids");
    // A launcher that starts something and never returns, printing nothing.
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\necho $$ > {pids}\nsleep 1000 &\necho $! >> {pids}\nwait\n",
            pids = pids.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("report");
    let child = doctor(&machine)
        .args(["--backend", "mpi", "--timeout", "2", "--launcher"])
        .arg(&launcher)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The rule: silent for twice --timeout (4 s), then SIGTERM to its process group (SIGKILL
    // 5 s later). Generous for a busy machine; the code before ended it after 4x+120 s.
    let (output, took) = wait_within(child, Duration::from_secs(60), "doctor");
    let stderr = text(&output.stderr);
    assert!(
        took >= Duration::from_secs(4),
        "not before the rule: {took:?}"
    );
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the sweep timed out: `")
            && stderr.contains("printed nothing for 4 s (twice --timeout) and was ended"),
        "{stderr}"
    );
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("FAILED: ") && stdout.contains("the sweep timed out"),
        "{stdout}"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("the sweep timed out"), "{summary}");
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "the launcher and its sleep");
    let started = Instant::now();
    while pids.iter().any(|&p| alive(p)) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in pids {
        assert!(
            !alive(pid),
            "process {pid} the launcher started is still running"
        );
    }
}

/// doctor on a sweep long enough to be interrupted; `signal` once its record exists.
fn interrupted_doctor(signal: nix::sys::signal::Signal, code: i32) {
    let machine = Machine::bare();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let child = doctor(&machine)
        .args([
            "--backend",
            "host",
            "--ranks",
            "2",
            "-e",
            "64M",
            "-f",
            "2",
            "--point-budget",
            "2",
            "--model",
            "resnet18",
            "--compute-ms",
            "40",
            "-o",
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let run = out.join("run.json");
    let started = Instant::now();
    // The sweep has started once its record is there (it is rewritten after every point).
    while !run.exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(run.exists(), "the sweep never wrote its record");
    nix::sys::signal::kill(pid, signal).unwrap();
    let (output, _) = wait_within(child, Duration::from_secs(60), "doctor after a signal");
    let stderr = text(&output.stderr);
    let name = signal.as_str();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    // The sweep got the signal: its record says so, and it is gone.
    let record = common::read_record(&run);
    assert_eq!(record.status.name(), "interrupted", "{stderr}");
    assert_eq!(
        record.error.as_deref(),
        Some(format!("interrupted by {name}").as_str())
    );
    let left = none_left_mentioning(&run.display().to_string());
    assert!(left.is_empty(), "the sweep outlived doctor: {left:?}");
    // The partial report says so; the simulation was not run.
    assert!(
        text(&output.stdout).starts_with("FAILED: "),
        "{}",
        text(&output.stdout)
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains(&format!(
            "doctor was interrupted by {name}: not run: the DDP simulation; this report is partial"
        )),
        "{summary}"
    );
    assert!(!out.join("simulation.json").exists());
    assert!(
        stderr.contains(&format!("doctor interrupted by {name}")),
        "{stderr}"
    );
}

#[test]
fn sigterm_reaches_the_sweep_and_doctor_writes_a_partial_report() {
    interrupted_doctor(nix::sys::signal::Signal::SIGTERM, 143);
}

#[test]
fn sigint_reaches_the_sweep_and_doctor_writes_a_partial_report() {
    interrupted_doctor(nix::sys::signal::Signal::SIGINT, 130);
}
