//! A sweep (or a pair matrix) from the engine's options, as a command or a library user starts
//! one: refuse what cannot be done before measuring, pick the backend, run its ranks.

use super::options::Options;
use super::select::{select_backend, Backend, Environment, Selection};
use super::worlds;
use crate::exit::{ExitCode, Failure};
use crate::matrix::options::Options as MatrixOptions;
use crate::render::record::paths::Files;

/// Run what `options` asks: collectives, or pairs when `options.matrix` is set.
pub fn run(options: &Options) -> Result<ExitCode, Failure> {
    match &options.matrix {
        Some(matrix) => pairs(options, matrix),
        None => collectives(options),
    }
}

fn start(options: &Options, selection: &Selection) -> Result<ExitCode, Failure> {
    match selection.backend {
        Backend::Host => worlds::host_threads(options, selection),
        Backend::Mpi => worlds::mpi(options, selection),
        Backend::Nccl => worlds::nccl(options, selection),
    }
}

/// Every file a sweep (or a pair matrix) reads and writes, for the output-path guard: checked
/// before anything is measured.
/// Check `files(args)` where this process writes them: on rank 0, or with no launcher. The
/// other ranks of a launched job write nothing, and the directories their flags name may not
/// exist yet when they start (doctor's rank 0 creates its report directory), so they check
/// only what they read.
fn check_files(args: &Options) -> Result<(), Failure> {
    if !writes_outputs() {
        return inputs(args).check();
    }
    files(args).check()?;
    // A store the run could not be kept in is refused now, not after the measurement.
    if let Some(target) = &args.history {
        crate::history::open::preflight(&target.location, crate::history::open::Access::Write)
            .map_err(crate::history::keep::failure)?;
    }
    Ok(())
}

/// Whether this process writes the outputs: rank 0 of a launched job, or no launcher.
fn writes_outputs() -> bool {
    let launched = crate::backend::launcher::from_env().map_or(0, |l| l.rank);
    crate::backend::mpi::launcher_rank() == 0 && launched == 0
}

/// What a sweep reads (every rank).
fn inputs(args: &Options) -> Files {
    Files::new()
        .input("--rules", args.gate.rules.rules.as_deref())
        .alltoallv_matrix_env()
        .input(
            "--alltoallv-matrix",
            args.what.traffic_matrix.as_ref().map(|(p, _)| p.as_path()),
        )
}

pub fn files(args: &Options) -> Files {
    let perf_json = args.perf.as_ref().and_then(|p| p.json.as_deref());
    let files = inputs(args)
        .output("--junit", args.gate.rules.junit.as_deref())
        .output("-J", perf_json);
    let files = args.report.files(files, "--report");
    let files = args.output.files(files);
    // The store and SQLite's files beside it are inputs: no output may replace them.
    let store = args
        .history
        .iter()
        .flat_map(|t| crate::history::open::store_files(&t.location));
    store.fold(files, |files, p| files.input("--history", Some(&p)))
}

fn collectives(args: &Options) -> Result<ExitCode, Failure> {
    check_files(args)?;
    let outcome = gated_collectives(args);
    if let (Err(f), Some(path)) = (&outcome, &args.gate.rules.junit) {
        error_junit(path, f)?;
    }
    outcome
}

/// `--junit` of a gate that ended without its verdict (refused, no backend, the run lost before
/// it was judged): the file says so as an `<error>` test case, written by the process that
/// writes the outputs, unless the gate's own verdict is already in it.
fn error_junit(path: &std::path::Path, f: &Failure) -> Result<(), Failure> {
    if !writes_outputs() || super::report::JUNIT_WRITTEN.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    let cx = crate::render::expect::SuiteContext {
        hostname: hostname::get()
            .ok()
            .map(|h| h.to_string_lossy().into_owned()),
        timestamp: Some(crate::model::now_rfc3339()),
        time: None,
    };
    let xml = crate::render::expect::junit_error(
        "ncclprobe qualify (this sweep)",
        &f.message,
        f.code,
        &cx,
    )?;
    crate::render::record::write_document("--junit", path, xml.as_bytes())
}

fn gated_collectives(args: &Options) -> Result<ExitCode, Failure> {
    args.report.destinations()?;
    if args.gate.requested() {
        // A bad rules file or profile is refused before anything is measured.
        crate::expect::gate::rules_from(&args.gate.rules, &args.gate.qualify)?;
        if let Some(id) = &args.gate.qualify {
            let table = crate::expect::shipped();
            if table.get(id).is_none() {
                let ids = table.ids();
                return Err(Failure::usage(format!(
                    "--qualify: unknown profile `{id}`{}; valid names: {}",
                    crate::flags::did_you_mean(id, &ids),
                    ids.join(", ")
                )));
            }
        }
    } else if args.gate.retries > 0 {
        return Err(Failure::usage(
            "--retries re-measures the points a gate failed: give --qualify PROFILE or rules",
        ));
    }
    if args.backend.backend == super::options::BackendChoice::Host && args.backend.ranks == Some(1)
    {
        crate::expect::gate::one_rank(&args.gate.rules, &args.gate.qualify)?;
    }
    // Flags are refused before any library is loaded, so a bad one reads the same on every
    // machine (the backend's own plan adds only its memory limit).
    crate::plan::Plan::from_options(args, None)?;
    let env = Environment::detect();
    let selection = select_backend(args.backend.backend, &env, args.backend.nccl_lib.as_deref())?;
    if args.backend.register != 0 && selection.backend != Backend::Nccl {
        return Err(Failure::usage(format!(
            "-R/--register: buffer registration is an NCCL feature; the {} backend has none ({})",
            selection.backend.name(),
            selection.reason
        )));
    }
    if let (Some(id), false) = (&args.gate.qualify, selection.backend == Backend::Nccl) {
        return Err(super::gate_checks::profile_needs_nccl(
            id,
            selection.backend,
        ));
    }
    start(args, &selection)
}

fn pairs(options: &Options, matrix: &MatrixOptions) -> Result<ExitCode, Failure> {
    if !(matrix.outlier > 0.0 && matrix.outlier < 1.0) {
        return Err(Failure::usage(format!(
            "--outlier: {} is not a fraction between 0 and 1 (0.5: name pairs below half the median pair)",
            matrix.outlier
        )));
    }
    check_files(options)?;
    let env = Environment::detect();
    let backend = &options.backend;
    let selection = select_backend(backend.backend, &env, backend.nccl_lib.as_deref())?;
    if backend.register != 0 {
        return Err(Failure::usage(
            "-R/--register: matrix uses plain buffers; buffer registration is a sweep option",
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ranks = backend.ranks.unwrap_or(cores.max(2));
    let mut options = options.clone();
    if selection.backend == Backend::Host && ranks > cores && !matrix.one_pair_at_a_time {
        // Rounds of pairs on fewer cores than threads time which thread the scheduler ran,
        // not the pairs: one pair at a time leaves a core to each end.
        crate::term::note(&format!("{ranks} host ranks on {cores} cores: measuring one pair at a time (rounds of pairs would share the cores; the two ends of a pair get a core each)"));
        if let Some(m) = options.matrix.as_mut() {
            std::sync::Arc::make_mut(m).one_pair_at_a_time = true;
        }
    }
    start(&options, &selection)
}
