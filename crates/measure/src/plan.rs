//! Validated sweep configuration: the parsed flags checked and turned into what to run.

use crate::coll::Collective;
use crate::dtype::{Dtype, RedOp};
use crate::exit::Failure;
use crate::fault_injection::Fault;
use crate::flags::{parse_list_or_all, seconds};
use crate::model::Settings;
use crate::sweep::options::{Options, Sizes, Timing};
use crate::units::{format_size, parse_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootChoice {
    One(usize),
    All,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub collectives: Vec<Collective>,
    pub dtypes: Vec<Dtype>,
    pub ops: Vec<RedOp>,
    pub root: RootChoice,
    pub sizes_bytes: Vec<u64>,
    /// nccl-tests' -N 0: each series' sizes walked again and again until a signal ends the run.
    pub forever: bool,
    pub settings: Settings,
    pub fault: Option<Fault>,
    /// TEST-ONLY slow links, late rank and host names (`--inject-fault`).
    pub injected: crate::fault_injection::Injected,
    /// `ncclprobe matrix`: measure pairs of ranks instead of collectives.
    pub matrix: Option<std::sync::Arc<crate::matrix::options::Options>>,
    pub notes: Vec<String>,
    /// `--qualify`/rules: gate the run after measuring, re-measuring failed points.
    pub gate: Option<std::sync::Arc<crate::expect::options::GateRules>>,
    /// Called as an nccl-tests `*_perf` binary: print and exit as it does.
    pub perf: Option<std::sync::Arc<crate::sweep::options::PerfStyle>>,
}

fn size_flag(flag: &str, text: &str) -> Result<u64, Failure> {
    parse_size(text).map_err(|e| Failure::usage(format!("{flag}: {e}")))
}

/// Sizes as nccl-tests walks them: `size *= factor` or `size += step` up to max.
pub fn size_series(min: u64, max: u64, factor: Option<u64>, step: Option<u64>) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = min;
    while size <= max {
        sizes.push(size);
        let next = match (factor, step) {
            (Some(f), _) if f > 1 => size.saturating_mul(f),
            (_, Some(s)) if s > 0 => size.saturating_add(s),
            _ => break,
        };
        if next == size {
            break;
        }
        size = next;
    }
    sizes
}

/// The timing flags checked; the sampling they ask for: (fewest, most samples, target
/// relative half-width of the interval, `None` for a fixed count).
fn sampling(t: &Timing) -> Result<(usize, usize, Option<f64>), Failure> {
    seconds("--timeout", t.timeout)?;
    seconds("--point-budget", t.point_budget)?;
    if let Some(b) = t.time_budget {
        seconds("--time-budget", b)?;
    }
    seconds("--sample-time", t.sample_time)?;
    if t.warmup_time != 0.0 {
        seconds("--warmup-time", t.warmup_time).map_err(|_| {
            Failure::usage("--warmup-time: must be 0 or more seconds, at most 30 days")
        })?;
    }
    if !(t.target_ci.is_finite() && t.target_ci > 0.0) {
        return Err(Failure::usage(
            "--target-ci: must be a positive fraction, e.g. 0.03",
        ));
    }
    if t.iters == Some(0) {
        return Err(Failure::usage("-n/--iters: must be at least 1"));
    }
    match t.samples {
        Some(0) => Err(Failure::usage("--samples: must be at least 1")),
        Some(n) => Ok((n, n, None)),
        None => {
            if t.min_samples == 0 || t.max_samples < t.min_samples {
                return Err(Failure::usage(
                    "--min-samples must be at least 1 and no more than --max-samples",
                ));
            }
            Ok((t.min_samples, t.max_samples, Some(t.target_ci)))
        }
    }
}

/// Each value once, in the order given; a note says what was dropped.
fn dedup<T: PartialEq + std::fmt::Display>(
    flag: &str,
    values: Vec<T>,
    notes: &mut Vec<String>,
) -> Vec<T> {
    let mut kept: Vec<T> = Vec::with_capacity(values.len());
    let mut dropped = Vec::new();
    for v in values {
        if kept.contains(&v) {
            dropped.push(v.to_string());
        } else {
            kept.push(v);
        }
    }
    if !dropped.is_empty() {
        notes.push(format!(
            "{flag}: {} given more than once; each is measured once",
            dropped.join(", ")
        ));
    }
    kept
}

/// The size flags checked: (min, max, factor, step), nccl-tests' walk with our factor-2 default.
/// alltoallv's traffic: the matrix file when one was given (read now, its errors nccl-tests'
/// sentences), else the generated split.
fn traffic(what: &crate::sweep::options::What) -> Result<crate::coll::Traffic, Failure> {
    match &what.traffic_matrix {
        Some((path, scale)) => {
            crate::coll::traffic::read_matrix(path, *scale).map_err(Failure::usage)
        }
        None => Ok(what.traffic.clone()),
    }
}

