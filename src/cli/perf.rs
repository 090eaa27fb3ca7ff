//! ncclprobe called by one of nccl-tests' names (`all_reduce_perf`, a link or a copy): its
//! flags with its letters, values and defaults (nccl-tests 2.19.6, src/common.cu, main), turned
//! into the sweep engine's options on nccl-tests' own schedule, with its output and exit status.

use crate::coll::Collective;
use crate::model::Schedule;
use crate::sweep::options::{
    BackendChoice, BackendOptions, Options, PerfStyle, Sizes, Timing, What,
};
use crate::units::cnum;
use std::ffi::OsString;
use std::path::PathBuf;

mod getopt;

/// nccl-tests' exit statuses (src/common.h, testResult_t): main returns the first failure.
pub mod status {
    pub const SUCCESS: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const NCCL: i32 = 3;
    pub const TIMEOUT: i32 = 4;
    pub const NOT_IMPLEMENTED: i32 = 5;
    pub const INVALID_USAGE: i32 = 6;
    /// testNumResults: what run() returns when a check failed or the average is too low.
    pub const RESULTS: i32 = 7;
    /// `return -1` from main, for sizes it cannot read and contradictory flags.
    pub const BAD_FLAGS: i32 = 255;
}

/// The collective a program name stands for: `all_reduce_perf`, `all_reduce_perf_mpi`.
pub fn program(argv0: &std::ffi::OsStr) -> Option<(String, Collective)> {
    let name = std::path::Path::new(argv0)
        .file_name()?
        .to_str()?
        .to_string();
    let stem = name
        .strip_suffix("_perf_mpi")
        .or_else(|| name.strip_suffix("_perf"))?;
    let coll = Collective::parse(stem)?;
    (coll.name() == stem).then_some((name, coll))
}

/// The usage text nccl-tests prints for -h and for an unknown option.
fn usage(program: &str) -> String {
    let lines = [
        "[-t,--nthreads <num threads>] ",
        "[-g,--ngpus <gpus per thread>] ",
        "[-b,--minbytes <min size in bytes>] ",
        "[-e,--maxbytes <max size in bytes>] ",
        "[-i,--stepbytes <increment size>] ",
        "[-f,--stepfactor <increment factor>] ",
        "[-n,--iters <iteration count>] ",
        "[-m,--agg_iters <aggregated iteration count>] ",
        "[-w,--warmup_iters <warmup iteration count>] ",
        "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] ",
        "[-p,--parallel_init <0/1>] ",
        "[-c,--check <check iteration count>] ",
        "[-o,--op <sum/prod/min/max/avg/mulsum/all>] ",
        "[-d,--datatype <nccltype/all>] ",
        "[-r,--root <root>] ",
        "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after each outer iter (-n)] ",
        "[-y,--stream_null <0/1>] ",
        "[-T,--timeout <time in seconds>] ",
        "[-G,--cudagraph <num graph launches>] ",
        "[-C,--report_cputime <0/1>] ",
        "[-S,--report_timestamps <0/1> report timestamps (default 0)] ",
        "[-J,--output_file <file> write output to filepath, if accessible. Infer type from suffix (only json supported presently.)] ",
        "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] ",
        "[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration on send/recv buffers (default: disable (0))] ",
        "[-x,--cta_policy <0/1/2> set CTA policy (NCCL_CTA_POLICY_DEFAULT (0), NCCL_CTA_POLICY_EFFICIENCY (1), NCCL_CTA_POLICY_ZERO (2)) (default: do not set)] ",
        "[-D,--device_implementation <implementation number> enable device implementation (default: 0, use NCCL implementation; requires -R 2 if > 0)] ",
        "[-V,--device_cta_count <number> set number of CTAs for device implementation (default: 16)] ",
        "[-M,--memory <0/1> enable memory usage report (default: 0)] ",
        "[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] ",
        "[-I,--per_iter_timing <0/1> per-iteration CUDA event timing\n\t    (best with -z 0, -z 2, or -z 3; with -z 1 includes barrier wait;\n\t    i_p99 uses nearest-rank percentile and may equal i_max\n\t    with <100 samples) (default: 0)] ",
        "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] ",
        "[-h,--help]",
    ];
    format!("USAGE: {program} \n\t{}\n", lines.join("\n\t"))
}

