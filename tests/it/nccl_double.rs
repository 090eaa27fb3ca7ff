//! The nccl backend end to end on machines without a GPU, against the TEST DOUBLE of libcuda
//! and libnccl (doubles/gpu; `ci/test` builds it). The double moves and reduces real data and
//! runs streams asynchronously; these tests check results, the launch modes, and that every
//! injected fault ends with the documented exit code within the timeout, finished points on disk.

use crate::common;

use common::read_record;
use ncclprobe::coll::{Collective, Placement};
use ncclprobe::model::RunStatus;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[path = "nccl_show_algo.rs"]
mod show_algo;

/// A directory where `libcuda.so.1` and `libnccl.so.2` are the test double.
fn doubles() -> tempfile::TempDir {
    common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"])
}

fn probe(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    // CUDA_VISIBLE_DEVICES and the rest of a GPU host's settings change what the double shows.
    common::without_host_settings(&mut c);
    c.env("LD_LIBRARY_PATH", dir)
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("NCCLPROBE_TEST_DOUBLE_FAULT");
    c
}

const SMALL: [&str; 12] = [
    "sweep",
    "-b",
    "8",
    "-e",
    "4K",
    "-f",
    "8",
    "--max-samples",
    "8",
    "--point-budget",
    "0.05",
    "--warmup-time=0.002",
];

fn run(mut c: Command) -> (Output, Duration) {
    let t = Instant::now();
    let out = c.output().expect("run ncclprobe");
    (out, t.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn one_process_two_gpus_every_collective_checked() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let trace = out_dir.path().join("calls.txt");
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
        .args(SMALL)
        .args([
            "--collective",
            "all",
            "-d",
            "float,half,bfloat16,int8",
            "-o",
            "sum,avg,min",
            "--json",
        ])
        .arg(&json);
    let (out, _) = run(c);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "# backend nccl: 2 GPUs driven by one process (-g 2) (auto: NCCL 2.18.5 found at"
        ),
        "{stdout}"
    );
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::Complete);
    assert_eq!(r.backend.name, "nccl");
    assert_eq!(r.backend.nranks, 2);
    assert!(r.backend.library_versions["nccl"].starts_with("2.18.5"));
    // The double's cuDriverGetVersion says 12040; the path is the file libcuda.so.1 resolves to.
    let driver = &r.backend.library_versions["cuda-driver"];
    assert!(
        driver.starts_with("12.4 (") && driver.contains("libncclprobe_test_double_gpu.so"),
        "{driver}"
    );
    assert_eq!(
        r.backend.ranks[1].device.as_deref(),
        Some(" 1 [0000:28:00] ncclprobe test double GPU 1")
    );
    for p in &r.points {
        let unchecked = p.placement == Placement::InPlace
            && matches!(p.collective, Collective::Alltoall | Collective::Sendrecv);
        assert_eq!(
            p.wrong,
            if unchecked { None } else { Some(0) },
            "{:?} {} {:?}",
            p.collective,
            p.size_bytes,
            p.placement
        );
    }
    // As nccl-tests and NCCL's rules for one thread driving several devices: every call on
    // both GPUs' communicators comes from one thread, inside ncclGroupStart/End.
    let calls = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = calls.lines().filter(|l| l.starts_with("thread=")).collect();
    assert!(lines.len() > 100, "{} calls", lines.len());
    let thread_of = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    assert!(
        lines.iter().all(|l| thread_of(l) == thread_of(lines[0])),
        "{calls}"
    );
    assert!(
        lines.iter().all(|l| l.contains(" grouped=true ")),
        "{calls}"
    );
    for rank in ["rank=0", "rank=1"] {
        assert!(lines
            .iter()
            .any(|l| l.contains(rank) && l.contains("call=ncclAllReduce")));
        assert!(lines
            .iter()
            .any(|l| l.contains(rank) && l.contains("call=ncclSend")));
    }
    // Pageable and pinned copy bandwidth, both directions, for each GPU.
    let copies = &r.calibration.copy_bandwidth;
    assert_eq!(copies.len(), 8);
    assert!(copies.iter().all(|c| c.bytes_per_s > 0.0));
    assert_eq!(
        copies
            .iter()
            .filter(|c| c.pinned && c.direction == "device-to-host")
            .count(),
        2
    );
}

