//! The runs themselves (see `tests/sweep_mpi.rs`).

use super::common::{
    needs_fault_injection, read_record, table_rows, without_host_settings, Machine,
};
use ncclprobe::model::RunStatus;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The straggler test judges timings: it runs alone, the other MPI runs beside each other.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A run that may share the machine with others (not with the straggler test).
fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|p| p.into_inner())
}

fn mpirun(np: usize, args: &[&str]) -> (Output, Duration) {
    let _shared = shared();
    launch(np, args)
}

/// [`mpirun`] with no other MPI run of these tests on the machine.
fn mpirun_alone(np: usize, args: &[&str]) -> (Output, Duration) {
    let _alone = TIMING.write().unwrap_or_else(|p| p.into_inner());
    launch(np, args)
}

fn launch(np: usize, args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let mut mpirun = Command::new("mpirun");
    let _session = super::common::own_session(&mut mpirun);
    let out = mpirun
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string()])
        // These runs mean the MPI backend: no GPU driver on any machine, so auto picks MPI.
        .env("NCCLPROBE_CUDA_DRIVER", "none")
        .arg(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mpirun ({e}); install Open MPI (ci/test does: apt-get install openmpi-bin libopenmpi-dev)"));
    (out, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The record a run left, or a failure that shows what the run printed.
fn record_of(json: &std::path::Path, out: &Output) -> ncclprobe::model::RunRecord {
    if !json.exists() {
        panic!(
            "the run left no record at {}\nstdout:\n{}\nstderr:\n{}",
            json.display(),
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    read_record(json)
}

const FAST: [&str; 6] = [
    "--min-samples",
    "6",
    "--max-samples",
    "12",
    "--point-budget",
    "0.05",
];

#[test]
fn two_ranks_every_collective_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let json_arg = json.to_str().unwrap();
    let mut args = vec![
        "sweep",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "--collective",
        "all",
        "-d",
        "int8,int32,half,bfloat16,float,double",
        "-o",
        "sum,avg,max",
        "--json",
        json_arg,
    ];
    args.extend(FAST);
    let (out, _) = mpirun(2, &args);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("# backend mpi: 2 ranks, one per process (auto:"),
        "{stdout}"
    );
    assert!(stdout.contains("# library mpi: Open MPI"), "{stdout}");
    let record = record_of(&json, &out);
    assert_eq!(record.status, RunStatus::Complete);
    assert_eq!(record.backend.name, "mpi");
    assert_eq!(record.backend.ranks.len(), 2);
    assert_ne!(
        record.backend.ranks[0].pid, record.backend.ranks[1].pid,
        "ranks are separate processes"
    );
    assert!(record.backend.library_versions.contains_key("mpi"));
    assert!(!record.points.is_empty());
    assert!(record.points.iter().all(|p| p.wrong == Some(0)));
    for c in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
    ] {
        assert!(
            stdout.contains(&format!("# Collective test starting: {c}_perf")),
            "{c}"
        );
    }
    assert_eq!(table_rows(&stdout).len() * 2, record.points.len());
}

#[test]
fn four_ranks_oversubscribed() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut args = vec![
        "sweep",
        "--backend",
        "mpi",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "4",
        "--collective",
        "all_reduce,alltoall,reduce_scatter",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(FAST);
    let (out, _) = mpirun(4, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let record = record_of(&json, &out);
    assert_eq!(record.backend.nranks, 4);
    assert!(record
        .points
        .iter()
        .all(|p| p.nranks == 4 && p.wrong == Some(0) && p.per_rank_time_s.len() == 4));
    // Table and record agree on every size.
    let rows = table_rows(&text(&out.stdout));
    let sizes: Vec<u64> = record
        .points
        .iter()
        .step_by(2)
        .map(|p| p.size_bytes)
        .collect();
    assert_eq!(rows.iter().map(|r| r.size).collect::<Vec<_>>(), sizes);
}

/// Two ranks sweeping 1K..64K with an injected fault and a timeout: the outcome, how long it
/// took, and the record path (in the returned directory).
fn faulted_run(
    timeout: &str,
    fault: &str,
) -> (Output, Duration, std::path::PathBuf, tempfile::TempDir) {
    super::common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let mut args = vec![
        "sweep",
        "-b",
        "1K",
        "-e",
        "64K",
        "--timeout",
        timeout,
        "--inject-fault",
        fault,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(FAST);
    let (out, took) = mpirun(2, &args);
    (out, took, json, dir)
}

#[test]
fn a_rank_that_dies_ends_the_run_within_the_timeout() {
    let (out, took, json, _dir) = faulted_run("5", "die:1:16K");
    assert!(!out.status.success(), "a dead rank must fail the run");
    assert!(took < Duration::from_secs(30), "survivors hung: {took:?}");
    let record = record_of(&json, &out);
    let sizes: Vec<u64> = record.points.iter().map(|p| p.size_bytes).collect();
    assert_eq!(
        sizes,
        vec![1024, 1024, 2048, 2048, 4096, 4096, 8192, 8192],
        "finished points stay on disk"
    );
}

#[test]
fn a_killed_rank_0_does_not_leave_its_record_running() {
    // Rank 0 alone writes the record; SIGKILLed, it cannot close it. The other rank (same
    // host) closes it for it when the launcher ends the run.
    let (out, took, json, _dir) = faulted_run("5", "die:0:16K");
    assert!(!out.status.success(), "a dead rank must fail the run");
    assert!(took < Duration::from_secs(30), "survivors hung: {took:?}");
    let record = record_of(&json, &out);
    assert_eq!(record.status, RunStatus::Failed, "{:?}", record.error);
    let error = record.error.unwrap_or_default();
    assert!(
        error.contains("rank 0") && error.contains("without closing the record"),
        "{error}"
    );
    let sizes: Vec<u64> = record.points.iter().map(|p| p.size_bytes).collect();
    assert_eq!(
        sizes,
        vec![1024, 1024, 2048, 2048, 4096, 4096, 8192, 8192],
        "rank 0's points stay"
    );
}

#[test]
fn a_stalled_rank_times_out_with_code_4() {
    let (out, took, json, _dir) = faulted_run("4", "stall:1:8K");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr:\n{stderr}");
    assert!(
        stderr
            .contains("timeout: all_reduce float 8 KiB (8192 bytes) out-of-place made no progress"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    let record = record_of(&json, &out);
    assert_eq!(record.status, RunStatus::TimedOut);
    assert_eq!(record.points.len(), 6);
}

/// MPI counts are C ints: 2 GiB of int8 is 2^31 elements, one more than an int holds. One
/// rank, so the plan's memory check (3 buffers of 2 GiB must fit in half the available
/// memory) lets the size through to the backend's own guard, which refuses it before
/// allocating anything.
#[test]
fn a_count_beyond_an_mpi_int_is_refused_by_the_backend() {
    let (out, _) = mpirun(
        1,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-b",
            "2G",
            "-e",
            "2G",
            "-d",
            "int8",
            "--samples",
            "1",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("do not fit in memory"),
        "this test needs 12 GiB of available memory to reach the MPI guard: {stderr}"
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("exceed MPI's int count limit"), "{stderr}");
}

#[test]
fn unsupported_sizes_are_refused_not_crashed() {
    // MPI counts are C ints: 4 GiB of int8 cannot be expressed (exit 2), and never a crash.
    let (out, _) = mpirun(
        2,
        &[
            "sweep",
            "-b",
            "3G",
            "-e",
            "3G",
            "-d",
            "int8",
            "--samples",
            "1",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("exceed MPI's int count limit") || stderr.contains("do not fit in memory"),
        "{stderr}"
    );
}

#[test]
fn ci_qualify_gates_a_two_rank_mpi_run_and_leaves_junit_and_record() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/qualify");
    let run = |min_busbw: &str, dir: &std::path::Path| {
        let mut c = Command::new(&script);
        // The script's mpirun inherits it.
        let _session = super::common::own_session(&mut c);
        let _shared = shared();
        c.arg(dir)
            .env("NCCLPROBE", env!("CARGO_BIN_EXE_ncclprobe"))
            .env("NCCLPROBE_CUDA_DRIVER", "none")
            .env("LAUNCHER", "mpirun")
            .env("NP", "2")
            .env("LAUNCH_ARGS", "--allow-run-as-root --oversubscribe")
            .env(
                "SIZES",
                "-b 8 -e 64K --min-samples 6 --max-samples 12 --point-budget 0.05",
            )
            .env("MIN_BUSBW", min_busbw)
            .env("RETRIES", "1")
            .output()
            .unwrap_or_else(|e| panic!("cannot run ci/qualify: {e}"))
    };
    let pass = tempfile::tempdir().unwrap();
    let out = run("0.0001", pass.path());
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let record = read_record(&pass.path().join("run.json"));
    assert_eq!(
        (record.backend.name.as_str(), record.backend.nranks),
        ("mpi", 2)
    );
    assert!(record.qualification.unwrap().passed);
    let xml = std::fs::read_to_string(pass.path().join("qual.xml")).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!((report.tests, report.failures), (3, 0));

    let fail = tempfile::tempdir().unwrap();
    let out = run("100000", fail.path());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let record = read_record(&fail.path().join("run.json"));
    let q = record.qualification.unwrap();
    assert_eq!((q.passed, q.attempts), (false, 2));
    assert_eq!(record.status, RunStatus::Complete);
    assert!(!record.retried_points.is_empty());
    let xml = std::fs::read_to_string(fail.path().join("qual.xml")).unwrap();
    assert!(
        quick_junit::Report::deserialize_from_str(&xml)
            .unwrap()
            .failures
            >= 1
    );
}

/// doctor reads the machine it runs on: here a bare fixture's sysfs, /proc and /dev, no NVML
/// and no CUDA driver, and none of the host's NCCL_*, CUDA_* or launcher variables, so a GPU
/// host's findings (a job on several GPUs is an error) cannot change the verdict or the exit.
fn on_a_bare_machine(cmd: &mut Command, machine: &Machine) {
    needs_fault_injection();
    without_host_settings(cmd);
    machine.apply(cmd);
    cmd.env("NCCLPROBE_NVML_LIBRARY", "none")
        .env("NCCLPROBE_CUDA_DRIVER", "none");
}

/// The kernel line of the fixture's /proc, as the report's diagnosis read it.
fn diagnosed_kernel(report: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(report.join("diagnosis.json")).ok()?;
    let doc: ncclprobe::documents::DiagnosisDocument = serde_json::from_str(&text).ok()?;
    doc.facts.live?.kernel
}

const FIXTURE_KERNEL: &str = "Linux version 6.1.0-fixture (a test's /proc) #1 SMP";

#[test]
fn doctor_under_mpirun_measures_in_its_ranks_and_rank_0_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let machine = Machine::bare();
    let mut cmd = Command::new("mpirun");
    on_a_bare_machine(&mut cmd, &machine);
    let _session = super::common::own_session(&mut cmd);
    let _shared = shared();
    let o = cmd
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .arg(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(["doctor", "--backend", "mpi", "-e", "256K"])
        .args(["--point-budget", "0.05", "-o"])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mpirun ({e}); install Open MPI (ci/test does)"));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(diagnosed_kernel(&out).as_deref(), Some(FIXTURE_KERNEL));
    let run = read_record(&out.join("run.json"));
    assert_eq!((run.backend.name.as_str(), run.backend.nranks), ("mpi", 2));
    assert!(out.join("index.html").exists() && out.join("summary.md").exists());
    assert!(text(&o.stdout).contains("report: "), "{}", text(&o.stdout));
}

/// doctor launching mpirun itself, with Open MPI restricted to TCP: it also measures the same
/// sweep without the restriction (shared memory), and the report quotes both.
#[test]
fn doctor_measures_the_mpi_run_again_without_the_tcp_restriction() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let machine = Machine::bare();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    on_a_bare_machine(&mut cmd, &machine);
    // The mpiruns doctor starts inherit it.
    let _session = super::common::own_session(&mut cmd);
    let _shared = shared();
    let o = cmd
        .args([
            "doctor",
            "--backend",
            "mpi",
            "--np",
            "2",
            "--launcher",
            "mpirun --allow-run-as-root --oversubscribe",
        ])
        .args(["-b", "64K", "-e", "4M", "--point-budget", "0.05", "-o"])
        .arg(&out)
        .env("OMPI_MCA_btl", "tcp,self")
        .output()
        .expect("doctor runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(diagnosed_kernel(&out).as_deref(), Some(FIXTURE_KERNEL));
    let tcp = read_record(&out.join("run.json"));
    let shm = read_record(&out.join("run-without-overrides.json"));
    assert_eq!(
        tcp.env.get("OMPI_MCA_btl").map(String::as_str),
        Some("tcp,self")
    );
    assert!(!shm.env.contains_key("OMPI_MCA_btl"));
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("OMPI_MCA_btl=tcp,self") && html.contains("OMPI_MCA_btl unset"));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    println!("{summary}");
}

fn matrix_doc(path: &std::path::Path) -> ncclprobe::matrix::MatrixDocument {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not a matrix document: {e}", path.display()))
}

#[test]
fn matrix_of_four_mpi_ranks_has_every_ordered_pair() {
    use ncclprobe::matrix::Direction;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let (out, _) = mpirun(
        4,
        &[
            "matrix",
            "--backend",
            "mpi",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let doc = matrix_doc(&json);
    assert_eq!(doc.backend.name, "mpi");
    assert_eq!(doc.backend.nranks, 4);
    let one_way: std::collections::BTreeSet<_> = doc
        .measurements
        .iter()
        .filter(|m| m.direction == Direction::OneWay)
        .map(|m| (m.from, m.to, m.size_bytes))
        .collect();
    assert_eq!(one_way.len(), 24, "12 ordered pairs at 2 sizes");
    assert!(doc
        .measurements
        .iter()
        .all(|m| m.wrong_bytes == 0 && m.time_s > 0.0));
    assert_eq!(
        serde_json::to_value(doc.schedule).unwrap(),
        "rounds",
        "MPI ranks are measured in rounds of disjoint pairs"
    );
    assert!(doc.measurements.iter().any(|m| m.concurrent_pairs == 2));
    // Only rank 0 prints the matrix.
    assert_eq!(
        stdout.matches("# ncclprobe matrix: 4 ranks").count(),
        1,
        "{stdout}"
    );
}

#[test]
fn matrix_by_node_under_mpirun_groups_ranks_by_host() {
    super::common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let (out, _) = mpirun(
        4,
        &[
            "matrix",
            "--backend",
            "mpi",
            "--by",
            "node",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "32",
            "--inject-fault",
            "hosts:n1,n1,n2,n2",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = matrix_doc(&json);
    let nodes: Vec<(String, Vec<usize>)> = doc
        .endpoints
        .iter()
        .map(|e| (e.label.clone(), e.ranks.clone()))
        .collect();
    assert_eq!(
        nodes,
        [
            ("n1".to_string(), vec![0, 1]),
            ("n2".to_string(), vec![2, 3])
        ]
    );
    assert_eq!(doc.backend.hosts, ["n1", "n2"]);
    // Both ranks of n1 send to both of n2 at once, and back.
    assert!(
        doc.measurements.iter().all(|m| m.rank_pairs == 2),
        "{:?}",
        doc.measurements
    );
    assert_eq!(doc.sizes(), vec![8, 256, 8192, 262144]);
    assert_eq!(
        ncclprobe::matrix::analysis::link(&doc, None, 0, 1),
        "different hosts (n1 and n2): the network"
    );
}

#[test]
fn a_late_mpi_rank_is_named_by_stragglers() {
    super::common::needs_fault_injection();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let (out, _) = mpirun_alone(
        3,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "64",
            "--stragglers",
            // 5 ms: well past what three ranks sharing two busy cores lose to the scheduler
            // (1 ms was lost in that noise once, in a full CI run).
            "--inject-fault",
            "late:1:5000",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    println!("{}", stdout.lines().last().unwrap_or_default());
    assert!(stdout.contains("# STRAGGLER: rank 1 (host "), "{stdout}");
    let record = record_of(&json, &out);
    let named = record
        .points
        .iter()
        .filter(|p| p.arrivals.as_ref().and_then(|a| a.straggler()) == Some(1))
        .count();
    assert!(
        named * 2 >= record.points.len(),
        "rank 1 at {named} of {} points",
        record.points.len()
    );
}

/// ncclprobe as an nccl-tests binary (`name`, a link) under mpirun on `np` ranks.
fn mpirun_perf(np: usize, name: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ncclprobe"), &link).unwrap();
    let mut c = Command::new("mpirun");
    without_host_settings(&mut c);
    let _session = super::common::own_session(&mut c);
    let _shared = shared();
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ])
    .env("NCCLPROBE_CUDA_DRIVER", "none")
    .arg(&link)
    .args(args)
    .output()
    .unwrap_or_else(|e| panic!("cannot run mpirun ({e}); install Open MPI (ci/test does)"))
}

#[test]
fn the_drop_in_runs_its_newer_flags_and_binaries_over_mpi() {
    // Every rank drops what needs GPUs (-G, -x, -y) alike, and rank 0 says so once; the
    // rest runs on MPI's calls, checked: mulsum's per-rank scalars, misaligned buffers, and
    // the gather, scatter, hypercube and alltoallv binaries (on every root).
    let out = mpirun_perf(
        2,
        "all_reduce_perf_mpi",
        &[
            "-b", "8", "-e", "4K", "-f", "8", "-G", "3", "-x", "1", "-y", "1", "-z", "3",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr)
            .matches("apply to the NCCL backend only")
            .count(),
        1,
        "{}",
        text(&out.stderr)
    );
    for (name, extra) in [
        (
            "reduce_perf_mpi",
            vec!["-o", "mulsum", "-d", "all", "-u", "3"],
        ),
        (
            "all_reduce_perf_mpi",
            vec!["-o", "mulsum", "-d", "half", "-r", "1"],
        ),
        ("gather_perf_mpi", vec!["-r", "-1", "-u", "1"]),
        ("scatter_perf_mpi", vec!["-r", "-1", "-u", "1"]),
        ("hypercube_perf_mpi", vec!["-u", "2"]),
        ("alltoallv_perf_mpi", vec!["-u", "1", "-d", "double"]),
    ] {
        let mut args = vec!["-b", "64", "-e", "64K", "-f", "32"];
        args.extend(extra);
        let out = mpirun_perf(4, name, &args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        assert!(
            stdout.contains("# Out of bounds values : 0 OK"),
            "{name}: {stdout}"
        );
    }
}
