//! The four ways a sweep's ranks come to life, each described as a [`Start`] for the one
//! skeleton in `launch`: host threads, NCCL with several GPUs in one process (`-g N`), NCCL
//! with one GPU per process (torchrun-style or under an MPI launcher), and MPI on host memory.

use super::launch::{launch, Start};
use super::one_gpu::{one_gpu_per_rank, Place};
use super::options::Bootstrap;
use super::options::Options;
use super::record;
use super::select::Selection;
use crate::backend::launcher::Launch;
use crate::backend::mpi as mpi_backend;
use crate::backend::nccl::{self, Api, NcclComm, RegistrationMode};
use crate::backend::rendezvous::{ControlPlane, Tcp};
use crate::backend::{host, BackendError};
use crate::exit::{ExitCode, Failure};
use crate::model::{Calibration, Registration};
use crate::plan::{host_memory_limit, memory_limit, Plan};
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

/// Ranks as threads of this process.
pub fn host_threads(args: &Options, selection: &Selection) -> Result<ExitCode, Failure> {
    let nranks = args.backend.ranks.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
    });
    if nranks == 0 || nranks > 1024 {
        return Err(Failure::usage(format!(
            "--ranks: {nranks} is out of range (1..=1024)"
        )));
    }
    let mut plan = Plan::from_options(args, memory_limit(nranks))?;
    without_gpu(&mut plan, "host", true);
    split_not_applied(
        &mut plan,
        args,
        "the host backend's ranks are threads of one process, and groups are of processes",
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if nranks > cores && plan.matrix.is_none() {
        let note = format!(
            "{nranks} ranks on {cores} cores: the rank threads take turns on the cores and every collective waits for the last one, so a point can take about {}x longer than with one core per rank and overrun --point-budget; the times measure the scheduler more than the memory",
            nranks.div_ceil(cores)
        );
        crate::term::note(&note);
        plan.notes.push(note);
    }
    let calibration = record::memcpy_calibration(&plan);
    let start = Start {
        plan,
        reports: true,
        ranks_text: format!("{nranks} ranks as threads of one process"),
        libraries: Default::default(),
        calibration,
        connect: Box::new(move |_, _| Ok(host::world(nranks))),
        keep_alive: None,
        runner: None,
    };
    launch(args, selection, start)
}

/// What a backend without GPUs cannot do of what the flags asked (nccl-tests' -x and -y, NCCL
/// settings): said, and taken out of the plan so the record does not claim it.
///
/// Every rank drops them (each process of an MPI job has its own plan, and all must run the
/// same calls); only the reporting one says so.
fn without_gpu(plan: &mut Plan, backend: &str, reports: bool) {
    let s = &mut plan.settings;
    let mut dropped = Vec::new();
    if std::mem::take(&mut s.stream_null) {
        dropped.push("-y 1 (the NULL stream)");
    }
    if s.cta_policy.take().is_some() {
        dropped.push("-x (NCCL's CTA policy)");
    }
    if s.graph_launches.take().is_some() {
        dropped.push("-G (CUDA graphs)");
    }
    if !dropped.is_empty() && reports {
        let (verb, pronoun) = match dropped.len() {
            1 => ("applies", "it is"),
            _ => ("apply", "they are"),
        };
        let note = format!(
            "{} {verb} to the NCCL backend only: the {backend} backend has no CUDA streams or NCCL communicators, so {pronoun} not applied",
            dropped.join(" and ")
        );
        crate::term::note(&note);
        plan.notes.push(note);
    }
}

/// `-d all` as nccl-tests runs it (src/common.cu, after the device report): the fp8 types are
/// added when NCCL is 2.24 or newer and every GPU is compute capability 9.0 or newer.
fn fp8_in_all_types(plan: &mut Plan, api: &Api, devices: &[c_int]) {
    let asked = plan.perf.as_ref().is_some_and(|p| p.all_types);
    let hopper = devices
        .iter()
        .all(|&d| api.compute_major(d).is_some_and(|m| m >= 9));
    if asked && hopper && api.nccl.version_code >= 22400 {
        plan.dtypes.extend(crate::dtype::Dtype::FP8);
    }
}