/// Two ranks as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR; our
/// rendezvous on a free port), each writing `rank<r>.json` into `out`: `more` adds each rank's
/// own arguments (ending with `--json`) and variables. Their outputs, in rank order.
fn torchrun_pair(
    d: &tempfile::TempDir,
    out: &Path,
    more: impl Fn(&mut Command, usize),
) -> Vec<Output> {
    let port = common::free_port();
    let children: Vec<_> = (0..2)
        .map(|rank| {
            let mut c = probe(d.path());
            c.args(SMALL);
            more(&mut c, rank);
            c.arg(out.join(format!("rank{rank}.json")))
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("NCCLPROBE_RENDEZVOUS_PORT", port.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

#[test]
fn two_processes_torchrun_style() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let outs = torchrun_pair(&d, out_dir.path(), |c, _| {
        c.args([
            "--collective",
            "all_reduce,alltoall,broadcast",
            "--timeout",
            "30",
            "--json",
        ])
        .env("LOCAL_WORLD_SIZE", "2")
        .env("MASTER_PORT", "1")
        .env_remove("CUDA_VISIBLE_DEVICES");
    });
    for o in &outs {
        assert!(
            o.status.success(),
            "{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        // seeds/000: several ranks on a host without CUDA_VISIBLE_DEVICES is called out.
        assert!(text(&o.stderr)
            .contains("CUDA_VISIBLE_DEVICES is not set while 2 ranks share this host"));
    }
    assert!(
        text(&outs[0].stdout).contains("2 ranks, one GPU per process (torchrun-style environment: RANK, WORLD_SIZE, MASTER_ADDR; rendezvous 127.0.0.1:")
    );
    let r = read_record(&out_dir.path().join("rank0.json"));
    assert_eq!(r.backend.nranks, 2);
    assert_ne!(r.backend.ranks[0].pid, r.backend.ranks[1].pid);
    assert!(r
        .points
        .iter()
        .filter(|p| p.placement == Placement::OutOfPlace)
        .all(|p| p.wrong == Some(0)));
    assert!(
        !out_dir.path().join("rank1.json").exists(),
        "only rank 0 writes"
    );
}

#[test]
fn two_ranks_on_one_gpu_are_refused_before_nccl_init_on_every_rank() {
    // Two local ranks, one GPU: the local rank wraps onto GPU 0 twice. NCCL's init would stop
    // with "Duplicate GPU detected" (ncclInvalidUsage, as the double now does too); ncclprobe
    // says so before init, on both ranks, with the counts.
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let outs = torchrun_pair(&d, out_dir.path(), |c, _| {
        c.args(["--timeout", "30", "--json"])
            .env("LOCAL_WORLD_SIZE", "2")
            .env("NCCLPROBE_TEST_DOUBLE_GPUS", "1")
            .env_remove("CUDA_VISIBLE_DEVICES");
    });
    for o in &outs {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}\n{err}", text(&o.stdout));
        assert!(
            err.contains(
                "ranks 0 and 1 of one communicator would both use GPU 0000:18:00.0 on host"
            ),
            "{err}"
        );
        assert!(
            err.contains("2 ranks run on this host and each process sees 1 GPU(s)"),
            "{err}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refused before any wait"
    );
}

fn faulted(
    fault: &str,
    timeout: &str,
) -> (
    Output,
    Duration,
    PathBuf,
    tempfile::TempDir,
    tempfile::TempDir,
) {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    c.args(SMALL)
        .args(["--timeout", timeout, "--json"])
        .arg(&json)
        .env("NCCLPROBE_TEST_DOUBLE_FAULT", fault);
    let (out, took) = run(c);
    (out, took, json, d, out_dir)
}

#[test]
fn init_failure_exits_1_and_says_which_call() {
    let (out, _, json, _d, _o) = faulted("init:1", "10");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("ncclCommInitRankConfig of 2 GPUs in a group failed: unhandled system error"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(read_record(&json).status, RunStatus::Failed);
}

#[test]
fn async_error_aborts_and_exits_1_with_finished_points() {
    let (out, took, json, _d, _o) = faulted("async:1:512", "10");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("NCCL async error during all_reduce of 512 bytes on rank 1 (GPU 1)"),
        "{stderr}"
    );
    assert!(stderr.contains("communicator aborted"));
    assert!(took < Duration::from_secs(10));
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.points.iter().map(|p| p.size_bytes).collect::<Vec<_>>(),
        vec![8, 8, 64, 64]
    );
}

#[test]
fn a_peer_that_exited_is_a_lost_peer_exit_6() {
    // NCCL reports a peer process that exited as ncclRemoteError on the survivors.
    let (out, took, json, _d, _o) = faulted("remote:1:512", "10");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("remote process exited"), "{stderr}");
    assert!(took < Duration::from_secs(10));
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.points.len(), 4, "finished points stay on disk");
}

#[test]
fn a_hung_collective_times_out_with_code_4() {
    let (out, took, json, _d, _o) = faulted("hang:0:512", "2");
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr)
        .contains("timeout: all_reduce float 512 B (512 bytes) out-of-place made no progress"));
    assert!(took < Duration::from_secs(10), "{took:?}");
    let r = read_record(&json);
    assert_eq!(r.status, RunStatus::TimedOut);
    assert_eq!(r.points.len(), 4);
}

#[test]
fn a_rank_that_dies_leaves_the_survivor_to_time_out() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let outs = torchrun_pair(&d, out_dir.path(), |c, rank| {
        c.args(["--timeout", "3", "--json"])
            .env("CUDA_VISIBLE_DEVICES", rank.to_string())
            .env("NCCLPROBE_TEST_DOUBLE_FAULT", "die:1:512");
    });
    assert_eq!(
        outs[1].status.code(),
        Some(9),
        "rank 1 died: {}",
        text(&outs[1].stderr)
    );
    assert_eq!(
        outs[0].status.code(),
        Some(4),
        "the survivor times out: {}",
        text(&outs[0].stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(15));
    let r = read_record(&out_dir.path().join("rank0.json"));
    assert_eq!(r.status, RunStatus::TimedOut);
    assert_eq!(r.points.len(), 4);
}

#[test]
fn asking_for_more_gpus_than_exist() {
    let d = doubles();
    let mut c = probe(d.path());
    c.args(["sweep", "-g", "3"]);
    let (out, _) = run(c);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("-g/--ngpus: 3 GPUs asked for, 2 visible"));
}

#[cfg(feature = "mpi")]
#[test]
fn two_mpi_ranks_exchange_the_unique_id_over_mpi() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut mpirun = Command::new("mpirun");
    let _session = common::own_session(&mut mpirun);
    let out = mpirun
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x"])
        .arg(format!("LD_LIBRARY_PATH={}", d.path().display()))
        .arg(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(SMALL)
        .args([
            "--collective",
            "all_reduce,reduce_scatter,all_gather",
            "--json",
        ])
        .arg(&json)
        .output()
        .expect("mpirun (ci/test installs Open MPI)");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("2 ranks, one GPU per process (MPI launcher)"),
        "{stdout}"
    );
    let r = read_record(&json);
    assert_eq!((r.backend.name.as_str(), r.backend.nranks), ("nccl", 2));
    assert!(r.points.iter().all(|p| p.wrong == Some(0)));
}

#[test]
fn cuda_event_timing() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let event_calls = |cuda_events: bool| {
        let trace = out_dir.path().join(format!("trace-{cuda_events}"));
        let mut c = probe(d.path());
        c.args(SMALL)
            .args(["--json"])
            .arg(&json)
            .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace);
        if cuda_events {
            c.arg("--cuda-events");
        }
        let (out, _) = run(c);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let lines = std::fs::read_to_string(&trace).unwrap_or_default();
        let count = |call: &str| lines.lines().filter(|l| l.ends_with(call)).count();
        (
            count("call=cuEventRecord"),
            count("call=cuEventElapsedTime"),
        )
    };
    let (records, elapsed) = event_calls(true);
    let r = read_record(&json);
    assert!(r.settings.as_ref().unwrap().cuda_events);
    assert!(r
        .points
        .iter()
        .all(|p| p.time_s > 0.0 && p.wrong == Some(0)));
    // Every timed batch of every point is bracketed by two events and read back once.
    let batches: usize = r.points.iter().map(|p| p.samples_s.len()).sum();
    assert!(
        records >= 2 * batches,
        "{records} cuEventRecord for {batches} samples"
    );
    assert!(
        elapsed >= batches,
        "{elapsed} cuEventElapsedTime for {batches} samples"
    );
    // Without the flag the host clock times the batches: no event at all.
    assert_eq!(event_calls(false), (0, 0));
}

