//! ncclprobe called by an nccl-tests name (`all_reduce_perf`): that binary's flags, output and
//! exit statuses, measured by the sweep engine on nccl-tests' schedule.

use crate::cli::perf::{self, status};
use crate::coll::Collective;
use crate::exit::{ExitCode, Failure};
use crate::render::perf_json;
use crate::render::record::paths::Files;
use std::ffi::OsString;
use std::path::Path;

/// Run as `program` (called as `argv0`) with the arguments after it; the process's exit status.
pub fn run(argv0: &str, program: &str, coll: Collective, args: &[OsString]) -> i32 {
    let flags = match perf::parse(argv0, program, args) {
        Ok(f) => f,
        Err(stop) => {
            // getopt's complaint comes first, as glibc writes it before nccl-tests' printf.
            eprint!("{}", stop.stderr);
            if let Err(code) = say(&stop.stdout) {
                return code;
            }
            return stop.code;
        }
    };
    if !coll.is_measured() {
        eprintln!("ncclprobe: {program}: ncclprobe does not run {coll} (it reads its output: `ncclprobe import`)");
        return status::NOT_IMPLEMENTED;
    }
    if let Some(what) = perf::unsupported(&flags) {
        eprintln!("ncclprobe: {program}: not supported by ncclprobe: {what}");
        return status::NOT_IMPLEMENTED;
    }
    let per_process = match perf::ranks(&flags) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("ncclprobe: {program}: {e}");
            return status::INVALID_USAGE;
        }
    };
    let argv: Vec<String> = std::iter::once(program.to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    let mut flags = flags;
    let output_file = flags
        .output_file
        .take()
        .filter(|path| perf_json::is_json_name(path));
    // The files are checked before -J claims its own (a refusal leaves no empty file behind).
    if let Err(e) = guard(output_file.as_deref(), flags.json.as_deref()) {
        eprintln!("ncclprobe: {}", e.message);
        return status::INVALID_USAGE;
    }
    // -J: claimed before anything else is printed, as jsonOutputInit does (src/common.cu, main).
    flags.output_file = output_file.and_then(|path| {
        let (claimed, line) = perf_json::claim(&path);
        // A closed stdout is found again (and ends the run) at the banner.
        let _ = say(&format!("{line}\n"));
        claimed.map(|p| p.to_string_lossy().into_owned())
    });
    let mut options = perf::options(program, coll, &flags, argv);
    // An nccl-tests build without MPI never reads NCCL_TESTS_SPLIT (src/common.cu:1496-1528
    // sit inside `#ifdef MPI_SUPPORT`): read here, it is applied only where ranks are
    // processes of a launched job, and a run of one process says it is not applied.
    options.backend.split = crate::sweep::split::from_env(
        std::env::var("NCCL_TESTS_SPLIT_MASK").ok().as_deref(),
        std::env::var("NCCL_TESTS_SPLIT").ok().as_deref(),
    );
    // Every rank of the job: a launcher's processes (one GPU each), or this process's t x g.
    let nranks = crate::backend::launcher::from_env().map_or(per_process, |l| l.world);
    if let Some(code) = before_the_run(coll, &flags, nranks) {
        return code;
    }
    // alltoallv_perf reads its matrix before anything runs (AlltoAllvInit) and fails the test
    // with testInternalError when it cannot; its sentences go to stdout (PRINT, a printf).
    if let (Collective::Alltoallv, Some(path)) =
        (coll, std::env::var_os("NCCL_TESTS_ALLTOALLV_MATRIX_FILE"))
    {
        let scale = crate::coll::Traffic::matrix_scale(
            std::env::var("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE")
                .ok()
                .as_deref(),
        );
        let read = crate::coll::traffic::read_matrix(Path::new(&path), scale).and_then(|t| {
            t.check(nranks, flags.min_bytes, flags.max_bytes)?;
            Ok(t)
        });
        match read {
            Ok(traffic) => options.what.traffic = traffic,
            Err(e) => return say(&format!("{e}\n")).err().unwrap_or(status::INTERNAL),
        }
    }
    // atoi(...) != 0, as AlltoAllvParseEnv reads it.
    let summary =
        std::env::var("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY").is_ok_and(|v| perf::atoi(&v) != 0);
    if let (Collective::Alltoallv, true, Some(style)) = (coll, summary, options.perf.as_mut()) {
        std::sync::Arc::make_mut(style).alltoallv_summary = Some(options.what.traffic.clone());
    }
    match crate::sweep::run(&options) {
        Ok(code) => code_of(code),
        Err(failure) => ended(failure),
    }
}

/// The outputs against the inputs before anything is written (D4: -J's claim creates its
/// file): -J as it would be claimed, --json, and NCCL_TESTS_ALLTOALLV_MATRIX_FILE's matrix.
fn guard(output_file: Option<&str>, json: Option<&str>) -> Result<(), Failure> {
    // A -J whose directory is missing is not an error: nccl-tests skips it (jsonOutputInit).
    let claim = output_file.map(perf_json::unclaimed).filter(|p| {
        p.parent()
            .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir())
    });
    Files::new()
        .alltoallv_matrix_env()
        .output("-J", claim.as_deref())
        .output("--json", json.map(Path::new))
        .check()
}