/// NCCL_TESTS_SPLIT in a run of one process (or on the MPI backend, which keeps one
/// communicator): every rank stays in group 0, as nccl-tests without MPI leaves it; said.
fn split_not_applied(plan: &mut Plan, args: &Options, why: &str) {
    if let Some(s) = &args.backend.split {
        let note = format!(
            "{} is not applied: {why}; every rank is in group 0",
            s.source
        );
        crate::term::note(&note);
        plan.notes.push(note);
    }
}

/// Host copies of a message each NCCL rank keeps (the send and receive staging for the check).
const NCCL_HOST_COPIES: u64 = 2;

/// The largest message an NCCL rank can take: three device buffers in the GPU's `free` bytes,
/// and its host copies, with those of the other `ranks_here` ranks on this host, in the host's
/// available memory (`-g 8 -e 16G` would otherwise want 256 GiB of RAM).
fn nccl_memory_limit(free: Option<usize>, ranks_here: usize) -> Option<u64> {
    let device = free.map(device_memory_limit);
    let host = host_memory_limit(ranks_here, NCCL_HOST_COPIES);
    device.into_iter().chain(host).min()
}

/// The largest power of two that fits three buffers of one message in `free` bytes.
fn device_memory_limit(free: usize) -> u64 {
    let per = (free as u64 / 3).max(1);
    1u64 << (63 - per.leading_zeros())
}

/// What `--cuda-events` and `-R` ask of a communicator, before its first point.
fn configure(comm: &mut NcclComm, plan: &Plan) -> Result<(), Failure> {
    if plan.settings.stream_null {
        comm.use_null_stream()
            .map_err(|e| Failure::internal(format!("-y 1: {e}")))?;
    }
    if plan.settings.cuda_events {
        comm.use_cuda_events()
            .map_err(|e| Failure::internal(format!("--cuda-events: {e}")))?;
    }
    let mode = match plan.settings.registration {
        Registration::None => None,
        Registration::Local => Some(RegistrationMode::Local),
        Registration::Symmetric => Some(RegistrationMode::Symmetric),
    };
    if let Some(mode) = mode {
        comm.use_registration(mode)
            .map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?;
    }
    Ok(())
}

/// NCCL on GPUs: one process per GPU when launched so (torchrun variables or an MPI launcher),
/// else every visible GPU (or `-g N`) from this process.
pub fn nccl(args: &Options, selection: &Selection) -> Result<ExitCode, Failure> {
    // NCCL reads its debug and dump variables once, at its first call.
    let collectives = match args.what.collective.as_str() {
        "all" => 7,
        list => list.split(',').count(),
    };
    super::observe::arm(args.backend.show_algo, collectives);
    let found = nccl::find_nccl(args.backend.nccl_lib.as_deref()).map_err(|a| {
        Failure::unavailable(format!("--backend nccl: {}", nccl::describe_attempts(&a)))
    })?;
    let api = Arc::new(
        Api::load(found).map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?,
    );
    super::observe::loaded(api.reset_debug);
    // nccl-tests says this while reading its flags, before the banner.
    if let Some(line) = nccl::cta_policy_for(args.backend.cta_policy, api.nccl.version_code).said {
        crate::outln!("{line}");
    }
    let launch = crate::backend::launcher::from_env();
    let mpi_world = mpi_backend::launcher_world_size().filter(|&n| n > 1);
    match args.backend.bootstrap {
        Bootstrap::Mpi => match mpi_world {
            Some(world) => nccl_under_mpi(args, selection, api, world),
            None => Err(Failure::usage(
                "--bootstrap mpi: this process was not started by an MPI launcher with several ranks",
            )),
        },
        Bootstrap::Tcp => match launch {
            Some(l) => nccl_over_tcp(args, selection, api, l),
            None => Err(Failure::usage(format!(
                "--bootstrap tcp: no launcher's variables found; {LAUNCHER_VARIABLES}"
            ))),
        },
        Bootstrap::Auto => match (launch, mpi_world) {
            // An MPI build under an MPI launcher keeps MPI (torchrun's variables win: they
            // are what the user set).
            (Some(l), Some(world)) if cfg!(feature = "mpi") && l.mpi_launcher => {
                nccl_under_mpi(args, selection, api, world)
            }
            (Some(l), _) if l.world > 1 || !l.mpi_launcher => {
                nccl_over_tcp(args, selection, api, l)
            }
            _ => nccl_group(args, selection, api),
        },
    }
}

