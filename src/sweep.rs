//! `ncclprobe sweep`: choose the backend, run the harness on every rank, and have rank 0 print
//! the table and keep the record on disk as points complete.

use crate::backend::host::{self, memcpy_bandwidth};
use crate::backend::{mpi as mpi_backend, Communicator, PointSpec};
use crate::cli::{BackendChoice, OutputFormat, SweepArgs};
use crate::coll::{Collective, Placement};
use crate::exit::{ExitCode, Failure};
use crate::measure::PointRunner;
use crate::model::{self, BackendInfo, Calibration, Point, RankInfo, RunRecord, RunStatus, Source};
use crate::plan::{memory_limit, Plan};
use crate::render::{record::RecordSink, table};
use crate::units::format_size;
use crate::watchdog::Watchdog;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// The backend that will run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub backend: BackendChoice,
    pub reason: String,
}

/// What the machine offers, for `--backend auto` (kept apart so the rule is testable).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub gpu_device_nodes: bool,
    pub mpi_world_size: Option<usize>,
    pub mpi_built: bool,
}

impl Environment {
    pub fn detect() -> Environment {
        Environment {
            gpu_device_nodes: std::path::Path::new("/dev/nvidiactl").exists()
                || std::path::Path::new("/dev/dxg").exists(),
            mpi_world_size: mpi_backend::launcher_world_size(),
            mpi_built: cfg!(feature = "mpi"),
        }
    }
}

/// NCCL and the CUDA driver as found on this machine, in one line.
fn nccl_status(explicit: Option<&std::path::Path>) -> (bool, String) {
    use crate::backend::nccl;
    let lib = nccl::find_nccl(explicit);
    let driver = nccl::find_cuda_driver();
    match (lib, driver) {
        (Ok(n), Ok(d)) if d.devices > 0 => (
            true,
            format!(
                "NCCL {} found at {} (via {}) and {} GPU(s) with CUDA driver {}",
                n.version(),
                n.path.display(),
                n.route.describe(),
                d.devices,
                d.driver_version
            ),
        ),
        (Ok(n), Ok(_)) => (
            false,
            format!(
                "the CUDA driver sees no GPU; NCCL {} found at {}",
                n.version(),
                n.path.display()
            ),
        ),
        (Ok(n), Err(e)) => (
            false,
            format!(
                "{e}; NCCL {} found at {} (via {})",
                n.version(),
                n.path.display(),
                n.route.describe()
            ),
        ),
        (Err(attempts), Ok(d)) => (
            false,
            format!(
                "{}; CUDA driver {} with {} GPU(s) found",
                nccl::describe_attempts(&attempts),
                d.driver_version,
                d.devices
            ),
        ),
        (Err(attempts), Err(e)) => (
            false,
            format!("{e}; {}", nccl::describe_attempts(&attempts)),
        ),
    }
}

pub fn select_backend(
    choice: BackendChoice,
    env: &Environment,
    nccl_lib: Option<&std::path::Path>,
) -> Result<Selection, Failure> {
    match choice {
        BackendChoice::Host => Ok(Selection {
            backend: BackendChoice::Host,
            reason: "asked for with --backend host".into(),
        }),
        BackendChoice::Mpi => Ok(Selection {
            backend: BackendChoice::Mpi,
            reason: "asked for with --backend mpi".into(),
        }),
        BackendChoice::Nccl => {
            let (usable, status) = nccl_status(nccl_lib);
            if usable {
                Ok(Selection {
                    backend: BackendChoice::Nccl,
                    reason: format!("asked for with --backend nccl; {status}"),
                })
            } else {
                Err(Failure::unavailable(format!("--backend nccl: {status}")))
            }
        }
        BackendChoice::Auto => {
            // The driver probe is a failed dlopen on machines without one: cheap.
            let driver = crate::backend::nccl::find_cuda_driver();
            let gpu_note = match &driver {
                Ok(d) if d.devices > 0 => {
                    let (usable, status) = nccl_status(nccl_lib);
                    if usable {
                        return Ok(Selection {
                            backend: BackendChoice::Nccl,
                            reason: format!("auto: {status}"),
                        });
                    }
                    format!("GPUs found, but {status}")
                }
                _ if env.gpu_device_nodes => {
                    "GPU device nodes found, but no usable CUDA driver".into()
                }
                _ => "no GPU found".into(),
            };
            match env.mpi_world_size {
                Some(n) if env.mpi_built => Ok(Selection {
                    backend: BackendChoice::Mpi,
                    reason: format!("auto: {gpu_note}; launched by an MPI launcher with {n} ranks"),
                }),
                Some(n) if n > 1 => Err(Failure::unavailable(format!(
                    "--backend auto: launched by an MPI launcher with {n} ranks, but this build has no MPI support; rebuild with --features mpi (or run without mpirun for the host backend)"
                ))),
                _ => Ok(Selection {
                    backend: BackendChoice::Host,
                    reason: format!("auto: {gpu_note}; not launched under MPI"),
                }),
            }
        }
    }
}