/// cudarc's loader tries `libcuda.so` before `libcuda.so.1`: a different library under that
/// name (a toolkit stub, here a copy of the double: a separate instance) is refused before any
/// cudarc call, naming both files.
#[test]
fn a_second_cuda_library_earlier_on_cudarcs_list_is_refused() {
    let d = doubles();
    let real = std::fs::canonicalize(d.path().join("libcuda.so.1")).unwrap();
    std::fs::copy(&real, d.path().join("libcuda.so")).unwrap();
    let mut c = probe(d.path());
    c.args(["sweep", "--backend", "nccl"]);
    let (out, _) = run(c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("two CUDA driver libraries: libcuda.so.1 is"),
        "{err}"
    );
    assert!(err.contains("/libcuda.so first"), "{err}");
}

/// A library that answers to libcuda.so.1 but is not the driver: exit 5, no panic.
#[test]
fn a_libcuda_without_cuinit_is_not_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("libm.so.6 (Debian's libc6) to stand in for a wrong libcuda.so.1");
    std::os::unix::fs::symlink(libm, dir.path().join("libcuda.so.1")).unwrap();
    let d = doubles();
    std::os::unix::fs::symlink(
        d.path().join("libnccl.so.2"),
        dir.path().join("libnccl.so.2"),
    )
    .unwrap();
    let mut c = probe(dir.path());
    c.args(["sweep", "--backend", "nccl"]);
    let (out, _) = run(c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("libcuda.so.1 has no cuInit: not the CUDA driver"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// -R 1 and -R 2 as nccl-tests: buffers from ncclMemAlloc, registered with ncclCommRegister or
/// as symmetric windows, every collective on registered buffers; an NCCL without the calls
/// (older than 2.19 / 2.27) is a clear exit 5.
#[test]
fn registered_buffers_when_nccl_has_registration() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    for (flag, version, mode) in [
        ("1", "21903", ncclprobe::model::Registration::Local),
        ("2", "22703", ncclprobe::model::Registration::Symmetric),
    ] {
        let json = out_dir.path().join(format!("run-{flag}.json"));
        let trace = out_dir.path().join(format!("calls-{flag}.txt"));
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
            .args(SMALL)
            .args([
                "--collective",
                "all_reduce,all_gather,alltoall",
                "-R",
                flag,
                "--json",
            ])
            .arg(&json);
        let (out, _) = run(c);
        assert!(out.status.success(), "-R {flag}: {}", text(&out.stderr));
        let r = read_record(&json);
        assert_eq!(r.settings.as_ref().unwrap().registration, mode);
        // Every point is checked and clean, except in-place alltoall, which NCCL leaves
        // unchecked as nccl-tests does.
        for p in &r.points {
            let unchecked = p.collective == ncclprobe::coll::Collective::Alltoall
                && p.placement == ncclprobe::coll::Placement::InPlace;
            let expected = if unchecked { None } else { Some(0) };
            assert_eq!(
                p.wrong, expected,
                "-R {flag}: {} {}",
                p.collective, p.size_bytes
            );
        }
        let calls = std::fs::read_to_string(&trace).unwrap();
        let collectives = || calls.lines().filter(|l| l.starts_with("thread="));
        assert!(collectives().count() > 20);
        assert!(
            collectives().all(|l| l.contains(" registered=true ")),
            "-R {flag}: {calls}"
        );
    }

    for (flag, version, message) in [
        (
            "1",
            "21805",
            "-R 1 needs ncclMemAlloc and ncclCommRegister (NCCL 2.19 or newer); NCCL 2.18.5 at",
        ),
        (
            "2",
            "22600",
            "-R 2 needs ncclCommWindowRegister (NCCL 2.27 or newer); NCCL 2.26.0 at",
        ),
    ] {
        let mut old = probe(d.path());
        old.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .args(SMALL)
            .args(["-R", flag]);
        let (out, _) = run(old);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{err}");
        assert!(err.contains(message), "{err}");
    }
}

/// NCCL 2.27 hands back a NULL window, with success, when cuMem or local registration is off:
/// -R 2 must say so instead of measuring unregistered buffers under a "symmetric" label.
#[test]
fn a_null_symmetric_window_is_refused_not_recorded_as_symmetric() {
    let d = doubles();
    for var in ["NCCL_CUMEM_ENABLE", "NCCL_LOCAL_REGISTER"] {
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22703")
            .env(var, "0")
            .args(SMALL)
            .args(["-R", "2"]);
        let (out, _) = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{var}=0: {err}");
        assert!(err.contains("returned no window"), "{err}");
    }
}

/// From NCCL 2.28 a communicator without symmetric support (NCCL_WIN_ENABLE=0, cuMem off, or
/// no P2P between every GPU) hands back a non-null window that is only local. NCCL 2.29 says
/// so (ncclCommQueryProperties): -R 2 refuses with exit 5; with symmetric support it confirms
/// it in the record. NCCL 2.28 cannot say: the run goes on and the record says "not verified".
#[test]
fn symmetric_windows_are_verified_where_nccl_can_say_and_marked_unverified_where_it_cannot() {
    let d = doubles();
    for (version, win_enable, code, says) in [
        (
            "22903",
            Some("0"),
            Some(5),
            "reports no symmetric support on GPU 0",
        ),
        (
            "22903",
            None,
            Some(0),
            "symmetric support confirmed by NCCL 2.29.3",
        ),
        (
            "22803",
            Some("0"),
            Some(0),
            "symmetric windows requested, not verified",
        ),
        (
            "22803",
            None,
            Some(0),
            "symmetric windows requested, not verified",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("run.json");
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .args(SMALL)
            .args(["-R", "2", "--json"])
            .arg(&json);
        if let Some(v) = win_enable {
            c.env("NCCL_WIN_ENABLE", v);
        }
        let (out, _) = run(c);
        let what = format!("NCCL {version}, NCCL_WIN_ENABLE={win_enable:?}");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), code, "{what}: {stderr}");
        assert!(
            stdout.contains(says) || stderr.contains(says),
            "{what}: {stdout}\n{stderr}"
        );
        if code == Some(0) {
            let r = read_record(&json);
            assert!(
                r.notes.iter().any(|n| n.contains(says)),
                "{what}: {:?}",
                r.notes
            );
        }
    }
}

