//! Multi-process NCCL runs without MPI (`--bootstrap tcp`), each launcher emulated on this
//! machine by giving every process the variables that launcher sets, plus a real `mpirun`
//! starting ranks that do not use MPI. NCCL is the TEST DOUBLE (doubles/gpu), so the ranks
//! move real data between processes; the rendezvous is real TCP on this host.

use crate::common;

use common::read_record;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// libcuda and libnccl are the test double, with `gpus` GPUs.
fn probe(dir: &Path, gpus: usize) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ncclprobe"));
    common::without_host_settings(&mut c);
    c.env("LD_LIBRARY_PATH", dir)
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", gpus.to_string())
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME");
    c
}

use common::free_port;

const SWEEP: [&str; 15] = [
    "sweep",
    "--backend",
    "nccl",
    "--bootstrap",
    "tcp",
    "-b",
    "8",
    "-e",
    "64K",
    "-f",
    "16",
    "--max-samples",
    "6",
    "--point-budget",
    "0.05",
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `n` processes, process `i` given `vars(i)`; rank 0's record in `out/run.json`.
fn launch_all(
    n: usize,
    out: &Path,
    vars: impl Fn(usize) -> Vec<(String, String)>,
    extra: &[&str],
) -> Vec<Output> {
    let dir = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut c = probe(dir.path(), n);
            c.args(SWEEP)
                .args(["--timeout", "60", "--json"])
                .arg(out.join("run.json"))
                .args(extra)
                .envs(vars(i))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn owned(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Every process succeeded; rank 0's banner names the launcher; its record has `n` ranks,
/// each its own process, and every out-of-place point checked right.
fn all_ran(outs: &[Output], out: &Path, n: usize, launcher: &str) {
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "process {i}:\n{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let banner = text(&outs[0].stdout);
    assert!(
        banner.contains(&format!("{n} ranks, one GPU per process ({launcher}")),
        "{banner}"
    );
    let r = read_record(&out.join("run.json"));
    assert_eq!(r.backend.nranks, n);
    let mut pids: Vec<u32> = r.backend.ranks.iter().map(|k| k.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), n, "one process per rank");
    assert!(!r.points.is_empty());
    assert!(r.points.iter().all(|p| p.wrong.unwrap_or(0) == 0));
}

/// srun -n N over one node, as slurmstepd sets each task's variables; `resv` gives the step a
/// reserved port (`srun --resv-ports`).
fn srun_vars(n: usize, i: usize, port: u16, host: &str) -> Vec<(String, String)> {
    owned(&[
        ("SLURM_JOB_ID", "4242".into()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_PROCID", i.to_string()),
        ("SLURM_LOCALID", i.to_string()),
        ("SLURM_NODEID", "0".into()),
        ("SLURM_NTASKS", n.to_string()),
        ("SLURM_STEP_NUM_TASKS", n.to_string()),
        ("SLURM_STEP_NODELIST", host.into()),
        ("SLURM_STEP_TASKS_PER_NODE", n.to_string()),
        ("SLURM_STEP_RESV_PORTS", format!("{port}-{}", port + 1)),
        ("SLURMD_NODENAME", host.into()),
        ("CUDA_VISIBLE_DEVICES", i.to_string()),
    ])
}

#[test]
fn srun_two_and_four_tasks_meet_over_tcp() {
    for n in [2, 4] {
        let out = tempfile::tempdir().unwrap();
        let port = free_port();
        // The node list in Slurm's compressed form, this host first.
        let outs = launch_all(n, out.path(), |i| srun_vars(n, i, port, "localhost"), &[]);
        all_ran(&outs, out.path(), n, "Slurm srun");
        assert!(
            text(&outs[0].stdout).contains(&format!("rendezvous localhost:{port}, listening here"))
        );
        assert!(!out.path().join("run.json.1").exists());
    }
}

#[test]
fn open_mpi_and_mpich_variables_on_one_host_meet_on_loopback() {
    for n in [2, 4] {
        let out = tempfile::tempdir().unwrap();
        let job = free_port().to_string();
        let outs = launch_all(
            n,
            out.path(),
            |i| {
                owned(&[
                    ("OMPI_COMM_WORLD_RANK", i.to_string()),
                    ("OMPI_COMM_WORLD_SIZE", n.to_string()),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", i.to_string()),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", n.to_string()),
                    ("OMPI_MCA_ess_base_jobid", job.clone()),
                    ("NCCLPROBE_RENDEZVOUS_PORT", job.clone()),
                ])
            },
            &[],
        );
        all_ran(&outs, out.path(), n, "Open MPI mpirun");
    }
    let out = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let outs = launch_all(
        4,
        out.path(),
        |i| {
            owned(&[
                ("PMI_RANK", i.to_string()),
                ("PMI_SIZE", "4".into()),
                ("PMI_FD", "9".into()),
                ("MPI_LOCALRANKID", i.to_string()),
                ("MPI_LOCALNRANKS", "4".into()),
                ("NCCLPROBE_RENDEZVOUS_PORT", port.clone()),
            ])
        },
        &[],
    );
    all_ran(&outs, out.path(), 4, "MPICH Hydra");
}

#[test]
fn kubernetes_leader_worker_set_and_indexed_job_pods() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let outs = launch_all(
        4,
        out.path(),
        |i| {
            owned(&[
                ("LWS_LEADER_ADDRESS", "localhost".into()),
                ("LWS_GROUP_SIZE", "4".into()),
                ("LWS_WORKER_INDEX", i.to_string()),
                ("NCCLPROBE_RENDEZVOUS_PORT", port.clone()),
                ("CUDA_VISIBLE_DEVICES", i.to_string()),
            ])
        },
        &[],
    );
    all_ran(&outs, out.path(), 4, "Kubernetes LeaderWorkerSet");
    let out = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let outs = launch_all(
        2,
        out.path(),
        |i| {
            owned(&[
                ("JOB_COMPLETION_INDEX", i.to_string()),
                ("WORLD_SIZE", "2".into()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", port.clone()),
                ("CUDA_VISIBLE_DEVICES", i.to_string()),
            ])
        },
        &[],
    );
    all_ran(&outs, out.path(), 2, "Kubernetes Indexed Job");
}

#[test]
fn real_mpirun_starts_ranks_that_meet_without_mpi() {
    // mpirun is Open MPI's, as ci/test installs it; the ranks use --bootstrap tcp, so the
    // build's MPI support is not used: what a build without the `mpi` feature does.
    let mpirun = Command::new("mpirun").arg("--version").output();
    assert!(
        mpirun.is_ok_and(|o| o.status.success()),
        "mpirun (Open MPI) is needed: ci/test installs openmpi-bin"
    );
    let dir = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let out = tempfile::tempdir().unwrap();
    let mut c = Command::new("mpirun");
    common::without_host_settings(&mut c);
    let _session = common::own_session(&mut c);
    c.args(["--oversubscribe", "-np", "4"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("LD_LIBRARY_PATH", dir.path())
        .env("NCCLPROBE_TEST_DOUBLE_GPUS", "4")
        .env_remove("NCCL_LIBRARY")
        .env_remove("NCCL_HOME")
        .arg(env!("CARGO_BIN_EXE_ncclprobe"))
        .args(SWEEP)
        .args(["--timeout", "60", "--json"])
        .arg(out.path().join("run.json"));
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    all_ran(&[o], out.path(), 4, "Open MPI mpirun");
}

#[test]
fn an_unreachable_rendezvous_ends_within_the_timeout_naming_host_and_port() {
    // Task 1 of 2 alone: the first host of the step is where it must connect, and nobody
    // listens there.
    let dir = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let port = free_port();
    let started = Instant::now();
    let o = probe(dir.path(), 2)
        .args(SWEEP)
        .args(["--timeout", "3"])
        .envs(srun_vars(2, 1, port, "localhost"))
        .env("SLURM_STEP_NODELIST", "localhost,node[02]")
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = text(&o.stderr);
    // Exit 4: the rendezvous made no progress within --timeout.
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!(
            "could not reach the rank that listens at localhost:{port}"
        )),
        "{err}"
    );
    assert!(err.contains("SLURM_STEP_RESV_PORTS"), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    eprintln!("{err}");
    // The listening task with its peer missing says which rank did not come.
    let o = probe(dir.path(), 2)
        .args(SWEEP)
        .args(["--timeout", "3"])
        .envs(srun_vars(2, 0, port, "localhost"))
        .output()
        .unwrap();
    let err = text(&o.stderr);
    // Exit 4: the rendezvous made no progress within --timeout.
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("listened on port {port} of localhost")),
        "{err}"
    );
    assert!(err.contains("ranks 1 did not connect within"), "{err}");
    eprintln!("{err}");
}

#[test]
fn bootstrap_tcp_without_a_launcher_says_what_it_reads() {
    let dir = common::test_double_dir(&["libcuda.so.1", "libnccl.so.2"]);
    let o = probe(dir.path(), 2).args(SWEEP).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--bootstrap tcp: no launcher's variables found"),
        "{err}"
    );
    assert!(err.contains("SLURM_PROCID"), "{err}");
}