/// The flags as nccl-tests holds them after parsing, defaults filled in (src/common.cu).
#[derive(Debug, Clone, PartialEq)]
pub struct PerfFlags {
    pub nthreads: i64,
    pub ngpus: i64,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_bytes: u64,
    pub step_factor: i64,
    pub iters: i64,
    pub agg_iters: i64,
    pub warmup_iters: i64,
    pub run_cycles: i64,
    pub parallel_init: i64,
    pub check: i64,
    pub op: String,
    pub datatype: String,
    pub root: i64,
    pub blocking: i64,
    pub stream_null: i64,
    pub timeout: i64,
    pub cudagraph: i64,
    pub report_cputime: i64,
    pub report_timestamps: i64,
    pub output_file: Option<String>,
    pub average: i64,
    pub local_register: i64,
    pub cta_policy: Option<i64>,
    pub device_implementation: i64,
    pub memory: i64,
    pub unalign: i64,
    pub per_iter_timing: i64,
    pub per_iter_skip: i64,
    /// ncclprobe's own: its run record, and the backend.
    pub json: Option<String>,
    pub backend: Option<String>,
}

/// What parsing ends in besides flags: text to print and the status to exit with.
#[derive(Debug, PartialEq)]
pub struct Stop {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Stop {
    fn err(text: String, code: i32) -> Stop {
        Stop {
            stdout: String::new(),
            stderr: text,
            code,
        }
    }
}

impl Default for PerfFlags {
    /// nccl-tests' defaults (src/common.cu:90-120).
    fn default() -> Self {
        PerfFlags {
            nthreads: 1,
            ngpus: 1,
            min_bytes: 32 << 20,
            max_bytes: 32 << 20,
            step_bytes: 1 << 20,
            step_factor: 1,
            iters: 20,
            agg_iters: 1,
            warmup_iters: 1,
            run_cycles: 1,
            parallel_init: 0,
            check: 1,
            op: "sum".into(),
            datatype: "float".into(),
            root: 0,
            blocking: 0,
            stream_null: 0,
            timeout: 0,
            cudagraph: 0,
            report_cputime: 0,
            report_timestamps: 0,
            output_file: None,
            average: 1,
            local_register: 0,
            cta_policy: None,
            device_implementation: 0,
            memory: 0,
            unalign: 0,
            per_iter_timing: 0,
            per_iter_skip: 0,
            json: None,
            backend: None,
        }
    }
}

/// `(int)strtol(optarg, NULL, 0)`, as nccl-tests reads every number but the sizes.
fn int(value: &str) -> i64 {
    cnum::c_int(cnum::strtol(value, 0).0)
}

/// nccl-tests' `parsesize` (src/common.cu:227-260): `sscanf(value, "%lf %1s")`, then K, M or G
/// (binary, either case) when a letter follows; -1 where it cannot read one.
pub fn parsesize(value: &str) -> f64 {
    let Some((size, rest)) = cnum::scan_lf(value) else {
        return -1.0;
    };
    let units = match rest
        .trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b')
        .chars()
        .next()
    {
        None => 1.0,
        Some('G' | 'g') => 1024.0 * 1024.0 * 1024.0,
        Some('M' | 'm') => 1024.0 * 1024.0,
        Some('K' | 'k') => 1024.0,
        Some(_) => return -1.0,
    };
    size * units
}

/// A size flag as src/common.cu:1217-1240 stores it: refused below 0 (a NaN is not), then
/// `(size_t)parsed`, which gcc on x86-64 makes 0 at 2^64 or more (see `cnum::size_t_of`).
fn size(value: &str, name: &str) -> Result<u64, Stop> {
    let parsed = parsesize(value);
    if parsed < 0.0 {
        return Err(Stop::err(
            format!("invalid size specified for '{name}'\n"),
            status::BAD_FLAGS,
        ));
    }
    Ok(cnum::size_t_of(parsed))
}

/// Read the arguments after the program name as nccl-tests 2.19.6's option loop does
/// (src/common.cu:1203-1405): getopt_long, each option applied as it comes (the last one
/// wins), a size it cannot read ending the run at once. `argv0` is the name as called, which
/// glibc's messages use; `program` its last part, which the usage shows.
pub fn parse(argv0: &str, program: &str, args: &[OsString]) -> Result<PerfFlags, Stop> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let posix = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut f = PerfFlags::default();
    for step in getopt::Getopt::new(argv0, &args, posix) {
        let (c, v) = match step {
            getopt::Step::Extra("json", v) => {
                f.json = Some(v);
                continue;
            }
            getopt::Step::Extra(_, v) => {
                f.backend = Some(v);
                continue;
            }
            // src/common.cu:1357-1404: `default:` says "invalid option '?'" after getopt's
            // own line on stderr, then the usage, and main returns 0.
            getopt::Step::Error(line) => {
                return Err(Stop {
                    stdout: format!("invalid option '?'\n{}", usage(program)),
                    stderr: format!("{line}\n"),
                    code: status::SUCCESS,
                });
            }
            getopt::Step::Opt('h', _) => {
                return Err(Stop {
                    stdout: usage(program),
                    stderr: String::new(),
                    code: status::SUCCESS,
                })
            }
            getopt::Step::Opt(c, v) => (c, v.unwrap_or_default()),
        };
        apply(&mut f, c, &v)?;
    }
    after_options(f)
}