/// NCCL 2.24+ hands back a NULL registration handle, with success, when local registration is
/// off or P2P copies through cudaMemcpy: -R 1 must say so instead of recording "registered".
#[test]
fn a_null_registration_handle_is_refused_not_recorded_as_registered() {
    let d = doubles();
    for (var, value) in [
        ("NCCL_LOCAL_REGISTER", "0"),
        ("NCCL_P2P_USE_CUDA_MEMCPY", "1"),
    ] {
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22403")
            .env(var, value)
            .args(SMALL)
            .args(["-R", "1"]);
        let (out, _) = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{var}={value}: {err}");
        assert!(err.contains("-R 1: ncclCommRegister on GPU "), "{err}");
        assert!(
            err.contains("returned no handle: NCCL registered nothing"),
            "{err}"
        );
    }
}

/// Each NCCL rank keeps two host copies of a message for the check: the largest size is capped
/// by the host's available memory too, not only by the GPUs' (here a host with 64 MiB free).
#[test]
fn nccl_sizes_are_capped_by_host_memory_as_well_as_gpu_memory() {
    common::needs_fault_injection();
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let meminfo = dir.path().join("meminfo");
    std::fs::write(&meminfo, "MemTotal: 131072 kB\nMemAvailable: 65536 kB\n").unwrap();
    let json = dir.path().join("run.json");
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_MEMINFO", &meminfo)
        .args(["sweep", "-g", "2", "-b", "8", "-e", "64M", "-f", "8"])
        .args(["--samples", "4", "-n", "1", "--json"])
        .arg(&json);
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_record(&json);
    // Half of 64 MiB for 2 ranks x 2 host copies: 8 MiB per message at most.
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("Reducing maxBytes to 8388608")),
        "{:?}",
        r.notes
    );
    assert!(r.points.iter().all(|p| p.size_bytes <= 8 << 20));
    assert_eq!(r.points.iter().map(|p| p.size_bytes).max(), Some(2 << 20));
}

/// NCCL 2.22's cost model (ncclGroupSimulateEnd) lands in every point when the library has it;
/// the double's model is 5 µs + bytes at 10 GB/s per call. Older NCCL: no estimate.
#[test]
fn nccl_cost_model_estimates_are_recorded_when_nccl_has_them() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    for (version, expected) in [("22203", true), ("21805", false)] {
        let json = out_dir.path().join(format!("run-{version}.json"));
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .args(SMALL)
            .args(["--collective", "all_reduce,alltoall", "--json"])
            .arg(&json);
        let (out, _) = run(c);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(
            stdout.contains("# all_reduce float 4 KiB: measured"),
            expected,
            "{stdout}"
        );
        if expected {
            assert!(
                stdout.contains("NCCL's cost model 5.4 us (ncclGroupSimulateEnd)"),
                "{stdout}"
            );
        }
        // diagnose compares the record with NCCL's estimates: the double's model is far
        // faster than the double itself (threads and files), so the finding must appear.
        let mut d_cmd = Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
        d_cmd
            .args(["diagnose", "--format", "json", "--from"])
            .arg(&json);
        let (diag, _) = run(d_cmd);
        let findings = text(&diag.stdout);
        assert_eq!(
            findings.contains("NCCL's own cost model predicts"),
            expected,
            "{findings}"
        );
        let r = read_record(&json);
        // A simulated group of sends and receives would stay queued and run before the next
        // group (the double keeps them, as NCCL 2.23+ does): every point must still be right.
        for p in &r.points {
            let unchecked =
                p.collective == Collective::Alltoall && p.placement == Placement::InPlace;
            assert_eq!(
                p.wrong,
                if unchecked { None } else { Some(0) },
                "{version}: {p:?}"
            );
        }
        for p in &r.points {
            match (expected, p.nccl_model_time_s) {
                (true, Some(t)) if p.collective == Collective::AllReduce => {
                    let want = (5.0 + p.size_bytes as f64 / 10e3) * 1e-6;
                    assert!((t - want).abs() < 1e-9, "{} B: {t} vs {want}", p.size_bytes);
                }
                // NCCL estimates collectives only; alltoall runs as sends and receives.
                (true, None) if p.collective == Collective::Alltoall => {}
                (false, None) => {}
                other => panic!(
                    "NCCL {version}, {:?} {} B: {other:?}",
                    p.collective, p.size_bytes
                ),
            }
        }
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn the_mpi_launch_test_needs_an_mpi_build() {
    panic!("two_mpi_ranks_exchange_the_unique_id_over_mpi runs only in an MPI build: `cargo test --features mpi` (ci/test does)");
}

/// A pageable host-to-device copy returns once the data is staged, before its DMA completes
/// (CUDA's documented behaviour; the double delays the DMA at 0.5 GB/s): the measured
/// bandwidth must include the DMA, not only the staging memcpy.
#[test]
fn pageable_copy_bandwidth_waits_for_the_dma() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    c.args(SMALL)
        .args(["--json"])
        .arg(&json)
        .env("NCCLPROBE_TEST_DOUBLE_PAGEABLE_GBPS", "0.5");
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_record(&json);
    let pageable_h2d: Vec<f64> = r
        .calibration
        .copy_bandwidth
        .iter()
        .filter(|c| !c.pinned && c.direction == "host-to-device")
        .map(|c| c.bytes_per_s)
        .collect();
    assert_eq!(pageable_h2d.len(), 2);
    for bw in pageable_h2d {
        assert!(
            bw < 0.55e9,
            "pageable H2D {bw:.3e} B/s is faster than its DMA (0.5 GB/s)"
        );
    }
}