/// What rank 0 owns: the record on disk, stdout, the progress bar.
pub struct Rank0 {
    sink: Arc<Mutex<RecordSink>>,
    print_table: bool,
    progress: ProgressBar,
}

impl Rank0 {
    fn with_sink<R>(&self, f: impl FnOnce(&mut RecordSink) -> R) -> Result<R, Failure> {
        let mut sink = self
            .sink
            .lock()
            .map_err(|_| Failure::internal("record lock poisoned"))?;
        Ok(f(&mut sink))
    }

    fn push(&self, points: &[Point]) -> Result<(), Failure> {
        self.with_sink(|sink| {
            sink.record.points.extend_from_slice(points);
            sink.flush()
        })?
        .map_err(|e| Failure::internal(format!("{e:#}")))
    }

    fn println(&self, line: &str) {
        if self.print_table {
            self.progress.suspend(|| println!("{line}"));
        }
    }
}

fn total_points(plan: &Plan, nranks: usize) -> u64 {
    plan.collectives
        .iter()
        .map(|&c| {
            let roots = plan.roots(c, nranks).map(|r| r.len()).unwrap_or(1);
            (plan.dtypes.len() * plan.ops_for(c).len() * roots * plan.sizes_bytes.len()) as u64
        })
        .sum()
}

fn prepare_failure(coll: Collective, size: u64, e: crate::backend::BackendError) -> Failure {
    match e {
        crate::backend::BackendError::Unsupported(m) => Failure::usage(m),
        other => Failure::internal(format!("{coll} at {}: {other}", format_size(size))),
    }
}