/// One option of the loop (src/common.cu:1210-1356), answered as nccl-tests linked with NCCL
/// 2.28 or newer answers it: the NCCL ncclprobe will load is not known while the flags are read.
fn apply(f: &mut PerfFlags, c: char, v: &str) -> Result<(), Stop> {
    match c {
        't' => f.nthreads = int(v),
        'g' => f.ngpus = int(v),
        'b' => f.min_bytes = size(v, "minbytes")?,
        'e' => f.max_bytes = size(v, "maxbytes")?,
        'i' => f.step_bytes = size(v, "stepBytes")?,
        'f' => f.step_factor = cnum::strtol(v, 0).0,
        'n' => f.iters = int(v),
        'm' => f.agg_iters = int(v),
        'w' => f.warmup_iters = int(v),
        'N' => f.run_cycles = int(v),
        'c' => f.check = int(v),
        'p' => f.parallel_init = int(v),
        'o' => f.op = known(v, &OP_NAMES, "op", "sum"),
        'd' => f.datatype = known(v, &TYPE_NAMES, "type", "float"),
        'r' => f.root = int(v),
        'z' => f.blocking = int(v),
        'y' => f.stream_null = int(v),
        'T' => f.timeout = int(v),
        'G' => f.cudagraph = int(v),
        'C' => f.report_cputime = int(v),
        'J' => f.output_file = Some(v.to_string()),
        'S' => f.report_timestamps = int(v),
        'a' => f.average = int(v),
        'R' => f.local_register = int(v),
        'M' => f.memory = int(v),
        'I' => f.per_iter_timing = int(v),
        'K' => f.per_iter_skip = int(v),
        'x' => f.cta_policy = Some(int(v)),
        'D' => f.device_implementation = int(v),
        // src/common.cu:1341-1347: out of range is said, and 16 used.
        'V' => {
            let count = int(v);
            if count <= 0 || count > 128 {
                eprintln!("device_cta_count (-V) must be positive and less than 128, got {count}. Using default value 16.");
            }
        }
        'u' => f.unalign = int(v),
        _ => {}
    }
    Ok(())
}

/// ncclstringtotype / ncclstringtoop (src/common.h:278-302): an unknown name is said on
/// stdout as it is read, and replaced.
fn known(name: &str, names: &[&str], what: &str, default: &str) -> String {
    if names.contains(&name) || name == "all" {
        return name.to_string();
    }
    // A closed stdout is found again at the banner, where the run ends.
    let _ = crate::exit::print(&format!(
        "invalid {what} {name}, defaulting to {default} .. \n"
    ));
    default.to_string()
}