/// NCCL's float average multiplies every input by a rounded 1/n before summing, so at n = 7
/// 21 x fl32(1/7) is 3.0000002, not 3: the double averages as NCCL does, and the check must
/// expect what NCCL computes (within nccl-tests' 2 ulps), not the exact quotient.
#[test]
fn float_avg_on_seven_gpus_is_checked_as_nccl_computes_it() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_GPUS", "7")
        .args(["sweep", "-g", "7", "-b", "1K", "-e", "16K", "-f", "4"])
        .args(["--samples", "2", "-n", "1", "-w", "0", "--warmup-time", "0"])
        .args(["-o", "avg", "-d", "float,double,half,bfloat16"])
        .args(["--collective", "all_reduce,reduce_scatter,reduce", "--json"])
        .arg(&json);
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_record(&json);
    assert!(!r.points.is_empty());
    for p in &r.points {
        assert_eq!(
            p.wrong,
            Some(0),
            "{} {} {} B",
            p.collective,
            p.dtype,
            p.size_bytes
        );
    }
}

/// A driver newer than cudarc's bindings returns codes they lack: CUDA_ERROR_CONTAINED (226)
/// from cuStreamQuery after an NVLink fault on Hopper. It must be read as a number and named,
/// never put into cudarc's enum (undefined behaviour), and end the run with exit 1.
#[test]
fn a_cuda_error_newer_than_the_bindings_is_named_by_number() {
    let (out, took, json, _d, _o) = faulted("contained:0:512", "10");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cuStreamQuery failed with CUDA_ERROR_CONTAINED (226)"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(took < Duration::from_secs(10));
    assert_eq!(read_record(&json).status, RunStatus::Failed);
}

/// A signal (or a timeout) aborts the communicators while their owners poll them. Abort
/// frees a communicator, so the owner must never touch it afterwards: the double ends the
/// process at the first use after free. The run must end as interrupted (143), not crash.
#[test]
fn sigterm_during_a_hung_collective_never_uses_an_aborted_communicator() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    c.args(SMALL)
        .args(["--timeout", "60", "--json"])
        .arg(&json)
        .env("NCCLPROBE_TEST_DOUBLE_FAULT", "hang:0:512")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let out = signal_once_stuck(c, &json, nix::sys::signal::Signal::SIGTERM);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("use after free"), "{stderr}");
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert_eq!(read_record(&json).status, RunStatus::Interrupted);
}

/// The pair matrix on the GPU TEST DOUBLE: 4 GPUs from one process (`-g 4`, every GPU's
/// ncclSend/ncclRecv in one group per phase, as NCCL requires of one thread), each pair
/// exchanging while the other pair of its round does; the double pairs sends with receives
/// per peer, so idle GPUs take no part.
#[test]
fn a_pair_matrix_across_four_gpus() {
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let trace = dir.path().join("trace.txt");
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
        .args([
            "matrix",
            "--backend",
            "nccl",
            "-g",
            "4",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "8192",
        ])
        .args(["--max-samples", "6", "--timeout", "60", "--json"])
        .arg(&json);
    let (out, _) = run(c);
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let doc: ncclprobe::matrix::MatrixDocument =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc.backend.name, "nccl");
    let labels: Vec<&str> = doc.endpoints.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(labels, ["GPU0", "GPU1", "GPU2", "GPU3"]);
    let one_way = doc
        .measurements
        .iter()
        .filter(|m| m.direction == ncclprobe::matrix::Direction::OneWay)
        .count();
    assert_eq!(one_way, 24, "12 ordered GPU pairs at 2 sizes");
    assert!(
        doc.measurements.iter().all(|m| m.wrong_bytes == 0),
        "every received byte is the sender's"
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.lines().any(|l| l.contains("call=ncclSend")));
    assert!(
        trace
            .lines()
            .filter(|l| l.contains("call=ncclSend") || l.contains("call=ncclRecv"))
            .all(|l| l.contains("grouped=true")),
        "one thread drives 4 GPUs: every send and receive is inside a group"
    );
    assert!(text(&out.stdout).contains("# one-way bandwidth, row sends to column at 64 KiB"));
}

/// NCCL waiting inside a call for a peer that never comes (the double's `stall` fault: the
/// call itself never finishes): the timeout reaches the thread that owns the communicators,
/// which aborts them itself. No other thread may call ncclCommAbort while the owner is inside
/// ncclGroupEnd: NCCL forbids concurrent use and the abort frees the communicator under the
/// call, so the double ends the process on it ("TEST DOUBLE: ... concurrent use"). With
/// NCCL_COMM_BLOCKING=1 the owner stays inside the call; the run still ends with code 4 and
/// nobody touches the communicator.
#[test]
fn a_stalled_nccl_call_times_out_with_code_4_and_is_aborted_only_by_its_owner() {
    for blocking in [None, Some("1"), Some("0")] {
        let d = doubles();
        let out_dir = tempfile::tempdir().unwrap();
        let json = out_dir.path().join("run.json");
        let mut c = probe(d.path());
        c.args(SMALL)
            .args(["--timeout", "2", "--json"])
            .arg(&json)
            .env("NCCLPROBE_TEST_DOUBLE_FAULT", "stall:0:512");
        if let Some(b) = blocking {
            c.env("NCCL_COMM_BLOCKING", b);
        }
        let (out, took) = run(c);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{blocking:?}: {stderr}");
        assert!(!stderr.contains("TEST DOUBLE"), "{blocking:?}: {stderr}");
        assert!(
            stderr.contains(
                "timeout: all_reduce float 512 B (512 bytes) out-of-place made no progress"
            ),
            "{blocking:?}: {stderr}"
        );
        assert!(took < Duration::from_secs(15), "{blocking:?}: {took:?}");
        let r = read_record(&json);
        assert_eq!(r.status, RunStatus::TimedOut, "{blocking:?}");
        assert_eq!(r.points.len(), 4, "{blocking:?}");
    }
}

#[test]
fn sigint_during_a_stalled_nccl_call_exits_130_with_the_record_closed() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    c.args(SMALL)
        .args(["--timeout", "60", "--json"])
        .arg(&json)
        .env("NCCLPROBE_TEST_DOUBLE_FAULT", "stall:1:512")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let out = signal_once_stuck(c, &json, nix::sys::signal::Signal::SIGINT);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("TEST DOUBLE"), "{stderr}");
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(read_record(&json).status, RunStatus::Interrupted);
}