/// The whole sweep as seen by one rank.
pub fn run_rank(
    comm: &mut dyn Communicator,
    plan: &Plan,
    watchdog: Option<&Watchdog>,
    out: Option<&Rank0>,
) -> Result<(), Failure> {
    let nranks = comm.nranks();
    let me = format!(
        "{}\t{}\t{}",
        hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
        std::process::id(),
        comm.device_label().unwrap_or_default()
    );
    let everyone = comm
        .allgather_bytes(me.as_bytes())
        .map_err(|e| Failure::internal(format!("exchanging rank information: {e}")))?;
    if let Some(out) = out {
        let ranks: Vec<RankInfo> = everyone
            .iter()
            .enumerate()
            .map(|(rank, b)| {
                let text = String::from_utf8_lossy(b);
                let mut fields = text.splitn(3, '\t');
                let host = fields.next().unwrap_or_default().to_string();
                let pid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                let device = fields.next().filter(|d| !d.is_empty()).map(str::to_string);
                RankInfo {
                    rank,
                    host,
                    pid,
                    device,
                }
            })
            .collect();
        out.with_sink(|sink| {
            let mut hosts: Vec<String> = ranks.iter().map(|r| r.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            sink.record.backend.hosts = hosts;
            sink.record.backend.ranks = ranks.clone();
            sink.record.backend.nranks = nranks;
        })?;
        out.println("#\n# Using devices");
        for r in &ranks {
            out.println(&format!(
                "#  Rank {:2} Group  0 Pid {:6} on {:>10} device  {}",
                r.rank,
                r.pid,
                r.host,
                r.device.as_deref().unwrap_or("host memory")
            ));
        }
        out.progress.set_length(total_points(plan, nranks));
    }

    for &coll in &plan.collectives {
        let roots = plan.roots(coll, nranks)?;
        if let Some(out) = out {
            out.println(&format!(
                "#\n# Collective test starting: {}_perf",
                coll.name()
            ));
            out.println(&table::header());
        }
        // Allocate for the largest size up front, as nccl-tests does: every size then runs in
        // the same (already touched) memory instead of growing buffers between sizes.
        if let (Some(&largest), Some(&dtype)) = (plan.sizes_bytes.last(), plan.dtypes.first()) {
            let spec = PointSpec {
                coll,
                dtype,
                op: crate::dtype::RedOp::Sum,
                root: 0,
                count: (largest / dtype.size_bytes() as u64) as usize,
            };
            comm.prepare(&spec)
                .map_err(|e| prepare_failure(coll, largest, e))?;
        }
        let mut coll_points: Vec<Point> = Vec::new();
        for &dtype in &plan.dtypes {
            for op in plan.ops_for(coll) {
                for &root in &roots {
                    for &size in &plan.sizes_bytes {
                        let spec = PointSpec {
                            coll,
                            dtype,
                            op: op.unwrap_or(crate::dtype::RedOp::Sum),
                            root: root.max(0) as usize,
                            count: (size / dtype.size_bytes() as u64) as usize,
                        };
                        comm.prepare(&spec)
                            .map_err(|e| prepare_failure(coll, size, e))?;
                        let mut runner = PointRunner {
                            comm: &mut *comm,
                            plan,
                            watchdog,
                        };
                        let oop = runner.measure(&spec, Placement::OutOfPlace)?;
                        let inp = runner.measure(&spec, Placement::InPlace)?;
                        if let Some(out) = out {
                            out.println(&table::row(&oop, &inp));
                            out.progress.inc(1);
                            out.push(&[oop.clone(), inp.clone()])?;
                        }
                        // No rank starts the next size before rank 0 has the point on disk, so
                        // a failure there can never lose it.
                        comm.allgather_bytes(&[]).map_err(|e| {
                            Failure::internal(format!("after {coll} {}: {e}", format_size(size)))
                        })?;
                        coll_points.push(oop);
                        coll_points.push(inp);
                    }
                }
            }
        }
        if let Some(out) = out {
            out.println(&table::footer(&coll_points));
            out.println(&format!(
                "# Collective test concluded: {}_perf",
                coll.name()
            ));
        }
    }
    if let Some(w) = watchdog {
        w.disarm();
    }
    Ok(())
}

fn new_record(
    plan: &Plan,
    selection: &Selection,
    libraries: BTreeMap<String, String>,
) -> RunRecord {
    RunRecord {
        schema_version: model::SCHEMA_VERSION,
        tool: crate::buildinfo::tool_info(),
        source: Source::Measured,
        status: RunStatus::Running,
        started_at: now_rfc3339(),
        finished_at: None,
        command_line: std::env::args().collect(),
        backend: BackendInfo {
            name: match selection.backend {
                BackendChoice::Host => "host",
                BackendChoice::Mpi => "mpi",
                BackendChoice::Nccl => "nccl",
                BackendChoice::Auto => "auto",
            }
            .into(),
            reason: selection.reason.clone(),
            nranks: 0,
            hosts: Vec::new(),
            ranks: Vec::new(),
            library_versions: libraries,
        },
        env: model::relevant_env(),
        settings: Some(plan.settings.clone()),
        calibration: Calibration::default(),
        // What this machine's GPUs look like (NVML, else sysfs); none on machines without GPUs.
        topology: crate::live::collect(&crate::live::Roots::default(), true)
            .topology
            .and_then(|t| serde_json::to_value(t).ok()),
        notes: plan.notes.clone(),
        points: Vec::new(),
        headlines: Vec::new(),
        import: None,
        error: None,
    }
}

/// The lock, unless another thread keeps it longer than `patience` (or it is poisoned).
fn lock_within<T>(m: &Mutex<T>, patience: Duration) -> Option<MutexGuard<'_, T>> {
    let deadline = Instant::now() + patience;
    loop {
        match m.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "unknown".into())
}

fn make_rank0(args: &SweepArgs, record: RunRecord, watchdog: &Watchdog) -> Rank0 {
    let sink = Arc::new(Mutex::new(args.output.sink(record)));
    // On a timeout, leave a record that says so (the finished points are already in it). The
    // record is marked before the communicators are aborted, and the process ends while the
    // sink is still locked: an abort wakes the hung rank, whose own error path must not get
    // to rewrite the record as failed or end the process with another code.
    let for_hook = Arc::clone(&sink);
    watchdog.set_on_timeout(Box::new(move |message: &str| {
        let guard = lock_within(&for_hook, Duration::from_secs(2));
        let _held = guard.map(|mut s| {
            s.record.status = RunStatus::TimedOut;
            s.record.error = Some(message.to_string());
            s.record.finished_at = Some(now_rfc3339());
            let _ = s.flush();
            s
        });
        // Hung NCCL communicators are aborted so their peers' calls return too.
        crate::backend::nccl_comm::abort_all();
        std::process::exit(ExitCode::Timeout.code());
    }));
    let progress = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {pos}/{len} sizes [{elapsed}] {wide_bar}")
    {
        progress.set_style(style);
    }
    Rank0 {
        sink,
        print_table: args.output.format == OutputFormat::Table,
        progress,
    }
}