fn size_flags(sizes: &Sizes) -> Result<(u64, u64, Option<u64>, Option<u64>), Failure> {
    let min = size_flag("-b/--minbytes", &sizes.minbytes)?;
    let max = size_flag("-e/--maxbytes", &sizes.maxbytes)?;
    if min > max {
        return Err(Failure::usage(format!(
            "-b/--minbytes ({min}) is larger than -e/--maxbytes ({max})"
        )));
    }
    let factor = match &sizes.stepfactor {
        Some(f) => Some(f.trim().parse::<u64>().map_err(|_| {
            Failure::usage(format!("-f/--stepfactor: '{f}' is not a whole number ≥ 2"))
        })?),
        None => None,
    };
    if factor.is_some_and(|f| f < 2) && min != max {
        return Err(Failure::usage(
            "-f/--stepfactor: must be 2 or more".to_string(),
        ));
    }
    let step = match &sizes.stepbytes {
        Some(s) => Some(size_flag("-i/--stepbytes", s)?),
        None => None,
    };
    if step == Some(0) && min != max {
        return Err(Failure::usage(
            "-i/--stepbytes: must be more than 0".to_string(),
        ));
    }
    // nccl-tests' default is a factor of 1 (a single size); ours is a factor-2 sweep.
    let factor = if factor.is_none() && step.is_none() {
        Some(2)
    } else {
        factor
    };
    if min == 0 && max > 0 && step.is_none() {
        return Err(Failure::usage(format!(
                "-b/--minbytes 0: a step factor never grows past 0, so {max} would never be reached; start at -b 1 (or more), or step with -i"
            )));
    }

    Ok((min, max, factor, step))
}

impl Plan {
    /// `max_bytes_allowed`: how large a message fits in memory (see `memory_limit`).
    pub fn from_options(args: &Options, max_bytes_allowed: Option<u64>) -> Result<Plan, Failure> {
        let collectives = parse_list_or_all(
            "--collective",
            &args.what.collective,
            &Collective::ALL,
            |s| Collective::parse(s).filter(|c| c.is_measured()),
            "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv (all), gather, scatter, hypercube",
        )?;
        let dtypes = parse_list_or_all(
            "-d/--datatype",
            &args.what.datatype,
            &Dtype::ALL,
            Dtype::parse,
            "int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double",
        )?;
        let ops = parse_list_or_all(
            "-o/--op",
            &args.what.op,
            &RedOp::ALL,
            RedOp::parse,
            "sum, prod, min, max, avg, mulsum",
        )?;
        let mut notes = Vec::new();
        let collectives = dedup("--collective", collectives, &mut notes);
        let dtypes = dedup("-d/--datatype", dtypes, &mut notes);
        let ops = dedup("-o/--op", ops, &mut notes);
        let root = if args.what.root.trim().eq_ignore_ascii_case("all") {
            RootChoice::All
        } else {
            RootChoice::One(args.what.root.trim().parse().map_err(|_| {
                Failure::usage(format!(
                    "-r/--root: '{}' is not a rank number or 'all'",
                    args.what.root
                ))
            })?)
        };

        let (min, mut max, factor, step) = size_flags(&args.sizes)?;

        if let Some(limit) = max_bytes_allowed {
            if min > limit {
                return Err(Failure::usage(format!(
                    "-b/--minbytes: {min} bytes ({}) do not fit in memory; at most {limit} ({}) per message here",
                    format_size(min),
                    format_size(limit)
                )));
            }
            if max > limit {
                let note = format!(
                    "Reducing maxBytes to {limit} ({}) due to memory limitation (asked for {max})",
                    format_size(limit)
                );
                notes.push(note);
                max = limit;
            }
        }
        let across = crate::model::AcrossRanks::from_flag(args.timing.average);
        if across != crate::model::AcrossRanks::Max {
            notes.push(format!(
                "sample times are the {} across ranks (-a {}), not the slowest rank's",
                match across {
                    crate::model::AcrossRanks::Rank0 => "time of rank 0",
                    crate::model::AcrossRanks::Average => "average",
                    _ => "minimum",
                },
                args.timing.average
            ));
        }
        // -N: nccl-tests walks the sizes again per cycle (src/common.cu, TimeTest's
        // `do { for (size ...) } while (--repeat)`), printing every row.
        // -N 0: one walk here, repeated by the sweep until it is stopped.
        let forever = args.timing.cycles == 0;
        let sizes_bytes = size_series(min, max, factor, step).repeat(args.timing.cycles.max(1));

        let t = &args.timing;
        let (min_samples, max_samples, target) = sampling(t)?;

        let settings = Settings {
            min_bytes: min,
            max_bytes: max,
            step_factor: if step.is_some() { None } else { factor },
            step_bytes: step,
            iters_per_sample: t.iters,
            sample_target_s: t.sample_time,
            warmup_iters: t.warmup_iters,
            warmup_min_s: t.warmup_time,
            check_iters: args.what.check,
            min_samples,
            max_samples,
            target_rel_ci: target,
            point_budget_s: t.point_budget,
            time_budget_s: t.time_budget,
            timeout_s: t.timeout,
            cuda_events: t.cuda_events,
            registration: match args.backend.register {
                0 => crate::model::Registration::None,
                1 => crate::model::Registration::Local,
                _ => crate::model::Registration::Symmetric,
            },
            across_ranks: across,
            stragglers: args.stragglers,
            schedule: t.schedule,
            per_iteration_skip: t.per_iteration_skip,
            agg_iters: (t.agg_iters > 1).then_some(t.agg_iters),
            blocking: t.blocking,
            unalign: (t.unalign > 0).then_some(t.unalign),
            cta_policy: args.backend.cta_policy,
            graph_launches: (t.graph_launches > 0).then_some(t.graph_launches),
            stream_null: args.backend.stream_null,
            alltoallv: match collectives.contains(&Collective::Alltoallv) {
                true => Some(traffic(&args.what)?),
                false => None,
            },
        };
        let (fault, injected) = match args.inject_fault.as_deref() {
            Some(text) => crate::fault_injection::parse(text)?,
            None => Default::default(),
        };
        Ok(Plan {
            collectives,
            dtypes,
            ops,
            root,
            sizes_bytes,
            forever,
            settings,
            fault,
            injected,
            matrix: args.matrix.clone(),
            notes,
            gate: args
                .gate
                .requested()
                .then(|| std::sync::Arc::new(args.gate.clone())),
            perf: args.perf.clone(),
        })
    }