/// The checks after the option loop (src/common.cu:1406-1437), in its order and words.
fn after_options(mut f: PerfFlags) -> Result<PerfFlags, Stop> {
    if f.min_bytes > f.max_bytes {
        return Err(Stop::err(
            format!(
                "invalid sizes for 'minbytes' and 'maxbytes': {} > {}\n",
                f.min_bytes, f.max_bytes
            ),
            status::BAD_FLAGS,
        ));
    }
    if f.device_implementation > 0 && f.local_register != 2 {
        return Err(Stop::err("device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)\n".into(), status::BAD_FLAGS));
    }
    let mut notes = String::new();
    if f.per_iter_timing != 0 && f.per_iter_timing != 1 {
        notes.push_str("per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\n");
        f.per_iter_timing = 0;
    }
    if f.per_iter_timing != 0 && f.cudagraph >= 1 {
        notes.push_str(
            "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.\n",
        );
        f.per_iter_timing = 0;
    }
    if f.blocking == 3 && f.cudagraph >= 1 {
        notes.push_str(
            "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.\n",
        );
        f.blocking = 0;
    }
    if f.per_iter_skip < 0 || f.per_iter_skip >= f.iters {
        notes.push_str(&format!(
            "per-iteration skip (-K) must be between 0 and {}. Disabling.\n",
            f.iters - 1
        ));
        f.per_iter_skip = 0;
    }
    if f.per_iter_skip != 0 && f.per_iter_timing == 0 {
        notes
            .push_str("per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n");
        f.per_iter_skip = 0;
    }
    eprint!("{notes}");
    Ok(f)
}

/// The ranks one process runs, nThreads x nGpus (src/common.cu:1555, `nGpus*nThreads`; 0 or
/// less is taken as 1), refused beyond what a backend can run in one process, naming the flags.
pub fn ranks(f: &PerfFlags) -> Result<usize, String> {
    let (t, g) = (f.nthreads.max(1), f.ngpus.max(1));
    let ranks = t * g;
    if ranks > 1024 {
        return Err(format!(
            "-t {t} x -g {g}: {ranks} ranks in one process; ncclprobe runs 1 to 1024 (nThread x nGpus)"
        ));
    }
    Ok(ranks as usize)
}

/// C's `atoi`: `(int)strtol(text, NULL, 10)`.
pub fn atoi(text: &str) -> i64 {
    cnum::c_int(cnum::strtol(text, 10).0)
}

/// NCCL_TESTS_MIN_BW as run() reads it (src/common.cu:1829-1830, `atof`, -1 when unset) and
/// writeResultFooter treats it (src/util.cu:778, 791): exactly -1 means no check.
pub fn min_bw(env: Option<&str>) -> Option<f64> {
    Some(env.map_or(-1.0, cnum::atof)).filter(|m| *m != -1.0)
}
/// What ncclprobe does not do of what the flags ask, in nccl-tests' terms; the run is refused
/// (exit 5, nccl-tests' testNotImplemented) rather than measured otherwise.
pub fn unsupported(f: &PerfFlags) -> Option<String> {
    let reasons = [
        (
            f.cudagraph > 0 && (f.blocking == 1 || f.blocking == 2),
            "-G with -z 1 or 2 (a wait inside a CUDA graph capture, which CUDA forbids)",
        ),
        (
            f.device_implementation > 0,
            "-D (nccl-tests' own kernels on NCCL's device API, NCCL 2.28+: ncclprobe has no device code of its own to run)",
        ),
    ];
    let missing: Vec<&str> = reasons
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, what)| *what)
        .collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// The names nccl-tests 2.19.6 knows (src/common.cu, test_typenames and test_opnames, with
/// NCCL >= 2.24 and bf16/fp8 support).
const TYPE_NAMES: [&str; 12] = [
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "f8e4m3", "f8e5m2",
];
const OP_NAMES: [&str; 6] = ["sum", "prod", "max", "min", "avg", "mulsum"];

/// nccl-tests' type list for `-d all` and op list for `-o all` (src/common.cu, test_typenames
/// and test_opnames); the NCCL backend adds the fp8 types where nccl-tests does.
const ALL_TYPES: &str = "int8,uint8,int32,uint32,int64,uint64,half,float,double,bfloat16";
const ALL_OPS: &str = "sum,prod,max,min,avg,mulsum";