fn banner(
    rank0: &Rank0,
    plan: &Plan,
    selection: &Selection,
    ranks_text: &str,
    libraries: &BTreeMap<String, String>,
) {
    rank0.println(&format!("# ncclprobe {}", crate::buildinfo::VERSION_LINE));
    rank0.println(&format!(
        "# backend {}: {ranks_text} ({})",
        rank0_backend_name(selection),
        selection.reason
    ));
    for (lib, version) in libraries {
        rank0.println(&format!("# library {lib}: {version}"));
    }
    let s = &plan.settings;
    let step = match (s.step_factor, s.step_bytes) {
        (_, Some(b)) => format!("{b}(bytes)"),
        (Some(f), _) => format!("{f}(factor)"),
        _ => "1(factor)".into(),
    };
    rank0.println(&format!(
        "# minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} validation: {}",
        s.min_bytes,
        s.max_bytes,
        s.warmup_iters,
        s.iters_per_sample
            .map(|n| n.to_string())
            .unwrap_or_else(|| "auto".into()),
        s.check_iters
    ));
    let sampling = match s.target_rel_ci {
        Some(t) => format!(
            "adaptive: {}..{} samples per point until the 95% CI of the median is within ±{:.1}% or {} s of measurement",
            s.min_samples, s.max_samples, t * 100.0, s.point_budget_s
        ),
        None => format!("fixed: {} samples per point", s.max_samples),
    };
    rank0.println(&format!(
        "# sampling {sampling}; time = median over samples of the slowest rank"
    ));
    for note in &plan.notes {
        rank0.println(&format!("# {note}"));
    }
}

fn rank0_backend_name(selection: &Selection) -> &'static str {
    match selection.backend {
        BackendChoice::Mpi => "mpi",
        BackendChoice::Nccl => "nccl",
        _ => "host",
    }
}

/// Finish the record and print what comes after the table; the exit code of the run.
fn finish(
    rank0: &Rank0,
    args: &SweepArgs,
    result: Result<(), Failure>,
) -> Result<ExitCode, Failure> {
    rank0.progress.finish_and_clear();
    let record = rank0.with_sink(|sink| {
        let r = &mut sink.record;
        r.finished_at = Some(now_rfc3339());
        r.headlines = model::headlines(&r.points);
        r.status = match &result {
            Err(f) if f.code == ExitCode::Timeout => RunStatus::TimedOut,
            Err(_) => RunStatus::Failed,
            Ok(()) if r.total_wrong() > 0 => RunStatus::CheckFailed,
            Ok(()) => RunStatus::Complete,
        };
        r.error = result.as_ref().err().map(|f| f.message.clone());
        sink.flush().map(|_| sink.record.clone())
    })?;
    let record = record.map_err(|e| Failure::internal(format!("{e:#}")))?;
    result?;

    for h in &record.headlines {
        rank0.println(&table::headline(h));
    }
    if let Some(line) = memcpy_ratio_line(&record) {
        rank0.println(&line);
    }
    for line in copy_bandwidth_lines(&record) {
        rank0.println(&line);
    }
    for line in cost_model_lines(&record) {
        rank0.println(&line);
    }
    if args.output.format == OutputFormat::Json || args.output.json_to_stdout() {
        let json = crate::render::to_json(&record)?;
        println!("{json}");
    }
    if args.output.format == OutputFormat::Csv || args.output.csv_to_stdout() {
        let csv = crate::render::csv::to_string(&record.points)
            .map_err(|e| Failure::internal(e.to_string()))?;
        print!("{csv}");
    }
    let wrong = record.total_wrong();
    if wrong > 0 {
        return Err(Failure::new(
            ExitCode::CheckFailed,
            format!("check failed: {wrong} wrong elements (see the #wrong column)"),
        ));
    }
    Ok(ExitCode::Ok)
}

