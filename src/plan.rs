//! Validated sweep configuration: the parsed flags checked and turned into what to run.

use crate::cli::SweepArgs;
use crate::coll::Collective;
use crate::dtype::{Dtype, RedOp};
use crate::exit::Failure;
use crate::model::Settings;
use crate::units::{format_size, parse_size};

/// A fault a test asks a rank to commit (hidden `--inject-fault`); never set otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Never return from the collective.
    Stall,
    /// Flip one output element before the check counts.
    Corrupt,
    /// Exit the process abruptly (a rank that dies).
    Die,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: usize,
    /// Only at this size (bytes); any size when `None`.
    pub size_bytes: Option<u64>,
}

impl Fault {
    pub fn parse(text: &str) -> Result<Fault, Failure> {
        let bad = || {
            Failure::usage(format!(
                "--inject-fault: '{text}' is not KIND:RANK[:SIZE] with KIND stall, corrupt or die"
            ))
        };
        let mut parts = text.split(':');
        let kind = match parts.next() {
            Some("stall") => FaultKind::Stall,
            Some("corrupt") => FaultKind::Corrupt,
            Some("die") => FaultKind::Die,
            _ => return Err(bad()),
        };
        let rank = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
        let size_bytes = match parts.next() {
            Some(s) => Some(parse_size(s).map_err(|_| bad())?),
            None => None,
        };
        Ok(Fault {
            kind,
            rank,
            size_bytes,
        })
    }

    pub fn applies(&self, rank: usize, size_bytes: u64) -> bool {
        self.rank == rank && self.size_bytes.is_none_or(|s| s == size_bytes)
    }
}

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
    pub settings: Settings,
    pub fault: Option<Fault>,
    pub notes: Vec<String>,
}

fn parse_list<T: Copy>(
    flag: &str,
    text: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    names: &str,
) -> Result<Vec<T>, Failure> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        out.push(parse(item).ok_or_else(|| {
            Failure::usage(format!(
                "{flag}: unknown value '{item}'; allowed: {names}, all"
            ))
        })?);
    }
    if out.is_empty() {
        return Err(Failure::usage(format!(
            "{flag}: empty list; allowed: {names}, all"
        )));
    }
    Ok(out)
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

impl Plan {
    /// `max_bytes_allowed`: how large a message fits in memory (see `memory_limit`).
    pub fn from_args(args: &SweepArgs, max_bytes_allowed: Option<u64>) -> Result<Plan, Failure> {
        let collectives = parse_list(
            "--collective",
            &args.what.collective,
            &Collective::ALL,
            |s| Collective::parse(s).filter(|c| c.is_measured()),
            "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv",
        )?;
        let dtypes = parse_list(
            "-d/--datatype",
            &args.what.datatype,
            &Dtype::ALL,
            Dtype::parse,
            "int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double",
        )?;
        let ops = parse_list(
            "-o/--op",
            &args.what.op,
            &RedOp::ALL,
            RedOp::parse,
            "sum, prod, min, max, avg",
        )?;
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

        let min = size_flag("-b/--minbytes", &args.sizes.minbytes)?;
        let mut max = size_flag("-e/--maxbytes", &args.sizes.maxbytes)?;
        if min > max {
            return Err(Failure::usage(format!(
                "-b/--minbytes ({min}) is larger than -e/--maxbytes ({max})"
            )));
        }
        let factor = match &args.sizes.stepfactor {
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
        let step = match &args.sizes.stepbytes {
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

        let mut notes = Vec::new();
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
        let sizes_bytes = size_series(min, max, factor, step);

        let t = &args.timing;
        let positive = |flag: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(Failure::usage(format!(
                    "{flag}: must be a positive number of seconds, got {v}"
                )))
            }
        };
        positive("--timeout", t.timeout)?;
        positive("--point-budget", t.point_budget)?;
        positive("--sample-time", t.sample_time)?;
        if !(t.warmup_time.is_finite() && t.warmup_time >= 0.0) {
            return Err(Failure::usage("--warmup-time: must be 0 or more seconds"));
        }
        if !(t.target_ci.is_finite() && t.target_ci > 0.0) {
            return Err(Failure::usage(
                "--target-ci: must be a positive fraction, e.g. 0.03",
            ));
        }
        if t.iters == Some(0) {
            return Err(Failure::usage("-n/--iters: must be at least 1"));
        }
        let (min_samples, max_samples, target) = match t.samples {
            Some(0) => return Err(Failure::usage("--samples: must be at least 1")),
            Some(n) => (n, n, None),
            None => {
                if t.min_samples == 0 || t.max_samples < t.min_samples {
                    return Err(Failure::usage(
                        "--min-samples must be at least 1 and no more than --max-samples",
                    ));
                }
                (t.min_samples, t.max_samples, Some(t.target_ci))
            }
        };

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
            timeout_s: t.timeout,
            cuda_events: t.cuda_events,
            registration: match args.backend.register {
                0 => crate::model::Registration::None,
                1 => crate::model::Registration::Local,
                _ => crate::model::Registration::Symmetric,
            },
            across_ranks: across,
        };
        let fault = args.inject_fault.as_deref().map(Fault::parse).transpose()?;
        Ok(Plan {
            collectives,
            dtypes,
            ops,
            root,
            sizes_bytes,
            settings,
            fault,
            notes,
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

    /// Ops to run for `coll`: collectives without a reduction run once.
    pub fn ops_for(&self, coll: Collective) -> Vec<Option<RedOp>> {
        if coll.has_op() {
            self.ops.iter().copied().map(Some).collect()
        } else {
            vec![None]
        }
    }
}

/// Largest message whose buffers (send, receive and a staging copy per rank, `ranks_here` ranks
/// on this host) fit in half the memory available now; `None` when that cannot be read.
pub fn memory_limit(ranks_here: usize) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let avail_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let per_message = avail_kib * 1024 / 2 / (3 * ranks_here.max(1) as u64);
    // Round down to a power of two so the clipped maximum is a size a factor-2 sweep visits.
    Some(1u64 << (63 - per_message.max(1).leading_zeros()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_walk_like_nccl_tests() {
        assert_eq!(size_series(8, 64, Some(2), None), vec![8, 16, 32, 64]);
        assert_eq!(size_series(8, 70, Some(2), None), vec![8, 16, 32, 64]);
        assert_eq!(size_series(0, 3, None, Some(1)), vec![0, 1, 2, 3]);
        assert_eq!(size_series(32, 32, Some(1), None), vec![32]);
        assert_eq!(size_series(1 << 20, 4 << 20, None, Some(1 << 20)).len(), 4);
    }

    #[test]
    fn faults_parse() {
        assert_eq!(
            Fault::parse("stall:1:64K").unwrap(),
            Fault {
                kind: FaultKind::Stall,
                rank: 1,
                size_bytes: Some(65536)
            }
        );
        assert!(Fault::parse("explode:1").is_err());
        assert!(Fault::parse("die").is_err());
    }
}
