//! ncclprobe called by one of nccl-tests' names (`all_reduce_perf`, a link or a copy): its
//! flags with its letters, values and defaults (nccl-tests 2.19.6, src/common.cu, main), turned
//! into the sweep engine's options on nccl-tests' own schedule, with its output and exit status.

use crate::coll::Collective;
use crate::model::Schedule;
use crate::sweep::options::{
    BackendChoice, BackendOptions, Options, PerfStyle, Sizes, Timing, What,
};
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::ffi::OsString;
use std::path::PathBuf;

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

/// Every flag of 2.19.6 (`getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:")`)
/// and the two of ncclprobe's own that a drop-in can use beside them.
const FLAGS: [(char, &str); 31] = [
    ('t', "nthreads"),
    ('g', "ngpus"),
    ('b', "minbytes"),
    ('e', "maxbytes"),
    ('i', "stepbytes"),
    ('f', "stepfactor"),
    ('n', "iters"),
    ('m', "agg_iters"),
    ('w', "warmup_iters"),
    ('N', "run_cycles"),
    ('p', "parallel_init"),
    ('c', "check"),
    ('o', "op"),
    ('d', "datatype"),
    ('r', "root"),
    ('z', "blocking"),
    ('y', "stream_null"),
    ('T', "timeout"),
    ('G', "cudagraph"),
    ('C', "report_cputime"),
    ('S', "report_timestamps"),
    ('J', "output_file"),
    ('a', "average"),
    ('R', "local_register"),
    ('x', "cta_policy"),
    ('D', "device_implementation"),
    ('V', "device_cta_count"),
    ('M', "memory"),
    ('u', "unalign"),
    ('I', "per_iter_timing"),
    ('K', "per_iter_skip"),
];

fn command(name: &str) -> Command {
    let mut c = Command::new("nccl-tests")
        .bin_name(name.to_string())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("help")
                .short('h')
                .long("help")
                .action(ArgAction::SetTrue),
        )
        .arg(Arg::new("json").long("json").num_args(1))
        .arg(Arg::new("backend").long("backend").num_args(1));
    for (short, long) in FLAGS {
        c = c.arg(
            Arg::new(long)
                .short(short)
                .long(long)
                .num_args(1)
                .allow_hyphen_values(true)
                .action(ArgAction::Set),
        );
    }
    c
}

/// C's `strtol(text, NULL, 0)`: leading space, a sign, `0x` hex or `0` octal, as many digits
/// as read; 0 when none.
pub fn strtol(text: &str) -> i64 {
    let t = text.trim_start();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (16, h)
    } else if t.len() > 1 && t.starts_with('0') {
        (8, &t[1..])
    } else {
        (10, t)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let value = i64::from_str_radix(&digits[..end], radix).unwrap_or(0);
    if negative {
        -value
    } else {
        value
    }
}

/// nccl-tests' `parsesize` (src/common.cu): `sscanf("%lf %1s")`, then K, M or G (binary, either
/// case); `None` where it returns -1.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim_start();
    let number_end = t
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == '-' || c == '+') && (i == 0 || t[..i].ends_with(['e', 'E'])))
                || ((c == 'e' || c == 'E') && i > 0))
        })
        .map_or(t.len(), |(i, _)| i);
    let mut number = &t[..number_end];
    // "8e" or "1M": an `e` not followed by digits is not part of the number (sscanf backs off).
    while number.ends_with(['e', 'E', '+', '-']) {
        number = &number[..number.len() - 1];
    }
    let value: f64 = number.parse().ok()?;
    let rest = t[number.len()..].trim_start();
    let units = match rest.chars().next() {
        None => 1.0,
        Some('G' | 'g') => 1024.0 * 1024.0 * 1024.0,
        Some('M' | 'm') => 1024.0 * 1024.0,
        Some('K' | 'k') => 1024.0,
        Some(_) => return None,
    };
    let bytes = value * units;
    (bytes >= 0.0).then_some(bytes as u64)
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

