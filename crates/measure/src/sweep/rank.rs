//! The whole sweep as one rank runs it: exchange who is where, then for every collective, type,
//! op, root and size measure both placements; rank 0 reports and records each point before any
//! rank moves on.

use super::budget::TimeBudget;
use super::report::Rank0;
use crate::backend::{BackendError, Communicator, PointSpec};
use crate::coll::{Collective, Placement};
use crate::dtype::RedOp;
use crate::exit::Failure;
use crate::measure::{exchange_whoami, PointRunner};
use crate::model::Point;
use crate::plan::Plan;
use crate::units::format_size;
use crate::watchdog::Watchdog;

/// Points (sizes × types × ops × roots × collectives) the plan asks of `nranks` ranks.
pub fn total_points(plan: &Plan, nranks: usize) -> u64 {
    plan.collectives
        .iter()
        .map(|&c| {
            let roots = plan.roots(c, nranks).map(|r| r.len()).unwrap_or(1);
            (plan.dtypes.len() * plan.ops_for(c).len() * roots * plan.sizes_bytes.len()) as u64
        })
        .sum()
}

fn prepare_failure(coll: Collective, size: u64, e: BackendError) -> Failure {
    crate::backend::failure(&format!("{coll} at {}", format_size(size)), e)
}

fn spec(
    plan: &Plan,
    coll: Collective,
    dtype: crate::dtype::Dtype,
    op: RedOp,
    root: i64,
    size: u64,
) -> PointSpec {
    PointSpec {
        coll,
        dtype,
        op,
        root: root.max(0) as usize,
        count: (size / dtype.size_bytes() as u64) as usize,
        unalign: plan.settings.unalign.unwrap_or(0),
        traffic: plan.settings.alltoallv.clone().unwrap_or_default(),
        rotate_within: plan.settings.max_bytes as usize,
    }
}

/// The whole sweep as seen by one rank; `out` is set on rank 0 only.
pub fn run_rank(
    comm: &mut dyn Communicator,
    plan: &Plan,
    watchdog: Option<&Watchdog>,
    out: Option<&Rank0>,
) -> Result<(), Failure> {
    let nranks = comm.nranks();
    let ranks = exchange_whoami(comm, &plan.injected)?;
    if let (1, Some(gate)) = (nranks, &plan.gate) {
        crate::expect::gate::one_rank(&gate.rules, &gate.qualify)?;
    }
    let queue = size_queue(plan, nranks)?;
    let mut sweep = Sweep {
        comm,
        plan,
        watchdog,
        out,
        started: std::time::Instant::now(),
        budget: plan.settings.time_budget_s.map(TimeBudget::new),
    };
    let mut next = 0;
    if let Some(out) = out {
        let notes = sweep.comm.notes();
        out.set_ranks(ranks, nranks, total_points(plan, nranks))?;
        out.add_notes(&notes)?;
    }

    for &coll in &plan.collectives {
        let roots = plan.roots(coll, nranks)?;
        if let Some(out) = out {
            out.collective_header(coll);
        }
        // Allocate for the largest size up front, as nccl-tests does: every size then runs in
        // the same (already touched) memory instead of growing buffers between sizes.
        // The widest type: its -u shift is the largest, so no later type grows the buffers.
        let widest = plan.dtypes.iter().copied().max_by_key(|d| d.size_bytes());
        if let (Some(&largest), Some(dtype)) = (plan.sizes_bytes.last(), widest) {
            sweep
                .comm
                .prepare(&spec(plan, coll, dtype, RedOp::Sum, 0, largest))
                .map_err(|e| prepare_failure(coll, largest, e))?;
        }
        let mut coll_points: Vec<Point> = Vec::new();
        for &dtype in &plan.dtypes {
            for op in plan.ops_for(coll) {
                for &root in &roots {
                    // -N 0 walks the series until a signal ends the run, keeping only the
                    // walk in progress and the last whole one.
                    let series_start = coll_points.len();
                    loop {
                        let walk_start = coll_points.len();
                        for &size in &plan.sizes_bytes {
                            let remaining = &queue[next.min(queue.len())..];
                            next += 1;
                            let (oop, inp) =
                                sweep.measure_size(coll, dtype, op, root, size, remaining)?;
                            coll_points.push(oop);
                            coll_points.push(inp);
                        }
                        if !plan.forever {
                            break;
                        }
                        coll_points.drain(series_start..walk_start);
                    }
                }
            }
        }
        let memory = match plan.perf.as_ref().is_some_and(|p| p.memory) {
            true => gpu_memory(sweep.comm, out)?,
            false => None,
        };
        if let Some(out) = out {
            out.collective_footer(coll, &coll_points, memory.as_ref());
        }
    }
    if let Some(gate) = &plan.gate {
        sweep.retry_failed(gate.retries)?;
    }
    if let Some(w) = watchdog {
        w.disarm();
    }
    Ok(())
}