/// Per collective and dtype, the largest out-of-place point against NCCL's own cost model.
fn cost_model_lines(record: &RunRecord) -> Vec<String> {
    model::largest_with_nccl_model(&record.points)
        .into_iter()
        .filter_map(|p| {
            let model = p.nccl_model_time_s?;
            Some(format!(
                "# {} {} {}: measured {:.1} us, NCCL's cost model {:.1} us (ncclGroupSimulateEnd): {:.2}x its estimate",
                p.collective,
                p.dtype,
                format_size(p.size_bytes),
                p.time_s * 1e6,
                model * 1e6,
                p.time_s / model
            ))
        })
        .collect()
}

/// Per GPU and direction: pageable vs pinned copy bandwidth (why DataLoader(pin_memory=True)).
fn copy_bandwidth_lines(record: &RunRecord) -> Vec<String> {
    let c = &record.calibration.copy_bandwidth;
    let mut lines = Vec::new();
    for p in c.iter().filter(|p| p.pinned) {
        if let Some(q) = c
            .iter()
            .find(|q| !q.pinned && q.device == p.device && q.direction == p.direction)
        {
            lines.push(format!(
                "# GPU{} {} {}: pageable {:.2} GB/s, pinned {:.2} GB/s ({} copies)",
                p.device,
                p.name,
                p.direction,
                q.bytes_per_s / 1e9,
                p.bytes_per_s / 1e9,
                format_size(p.size_bytes)
            ));
        }
    }
    lines
}

/// The host backend's all_reduce busbw at 64 MiB against single-thread memcpy of this run.
fn memcpy_ratio_line(record: &RunRecord) -> Option<String> {
    let memcpy = record.calibration.memcpy_bytes_per_s?;
    let p = record.points.iter().find(|p| {
        p.collective == Collective::AllReduce
            && p.placement == Placement::OutOfPlace
            && p.size_bytes == 64 << 20
    })?;
    Some(format!(
        "# host backend: all_reduce busbw at 64 MiB {:.2} GB/s = {:.2} x single-thread memcpy ({:.2} GB/s, measured in this run)",
        p.busbw_bytes_per_s / 1e9,
        p.busbw_bytes_per_s / memcpy,
        memcpy / 1e9
    ))
}

pub fn run(args: &SweepArgs) -> Result<ExitCode, Failure> {
    let env = Environment::detect();
    let selection = select_backend(args.backend.backend, &env, args.backend.nccl_lib.as_deref())?;
    if args.backend.register != 0 && selection.backend != BackendChoice::Nccl {
        return Err(Failure::usage(format!(
            "-R/--register: buffer registration is an NCCL feature; the {} backend has none ({})",
            rank0_backend_name(&selection),
            selection.reason
        )));
    }
    match selection.backend {
        BackendChoice::Mpi => run_mpi(args, selection),
        BackendChoice::Nccl => run_nccl(args, selection),
        _ => run_host(args, selection),
    }
}

/// What `--cuda-events` and `-R` ask of a communicator, before its first point.
fn configure(comm: &mut crate::backend::nccl_comm::NcclComm, plan: &Plan) -> Result<(), Failure> {
    if plan.settings.cuda_events {
        comm.use_cuda_events()
            .map_err(|e| Failure::internal(format!("--cuda-events: {e}")))?;
    }
    use crate::backend::nccl_comm::RegistrationMode;
    let mode = match plan.settings.registration {
        crate::model::Registration::None => None,
        crate::model::Registration::Local => Some(RegistrationMode::Local),
        crate::model::Registration::Symmetric => Some(RegistrationMode::Symmetric),
    };
    if let Some(mode) = mode {
        comm.use_registration(mode)
            .map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?;
    }
    Ok(())
}

fn run_host(args: &SweepArgs, selection: Selection) -> Result<ExitCode, Failure> {
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
    let plan = Plan::from_args(args, memory_limit(nranks))?;
    let watchdog = Watchdog::start(plan.settings.timeout_s);
    let mut record = new_record(&plan, &selection, BTreeMap::new());
    let calib_size = (64usize << 20).min(plan.settings.max_bytes.max(1 << 20) as usize);
    if let Ok(bw) = memcpy_bandwidth(calib_size) {
        record.calibration = Calibration {
            memcpy_bytes_per_s: Some(bw),
            memcpy_size_bytes: Some(calib_size as u64),
            copy_bandwidth: Vec::new(),
        };
    }
    let rank0 = make_rank0(args, record, &watchdog);
    banner(
        &rank0,
        &plan,
        &selection,
        &format!("{nranks} ranks as threads of one process"),
        &BTreeMap::new(),
    );

    let comms = host::world(nranks);
    watchdog.set_missing_ranks_probe(comms[0].missing_ranks_probe());
    let result = run_threads(comms, &plan, &watchdog, &rank0, args);
    finish_or_exit(&rank0, args, result)
}

