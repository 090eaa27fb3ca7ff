//! Who started this process as one rank of a job, read from the launcher's own variables, and
//! where the ranks meet over TCP when there is no MPI to carry NCCL's unique id: torchrun (and
//! Kubeflow's PyTorchJob, which sets its variables), Slurm's srun, Open MPI's mpirun (and
//! Kubeflow's MPIJob, which runs it), MPICH's Hydra, and Kubernetes' LeaderWorkerSet and
//! JobSet/Indexed Jobs.
//!
//! One process listens (the hub) and every other connects to it: the hub is the first process
//! on the host every rank can name (rank 0 where the launcher names rank 0's host, else the
//! first local process on the first host of the job), so no rank needs another's address.

use super::hostlist;

/// This process's place in a launched job and where its ranks meet.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The launcher as the banner names it, with the variables read.
    pub launcher: String,
    pub rank: usize,
    pub world: usize,
    pub local: usize,
    pub local_world: Option<usize>,
    /// Started by an MPI launcher (srun, mpirun, mpiexec), which an MPI build can use instead.
    pub mpi_launcher: bool,
    pub meet: Result<Meeting, String>,
}

/// Where the ranks of a job meet: the hub listens on `port`; the others try `hosts` in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Meeting {
    pub hosts: Vec<String>,
    pub port: u16,
    pub hub: bool,
    /// Where the host and port came from, for errors ("the first host of SLURM_STEP_NODELIST").
    pub source: String,
    /// Tells this job's rendezvous from another's on the same port. Computed from public
    /// values: it tells jobs apart and authenticates nothing.
    pub key: u64,
    /// The secret every rank was given, when one was: the handshake's MAC key.
    pub token: Option<Token>,
    /// Where the other ranks connect from, as far as the launcher says.
    pub peer_hosts: PeerHosts,
}

/// The hosts a job's ranks run on, which the hub admits when no token authenticates them.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerHosts {
    /// Every rank runs on the hub's host: only its own addresses connect.
    ThisHost,
    /// The hosts the launcher names (Slurm's node list, JobSet's pods), and where from.
    Named { hosts: Vec<String>, from: String },
    /// The launcher names no list (torchrun and Open MPI across hosts): why.
    Any(String),
}

#[path = "launcher_token.rs"]
mod token;
pub use token::Token;

/// The port a rendezvous takes when the launcher names none and no job id can spread jobs
/// over a range: one above torchrun's default MASTER_PORT (29500).
pub const DEFAULT_PORT: u16 = 29501;

/// Where job-derived ports fall: below Linux's ephemeral range (32768 and up), above the
/// well-known services.
const PORT_BASE: u16 = 20000;
const PORT_SPAN: u64 = 10000;

/// What a detection reads: an environment and this host.
pub struct Machine<'a> {
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// Whether an IP address belongs to this host (binding to it works).
    pub is_local_address: &'a dyn Fn(&str) -> bool,
    pub host_name: String,
    /// The parent process (MPICH's Hydra proxy, shared by the ranks of one host).
    pub parent_pid: u32,
}

impl Machine<'_> {
    fn get(&self, k: &str) -> Option<String> {
        (self.var)(k).filter(|v| !v.trim().is_empty())
    }
    fn num(&self, k: &str) -> Option<usize> {
        self.get(k)?.trim().parse().ok()
    }
    fn parsed<T: std::str::FromStr>(&self, k: &str) -> Option<T> {
        self.get(k)?.trim().parse().ok()
    }
}