/// Communicators are made as nccl-tests 2.19.6 makes them (ncclCommInitRankConfig; on NCCL
/// 2.28+ with nvlinkCentricSched = 1, so rows compare on Blackwell), blocking as there, and
/// NCCL_COMM_BLOCKING in the environment (which overrides the config in NCCL) changes nothing
/// in the results: ncclInProgress is polled, never taken for a failure. The streams are
/// created CU_STREAM_NON_BLOCKING, as nccl-tests creates them.
#[test]
fn communicators_and_streams_are_made_as_nccl_tests_makes_them_and_any_blocking_mode_works() {
    for (version, blocking, sched) in [
        ("21805", None, "unread"),
        ("22803", None, "1"),
        ("22803", Some("0"), "1"),
        ("22803", Some("1"), "1"),
    ] {
        let d = doubles();
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("calls.txt");
        let mut c = probe(d.path());
        c.args(SMALL)
            .args([
                "--collective",
                "all_reduce,all_gather,alltoall",
                "--check",
                "2",
            ])
            .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
            .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version);
        if let Some(b) = blocking {
            c.env("NCCL_COMM_BLOCKING", b);
        }
        let (out, _) = run(c);
        let what = format!("NCCL {version}, NCCL_COMM_BLOCKING={blocking:?}");
        assert!(out.status.success(), "{what}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("# Out of bounds values : 0 OK"),
            "{what}: {}",
            text(&out.stdout)
        );
        let calls = std::fs::read_to_string(&trace).unwrap();
        let inits: Vec<&str> = calls
            .lines()
            .filter(|l| l.contains("call=ncclCommInitRankConfig"))
            .collect();
        let mode = if blocking == Some("0") { "0" } else { "1" };
        assert_eq!(inits.len(), 2, "{what}: {calls}");
        for l in inits {
            assert!(
                l.ends_with(&format!(
                    "blocking={mode} nvlinkCentricSched={sched} CTAPolicy=unset"
                )),
                "{what}: {l}"
            );
        }
        // The calibration's copies use blocking streams of their own; the ranks' are 1.
        let rank_streams = calls
            .lines()
            .skip_while(|l| !l.contains("ncclCommInitRankConfig"))
            .filter(|l| l.starts_with("call=cuStreamCreate"))
            .collect::<Vec<_>>();
        assert_eq!(
            rank_streams,
            vec!["call=cuStreamCreate flags=1"; 2],
            "{what}: {calls}"
        );
    }
}

/// On a non-blocking communicator NCCL does not simulate a group: ncclGroupSimulateEnd takes
/// ncclGroupEnd's non-blocking branch and launches the collective for real, leaving the
/// communicator ncclInProgress (src/group.cc, v2.28.9 642-644 and 704-738). Under
/// NCCL_COMM_BLOCKING=0 no estimate is asked for, and the record says why; blocking
/// communicators still get NCCL's estimate per point.
#[test]
fn no_simulated_group_is_launched_for_real_on_a_non_blocking_communicator() {
    for blocking in [Some("0"), None] {
        let d = doubles();
        let dir = tempfile::tempdir().unwrap();
        let (trace, json) = (dir.path().join("calls.txt"), dir.path().join("run.json"));
        let mut c = probe(d.path());
        c.args(SMALL)
            .args(["--collective", "all_reduce", "--json"])
            .arg(&json)
            .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace)
            .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22803");
        if let Some(b) = blocking {
            c.env("NCCL_COMM_BLOCKING", b);
        }
        let (out, _) = run(c);
        assert!(out.status.success(), "{blocking:?}: {}", text(&out.stderr));
        let calls = std::fs::read_to_string(&trace).unwrap();
        assert!(
            !calls.contains("call=ncclGroupSimulateEnd simulated=0"),
            "{blocking:?}: a simulated group ran for real"
        );
        let r = read_record(&json);
        let estimated = r.points.iter().filter(|p| p.nccl_model_time_s.is_some());
        let said = r.notes.iter().any(|n| n.contains("no NCCL estimate"));
        if blocking.is_some() {
            assert_eq!(estimated.count(), 0, "{:?}", r.points);
            assert!(said, "{:?}", r.notes);
        } else {
            assert_eq!(estimated.count(), r.points.len());
            assert!(!said, "{:?}", r.notes);
        }
    }
}