/// What `--bootstrap tcp` reads, for the error when none is set.
const LAUNCHER_VARIABLES: &str = "start the processes with torchrun (RANK, WORLD_SIZE, MASTER_ADDR), srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST), mpirun (OMPI_COMM_WORLD_RANK/SIZE), mpiexec (PMI_RANK/PMI_SIZE), or in Kubernetes a LeaderWorkerSet (LWS_*) or an Indexed Job/JobSet (JOB_COMPLETION_INDEX with WORLD_SIZE)";

/// One process per GPU, as the launcher placed them, meeting over TCP.
fn nccl_over_tcp(
    args: &Options,
    selection: &Selection,
    api: Arc<Api>,
    launch: Launch,
) -> Result<ExitCode, Failure> {
    let meet = launch.meet.map_err(|why| {
        Failure::usage(format!(
            "--backend nccl, started by {}: {why}",
            launch.launcher
        ))
    })?;
    let at = PerProcess {
        rank: launch.rank,
        world: launch.world,
        local: launch.local,
        local_world: launch.local_world,
        how: format!(
            "{}; rendezvous {}:{}{}",
            launch.launcher,
            meet.hosts.first().map_or("", String::as_str),
            meet.port,
            if meet.hub { ", listening here" } else { "" }
        ),
        meeting: format!(
            " at {}:{} ({})",
            meet.hosts.join(" or "),
            meet.port,
            meet.source
        ),
    };
    let (rank, world) = (launch.rank, launch.world);
    // The unique id travels over our TCP rendezvous.
    let plane = move |timeout: Duration| {
        Tcp::connect(rank, world, &meet, timeout).map(|t| Box::new(t) as Box<dyn ControlPlane>)
    };
    nccl_per_process(args, selection, api, at, plane, None)
}

/// `-g N`: several GPUs driven by this process, one rank thread each.
fn nccl_group(args: &Options, selection: &Selection, api: Arc<Api>) -> Result<ExitCode, Failure> {
    let first = args.backend.first_device.unwrap_or(0);
    let ngpus = args
        .backend
        .ngpus
        .unwrap_or((api.devices as usize).saturating_sub(first));
    if first > 0 && first + ngpus > api.devices as usize {
        // nccl-tests' words and status (src/util.cu, writeDeviceReport: testNotImplemented).
        return Err(Failure::unavailable(format!(
            "Invalid number of GPUs: {} requested but only {} were found (NCCL_TESTS_DEVICE={first}, -g {ngpus})",
            first + ngpus,
            api.devices
        )));
    }
    if ngpus == 0 || ngpus > api.devices as usize {
        return Err(Failure::usage(format!(
            "-g/--ngpus: {ngpus} GPUs asked for, {} visible",
            api.devices
        )));
    }
    let devices: Vec<c_int> = (first as c_int..(first + ngpus) as c_int).collect();
    let free = devices
        .iter()
        .filter_map(|&d| api.use_device(d).ok().and_then(|_| api.free_memory()))
        .min();
    let mut plan = Plan::from_options(args, nccl_memory_limit(free, ngpus))?;
    fp8_in_all_types(&mut plan, &api, &devices);
    split_not_applied(
        &mut plan,
        args,
        "one process drives every GPU (-g), and groups are of processes, as in nccl-tests",
    );
    let cta = nccl::cta_policy_for(plan.settings.cta_policy, api.nccl.version_code);
    plan.notes.extend(cta.note);
    // The record says what NCCL was given, not what was asked and ignored.
    plan.settings.cta_policy = cta.value.map(i64::from);
    let start = Start {
        calibration: record::copy_calibration(&api, &devices, &plan),
        plan,
        reports: true,
        ranks_text: format!("{ngpus} GPUs driven by one process (-g {ngpus})"),
        libraries: record::nccl_libraries(&api),
        connect: Box::new(move |watchdog, plan| {
            watchdog.arm(format!("NCCL init of {ngpus} GPUs"));
            let mut comms = NcclComm::init_all(api, &devices, cta.value)
                .map_err(|e| Failure::internal(format!("--backend nccl: {e}")))?;
            watchdog.disarm();
            for c in &mut comms {
                configure(c, plan)?;
            }
            Ok(comms)
        }),
        keep_alive: None,
        runner: None,
    };
    launch(args, selection, start)
}

/// Where this process sits in a one-GPU-per-process job.
struct PerProcess {
    rank: usize,
    world: usize,
    local: usize,
    local_world: Option<usize>,
    how: String,
    /// " at host:port" where the ranks meet over TCP.
    meeting: String,
}