/// This process's launch, from the real environment.
pub fn from_env() -> Option<Launch> {
    let var = |k: &str| std::env::var(k).ok();
    let local = |ip: &str| {
        ip.parse::<std::net::IpAddr>()
            .is_ok_and(|a| std::net::UdpSocket::bind((a, 0)).is_ok())
    };
    detect(&Machine {
        var: &var,
        is_local_address: &local,
        host_name: host_name(),
        parent_pid: std::os::unix::process::parent_id(),
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The launch the variables describe, `None` when none does. torchrun's variables come first
/// (a PyTorchJob or a user's `mpirun -x MASTER_ADDR` states the meeting place outright), then
/// the launchers that carry their own.
pub fn detect(m: &Machine) -> Option<Launch> {
    let mut launch = torchrun(m)
        .or_else(|| leader_worker_set(m))
        .or_else(|| slurm(m))
        .or_else(|| open_mpi(m))
        .or_else(|| hydra(m))
        .or_else(|| indexed_job(m))?;
    overridden(m, &mut launch);
    // The key is computed from values anyone on the network may know (MASTER_ADDR, the port,
    // the world size): it tells jobs apart but turns no one away. A token every rank was given
    // is what the handshake proves, both ways.
    let get = |k: &str| m.get(k);
    match (token::from_vars(&get), launch.meet.as_mut()) {
        (Ok(Some(t)), Ok(meet)) => {
            meet.source = format!("{}, authenticated by {}", meet.source, t.from);
            meet.token = Some(t);
        }
        (Err(e), Ok(_)) => launch.meet = Err(e),
        _ => {}
    }
    Some(launch)
}

/// NCCLPROBE_RENDEZVOUS=host:port (or host) and NCCLPROBE_RENDEZVOUS_PORT name the meeting
/// place for any launcher: rank 0 listens, on that host.
fn overridden(m: &Machine, launch: &mut Launch) {
    let port: Option<u16> = m.parsed("NCCLPROBE_RENDEZVOUS_PORT");
    if let Some(at) = m.get("NCCLPROBE_RENDEZVOUS") {
        let (host, p) = split_host_port(&at);
        let meeting = Meeting {
            hosts: vec![host],
            port: p.or(port).unwrap_or(DEFAULT_PORT),
            hub: launch.rank == 0,
            source: "NCCLPROBE_RENDEZVOUS".into(),
            key: launch.meet.as_ref().map_or(0, |m| m.key),
            token: None,
            // The launcher still says where the ranks run, wherever they meet.
            peer_hosts: launch.meet.as_ref().map_or_else(
                |_| PeerHosts::Any("the launcher names no hosts".into()),
                |m| m.peer_hosts.clone(),
            ),
        };
        launch.meet = Ok(meeting);
    } else if let (Some(port), Ok(meet)) = (port, launch.meet.as_mut()) {
        meet.port = port;
        meet.source = format!("{}, port from NCCLPROBE_RENDEZVOUS_PORT", meet.source);
    }
}

/// `host:port`, `[v6]:port` or a bare host.
fn split_host_port(at: &str) -> (String, Option<u16>) {
    let at = at.trim();
    if let Some(rest) = at.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            return (
                host.into(),
                tail.strip_prefix(':').and_then(|p| p.parse().ok()),
            );
        }
    }
    match at.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h.into(), Some(port)),
            Err(_) => (at.into(), None),
        },
        _ => (at.into(), None),
    }
}