/// -M: every rank's GPU memory by stage, the most of each over the ranks (nccl-tests'
/// MPI_Allreduce with MPI_MAX); rank 0 says so where no rank has a GPU.
fn gpu_memory(
    comm: &mut dyn Communicator,
    out: Option<&Rank0>,
) -> Result<Option<crate::model::GpuMemory>, Failure> {
    let mine = comm.gpu_memory().map(|m| m.to_bytes().to_vec());
    let all = comm
        .allgather_bytes(&mine.unwrap_or_default())
        .map_err(|e| crate::backend::failure("gathering GPU memory use (-M)", e))?;
    let most = crate::model::GpuMemory::most_of(&all);
    if let (None, Some(out)) = (most, out) {
        let note = "-M 1: no GPU memory to report: this backend runs on host memory";
        crate::term::note(note);
        out.add_notes(&[note.to_string()])?;
    }
    if let (Some(m), Some(out)) = (most, out) {
        out.add_notes(&[format!(
            "GPU memory (-M, the most of any rank): initialization {} B, buffers {} B, collectives {} B",
            m.initialization_bytes, m.user_allocated_bytes, m.collective_bytes
        )])?;
    }
    Ok(most)
}

/// Every size the sweep will measure, in order, once per series (collective, type, op, root)
/// it appears in: what `--time-budget` shares its seconds among.
fn size_queue(plan: &Plan, nranks: usize) -> Result<Vec<u64>, Failure> {
    if let Some(traffic) = &plan.settings.alltoallv {
        // A matrix must cover the ranks and fit the buffers; nccl-tests fails such a run as
        // an internal error (testInternalError), ncclprobe under its own name as usage.
        let s = &plan.settings;
        traffic
            .check(nranks, s.min_bytes, s.max_bytes)
            .map_err(|e| match plan.perf.is_some() {
                true => Failure::internal(e),
                false => Failure::usage(e),
            })?;
    }
    let mut queue = Vec::new();
    for &coll in &plan.collectives {
        let series = plan.dtypes.len() * plan.ops_for(coll).len() * plan.roots(coll, nranks)?.len();
        for _ in 0..series {
            queue.extend_from_slice(&plan.sizes_bytes);
        }
    }
    Ok(queue)
}

/// What one rank's sweep works with, for the steps after the first pass (retries).
struct Sweep<'a> {
    comm: &'a mut dyn Communicator,
    plan: &'a Plan,
    watchdog: Option<&'a Watchdog>,
    out: Option<&'a Rank0>,
    /// When this rank began the sweep (rank 0's clock is the one `--time-budget` goes by).
    started: std::time::Instant,
    budget: Option<TimeBudget>,
}