/// Finish the record; on failure exit at once: peers of a failed rank may be blocked.
fn finish_or_exit(
    rank0: &Rank0,
    args: &SweepArgs,
    result: Result<(), Failure>,
) -> Result<ExitCode, Failure> {
    let code = finish(rank0, args, result);
    if let Err(f) = &code {
        eprintln!("ncclprobe: {}", f.message);
        std::process::exit(f.code.code());
    }
    code
}

/// Run every rank of an in-process world on its own thread; rank 0 reports. The first failure
/// ends the process at once (the record finished first): its peers may be blocked for good
/// waiting for the failed rank, and the thread scope would wait for them.
fn run_threads<C: Communicator + Send>(
    comms: Vec<C>,
    plan: &Plan,
    watchdog: &Watchdog,
    rank0: &Rank0,
    args: &SweepArgs,
) -> Result<(), Failure> {
    let nranks = comms.len();
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), Failure>>();
    std::thread::scope(|scope| {
        for mut comm in comms {
            let tx = tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("rank{}", comm.rank()))
                .spawn_scoped(scope, move || {
                    let is_zero = comm.rank() == 0;
                    let r = run_rank(
                        &mut comm,
                        plan,
                        is_zero.then_some(watchdog),
                        is_zero.then_some(rank0),
                    );
                    let _ = tx.send(r);
                });
            if let Err(e) = spawned {
                return Err(Failure::internal(format!(
                    "cannot start a rank thread: {e}"
                )));
            }
        }
        drop(tx);
        for r in rx.iter().take(nranks) {
            if let Err(f) = r {
                let _ = finish_or_exit(rank0, args, Err(f));
            }
        }
        Ok(())
    })
}

/// The largest power of two that fits three buffers of one message in `free` bytes.
fn device_memory_limit(free: usize) -> u64 {
    let per = (free as u64 / 3).max(1);
    1u64 << (63 - per.leading_zeros())
}

fn nccl_libraries(api: &crate::backend::nccl_comm::Api) -> BTreeMap<String, String> {
    let (driver_path, driver_version) = &api.driver;
    [
        (
            "nccl".to_string(),
            format!("{} ({})", api.nccl.version(), api.nccl.path.display()),
        ),
        (
            "cuda-driver".to_string(),
            format!(
                "{}.{} ({})",
                driver_version / 1000,
                driver_version % 1000 / 10,
                driver_path.display()
            ),
        ),
    ]
    .into()
}

/// torchrun-style environment: (rank, world, local rank, local world, master addr, port).
fn torchrun_env() -> Option<(usize, usize, usize, Option<usize>, String, u16)> {
    let get = |k: &str| std::env::var(k).ok();
    let rank = get("RANK")?.parse().ok()?;
    let world = get("WORLD_SIZE")?.parse().ok()?;
    let local = get("LOCAL_RANK")
        .and_then(|v| v.parse().ok())
        .unwrap_or(rank);
    let local_world = get("LOCAL_WORLD_SIZE").and_then(|v| v.parse().ok());
    let addr = get("MASTER_ADDR")?;
    let port: u16 = match get("NCCLPROBE_RENDEZVOUS_PORT") {
        Some(p) => p.parse().ok()?,
        None => get("MASTER_PORT")?.parse::<u16>().ok()?.checked_add(1)?,
    };
    Some((rank, world, local, local_world, addr, port))
}

/// Where this process sits in a one-GPU-per-process job.
struct Launch {
    rank: usize,
    world: usize,
    local: usize,
    local_world: Option<usize>,
    how: &'static str,
}

