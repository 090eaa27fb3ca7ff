//! ncclprobe called by an nccl-tests name (`all_reduce_perf`): that binary's flags, output and
//! exit statuses, measured by the sweep engine on nccl-tests' schedule.

use crate::cli::perf::{self, status};
use crate::coll::Collective;
use crate::exit::{ExitCode, Failure};
use crate::render::perf_json;
use std::ffi::OsString;
use std::path::Path;

/// Run as `program` with the arguments after it; the process's exit status.
pub fn run(program: &str, coll: Collective, args: &[OsString]) -> i32 {
    let flags = match perf::parse(program, args) {
        Ok(f) => f,
        Err(stop) => {
            if let Err(code) = say(&stop.stdout) {
                return code;
            }
            eprint!("{}", stop.stderr);
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
    let argv: Vec<String> = std::iter::once(program.to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect();
    let mut flags = flags;
    // -J: claimed before anything else is printed, as jsonOutputInit does (src/common.cu, main).
    flags.output_file = flags
        .output_file
        .take()
        .filter(|path| perf_json::is_json_name(path))
        .and_then(|path| {
            let (claimed, line) = perf_json::claim(&path);
            // A closed stdout is found again (and ends the run) at the banner.
            let _ = say(&format!("{line}\n"));
            claimed.map(|p| p.to_string_lossy().into_owned())
        });
    let split = crate::sweep::split::from_env(
        std::env::var("NCCL_TESTS_SPLIT_MASK").ok().as_deref(),
        std::env::var("NCCL_TESTS_SPLIT").ok().as_deref(),
    );
    let mut options = perf::options(program, coll, &flags, argv);
    options.backend.split = match split {
        Ok(split) => split,
        Err(e) => {
            eprintln!("ncclprobe: {program}: {e}");
            return status::INVALID_USAGE;
        }
    };
    // alltoallv_perf reads its matrix before anything runs (AlltoAllvInit) and fails the test
    // with testInternalError when it cannot.
    if let (Collective::Alltoallv, Some(path)) =
        (coll, std::env::var_os("NCCL_TESTS_ALLTOALLV_MATRIX_FILE"))
    {
        let scale = crate::coll::Traffic::matrix_scale(
            std::env::var("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE")
                .ok()
                .as_deref(),
        );
        match crate::coll::traffic::read_matrix(Path::new(&path), scale) {
            Ok(traffic) => options.what.traffic = traffic,
            Err(e) => {
                return say(&format!("{e}\n")).err().unwrap_or(status::INTERNAL);
            }
        }
    }
    // atoi(...) != 0, as AlltoAllvParseEnv reads it.
    let summary =
        std::env::var("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY").is_ok_and(|v| perf::strtol(&v) != 0);
    if let (Collective::Alltoallv, true, Some(style)) = (coll, summary, options.perf.as_mut()) {
        std::sync::Arc::make_mut(style).alltoallv_summary = Some(options.what.traffic.clone());
    }
    match crate::sweep::run(&options) {
        Ok(code) => code_of(code),
        Err(failure) => {
            eprintln!("ncclprobe: {}", failure.message);
            if failure.code == ExitCode::CheckFailed {
                // TESTCHECK(result) in main (src/common.cu) says where the run failed.
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
    }
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
