//! Launches read from each launcher's variables as it sets them (one process's view each).

use super::*;

/// A process of a job: its variables, its host name, the addresses that are its own.
fn launch(vars: &[(&str, &str)], host: &str, local_ips: &[&str]) -> Option<Launch> {
    let env: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let var = |k: &str| env.get(k).cloned();
    let local = |ip: &str| local_ips.contains(&ip);
    detect(&Machine {
        var: &var,
        is_local_address: &local,
        host_name: host.into(),
        parent_pid: 4242,
    })
}

fn meeting(l: &Launch) -> &Meeting {
    l.meet.as_ref().expect("a meeting place")
}

/// srun -N2 -n4 on gpu[07-08], task `rank`, as slurmstepd sets it (block distribution).
fn srun(rank: usize, more: &[(&str, &str)]) -> Launch {
    let (node, local) = (rank / 2, rank % 2);
    let (procid, localid, nodeid) = (rank.to_string(), local.to_string(), node.to_string());
    let name = format!("gpu0{}", 7 + node);
    let mut vars = vec![
        ("SLURM_JOB_ID", "81234"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", procid.as_str()),
        ("SLURM_LOCALID", localid.as_str()),
        ("SLURM_NODEID", nodeid.as_str()),
        ("SLURM_NTASKS", "4"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_NODELIST", "gpu[07-08]"),
        ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ("SLURMD_NODENAME", name.as_str()),
    ];
    vars.extend_from_slice(more);
    launch(&vars, &name, &[]).expect("srun's variables are a launch")
}

#[test]
fn srun_tasks_meet_at_the_first_local_task_of_the_first_host() {
    let all: Vec<Launch> = (0..4).map(|r| srun(r, &[])).collect();
    for (r, l) in all.iter().enumerate() {
        assert_eq!((l.rank, l.world, l.local), (r, 4, r % 2));
        assert_eq!(l.local_world, Some(2));
        assert!(l.mpi_launcher);
        assert!(l.launcher.starts_with("Slurm srun"), "{}", l.launcher);
        let m = meeting(l);
        assert_eq!(m.hosts, ["gpu07"]);
        assert_eq!(m.hub, r == 0, "rank {r}");
        assert!(m.source.contains("first host of SLURM_STEP_NODELIST"));
    }
    // One port and one key for the step; (20000, 30000) is where job-derived ports fall.
    let port = meeting(&all[0]).port;
    assert!((20000..30000).contains(&port), "{port}");
    assert!(all.iter().all(|l| meeting(l).port == port));
    assert!(all.iter().all(|l| meeting(l).key == meeting(&all[0]).key));
    // The next step of the job meets elsewhere, and is told apart.
    let next = srun(0, &[("SLURM_STEP_ID", "1")]);
    assert_ne!(meeting(&next).key, meeting(&all[0]).key);
    // srun --resv-ports: the step's own reserved port.
    let reserved = srun(3, &[("SLURM_STEP_RESV_PORTS", "12010-12013")]);
    assert_eq!(meeting(&reserved).port, 12010);
}

#[test]
fn a_batch_script_outside_a_step_is_not_a_launch() {
    // sbatch's script has SLURM_PROCID=0 and the allocation's task count, but no step: it is
    // one process, not rank 0 of 4 waiting for peers that will never come.
    let vars = [
        ("SLURM_JOB_ID", "81234"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_JOB_NODELIST", "gpu[07-08]"),
    ];
    assert_eq!(launch(&vars, "gpu07", &[]), None);
}

#[test]
fn srun_with_a_malformed_node_list_says_so() {
    let l = srun(1, &[("SLURM_STEP_NODELIST", "gpu[07-")]);
    let e = l.meet.unwrap_err();
    assert!(e.contains("`[` without `]`"), "{e}");
}

/// mpirun's variables for rank `rank` of `world`, `local_size` per host.
fn ompi(rank: usize, world: usize, local_size: usize) -> Vec<(&'static str, String)> {
    vec![
        ("OMPI_COMM_WORLD_RANK", rank.to_string()),
        ("OMPI_COMM_WORLD_SIZE", world.to_string()),
        (
            "OMPI_COMM_WORLD_LOCAL_RANK",
            (rank % local_size).to_string(),
        ),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", local_size.to_string()),
        ("OMPI_MCA_ess_base_jobid", "378601473".into()),
        ("PMIX_RANK", rank.to_string()),
        (
            "OMPI_MCA_orte_hnp_uri",
            "378601472.0;tcp://10.0.0.1,192.168.1.1:41043;tcp6://[fd00::2]:34077".into(),
        ),
        (
            "OMPI_MCA_orte_num_nodes",
            world.div_ceil(local_size).to_string(),
        ),
    ]
}

fn borrowed<'a>(vars: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn mpirun_on_one_host_meets_on_loopback_and_across_hosts_at_mpiruns_host() {
    let one = ompi(1, 4, 4);
    let l = launch(&borrowed(&one), "vm", &[]).unwrap();
    assert_eq!(
        (l.rank, l.world, l.local, l.local_world),
        (1, 4, 1, Some(4))
    );
    assert!(l.launcher.starts_with("Open MPI mpirun"));
    let m = meeting(&l);
    assert_eq!(
        (m.hosts.as_slice(), m.hub),
        (&["127.0.0.1".to_string()][..], false)
    );
    // Two hosts: mpirun's addresses, IPv4 only; the first local rank where one of them is
    // this host's listens.
    let zero = ompi(0, 4, 2);
    let l = launch(&borrowed(&zero), "node1", &["10.0.0.1", "192.168.1.1"]).unwrap();
    assert_eq!(meeting(&l).hosts, ["10.0.0.1", "192.168.1.1"]);
    assert!(meeting(&l).hub);
    let two = ompi(2, 4, 2);
    let l = launch(&borrowed(&two), "node2", &["10.0.0.2"]).unwrap();
    assert!(!meeting(&l).hub, "local rank 0 of a host mpirun is not on");
    // An address every host has (docker0's, say) does not make a hub of each.
    let l = launch(&borrowed(&two), "node2", &["192.168.1.1"]).unwrap();
    assert!(!meeting(&l).hub, "only mpirun's first address decides");
    let three = ompi(3, 4, 2);
    let l = launch(&borrowed(&three), "node1", &["10.0.0.1"]).unwrap();
    assert!(!meeting(&l).hub, "local rank 1 of mpirun's host");
}

#[test]
fn mpirun_with_master_addr_meets_there_and_without_an_hnp_uri_says_what_to_add() {
    let mut vars = ompi(2, 4, 2);
    vars.push(("MASTER_ADDR", "node1".into()));
    vars.push(("MASTER_PORT", "6000".into()));
    let l = launch(&borrowed(&vars), "node2", &[]).unwrap();
    assert!(l.launcher.starts_with("Open MPI"), "{}", l.launcher);
    assert_eq!(
        (meeting(&l).hosts[0].as_str(), meeting(&l).port),
        ("node1", 6001)
    );
    // Open MPI 5 (PRRTE) passes no HNP URI; its job namespace names mpirun's host.
    let mut v5: Vec<_> = ompi(0, 4, 2)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("OMPI_MCA_"))
        .collect();
    v5.push(("PMIX_NAMESPACE", "prterun-dgx-a-07-12345@1".into()));
    let l = launch(&borrowed(&v5), "dgx-a-07.cluster", &[]).unwrap();
    assert_eq!(meeting(&l).hosts, ["dgx-a-07"]);
    assert!(meeting(&l).hub);
    v5.retain(|(k, _)| *k != "PMIX_NAMESPACE");
    let e = launch(&borrowed(&v5), "node2", &[])
        .unwrap()
        .meet
        .unwrap_err();
    assert!(e.contains("-x MASTER_ADDR=<the first host>"), "{e}");
}

#[test]
fn an_mpijob_meets_at_worker_zero_not_at_the_launcher_pod() {
    let mut vars = ompi(0, 4, 2);
    vars.push(("K_MPI_JOB_ROLE", "worker".into()));
    let l = launch(&borrowed(&vars), "bench-worker-0", &[]).unwrap();
    let m = meeting(&l);
    assert_eq!(m.hosts, ["bench-worker-0.bench", "bench-worker-0"]);
    assert!(m.hub);
    let mut vars = ompi(2, 4, 2);
    vars.push(("K_MPI_JOB_ROLE", "worker".into()));
    let l = launch(&borrowed(&vars), "bench-worker-1", &[]).unwrap();
    assert!(!meeting(&l).hub);
}

#[test]
fn mpich_hydra_meets_on_one_host_and_asks_for_master_addr_across_hosts() {
    let local = [
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("PMI_FD", "6"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ];
    let l = launch(&local, "vm", &[]).unwrap();
    assert!(l.launcher.starts_with("MPICH Hydra"));
    assert_eq!((l.rank, l.world, l.local), (1, 2, 1));
    assert_eq!(meeting(&l).hosts, ["127.0.0.1"]);
    let spread = [
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALNRANKS", "2"),
    ];
    let e = launch(&spread, "vm", &[]).unwrap().meet.unwrap_err();
    assert!(e.contains("-genv MASTER_ADDR"), "{e}");
}

#[test]
fn torchrun_meets_one_port_above_its_store_and_says_which_it_is() {
    let vars = [
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "3"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "node1"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "none"),
    ];
    let l = launch(&vars, "node1", &[]).unwrap();
    assert_eq!(
        (l.rank, l.world, l.local, l.local_world),
        (3, 8, 3, Some(4))
    );
    assert!(l.launcher.starts_with("torchrun:"), "{}", l.launcher);
    assert!(!l.mpi_launcher);
    assert_eq!((meeting(&l).port, meeting(&l).hub), (29501, false));
    // Kubeflow's PyTorchJob sets the same variables in each pod.
    let pod = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "bench-master-0"),
        ("MASTER_PORT", "23456"),
        ("PET_NNODES", "2"),
    ];
    let l = launch(&pod, "bench-master-0", &[]).unwrap();
    assert!(
        l.launcher.starts_with("Kubeflow PyTorchJob"),
        "{}",
        l.launcher
    );
    assert!(meeting(&l).hub);
}