/// One rank of a multi-process NCCL job: pick the GPU by local rank, rendezvous, sweep.
fn run_nccl_rank(
    args: &SweepArgs,
    selection: &Selection,
    api: &std::sync::Arc<crate::backend::nccl_comm::Api>,
    launch: Launch,
    connect: impl FnOnce(
        std::time::Duration,
    ) -> Result<
        Box<dyn crate::backend::nccl_comm::ControlPlane>,
        crate::backend::BackendError,
    >,
) -> Result<ExitCode, Failure> {
    use crate::backend::nccl_comm::NcclComm;
    let Launch {
        rank,
        world,
        local,
        local_world,
        how,
    } = launch;
    let libraries = nccl_libraries(api);
    let device = (local % api.devices as usize) as std::ffi::c_int;
    let mut notes = Vec::new();
    let sharing = local_world.unwrap_or(world);
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() && sharing > 1 {
        let n = format!("rank {rank}: CUDA_VISIBLE_DEVICES is not set while {sharing} ranks share this host; using GPU {device} by local rank (see `ncclprobe diagnose`)");
        eprintln!("ncclprobe: {n}");
        notes.push(n);
    }
    api.use_device(device)
        .map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?;
    let mut plan = Plan::from_args(args, api.free_memory().map(device_memory_limit))?;
    plan.notes.extend(notes);
    let watchdog = Watchdog::start(plan.settings.timeout_s);
    watchdog.arm(format!("rendezvous of {world} ranks"));
    let plane = connect(std::time::Duration::from_secs_f64(plan.settings.timeout_s))
        .map_err(|e| Failure::internal(e.to_string()))?;
    watchdog.arm(format!("ncclCommInitRank of rank {rank} of {world}"));
    let mut comm = NcclComm::new(std::sync::Arc::clone(api), rank, world, device, plane)
        .map_err(|e| Failure::internal(format!("--backend nccl: {e}")))?;
    configure(&mut comm, &plan)?;
    watchdog.disarm();
    let rank0 = (rank == 0).then(|| {
        let r0 = make_rank0(
            args,
            new_record(&plan, selection, libraries.clone()),
            &watchdog,
        );
        banner(
            &r0,
            &plan,
            selection,
            &format!("{world} ranks, one GPU per process ({how})"),
            &libraries,
        );
        r0
    });
    let result = run_rank(&mut comm, &plan, Some(&watchdog), rank0.as_ref());
    match &rank0 {
        Some(r0) => finish_or_exit(r0, args, result),
        None => result.map(|_| ExitCode::Ok),
    }
}

#[cfg(not(feature = "mpi"))]
fn run_nccl_under_mpi(
    _: &SweepArgs,
    _: Selection,
    _: &std::sync::Arc<crate::backend::nccl_comm::Api>,
    world: usize,
) -> Result<ExitCode, Failure> {
    Err(Failure::unavailable(format!(
        "--backend nccl: launched by an MPI launcher with {world} ranks, but this build has no MPI support to exchange the NCCL unique id; rebuild with --features mpi, or launch with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"
    )))
}