/// The sweep engine's options for these flags: nccl-tests' sizes and schedule, its output.
pub fn options(program: &str, coll: Collective, f: &PerfFlags, argv: Vec<String>) -> Options {
    let (step_factor, step_bytes) = if f.step_factor > 1 {
        (Some(f.step_factor.to_string()), None)
    } else {
        (None, Some(f.step_bytes.to_string()))
    };
    let min_bw = min_bw(std::env::var("NCCL_TESTS_MIN_BW").ok().as_deref());
    let perf = PerfStyle {
        program: program.to_string(),
        nthreads: f.nthreads,
        ngpus: f.ngpus,
        max_bytes: f.max_bytes,
        step_factor: f.step_factor.max(0) as u64,
        step_bytes: f.step_bytes,
        warmup_iters: f.warmup_iters,
        iters: f.iters,
        agg_iters: f.agg_iters,
        validation: f.check,
        graph: f.cudagraph,
        unalign: f.unalign,
        blocking: f.blocking,
        parallel_init: f.parallel_init != 0,
        report_cputime: f.report_cputime != 0,
        report_timestamps: f.report_timestamps != 0,
        memory: f.memory != 0,
        all_types: f.datatype == "all",
        per_iter_skip: (f.per_iter_timing != 0).then_some(f.per_iter_skip.max(0) as usize),
        min_bw,
        json: f.output_file.as_ref().map(PathBuf::from),
        argv,
        // The command sets it once it knows the traffic.
        alltoallv_summary: None,
    };
    // Checked by the command (`ranks`) before it gets here.
    let ranks = ranks(f).unwrap_or(1);
    Options {
        sizes: Sizes {
            minbytes: f.min_bytes.to_string(),
            maxbytes: f.max_bytes.to_string(),
            stepfactor: step_factor,
            stepbytes: step_bytes,
        },
        what: What {
            collective: coll.name().to_string(),
            datatype: match f.datatype.as_str() {
                "all" => ALL_TYPES.into(),
                d => d.into(),
            },
            op: match f.op.as_str() {
                "all" => ALL_OPS.into(),
                o => o.into(),
            },
            // Only the rooted collectives read -r (their RunTest, e.g. src/broadcast.cu:94):
            // all_reduce_perf -r -5 runs as it would without it. A root outside the ranks is
            // the command's to answer (NCCL's "invalid argument"), once it knows the ranks.
            root: match (coll.is_rooted(), f.root) {
                (false, _) => "0".into(),
                (true, -1) => "all".into(),
                (true, r) => r.max(0).to_string(),
            },
            check: f.check.max(0) as usize,
            traffic: crate::coll::Traffic::generated(
                std::env::var("NCCL_TESTS_ALLTOALLV_SPREAD").ok().as_deref(),
            ),
            // The matrix is read by the command, which answers its errors as nccl-tests does.
            traffic_matrix: None,
        },
        timing: Timing {
            iters: Some(f.iters.max(1) as usize),
            warmup_iters: f.warmup_iters.max(0) as usize,
            samples: Some(1),
            min_samples: 1,
            max_samples: 1,
            average: f.average.clamp(0, 3) as u8,
            // nccl-tests waits forever without -T; ncclprobe's watchdog keeps its 300 s.
            timeout: if f.timeout > 0 {
                f.timeout as f64
            } else {
                300.0
            },
            schedule: Schedule::NcclTests,
            per_iteration_skip: (f.per_iter_timing != 0).then_some(f.per_iter_skip.max(0) as usize),
            // `do { ... } while (--repeat)`: 0 (or less) never reaches 0 again.
            cycles: f.run_cycles.max(0) as usize,
            agg_iters: f.agg_iters.max(1) as usize,
            blocking: crate::model::Blocking::from_flag(f.blocking),
            unalign: f.unalign.max(0) as usize,
            graph_launches: f.cudagraph.max(0) as usize,
            ..Timing::default()
        },
        backend: BackendOptions {
            backend: match f.backend.as_deref() {
                Some("host") => BackendChoice::Host,
                Some("mpi") => BackendChoice::Mpi,
                Some("nccl") => BackendChoice::Nccl,
                _ => BackendChoice::Auto,
            },
            ngpus: Some(ranks),
            // The host backend has no GPUs: its ranks stand for the t*g GPUs of the flags,
            // whether it was named or chosen (the other backends count GPUs or processes).
            ranks: Some(ranks),
            register: f.local_register.clamp(0, 2) as u8,
            // atoi, as nccl-tests reads it; -1 (or nothing) leaves the default.
            first_device: std::env::var("NCCL_TESTS_DEVICE")
                .ok()
                .map(|v| atoi(&v))
                .filter(|d| *d >= 0)
                .map(|d| d as usize),
            cta_policy: f.cta_policy,
            stream_null: f.stream_null != 0,
            ..BackendOptions::default()
        },
        output: crate::render::record::Outputs {
            json: f.json.as_ref().map(PathBuf::from),
            ..Default::default()
        },
        perf: Some(std::sync::Arc::new(perf)),
        history: None,
        ..Options::default()
    }
}