/// Start the sweep `c`, wait until its record at `json` holds the 4 points below 512 B (where
/// the tests' faults strike), give it a moment inside the stuck call, send `signal`.
fn signal_once_stuck(mut c: Command, json: &Path, signal: nix::sys::signal::Signal) -> Output {
    let child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(json)
        .ok()
        .and_then(|b| serde_json::from_slice::<ncclprobe::model::RunRecord>(&b).ok())
        .is_none_or(|r| r.points.len() < 4)
    {
        assert!(
            Instant::now() < deadline,
            "the sweep never reached the fault"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    child.wait_with_output().unwrap()
}

/// CUDA numbers GPUs its own way (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES); NVML and the
/// topology by PCI bus. The record ties each rank to its GPU by PCI address, as nccl-tests
/// 2.19 prints it, and the expectation follows the GPUs the ranks really used.
#[test]
fn ranks_are_tied_to_their_gpus_by_pci_address_whatever_cuda_numbered_them() {
    let d = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2", "libnvidia-ml.so.1"]);
    let machine = common::Machine::bare();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let mut c = probe(d.path());
    machine.apply(&mut c);
    // Four GPUs bridged in pairs (0-1, 2-3); the driver enumerates them 3,2,1,0 and the
    // process sees its ordinals 1 and 3: bus GPUs 2 and 0, which meet over the host bridge.
    c.env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env("NCCLPROBE_TEST_DOUBLE_LINKS", "0-1:NV4,2-3:NV4")
        .env("NCCLPROBE_TEST_DOUBLE_FASTEST_FIRST", "3,2,1,0")
        .env("CUDA_VISIBLE_DEVICES", "1,3,7,0")
        .args(SMALL)
        .arg("--json")
        .arg(&json);
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_record(&json);
    // Ordinal 7 does not exist: CUDA hides it and everything after it, so two GPUs, not three.
    assert_eq!(r.backend.nranks, 2);
    let devices: Vec<_> = r.backend.ranks.iter().map(|k| k.device.clone()).collect();
    assert_eq!(
        devices,
        [
            Some(" 0 [0000:38:00] ncclprobe test double GPU 2".to_string()),
            Some(" 1 [0000:18:00] ncclprobe test double GPU 0".to_string()),
        ]
    );
    let topo: ncclprobe::documents::topology::Topology =
        serde_json::from_value(r.topology.clone().expect("the record's topology")).unwrap();
    assert_eq!(
        topo.info["GPU2"].pci_bus_id.as_deref(),
        Some("0000:38:00.0")
    );
    let s = ncclprobe::expect::Situation::of_record(&r, None, None);
    let why = match ncclprobe::expect::choose(ncclprobe::expect::shipped(), &s) {
        Ok(c) => c.why,
        Err(e) => e.to_string(),
    };
    assert!(why.contains("GPU2, GPU0 (by PCI address)"), "{why}");
    assert!(why.contains("GPU2-GPU0 is PHB"), "{why}");
    assert!(!why.contains("NV4"), "{why}");
}

/// nccl-tests moves each call of a batch through its -e-sized buffers (src/common.cu,
/// startColl: `shift = totalnbytes * (iter % steps)`), so a message smaller than the GPU's
/// cache is not read from the cache on every call. A 1 KiB all_reduce swept to 8 KiB uses
/// eight places 1 KiB apart; the 8 KiB point uses the first.
#[test]
fn calls_of_a_batch_rotate_through_the_buffers_as_nccl_tests_does() {
    let d = doubles();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("run.json");
    let trace = out_dir.path().join("calls.txt");
    let mut c = probe(d.path());
    c.args([
        "sweep", "-b", "1K", "-e", "8K", "-f", "8", "-n", "20", "-w", "1",
    ])
    .args(["--samples", "2", "-c", "1", "--json"])
    .arg(&json)
    .env("NCCLPROBE_TEST_DOUBLE_GPUS", "1")
    .env("NCCLPROBE_TEST_DOUBLE_TRACE", &trace);
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = read_record(&json);
    assert_eq!(r.points.len(), 4, "{:?}", r.points);
    assert!(r.points.iter().all(|p| p.wrong == Some(0)));
    let lines = std::fs::read_to_string(&trace).unwrap();
    let calls: Vec<Vec<u64>> = lines
        .lines()
        .filter(|l| l.ends_with("call=ncclAllReduce"))
        .filter_map(|l| l.split(" bufs=").nth(1)?.split(' ').next())
        .map(|b| {
            b.split(',')
                .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
                .collect()
        })
        .collect();
    // Out of place the send buffer moves, in place the receive buffer (sent from itself).
    for in_place in [false, true] {
        let mut used: Vec<u64> = calls
            .iter()
            .filter(|b| (b[0] == b[1]) == in_place)
            .map(|b| b[0])
            .collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 8, "in place {in_place}: {used:x?}");
        assert!(
            used.windows(2).all(|w| w[1] - w[0] == 1024),
            "in place {in_place}, not 1 KiB apart: {used:x?}"
        );
    }
}

/// What NCCL says about itself reaches the record: the double plays NCCL 2.28 (its tuner
/// lines name the collective and the channels) and 2.21 (numbers only, rank 0), writes its
/// topology and graph dumps where the backend points them, and the table gains the tuner's
/// column with --show-algo. The variables set to get them stay out of the record's env and
/// their directory is gone after the run.
#[test]
fn the_record_keeps_what_nccl_said_and_show_algo_fills_the_column() {
    let d = doubles();
    for (version, channels) in [("22805", true), ("22105", false)] {
        let out_dir = tempfile::tempdir().unwrap();
        let json = out_dir.path().join("run.json");
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .env("TMPDIR", out_dir.path())
            .args([
                "sweep",
                "-b",
                "8",
                "-e",
                "16M",
                "-f",
                "8",
                "--max-samples",
                "4",
            ])
            .args([
                "--point-budget",
                "0.02",
                "--warmup-time=0.001",
                "--show-algo",
                "--json",
            ])
            .arg(&json);
        let (out, _) = run(c);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        assert!(stdout.contains("algo/proto/channels"), "{stdout}");
        let row = |size: &str| {
            stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(size))
                .unwrap_or_else(|| panic!("no {size} row in\n{stdout}"))
                .to_string()
        };
        let (small, mid, large) = if channels {
            ("Tree/LL/2ch", "Ring/LL128/4ch", "Ring/Simple/8ch")
        } else {
            ("Tree/LL", "Ring/LL128", "Ring/Simple")
        };
        assert!(row("512").ends_with(small), "{}", row("512"));
        assert!(row("262144").ends_with(mid), "{}", row("262144"));
        assert!(row("16777216").ends_with(large), "{}", row("16777216"));
        assert!(
            stdout.contains("# NCCL chose (all_reduce): Tree/LL up to 32 KiB, Ring/LL128 to 2 MiB, Ring/Simple above"),
            "{stdout}"
        );
        let r = read_record(&json);
        let n = r.nccl.as_ref().expect("the record's nccl");
        assert_eq!(n.networks, ["Socket"]);
        assert!(n.tuner_lines > 0);
        let dump = n.dump.as_ref().expect("the dumps were read");
        assert_eq!(dump.system.as_ref().unwrap().gpus.len(), 2);
        assert_eq!(dump.graphs.as_ref().unwrap().used(4).count(), 1);
        let p = r.points.iter().find(|p| p.size_bytes == 16 << 20).unwrap();
        let a = p.nccl_algo.as_ref().unwrap();
        assert_eq!((a.algo.as_str(), a.proto.as_str()), ("Ring", "Simple"));
        assert!(!r.env.contains_key("NCCL_DEBUG") && !r.env.contains_key("NCCL_TOPO_DUMP_FILE"));
        let left: Vec<_> = std::fs::read_dir(out_dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ncclprobe-nccl-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    // NCCL 2.18 (the double's default) states no choice at INFO: the column says so.
    let mut c = probe(d.path());
    c.args([
        "sweep",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "--max-samples",
        "4",
        "--show-algo",
    ]);
    let (out, _) = run(c);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("# --show-algo: NCCL stated no tuner choice"),
        "{stdout}"
    );
}

/// A variable the user set is theirs: read, not replaced, and not removed.
#[test]
fn a_dump_file_the_user_named_is_read_and_kept() {
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("mine.xml");
    let json = dir.path().join("run.json");
    let mut c = probe(d.path());
    c.env("NCCL_TOPO_DUMP_FILE", &topo)
        .env("NCCLPROBE_TEST_DOUBLE_NET", "ib")
        .args(SMALL)
        .arg("--json")
        .arg(&json);
    let (out, _) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(topo.exists());
    let r = read_record(&json);
    assert_eq!(
        r.env.get("NCCL_TOPO_DUMP_FILE").map(PathBuf::from),
        Some(topo.clone())
    );
    let n = r.nccl.unwrap();
    assert_eq!(n.networks, ["IB"]);
    let sys = n.dump.unwrap().system.unwrap();
    assert!(sys.nets.iter().all(|n| n.rdma() && n.gdr == Some(true)));
    assert!(n.files.contains(&"mine.xml".to_string()));
}

/// NCCL 2.24+ dumps the topology from a pass over physical ports, while its graphs name the
/// virtual NIC it fused from them (src/graph/topo.cc, v2.28.9 1373-1374 and 1347-1350): the
/// rails join the two through the log's `Made virtual device` line and name the fused NIC,
/// with the channels that use it, on either side of 2.24.
#[test]
fn rails_name_the_nic_nccl_fused_from_two_ports() {
    for version in ["22803", "22304"] {
        let d = doubles();
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("run.json");
        let mut c = probe(d.path());
        c.env("NCCLPROBE_TEST_DOUBLE_NET", "ib-fused")
            .env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", version)
            .args(SMALL)
            .args(["--collective", "all_reduce", "--json"])
            .arg(&json);
        let (out, _) = run(c);
        assert!(out.status.success(), "{version}: {}", text(&out.stderr));
        let rails = read_record(&json).nccl.unwrap().dump.unwrap().rails;
        let used: Vec<_> = rails.iter().filter(|r| r.channels > 0).collect();
        assert_eq!(used.len(), 2, "{version}: {rails:?}");
        for r in used {
            assert_eq!(r.net, Some(2), "{version}: {r:?}");
            assert!(
                r.net_name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("mlx5_0+mlx5_1 (NET 2")),
                "{version}: {r:?}"
            );
            assert!(r.path.is_some(), "{version}: {r:?}");
        }
    }
}