/// Under mpirun/srun: MPI carries the unique id and the harness's exchanges.
#[cfg(feature = "mpi")]
fn run_nccl_under_mpi(
    args: &SweepArgs,
    selection: Selection,
    api: &std::sync::Arc<crate::backend::nccl_comm::Api>,
    _world: usize,
) -> Result<ExitCode, Failure> {
    struct MpiPlane(mpi_backend::MpiSession);
    impl crate::backend::nccl_comm::ControlPlane for MpiPlane {
        fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, crate::backend::BackendError> {
            self.0.comm.allgather_bytes(data)
        }
    }
    let session = mpi_backend::start().map_err(|e| Failure::unavailable(e.to_string()))?;
    let (rank, world) = (session.comm.rank(), session.comm.nranks());
    let local = [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
        "PMIX_LOCAL_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(rank);
    let launch = Launch {
        rank,
        world,
        local,
        local_world: mpi_backend::launcher_local_size(),
        how: "MPI launcher",
    };
    run_nccl_rank(args, &selection, api, launch, move |_| {
        Ok(Box::new(MpiPlane(session)) as Box<dyn crate::backend::nccl_comm::ControlPlane>)
    })
}

fn run_nccl(args: &SweepArgs, selection: Selection) -> Result<ExitCode, Failure> {
    use crate::backend::nccl::{describe_attempts, find_nccl};
    use crate::backend::nccl_comm::{Api, NcclComm, Tcp};
    let nccl = find_nccl(args.backend.nccl_lib.as_deref())
        .map_err(|a| Failure::unavailable(format!("--backend nccl: {}", describe_attempts(&a))))?;
    let api = std::sync::Arc::new(
        Api::load(nccl).map_err(|e| Failure::unavailable(format!("--backend nccl: {e}")))?,
    );
    let libraries = nccl_libraries(&api);

    if let Some((rank, world, local, local_world, addr, port)) = torchrun_env() {
        // One process per GPU; the unique id travels over our TCP rendezvous.
        let launch = Launch {
            rank,
            world,
            local,
            local_world,
            how: "torchrun-style environment",
        };
        return run_nccl_rank(args, &selection, &api, launch, |timeout| {
            Tcp::connect(rank, world, &addr, port, timeout)
                .map(|t| Box::new(t) as Box<dyn crate::backend::nccl_comm::ControlPlane>)
        });
    }
    if let Some(world) = mpi_backend::launcher_world_size().filter(|&n| n > 1) {
        return run_nccl_under_mpi(args, selection, &api, world);
    }

    // One process, several GPUs (-g N).
    let ngpus = args.backend.ngpus.unwrap_or(api.devices as usize);
    if ngpus == 0 || ngpus > api.devices as usize {
        return Err(Failure::usage(format!(
            "-g/--ngpus: {ngpus} GPUs asked for, {} visible",
            api.devices
        )));
    }
    let devices: Vec<std::ffi::c_int> = (0..ngpus as std::ffi::c_int).collect();
    let free = devices
        .iter()
        .filter_map(|&d| api.use_device(d).ok().and_then(|_| api.free_memory()))
        .min();
    let plan = Plan::from_args(args, free.map(device_memory_limit))?;
    let watchdog = Watchdog::start(plan.settings.timeout_s);
    let mut record = new_record(&plan, &selection, libraries.clone());
    let copy_bytes = (64usize << 20).min(plan.settings.max_bytes.max(1 << 20) as usize);
    for &d in &devices {
        let name = api.device_name(d);
        for (pinned, to_device) in [(false, true), (true, true), (false, false), (true, false)] {
            if let Ok(bw) = api
                .use_device(d)
                .and_then(|_| api.copy_bandwidth(copy_bytes, pinned, to_device))
            {
                record
                    .calibration
                    .copy_bandwidth
                    .push(crate::model::CopyBandwidth {
                        device: d as usize,
                        name: name.clone(),
                        direction: if to_device {
                            "host-to-device"
                        } else {
                            "device-to-host"
                        }
                        .into(),
                        pinned,
                        size_bytes: copy_bytes as u64,
                        bytes_per_s: bw,
                    });
            }
        }
    }
    let rank0 = make_rank0(args, record, &watchdog);
    banner(
        &rank0,
        &plan,
        &selection,
        &format!("{ngpus} GPUs driven by one process (-g {ngpus})"),
        &libraries,
    );
    watchdog.arm(format!("ncclCommInitAll of {ngpus} GPUs"));
    let result = NcclComm::init_all(std::sync::Arc::clone(&api), &devices)
        .map_err(|e| Failure::internal(format!("--backend nccl: {e}")))
        .and_then(|mut comms| {
            watchdog.disarm();
            for c in &mut comms {
                configure(c, &plan)?;
            }
            run_threads(comms, &plan, &watchdog, &rank0, args)
        });
    finish_or_exit(&rank0, args, result)
}

fn run_mpi(args: &SweepArgs, selection: Selection) -> Result<ExitCode, Failure> {
    let session = mpi_backend::start().map_err(|e| Failure::unavailable(e.to_string()))?;
    run_mpi_session(args, selection, session)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi_session(
    _: &SweepArgs,
    _: Selection,
    _: mpi_backend::MpiSession,
) -> Result<ExitCode, Failure> {
    Err(Failure::unavailable(
        "--backend mpi: this build has no MPI support",
    ))
}

#[cfg(feature = "mpi")]
fn run_mpi_session(
    args: &SweepArgs,
    selection: Selection,
    mut session: mpi_backend::MpiSession,
) -> Result<ExitCode, Failure> {
    let comm = &mut session.comm;
    let local = mpi_backend::launcher_local_size().unwrap_or(comm.nranks());
    let plan = Plan::from_args(args, memory_limit(local))?;
    let watchdog = Watchdog::start(plan.settings.timeout_s);
    let libraries: BTreeMap<String, String> = [("mpi".to_string(), comm.library.clone())].into();
    let rank0 = (comm.rank() == 0).then(|| {
        let r0 = make_rank0(
            args,
            new_record(&plan, &selection, libraries.clone()),
            &watchdog,
        );
        banner(
            &r0,
            &plan,
            &selection,
            &format!("{} ranks, one per process", comm.nranks()),
            &libraries,
        );
        r0
    });
    let result = run_rank(comm, &plan, Some(&watchdog), rank0.as_ref());
    match &rank0 {
        Some(r0) => finish(r0, args, result),
        None => result.map(|_| ExitCode::Ok),
    }
}