type PlaneResult = Result<Box<dyn ControlPlane>, BackendError>;

/// One rank of a multi-process NCCL job: the GPU of its local rank, a rendezvous, a sweep.
fn nccl_per_process(
    args: &Options,
    selection: &Selection,
    api: Arc<Api>,
    at: PerProcess,
    plane: impl FnOnce(Duration) -> PlaneResult + Send + 'static,
    keep_alive: Option<Box<dyn std::any::Any>>,
) -> Result<ExitCode, Failure> {
    // NCCL_TESTS_DEVICE names the GPU of every process (src/util.cu: `gpu0 + i`).
    let device = match args.backend.first_device {
        Some(first) => first as c_int,
        None => (at.local % api.devices.max(1) as usize) as c_int,
    };
    let mut notes = Vec::new();
    let sharing = at.local_world.unwrap_or(at.world);
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() && sharing > 1 {
        let n = format!("rank {}: CUDA_VISIBLE_DEVICES is not set while {sharing} ranks share this host; using GPU {device} by local rank (see `ncclprobe diagnose`)", at.rank);
        crate::term::note(&n);
        notes.push(n);
    }
    api.use_device(device)
        .map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?;
    let mut plan = Plan::from_options(args, nccl_memory_limit(api.free_memory(), sharing))?;
    // Each process judges its own GPU (nccl-tests takes the minimum over all processes).
    fp8_in_all_types(&mut plan, &api, &[device]);
    plan.notes.extend(notes);
    let cta = nccl::cta_policy_for(plan.settings.cta_policy, api.nccl.version_code);
    plan.notes.extend(cta.note);
    plan.settings.cta_policy = cta.value.map(i64::from);
    let split = args.backend.split.clone();
    if let Some(s) = &split {
        plan.notes.push(format!(
            "{}: the processes of each color form their own communicator and run the test at once; each row's time is taken over every process of every group (-a: the average unless told) and its bandwidth uses the group's size, as nccl-tests computes them (each group's own figures follow it as `#  group` lines)",
            s.source
        ));
    }
    let (rank, world) = (at.rank, at.world);
    let meeting = at.meeting;
    let start = Start {
        plan,
        reports: rank == 0,
        ranks_text: format!("{world} ranks, one GPU per process ({})", at.how),
        libraries: record::nccl_libraries(&api),
        calibration: Calibration::default(),
        connect: Box::new(move |watchdog, plan| {
            watchdog.arm(format!("rendezvous of {world} ranks{meeting}"));
            // The rendezvous gives up a little before the watchdog, so that its own words
            // (which rank is missing, which host did not answer) are what the user reads.
            let secs = plan.settings.timeout_s * 0.9;
            let secs = if secs > 0.0 { secs.min(1e9) } else { 0.0 };
            let mut control = plane(Duration::from_secs_f64(secs)).map_err(|e| match e {
                BackendError::Failed(m) => Failure::internal(m),
                e => crate::backend::failure("rendezvous", e),
            })?;
            let host = crate::measure::host_name(rank, &plan.injected);
            let gpu = api.pci_bus_id(device);
            let (group, group_rank, group_size) =
                split_group(control.as_mut(), split, (rank, world))?;
            let place = Place {
                host: &host,
                bus_id: gpu,
                device,
                color: group.color,
            };
            one_gpu_per_rank(control.as_mut(), place, (sharing, api.devices))?;
            watchdog.arm(format!(
                "ncclCommInitRank of rank {group_rank} of {group_size} (group {})",
                group.color
            ));
            let mut comm = NcclComm::new(
                api, group_rank, group_size, device, control, cta.value, group,
            )
            .map_err(|e| Failure::internal(format!("--backend nccl: {e}")))?;
            configure(&mut comm, plan)?;
            watchdog.disarm();
            Ok(vec![comm])
        }),
        keep_alive,
        runner: None,
    };
    launch(args, selection, start)
}