#[test]
fn leader_worker_set_and_jobset_pods_meet_at_their_first_pod() {
    let worker = [
        ("LWS_LEADER_ADDRESS", "bench-0.bench.default"),
        ("LWS_GROUP_SIZE", "4"),
        ("LWS_WORKER_INDEX", "2"),
    ];
    let l = launch(&worker, "bench-0-2", &[]).unwrap();
    assert_eq!((l.rank, l.world), (2, 4));
    assert_eq!(meeting(&l).hosts, ["bench-0.bench.default"]);
    assert!(!meeting(&l).hub);
    let pod = [
        ("JOBSET_NAME", "bench"),
        ("REPLICATED_JOB_NAME", "workers"),
        ("JOB_INDEX", "0"),
        ("JOB_COMPLETION_INDEX", "0"),
        ("WORLD_SIZE", "2"),
    ];
    let l = launch(&pod, "bench-workers-0-0", &[]).unwrap();
    assert!(l.launcher.starts_with("Kubernetes JobSet"));
    assert_eq!(
        meeting(&l).hosts,
        ["bench-workers-0-0.bench", "bench-workers-0-0"]
    );
    assert!(meeting(&l).hub);
    let e = launch(&[("JOB_COMPLETION_INDEX", "1")], "job-1", &[])
        .unwrap()
        .meet
        .unwrap_err();
    assert!(e.contains("set WORLD_SIZE"), "{e}");
}