/// Read the arguments after the program name as nccl-tests 2.19.6 does.
pub fn parse(program: &str, args: &[OsString]) -> Result<PerfFlags, Stop> {
    let argv = std::iter::once(OsString::from(program)).chain(args.iter().cloned());
    let m = match command(program).try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) => {
            // getopt prints its own complaint; nccl-tests then prints the usage and returns 0.
            let what = e
                .get(clap::error::ContextKind::InvalidArg)
                .map(|v| v.to_string())
                .unwrap_or_default();
            return Err(Stop {
                stdout: format!(
                    "invalid option '{}'\n{}",
                    what.trim_start_matches('-'),
                    usage(program)
                ),
                stderr: String::new(),
                code: status::SUCCESS,
            });
        }
    };
    if m.get_flag("help") {
        return Err(Stop {
            stdout: usage(program),
            stderr: String::new(),
            code: status::SUCCESS,
        });
    }
    read(program, &m)
}

fn read(_program: &str, m: &ArgMatches) -> Result<PerfFlags, Stop> {
    let text = |k: &str| m.get_one::<String>(k).cloned();
    let int = |k: &str, default: i64| text(k).map_or(default, |v| strtol(&v));
    let size = |k: &str, name: &str, default: u64| -> Result<u64, Stop> {
        match text(k) {
            None => Ok(default),
            Some(v) => parse_size(&v).ok_or_else(|| {
                Stop::err(
                    format!("invalid size specified for '{name}'\n"),
                    status::BAD_FLAGS,
                )
            }),
        }
    };
    let mut f = PerfFlags {
        nthreads: int("nthreads", 1),
        ngpus: int("ngpus", 1),
        min_bytes: size("minbytes", "minbytes", 32 << 20)?,
        max_bytes: size("maxbytes", "maxbytes", 32 << 20)?,
        step_bytes: size("stepbytes", "stepBytes", 1 << 20)?,
        step_factor: int("stepfactor", 1),
        iters: int("iters", 20),
        agg_iters: int("agg_iters", 1),
        warmup_iters: int("warmup_iters", 1),
        run_cycles: int("run_cycles", 1),
        parallel_init: int("parallel_init", 0),
        check: int("check", 1),
        op: text("op").unwrap_or_else(|| "sum".into()),
        datatype: text("datatype").unwrap_or_else(|| "float".into()),
        root: int("root", 0),
        blocking: int("blocking", 0),
        stream_null: int("stream_null", 0),
        timeout: int("timeout", 0),
        cudagraph: int("cudagraph", 0),
        report_cputime: int("report_cputime", 0),
        report_timestamps: int("report_timestamps", 0),
        output_file: text("output_file"),
        average: int("average", 1),
        local_register: int("local_register", 0),
        cta_policy: text("cta_policy").map(|v| strtol(&v)),
        device_implementation: int("device_implementation", 0),
        memory: int("memory", 0),
        unalign: int("unalign", 0),
        per_iter_timing: int("per_iter_timing", 0),
        per_iter_skip: int("per_iter_skip", 0),
        json: text("json"),
        backend: text("backend"),
    };
    // ncclstringtotype / ncclstringtoop (src/common.h): an unknown name is said and replaced.
    if !TYPE_NAMES.contains(&f.datatype.as_str()) && f.datatype != "all" {
        // A closed stdout is found again at the banner, where the run ends.
        let _ = crate::exit::print(&format!(
            "invalid type {}, defaulting to float .. \n",
            f.datatype
        ));
        f.datatype = "float".into();
    }
    if !OP_NAMES.contains(&f.op.as_str()) && f.op != "all" {
        let _ = crate::exit::print(&format!("invalid op {}, defaulting to sum .. \n", f.op));
        f.op = "sum".into();
    }
    // The checks after the option loop, in its order and words.
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
    let min_bw = std::env::var("NCCL_TESTS_MIN_BW")
        .ok()
        .map(|v| v.trim().parse::<f64>().unwrap_or(0.0));
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
    let ranks = (f.nthreads.max(1) * f.ngpus.max(1)) as usize;
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
            root: if f.root == -1 {
                "all".into()
            } else {
                f.root.to_string()
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
            // The host backend has no GPUs: its ranks stand for the t*g GPUs of the flags.
            ranks: (f.backend.as_deref() == Some("host")).then_some(ranks),
            register: f.local_register.clamp(0, 2) as u8,
            // atoi, as nccl-tests reads it; -1 (or nothing) leaves the default.
            first_device: std::env::var("NCCL_TESTS_DEVICE")
                .ok()
                .map(|v| strtol(&v))
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