    /// Roots to run for `coll` on `nranks` ranks; `-1` stands for "no root".
    pub fn roots(&self, coll: Collective, nranks: usize) -> Result<Vec<i64>, Failure> {
        if !coll.is_rooted() {
            return Ok(vec![-1]);
        }
        match self.root {
            RootChoice::All => Ok((0..nranks as i64).collect()),
            RootChoice::One(r) if r < nranks => Ok(vec![r as i64]),
            RootChoice::One(r) => Err(Failure::usage(format!(
                "-r/--root: rank {r} does not exist with {nranks} ranks"
            ))),
        }
    }

    /// Ops to run for `coll`: collectives without a reduction run once, except sendrecv,
    /// which nccl-tests runs (and labels) once per op ([`Collective::labels_op`]).
    pub fn ops_for(&self, coll: Collective) -> Vec<Option<RedOp>> {
        if coll.labels_op() {
            self.ops.iter().copied().map(Some).collect()
        } else {
            vec![None]
        }
    }
}

/// Largest message whose buffers (send, receive and a staging copy per rank, `ranks_here` ranks
/// on this host) fit in half the memory available now; `None` when that cannot be read.
pub fn memory_limit(ranks_here: usize) -> Option<u64> {
    host_memory_limit(ranks_here, 3)
}

/// Largest message of which `buffers` host copies per rank (`ranks_here` ranks on this host) fit
/// in half the memory available now; `None` when that cannot be read.
pub fn host_memory_limit(ranks_here: usize, buffers: u64) -> Option<u64> {
    limit_from_meminfo(
        &std::fs::read_to_string(meminfo_path()).ok()?,
        ranks_here,
        buffers,
    )
}

/// `/proc/meminfo`; in builds with the TEST-ONLY `fault-injection` feature, the file
/// `NCCLPROBE_TEST_MEMINFO` names, so a test can stand for a host with little memory.
fn meminfo_path() -> std::path::PathBuf {
    if crate::fault_injection::test_hooks() {
        if let Some(p) = std::env::var_os("NCCLPROBE_TEST_MEMINFO") {
            return p.into();
        }
    }
    "/proc/meminfo".into()
}

fn limit_from_meminfo(meminfo: &str, ranks_here: usize, buffers: u64) -> Option<u64> {
    let avail_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let per_message = avail_kib * 1024 / 2 / (buffers.max(1) * ranks_here.max(1) as u64);
    // Round down to a power of two so the clipped maximum is a size a factor-2 sweep visits.
    Some(1u64 << (63 - per_message.max(1).leading_zeros()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_limit_counts_every_copy_of_every_local_rank() {
        let info = "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\n";
        // 16 GiB available, half of it for 8 ranks x 2 copies: 512 MiB.
        assert_eq!(limit_from_meminfo(info, 8, 2), Some(512 << 20));
        assert_eq!(limit_from_meminfo(info, 1, 3), Some(2 << 30));
        assert_eq!(limit_from_meminfo("MemTotal: 1 kB\n", 1, 2), None);
    }

    #[test]
    fn sizes_walk_like_nccl_tests() {
        assert_eq!(size_series(8, 64, Some(2), None), vec![8, 16, 32, 64]);
        assert_eq!(size_series(8, 70, Some(2), None), vec![8, 16, 32, 64]);
        assert_eq!(size_series(0, 3, None, Some(1)), vec![0, 1, 2, 3]);
        assert_eq!(size_series(32, 32, Some(1), None), vec![32]);
        assert_eq!(size_series(1 << 20, 4 << 20, None, Some(1 << 20)).len(), 4);
    }
}