#[test]
fn ncclprobe_rendezvous_overrides_any_launcher() {
    let l = srun(
        2,
        &[
            ("NCCLPROBE_RENDEZVOUS", "login1:7000"),
            ("NCCLPROBE_RENDEZVOUS_PORT", "7100"),
        ],
    );
    let m = meeting(&l);
    assert_eq!(
        (m.hosts[0].as_str(), m.port, m.hub),
        ("login1", 7000, false)
    );
    let l = srun(0, &[("NCCLPROBE_RENDEZVOUS_PORT", "7100")]);
    assert_eq!(
        (meeting(&l).hosts[0].as_str(), meeting(&l).port),
        ("gpu07", 7100)
    );
    assert!(meeting(&l).source.contains("NCCLPROBE_RENDEZVOUS_PORT"));
    assert_eq!(
        split_host_port("[fd00::1]:80"),
        ("fd00::1".into(), Some(80))
    );
    assert_eq!(split_host_port("fd00::1"), ("fd00::1".into(), None));
}

#[test]
fn no_launcher_variables_is_no_launch() {
    assert_eq!(launch(&[("HOME", "/root")], "vm", &[]), None);
    // RANK without WORLD_SIZE and MASTER_ADDR is not torchrun.
    assert_eq!(launch(&[("RANK", "1")], "vm", &[]), None);
}

/// torchrun's rank `rank` of 2 on node01, with `more` variables.
fn torchrun_with(rank: &str, more: &[(&str, &str)]) -> Result<Meeting, String> {
    let mut vars = vec![
        ("RANK", rank),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", rank),
        ("MASTER_ADDR", "node01"),
        ("MASTER_PORT", "29500"),
    ];
    vars.extend_from_slice(more);
    launch(&vars, "node01", &[]).unwrap().meet
}

/// The MAC key a meeting's token gives, whichever variable it came from.
fn mac(m: &Meeting) -> Option<[u8; 32]> {
    m.token.as_ref().map(|t| *t.mac_key())
}