/// FNV-1a of the text that names a job: every rank of it computes the same.
fn key_of(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A port for a job, spread by its id so that jobs sharing a host do not meet on one port.
fn port_for(job: &str) -> u16 {
    PORT_BASE + (key_of(job) % PORT_SPAN) as u16
}

/// torchrun, and what sets its variables (Kubeflow's PyTorchJob, `mpirun -x MASTER_ADDR`):
/// RANK, WORLD_SIZE, MASTER_ADDR; rank 0 listens one port above MASTER_PORT, which torchrun's
/// own store holds.
fn torchrun(m: &Machine) -> Option<Launch> {
    let addr = m.get("MASTER_ADDR")?;
    let (rank, world) = match (m.num("RANK"), m.num("WORLD_SIZE")) {
        (Some(r), Some(w)) => (r, w),
        // MASTER_ADDR beside another launcher's ranks (`mpirun -x MASTER_ADDR=node1`).
        _ => return None,
    };
    let who = if m.get("TORCHELASTIC_RUN_ID").is_some() {
        "torchrun"
    } else if m.get("PET_NNODES").is_some() {
        // The training operator sets PET_* for torchrun beside RANK and WORLD_SIZE.
        "Kubeflow PyTorchJob"
    } else {
        "torchrun-style environment"
    };
    let master_port: Option<u16> = m.parsed("MASTER_PORT");
    let port = master_port
        .and_then(|p| p.checked_add(1))
        .unwrap_or(DEFAULT_PORT);
    Some(Launch {
        launcher: format!("{who}: RANK, WORLD_SIZE, MASTER_ADDR"),
        rank,
        world,
        local: m.num("LOCAL_RANK").unwrap_or(rank),
        local_world: m.num("LOCAL_WORLD_SIZE"),
        mpi_launcher: false,
        meet: Ok(Meeting {
            hosts: vec![addr.clone()],
            port,
            hub: rank == 0,
            source: format!(
                "MASTER_ADDR, MASTER_PORT + 1 (torchrun's store holds {})",
                master_port.map_or("none".into(), |p| p.to_string())
            ),
            key: key_of(&format!("torchrun {addr} {port} {world}")),
            token: None,
            peer_hosts: if m.num("LOCAL_WORLD_SIZE") == Some(world) {
                PeerHosts::ThisHost
            } else {
                PeerHosts::Any("torchrun names only MASTER_ADDR, not the other ranks' hosts".into())
            },
        }),
    })
}

/// MASTER_ADDR (and MASTER_PORT) given beside another launcher's ranks, as guides tell
/// `mpirun -x MASTER_ADDR=node1` users: rank 0 listens there.
fn stated(m: &Machine, rank: usize, job: &str) -> Option<Meeting> {
    let addr = m.get("MASTER_ADDR")?;
    let port = m
        .parsed::<u16>("MASTER_PORT")
        .and_then(|p| p.checked_add(1))
        .unwrap_or(DEFAULT_PORT);
    Some(Meeting {
        hosts: vec![addr],
        port,
        hub: rank == 0,
        source: "MASTER_ADDR, MASTER_PORT + 1".into(),
        key: key_of(job),
        token: None,
        peer_hosts: PeerHosts::Any("the launcher names only MASTER_ADDR".into()),
    })
}

/// Every rank on this host: they meet on the loopback interface, rank 0 listening.
fn on_this_host(rank: usize, port: u16, job: &str, why: &str) -> Meeting {
    Meeting {
        hosts: vec!["127.0.0.1".into()],
        port,
        hub: rank == 0,
        source: format!("this host ({why})"),
        key: key_of(job),
        token: None,
        peer_hosts: PeerHosts::ThisHost,
    }
}

/// Slurm's srun, inside a job step (the batch script itself has no SLURM_STEP_NUM_TASKS):
/// SLURM_PROCID of SLURM_STEP_NUM_TASKS, SLURM_LOCALID; the first local task of the first host
/// of SLURM_STEP_NODELIST listens, on the step's reserved port (`srun --resv-ports`) or one
/// chosen from the job and step ids.
fn slurm(m: &Machine) -> Option<Launch> {
    let rank = m.num("SLURM_PROCID")?;
    let world = m
        .num("SLURM_STEP_NUM_TASKS")
        .or_else(|| m.get("SLURM_STEP_ID").and(m.num("SLURM_NTASKS")))?;
    let local = m.num("SLURM_LOCALID").unwrap_or(0);
    let job = format!(
        "slurm {}.{}",
        m.get("SLURM_JOB_ID").unwrap_or_default(),
        m.get("SLURM_STEP_ID").unwrap_or_default()
    );
    let reserved = m
        .get("SLURM_STEP_RESV_PORTS")
        .and_then(|r| r.split(['-', ',']).next()?.trim().parse::<u16>().ok());
    let port = reserved.unwrap_or_else(|| port_for(&job));
    let port_source = if reserved.is_some() {
        "SLURM_STEP_RESV_PORTS"
    } else {
        "a port from SLURM_JOB_ID and SLURM_STEP_ID"
    };
    let list_var = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .into_iter()
    .find(|v| m.get(v).is_some());
    let mut meet = match stated(m, rank, &job) {
        Some(s) => Ok(s),
        None => match list_var {
            Some(var) => hostlist::first(&m.get(var).unwrap_or_default()).map(|first| {
                let here = m.get("SLURMD_NODENAME").unwrap_or_else(|| m.host_name.clone());
                let first_node = match m.get("SLURMD_NODENAME") {
                    Some(_) => here == first,
                    // Without the node's Slurm name, its host name or its node index says.
                    None => short(&here) == short(&first) || m.num("SLURM_NODEID") == Some(0),
                };
                Meeting {
                    hosts: vec![first.clone()],
                    port,
                    hub: first_node && local == 0,
                    source: format!("the first host of {var}, {port_source}"),
                    key: key_of(&job),
                    token: None,
                    peer_hosts: PeerHosts::Any(String::new()),
                }
            }),
            None => Err(
                "srun set no SLURM_STEP_NODELIST to name the first host; set MASTER_ADDR (or NCCLPROBE_RENDEZVOUS=host:port) for every task".into(),
            ),
        },
    };
    // The step's nodes are where its tasks connect from, wherever they meet.
    if let (Some(var), Ok(meeting)) = (list_var, meet.as_mut()) {
        let list = m.get(var).unwrap_or_default();
        match hostlist::expand(&list) {
            Ok(hosts) => {
                meeting.peer_hosts = PeerHosts::Named {
                    hosts,
                    from: var.into(),
                }
            }
            Err(e) => {
                meet = Err(format!(
                    "{var}: {e}; set NCCLPROBE_RENDEZVOUS_TOKEN for every task instead"
                ))
            }
        }
    }
    Some(Launch {
        launcher: "Slurm srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST".into(),
        rank,
        world,
        local,
        // "4" or "2(x3),1": the first node's count (the largest under block distribution).
        local_world: m
            .get("SLURM_STEP_TASKS_PER_NODE")
            .and_then(|t| t.split(['(', ',']).next()?.trim().parse().ok()),
        mpi_launcher: true,
        meet,
    })
}

/// A host name without its domain.
fn short(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// Why an Open MPI job across hosts admits any address: its variables name mpirun's host only.
const ACROSS_MPIRUN: &str = "mpirun names only its own host, not the ranks' hosts";

/// Open MPI's mpirun: OMPI_COMM_WORLD_RANK of OMPI_COMM_WORLD_SIZE. All ranks on this host
/// meet on the loopback interface; across hosts, at mpirun's own host (Open MPI 4 names its
/// addresses in OMPI_MCA_orte_hnp_uri), where the first local rank listens.
fn open_mpi(m: &Machine) -> Option<Launch> {
    let rank = m.num("OMPI_COMM_WORLD_RANK")?;
    let world = m.num("OMPI_COMM_WORLD_SIZE")?;
    let local = m.num("OMPI_COMM_WORLD_LOCAL_RANK").unwrap_or(rank);
    let local_world = m.num("OMPI_COMM_WORLD_LOCAL_SIZE");
    let jobid = m
        .get("OMPI_MCA_ess_base_jobid")
        .or_else(|| m.get("PMIX_NAMESPACE"))
        .unwrap_or_default();
    let job = format!("ompi {jobid}");
    let port = port_for(&job);
    let meet = if let Some(s) = stated(m, rank, &job) {
        Ok(s)
    } else if local_world == Some(world) || m.num("OMPI_MCA_orte_num_nodes") == Some(1) {
        Ok(on_this_host(rank, port, &job, "every rank is local"))
    } else if let Some(kube) = mpi_job(m, local, port, &job) {
        Ok(kube)
    } else if let Some(uri) = m.get("OMPI_MCA_orte_hnp_uri") {
        let hosts = hnp_addresses(&uri);
        // The first address alone decides: later ones may be docker0's 172.17.0.1 or another
        // address every host of the job has, which would make a hub on each.
        let here = hosts.first().is_some_and(|h| (m.is_local_address)(h));
        if hosts.is_empty() {
            Err(format!("OMPI_MCA_orte_hnp_uri `{uri}` names no IPv4 address; set MASTER_ADDR (mpirun -x MASTER_ADDR=<first host>)"))
        } else {
            Ok(Meeting {
                hosts,
                port,
                hub: here && local == 0,
                source: "mpirun's host (OMPI_MCA_orte_hnp_uri), a port from the job id".into(),
                key: key_of(&job),
                token: None,
                peer_hosts: PeerHosts::Any(ACROSS_MPIRUN.into()),
            })
        }
    } else if let Some(host) = m.get("PMIX_NAMESPACE").as_deref().and_then(prrte_host) {
        let here = short(&m.host_name) == short(&host);
        Ok(Meeting {
            hub: here && local == 0,
            hosts: vec![host],
            port,
            source: "mpirun's host (named in PMIX_NAMESPACE), a port from the job id".into(),
            key: key_of(&job),
            token: None,
            peer_hosts: PeerHosts::Any(ACROSS_MPIRUN.into()),
        })
    } else {
        Err("mpirun named no host to meet at; add `-x MASTER_ADDR=<the first host>` to mpirun, or set NCCLPROBE_RENDEZVOUS=host:port".into())
    };
    Some(Launch {
        launcher: "Open MPI mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE".into(),
        rank,
        world,
        local,
        local_world,
        mpi_launcher: true,
        meet,
    })
}

/// The IPv4 addresses of `jobid.0;tcp://10.0.0.1,192.168.1.1:41043;tcp6://[fd00::2]:34077`.
fn hnp_addresses(uri: &str) -> Vec<String> {
    uri.split(';')
        .filter_map(|part| part.strip_prefix("tcp://"))
        .flat_map(|rest| {
            let addrs = rest.rsplit_once(':').map_or(rest, |(a, _)| a);
            addrs.split(',').map(str::to_string).collect::<Vec<_>>()
        })
        .filter(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
        .collect()
}

/// The host in Open MPI 5's job namespace, `prterun-<host>-<pid>@<job>` (PRRTE names jobs
/// after the tool, mpirun's host and its pid); host names may hold dashes.
fn prrte_host(namespace: &str) -> Option<String> {
    let (name, _) = namespace.split_once('@')?;
    let (rest, pid) = name.rsplit_once('-')?;
    pid.parse::<u32>().ok()?;
    let (_, host) = rest.split_once('-')?;
    (!host.is_empty()).then(|| host.to_string())
}

/// MPICH's Hydra (mpiexec): PMI_RANK of PMI_SIZE. It names no host, so ranks meet on this one
/// when all are local (MPI_LOCALNRANKS), else where MASTER_ADDR says.
fn hydra(m: &Machine) -> Option<Launch> {
    let rank = m.num("PMI_RANK")?;
    let world = m.num("PMI_SIZE")?;
    let local_world = m.num("MPI_LOCALNRANKS");
    // The processes of one host share their Hydra proxy, their parent.
    let job = format!("hydra {}", m.parent_pid);
    let meet = match stated(m, rank, &job) {
        Some(s) => Ok(s),
        None if local_world == Some(world) => Ok(on_this_host(
            rank,
            port_for(&job),
            &job,
            "every rank is local",
        )),
        None => Err("MPICH's mpiexec names no host to meet at across hosts; add `-genv MASTER_ADDR <the first host>`, or set NCCLPROBE_RENDEZVOUS=host:port".into()),
    };
    Some(Launch {
        launcher: "MPICH Hydra: PMI_RANK, PMI_SIZE".into(),
        rank,
        world,
        local: m.num("MPI_LOCALRANKID").unwrap_or(rank),
        local_world,
        mpi_launcher: true,
        meet,
    })
}

/// Kubernetes' LeaderWorkerSet: LWS_WORKER_INDEX of LWS_GROUP_SIZE; the leader (index 0)
/// listens at LWS_LEADER_ADDRESS, its DNS name.
fn leader_worker_set(m: &Machine) -> Option<Launch> {
    let leader = m.get("LWS_LEADER_ADDRESS")?;
    let rank = m.num("LWS_WORKER_INDEX")?;
    let world = m.num("LWS_GROUP_SIZE")?;
    Some(Launch {
        launcher:
            "Kubernetes LeaderWorkerSet: LWS_WORKER_INDEX, LWS_GROUP_SIZE, LWS_LEADER_ADDRESS"
                .into(),
        rank,
        world,
        // One pod per rank.
        local: 0,
        local_world: Some(1),
        mpi_launcher: false,
        meet: Ok(Meeting {
            hosts: vec![leader.clone()],
            port: DEFAULT_PORT,
            hub: rank == 0,
            source: "LWS_LEADER_ADDRESS".into(),
            key: key_of(&format!("lws {leader}")),
            token: None,
            peer_hosts: PeerHosts::Any("LeaderWorkerSet names only the leader's address".into()),
        }),
    })
}

/// Kubernetes' Indexed Jobs and JobSet: JOB_COMPLETION_INDEX is the rank (one pod per rank);
/// the size is not in a pod's environment, so WORLD_SIZE says it. Pod 0 listens: at
/// MASTER_ADDR, or under JobSet at the DNS name JobSet gives it
/// (`<jobset>-<replicated job>-<job index>-0.<jobset>`).
fn indexed_job(m: &Machine) -> Option<Launch> {
    let index = m.num("JOB_COMPLETION_INDEX")?;
    let world = m
        .num("WORLD_SIZE")
        .or_else(|| m.num("NCCLPROBE_WORLD_SIZE"));
    let jobset = m.get("JOBSET_NAME");
    let who = if jobset.is_some() {
        "Kubernetes JobSet: JOB_COMPLETION_INDEX, WORLD_SIZE"
    } else {
        "Kubernetes Indexed Job: JOB_COMPLETION_INDEX, WORLD_SIZE"
    };
    let job = format!("k8s {}", jobset.clone().unwrap_or_default());
    let meet = match (stated(m, index, &job), world, jobset) {
        (_, None, _) => Err("the pod's index is known (JOB_COMPLETION_INDEX) but not the job's size: set WORLD_SIZE to the number of pods".into()),
        (Some(s), _, _) => Ok(s),
        (None, _, Some(set)) => {
            let replicated = m.get("REPLICATED_JOB_NAME").unwrap_or_default();
            let job_index = m.get("JOB_INDEX").unwrap_or_else(|| "0".into());
            let pod0 = format!("{set}-{replicated}-{job_index}-0");
            // JobSet names every pod of the job alike: pod i is `<job>-i.<jobset>`.
            let job_pods = format!("{set}-{replicated}-{job_index}-");
            let hosts = (0..world.unwrap_or(1))
                .map(|i| format!("{job_pods}{i}.{set}"))
                .collect();
            Ok(Meeting {
                hosts: vec![format!("{pod0}.{set}"), pod0.clone()],
                port: DEFAULT_PORT,
                hub: index == 0,
                source: "pod 0 of the JobSet's job, by its DNS name".into(),
                key: key_of(&job),
                token: None,
                peer_hosts: PeerHosts::Named {
                    hosts,
                    from: "the JobSet's pod names".into(),
                },
            })
        }
        (None, _, None) => Err("an Indexed Job names no host to meet at: set MASTER_ADDR to pod 0's DNS name (<job>-0.<headless service>)".into()),
    };
    Some(Launch {
        launcher: who.into(),
        rank: index,
        world: world.unwrap_or(1),
        local: 0,
        local_world: Some(1),
        mpi_launcher: false,
        meet,
    })
}

/// Kubeflow's MPIJob runs mpirun in a launcher pod that hosts no rank (OMPI_MCA_orte_hnp_uri
/// names it), with workers `<job>-worker-<i>` under the job's headless service: the first local
/// rank of worker 0 listens.
fn mpi_job(m: &Machine, local: usize, port: u16, job: &str) -> Option<Meeting> {
    // The mpi-operator sets the hostfile on the launcher, and mpirun passes its MCA
    // settings on to the ranks (Open MPI 5's PRRTE renames them).
    let kube = m.get("K_MPI_JOB_ROLE").is_some()
        || [
            "OMPI_MCA_orte_default_hostfile",
            "PRTE_MCA_prte_default_hostfile",
        ]
        .iter()
        .any(|v| m.get(v).is_some_and(|f| f.starts_with("/etc/mpi/")));
    if !kube {
        return None;
    }
    let host = short(&m.host_name);
    let (name, index) = host.rsplit_once("-worker-")?;
    Some(Meeting {
        hosts: vec![
            format!("{name}-worker-0.{name}"),
            format!("{name}-worker-0"),
        ],
        port,
        hub: index == "0" && local == 0,
        source: "worker 0 of the MPIJob, by its DNS name".into(),
        key: key_of(job),
        token: None,
        peer_hosts: PeerHosts::Any(ACROSS_MPIRUN.into()),
    })
}

#[cfg(test)]
#[path = "launcher_tests.rs"]
mod tests;