/// What nccl-tests ends the run with before it measures, given every rank of the job: a root
/// outside the ranks (NCCL's ArgsCheck refuses it: the warm-up's NCCLCHECK fails the test, exit
/// 3) and hypercube on a rank count that is not a power of two (src/hypercube.cu:104-112:
/// said, and nothing run, exit 0).
fn before_the_run(coll: Collective, flags: &perf::PerfFlags, nranks: usize) -> Option<i32> {
    if coll == Collective::Hypercube && !nranks.is_power_of_two() {
        let said = say(&format!("nRanks {nranks} is not a power of 2, skipping\n"));
        return Some(said.err().unwrap_or(status::SUCCESS));
    }
    let root = flags.root;
    if !coll.is_rooted() || root == -1 || (0..nranks as i64).contains(&root) {
        return None;
    }
    // NCCLCHECK's line (src/common.h:42-54, NCCL 2.13 and later) at the call in <coll>.cu,
    // then TESTCHECK's (src/common.h:81-91) up the main thread's calls: startColl
    // (common.cu:596), TimeTest's warm-up (common.cu:928), <coll>RunTest, threadRunTests
    // (common.cu:972), run (common.cu:1768) and main (common.cu:1454).
    let (file, call, test, name) = match coll {
        Collective::Broadcast => ("broadcast.cu", 50, 103, "Broadcast"),
        Collective::Reduce => ("reduce.cu", 46, 104, "Reduce"),
        Collective::Gather => ("gather.cu", 58, 117, "Gather"),
        _ => ("scatter.cu", 54, 113, "Scatter"),
    };
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let pid = std::process::id();
    let mut text = format!(
        "{host}: Test NCCL failure {file}:{call} 'invalid argument (run with NCCL_DEBUG=WARN for details) / {name} : invalid root {root} (root should be in the 0..{nranks} range)'\n"
    );
    for at in [
        "common.cu:596".to_string(),
        "common.cu:928".into(),
        format!("{file}:{test}"),
        "common.cu:972".into(),
        "common.cu:1768".into(),
        "common.cu:1454".into(),
    ] {
        text.push_str(&format!(" .. {host} pid {pid}: Test failure {at}\n"));
    }
    Some(say(&text).err().unwrap_or(status::NCCL))
}

/// A run that failed: ncclprobe's reason on stderr (none for a reader that went away: a clean
/// 141, as a tool killed by SIGPIPE), and where the test failed as main's TESTCHECK says it.
fn ended(failure: Failure) -> i32 {
    if !failure.message.is_empty() {
        eprintln!("ncclprobe: {}", failure.message);
    }
    if failure.code == ExitCode::CheckFailed {
        // TESTCHECK(result) in main (src/common.cu:1454) says where the run failed.
        let host = hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let line = format!(
            " .. {host} pid {}: Test failure common.cu:1454\n",
            std::process::id()
        );
        if let Err(code) = say(&line) {
            return code;
        }
    }
    code_of(failure.code)
}

/// Stdout through the one writer; a reader that went away (or a full disk) ends the run with
/// the exit status to return.
fn say(text: &str) -> Result<(), i32> {
    crate::exit::print(text).map_err(|f| {
        if !f.message.is_empty() {
            eprintln!("ncclprobe: {}", f.message);
        }
        f.code.code()
    })
}

/// ncclprobe's exit codes as nccl-tests' (src/common.h, testResult_t).
fn code_of(code: ExitCode) -> i32 {
    match code {
        ExitCode::Ok => status::SUCCESS,
        ExitCode::Internal => status::INTERNAL,
        ExitCode::Usage => status::INVALID_USAGE,
        ExitCode::CheckFailed => status::RESULTS,
        ExitCode::Timeout => status::TIMEOUT,
        ExitCode::BackendUnavailable => status::NOT_IMPLEMENTED,
        // A peer that died shows in NCCL as a remote error: NCCLCHECK's testNcclError.
        ExitCode::PeerLost => status::NCCL,
        ExitCode::Interrupted | ExitCode::Terminated | ExitCode::ClosedPipe => code.code(),
    }
}

/// `ncclprobe aliases DIR`: a link per collective ncclprobe measures, named as nccl-tests'
/// binary, to this executable. A name already taken by something else is not touched; a link
/// that already points here is kept. Fails (usage) when any name could not be made.
pub fn aliases(dir: &Path, mpi: bool) -> Result<ExitCode, Failure> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::internal(format!("where this ncclprobe is: {e}")))?;
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))?;
    let suffix = if mpi { "_perf_mpi" } else { "_perf" };
    let mut refused = Vec::new();
    for coll in Collective::ALL.into_iter().chain(Collective::EXTRA) {
        let link = dir.join(format!("{}{suffix}", coll.name()));
        let ours = std::fs::canonicalize(&link).is_ok_and(|target| target == exe);
        let made = if ours {
            Ok("kept")
        } else {
            std::os::unix::fs::symlink(&exe, &link).map(|_| "made")
        };
        match made {
            Ok(how) => crate::outln!("{} -> {} ({how})", link.display(), exe.display()),
            Err(e) => {
                eprintln!("ncclprobe: {}: {e}; left as it is", link.display());
                refused.push(link.display().to_string());
            }
        }
    }
    if refused.is_empty() {
        Ok(ExitCode::Ok)
    } else {
        Err(Failure::usage(format!(
            "{} name(s) taken by something else: {}",
            refused.len(),
            refused.join(", ")
        )))
    }
}