impl Sweep<'_> {
    /// One size of one (collective, type, op, root): both placements measured, rank 0 records
    /// them, and no rank moves on before the point is on disk.
    fn measure_size(
        &mut self,
        coll: Collective,
        dtype: crate::dtype::Dtype,
        op: Option<RedOp>,
        root: i64,
        size: u64,
        remaining: &[u64],
    ) -> Result<(Point, Point), Failure> {
        let spec = spec(self.plan, coll, dtype, op.unwrap_or(RedOp::Sum), root, size);
        let settings = &self.plan.settings;
        let budget_s = match &self.budget {
            Some(b) if remaining.is_empty() => b.point_budget_s(settings, &[size]),
            Some(b) => b.point_budget_s(settings, remaining),
            None => settings.point_budget_s,
        };
        self.comm
            .prepare(&spec)
            .map_err(|e| prepare_failure(coll, size, e))?;
        let mut runner = PointRunner {
            comm: &mut *self.comm,
            plan: self.plan,
            watchdog: self.watchdog,
            // The out-of-place placement's check is the point's first call: the tuner's
            // choice for the size is learned there, untimed.
            around_check: self.out.map(|_| super::observe::tuning_window as fn(bool)),
        };
        let oop = runner.measure(&spec, Placement::OutOfPlace, budget_s)?;
        let inp = runner.measure(&spec, Placement::InPlace, budget_s)?;
        if let Some(out) = self.out {
            out.point(&oop, &inp)?;
        }
        // No rank starts the next size before rank 0 has the point on disk, so a failure there
        // can never lose it. Rank 0 passes its clock along for the time budget.
        let clock = match self.out {
            Some(_) => self.started.elapsed().as_secs_f64().to_le_bytes().to_vec(),
            None => Vec::new(),
        };
        let all = self.comm.allgather_bytes(&clock).map_err(|e| {
            crate::backend::failure(&format!("after {coll} {}", format_size(size)), e)
        })?;
        if let Some(b) = &mut self.budget {
            let rank0: Option<[u8; 8]> = all.first().and_then(|c| c.as_slice().try_into().ok());
            let elapsed = rank0.map_or(self.started.elapsed().as_secs_f64(), f64::from_le_bytes);
            b.record(elapsed, size, oop.time_s);
        }
        Ok((oop, inp))
    }

    /// `sweep --retries`: rank 0 judges what it recorded and tells every rank which (collective,
    /// size) points failed; all ranks measure those again, up to `retries` times.
    fn retry_failed(&mut self, retries: usize) -> Result<(), Failure> {
        let (plan, out) = (self.plan, self.out);
        let nranks = self.comm.nranks();
        for _ in 0..retries {
            let mine: String = out
                .map(|o| o.points_to_retry())
                .unwrap_or_default()
                .iter()
                .map(|(c, s)| format!("{}\t{s}\n", c.name()))
                .collect();
            let all = self.comm.allgather_bytes(mine.as_bytes()).map_err(|e| {
                crate::backend::failure("agreeing on the points to measure again", e)
            })?;
            let todo: Vec<(Collective, u64)> =
                String::from_utf8_lossy(all.first().map_or(&[][..], |v| v))
                    .lines()
                    .filter_map(|l| {
                        let (c, s) = l.split_once('\t')?;
                        Some((Collective::parse(c)?, s.parse().ok()?))
                    })
                    .collect();
            // A rule judged over a plateau names where it starts: measure the plan's sizes from
            // there; a size the plan never had is not measured now either.
            let mut todo: Vec<(Collective, u64)> = todo
                .into_iter()
                .flat_map(|(c, s)| {
                    let sizes: Vec<u64> = if plan.sizes_bytes.contains(&s) {
                        vec![s]
                    } else {
                        plan.sizes_bytes
                            .iter()
                            .copied()
                            .filter(|&p| p >= s)
                            .collect()
                    };
                    sizes.into_iter().map(move |p| (c, p))
                })
                .filter(|(c, _)| plan.collectives.contains(c))
                .collect();
            todo.sort();
            todo.dedup();
            if todo.is_empty() {
                return Ok(());
            }
            // Every measurement the retry makes, in order: its size, for the time budget.
            let mut queue: Vec<(Collective, crate::dtype::Dtype, Option<RedOp>, i64, u64)> =
                Vec::new();
            for &(coll, size) in &todo {
                for root in plan.roots(coll, nranks)? {
                    for &dtype in &plan.dtypes {
                        for op in plan.ops_for(coll) {
                            queue.push((coll, dtype, op, root, size));
                        }
                    }
                }
            }
            let sizes: Vec<u64> = queue.iter().map(|q| q.4).collect();
            if let Some(b) = &self.budget {
                // Every rank decides alike: the budget goes by rank 0's clock.
                let least = b.least_s(&plan.settings, &sizes);
                if least > b.left_s() {
                    if let Some(out) = out {
                        out.add_notes(&[format!(
                            "--retries: not measuring again: {:.2} s of --time-budget left, and measuring the {} failed points again takes at least {least:.2} s",
                            b.left_s(),
                            sizes.len()
                        )])?;
                    }
                    return Ok(());
                }
            }
            if let Some(out) = out {
                out.begin_retry(&todo);
            }
            for (i, (coll, dtype, op, root, size)) in queue.into_iter().enumerate() {
                self.measure_size(coll, dtype, op, root, size, &sizes[i..])?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::options::{Options, Sizes, What};

    #[test]
    fn rank_information_round_trips_and_tolerates_missing_fields() {
        let info = crate::measure::parse_whoami(3, b"node7\t4242\t1\tGPU 1: NVIDIA H100");
        assert_eq!(
            (info.rank, info.host.as_str(), info.pid, info.group),
            (3, "node7", 4242, 1)
        );
        assert_eq!(info.device.as_deref(), Some("GPU 1: NVIDIA H100"));
        let bare = crate::measure::parse_whoami(0, b"node7\tnot-a-pid\t\t");
        assert_eq!((bare.pid, bare.device, bare.group), (0, None, 0));
    }

    #[test]
    fn points_count_every_root_type_and_op() {
        let sweep = Options {
            sizes: Sizes {
                minbytes: "8".into(),
                maxbytes: "64".into(),
                ..Default::default()
            },
            what: What {
                collective: "all_reduce,broadcast".into(),
                datatype: "float,int8".into(),
                op: "sum,max".into(),
                root: "all".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let plan = Plan::from_options(&sweep, None).unwrap();
        // all_reduce: 2 types x 2 ops x 4 sizes; broadcast: 2 types x 3 roots x 4 sizes.
        assert_eq!(total_points(&plan, 3), 16 + 24);
    }
}