/// NCCL_TESTS_SPLIT: this process's color, exchanged over the job's control plane; the group
/// (its color and first member), this process's rank in it and its size (MPI_Comm_split with
/// the job rank as key, as nccl-tests).
fn split_group(
    control: &mut dyn ControlPlane,
    split: Option<crate::sweep::split::Split>,
    (rank, world): (usize, usize),
) -> Result<(nccl::Group, usize, usize), Failure> {
    let Some(split) = split else {
        return Ok((nccl::Group::default(), rank, world));
    };
    let color = split.color(rank).map_err(Failure::usage)?;
    let colors: Vec<usize> = control
        .allgather(&(color as u64).to_le_bytes())
        .map_err(|e| crate::backend::failure("exchanging NCCL_TESTS_SPLIT colors", e))?
        .iter()
        .map(|b| b.as_slice().try_into().map_or(0, u64::from_le_bytes) as usize)
        .collect();
    let members: Vec<usize> = (0..colors.len()).filter(|&r| colors[r] == color).collect();
    let group_rank = members.iter().position(|&r| r == rank).unwrap_or(0);
    let group = nccl::Group {
        color,
        leader: members.first().copied().unwrap_or(0),
    };
    Ok((group, group_rank, members.len()))
}

#[cfg(not(feature = "mpi"))]
fn nccl_under_mpi(
    _: &Options,
    _: &Selection,
    _: Arc<Api>,
    world: usize,
) -> Result<ExitCode, Failure> {
    Err(Failure::unavailable(format!(
        "--backend nccl: launched by an MPI launcher with {world} ranks, but this build has no MPI support to exchange the NCCL unique id; rebuild with --features mpi, or use --bootstrap tcp"
    )))
}

/// Under mpirun/srun: MPI carries the unique id and the harness's exchanges.
#[cfg(feature = "mpi")]
fn nccl_under_mpi(
    args: &Options,
    selection: &Selection,
    api: Arc<Api>,
    _world: usize,
) -> Result<ExitCode, Failure> {
    use crate::backend::Communicator;
    struct MpiPlane(mpi_backend::MpiComm);
    impl ControlPlane for MpiPlane {
        fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
            self.0.allgather_bytes(data)
        }
    }
    let (universe, comm) = mpi_backend::start()
        .map_err(|e| Failure::unavailable(e.to_string()))?
        .split();
    let (rank, world) = (comm.rank(), comm.nranks());
    let local = [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
        "PMIX_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(rank);
    let at = PerProcess {
        rank,
        world,
        local,
        local_world: mpi_backend::launcher_local_size(),
        how: "MPI launcher".into(),
        meeting: String::new(),
    };
    let plane = move |_| Ok(Box::new(MpiPlane(comm)) as Box<dyn ControlPlane>);
    nccl_per_process(args, selection, api, at, plane, Some(Box::new(universe)))
}

/// MPI's own collectives on host memory, one rank per process.
#[cfg(feature = "mpi")]
pub fn mpi(args: &Options, selection: &Selection) -> Result<ExitCode, Failure> {
    use crate::backend::Communicator;
    // MPI lives on a thread of its own that alone calls it (at MPI_THREAD_SINGLE, as
    // nccl-tests), and the rank runs there.
    let (comm, mpi_thread) =
        mpi_backend::start_single().map_err(|e| Failure::unavailable(e.to_string()))?;
    let local = mpi_backend::launcher_local_size().unwrap_or(comm.nranks());
    let mut plan = Plan::from_options(args, memory_limit(local))?;
    without_gpu(&mut plan, "mpi", comm.rank() == 0);
    if comm.rank() == 0 {
        split_not_applied(&mut plan, args, "the MPI backend keeps one communicator");
    }
    let start = Start {
        plan,
        reports: comm.rank() == 0,
        ranks_text: format!("{} ranks, one per process", comm.nranks()),
        libraries: [("mpi".to_string(), comm.library.clone())].into(),
        calibration: Calibration::default(),
        connect: Box::new(move |_, _| Ok(vec![comm])),
        runner: Some(mpi_thread.runner()),
        keep_alive: Some(Box::new(mpi_thread)),
    };
    launch(args, selection, start)
}

#[cfg(not(feature = "mpi"))]
pub fn mpi(_: &Options, _: &Selection) -> Result<ExitCode, Failure> {
    mpi_backend::start()
        .map(|_| ExitCode::Ok)
        .map_err(|e| Failure::unavailable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_limit_is_the_largest_power_of_two_that_fits_three_buffers() {
        assert_eq!(device_memory_limit(3 << 30), 1 << 30);
        assert_eq!(device_memory_limit((3 << 30) - 1), 1 << 29);
        assert_eq!(device_memory_limit(0), 1);
    }
}