#[test]
fn a_token_is_what_the_handshake_proves_and_the_public_key_stays_public() {
    // Review D16: the key follows from public values (here MASTER_ADDR, MASTER_PORT and
    // WORLD_SIZE), so it tells jobs apart and no more. A token every rank is given is the
    // handshake's MAC key; NCCLPROBE_RENDEZVOUS_SECRET, last round's name, still works.
    let public = torchrun_with("0", &[]).unwrap();
    assert_eq!(public.key, key_of("torchrun node01 29501 2"));
    assert_eq!(public.token, None);
    let token = |r: &str, t: &str| torchrun_with(r, &[("NCCLPROBE_RENDEZVOUS_TOKEN", t)]).unwrap();
    let (zero, one) = (token("0", "s3cret"), token("1", "s3cret"));
    assert_eq!(mac(&zero), mac(&one), "every rank agrees");
    assert_eq!(zero.key, public.key, "the key is the job's public one");
    assert_ne!(mac(&zero), mac(&token("0", "other")));
    assert!(
        zero.source
            .contains("authenticated by NCCLPROBE_RENDEZVOUS_TOKEN"),
        "{}",
        zero.source
    );
    assert!(
        !format!("{zero:?}").contains("s3cret"),
        "a token is never printed"
    );
    let alias = torchrun_with("1", &[("NCCLPROBE_RENDEZVOUS_SECRET", "s3cret")]).unwrap();
    assert_eq!(mac(&alias), mac(&zero), "SECRET is TOKEN's older name");
    let e = torchrun_with(
        "0",
        &[
            ("NCCLPROBE_RENDEZVOUS_TOKEN", "a"),
            ("NCCLPROBE_RENDEZVOUS_SECRET", "b"),
        ],
    )
    .unwrap_err();
    assert!(e.contains("differ"), "{e}");
}

#[test]
fn a_token_file_is_read_only_when_it_is_the_users_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    let p = path.to_str().unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let from_file = torchrun_with("0", &[("NCCLPROBE_RENDEZVOUS_TOKEN_FILE", p)]).unwrap();
    let from_var = torchrun_with("0", &[("NCCLPROBE_RENDEZVOUS_TOKEN", "s3cret")]).unwrap();
    assert_eq!(
        mac(&from_file),
        mac(&from_var),
        "the file's newline is not the token's"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = torchrun_with("0", &[("NCCLPROBE_RENDEZVOUS_TOKEN_FILE", p)]).unwrap_err();
    assert!(
        e.contains("can be read or written by others (mode 640); chmod 600 it"),
        "{e}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    // SAFETY: geteuid cannot fail. Only root can give a file away, to check the owner rule.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(1), None).unwrap();
        let e = torchrun_with("0", &[("NCCLPROBE_RENDEZVOUS_TOKEN_FILE", p)]).unwrap_err();
        assert!(e.contains("belongs to user 1 rather than this one"), "{e}");
    }
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; 5000]).unwrap();
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = token::read_file(big.to_str().unwrap()).unwrap_err();
    assert!(e.contains("longer than 4096 bytes"), "{e}");
    let e = token::read_file(dir.path().to_str().unwrap()).unwrap_err();
    assert!(e.contains("not a regular file"), "{e}");
    let e = token::read_file("/nonexistent/token").unwrap_err();
    assert!(e.contains("cannot be read"), "{e}");
    let e = torchrun_with(
        "0",
        &[
            ("NCCLPROBE_RENDEZVOUS_TOKEN_FILE", p),
            ("NCCLPROBE_RENDEZVOUS_TOKEN", "x"),
        ],
    )
    .unwrap_err();
    assert!(e.contains("give every rank one of them"), "{e}");
}

#[test]
fn the_hosts_a_hub_admits_are_the_ones_the_launcher_names() {
    // Slurm: the step's whole node list; all-local launches: this host; torchrun across
    // hosts names only MASTER_ADDR, so any host may try (and only a token authenticates).
    let slurm = meeting(&srun(1, &[])).clone();
    assert_eq!(
        slurm.peer_hosts,
        PeerHosts::Named {
            hosts: vec!["gpu07".into(), "gpu08".into()],
            from: "SLURM_STEP_NODELIST".into()
        }
    );
    let huge = srun(0, &[("SLURM_STEP_NODELIST", "n[0-99999]")]);
    assert!(huge.meet.unwrap_err().contains("more than 65536 hosts"));
    assert!(matches!(
        torchrun_with("0", &[]).unwrap().peer_hosts,
        PeerHosts::Any(_)
    ));
    let local = torchrun_with("0", &[("LOCAL_WORLD_SIZE", "2")]).unwrap();
    assert_eq!(local.peer_hosts, PeerHosts::ThisHost);
    let vars = [
        ("JOB_COMPLETION_INDEX", "1"),
        ("WORLD_SIZE", "3"),
        ("JOBSET_NAME", "bench"),
        ("REPLICATED_JOB_NAME", "workers"),
        ("JOB_INDEX", "0"),
    ];
    let pods = launch(&vars, "bench-workers-0-1", &[]).unwrap();
    assert_eq!(
        meeting(&pods).peer_hosts,
        PeerHosts::Named {
            hosts: (0..3)
                .map(|i| format!("bench-workers-0-{i}.bench"))
                .collect(),
            from: "the JobSet's pod names".into()
        }
    );
}