/// `sweep --qualify` with `--forbid socket`: the double's NCCL says `Using network Socket`
/// (no InfiniBand), so the gate fails (exit 3) naming the line; with two IB ports and
/// GPUDirect RDMA it passes, `--require transport=IB` too.
#[test]
fn sweep_gates_a_socket_fallback_by_what_nccl_said() {
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("gate.xml");
    let mut c = probe(d.path());
    c.args(SMALL)
        .args(["--forbid", "socket", "--junit"])
        .arg(&junit);
    let (out, _) = run(c);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("forbid socket") && xml.contains("Using network Socket"),
        "{xml}"
    );
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_NET", "ib").args(SMALL).args([
        "--forbid",
        "socket",
        "--require",
        "transport=IB",
    ]);
    let (out, _) = run(c);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// `bundle -o DIR --redact` on the double: the short run's per-process debug file and NCCL's
/// dumps are there, the tuner's choices in its record, the summary follows NCCL's issue
/// template, addresses and user paths are replaced in every file, and the archive holds the
/// same files. Without nvidia-smi or IB the bundle says what is missing instead of failing.
#[test]
fn bundle_collects_what_nccls_issue_template_asks_for() {
    let d = doubles();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("bug");
    let mut c = probe(d.path());
    c.env("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION", "22805")
        .env("NCCL_TOPO_FILE", "/home/alice-test/topo.xml")
        .env("PATH", "/usr/bin:/bin")
        .args(["bundle", "--redact", "--timeout", "30", "-o"])
        .arg(&out_dir);
    let (out, _) = run(c);
    let summary = text(&out.stdout);
    assert!(out.status.success(), "{summary}\n{}", text(&out.stderr));
    for field in [
        "## How is this issue impacting you?",
        "## Share Your Debug Logs",
        "## Steps to Reproduce the Issue",
        "## NCCL Version",
        "## Your platform details",
        "## Error Message & Behavior",
    ] {
        assert!(summary.contains(field), "{field} in\n{summary}");
    }
    assert!(summary.contains("2.28.5"), "{summary}");
    let nccl: Vec<String> = std::fs::read_dir(out_dir.join("nccl"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(nccl.iter().any(|n| n.starts_with("ncclDebug.")), "{nccl:?}");
    assert!(
        nccl.contains(&"ncclSystem.xml".to_string()) && nccl.contains(&"ncclGraph.xml".to_string())
    );
    let debug = nccl.iter().find(|n| n.starts_with("ncclDebug.")).unwrap();
    let log = std::fs::read_to_string(out_dir.join("nccl").join(debug)).unwrap();
    assert!(
        log.contains("Using network Socket") && !log.contains("10.0.0.2"),
        "{log}"
    );
    assert!(log.contains("192.0.2."), "{log}");
    let env = std::fs::read_to_string(out_dir.join("environment.txt")).unwrap();
    assert!(
        env.contains("NCCL_TOPO_FILE=/home/user-1/topo.xml"),
        "{env}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    assert!(record["points"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["nccl_algo"]["algo"] == "Ring"));
    assert!(
        summary.contains("`nvidia-smi.txt`: nvidia-smi — missing"),
        "{summary}"
    );
    // The kernel's Xid lines, or why /dev/kmsg could not be read here: listed either way.
    assert!(summary.contains("`kernel-xid.txt`"), "{summary}");
    // The archive beside the directory holds the same files.
    let archive = dir.path().join("bug.tar.gz");
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&archive).unwrap());
    let names: Vec<String> = tar::Archive::new(gz)
        .entries()
        .unwrap()
        .flatten()
        .map(|e| e.path().unwrap().display().to_string())
        .collect();
    assert!(names.contains(&"bug/summary.md".to_string()), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("bug/nccl/ncclDebug.")),
        "{names:?}"
    );
    // A second bundle into the same directory is refused: nothing is overwritten.
    let mut c = probe(d.path());
    c.args(["bundle", "--no-run", "-o"]).arg(&out_dir);
    let (out, _) = run(c);
    assert_eq!(out.status.code(), Some(2));
}
