//! The parts of nccl-tests' own schedule the adaptive one has no use for: -I's per-iteration
//! times and -z's iterations waited for one by one (src/common.cu, BenchTime and startColl).

use super::{backend_failure, max_of, PointRunner, Sampled, Warm};
use crate::coll::Placement;
use crate::exit::Failure;
use crate::model::{Blocking, IterationTiming, PerIteration};
use std::time::Instant;

impl PointRunner<'_> {
    /// `iters` iterations of `agg` calls each on this rank, every iteration waited for and,
    /// as `mode` says, followed by a barrier of all ranks (startColl: `testStreamSynchronize`,
    /// then `Barrier` for -z 1; BenchTime: for -z 3 the sync then the barrier, with only the
    /// time up to the sync counted, `collOnlySec`). The batch's seconds and each iteration's.
    pub(super) fn blocking_batch(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        mode: Blocking,
        what: &str,
    ) -> Result<(f64, Vec<f64>), Failure> {
        self.arm(what);
        let start = Instant::now();
        let mut each = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t0 = Instant::now();
            // A backend's run returns when the calls are done: the wait of -z.
            self.comm
                .run_aggregated(placement, 1, agg)
                .map_err(|e| backend_failure(what, e))?;
            let waited = t0.elapsed().as_secs_f64();
            if mode.barrier() {
                self.comm
                    .allgather_bytes(&[])
                    .map_err(|e| backend_failure(what, e))?;
            }
            each.push(match mode {
                Blocking::WaitBarrierExcluded => waited,
                _ => t0.elapsed().as_secs_f64(),
            });
        }
        let batch_s = match mode {
            Blocking::WaitBarrierExcluded => each.iter().sum(),
            _ => start.elapsed().as_secs_f64(),
        };
        Ok((batch_s, each))
    }

    /// One rank's batch of `iters` iterations with -m's `agg` calls each, every iteration
    /// timed: waited for one by one under -z, else as the backend tells them apart
    /// (`Communicator::run_each`). Times are per call, as getElapsedTimes divides by aggIters.
    fn each_iteration(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        what: &str,
    ) -> Result<(f64, Vec<f64>, IterationTiming), Failure> {
        let (batch_s, each, timing) = match self.plan.settings.blocking {
            Some(mode) => {
                let (batch_s, each) = self.blocking_batch(placement, iters, agg, mode, what)?;
                (batch_s, each, IterationTiming::HostClockEachWaited)
            }
            None => {
                self.arm(what);
                self.comm
                    .run_each(placement, iters, agg)
                    .map_err(|e| backend_failure(what, e))?
            }
        };
        let per_call = |t: f64| t / agg as f64;
        Ok((batch_s, each.into_iter().map(per_call).collect(), timing))
    }

    /// nccl-tests' -I: the one sample of `-n` iterations, each timed; every rank's times are
    /// gathered, and an iteration's time is its slowest rank's, as nccl-tests takes the maximum
    /// over its process rows (src/common.cu, ReduceProcessMaxIterTimes).
    pub(super) fn sample_each(
        &mut self,
        placement: Placement,
        what: &str,
        warm: Warm,
        skip: usize,
    ) -> Result<(Sampled, PerIteration), Failure> {
        let iters = warm.iters_per_sample;
        let agg = self.plan.settings.agg_iters.unwrap_or(1).max(1);
        let (batch_s, each, timing) = self.each_iteration(placement, iters, agg, what)?;
        let mine: Vec<f64> = std::iter::once(batch_s).chain(each).collect();
        let rows = self
            .comm
            .allgather_f64s(&mine)
            .map_err(|e| backend_failure(what, e))?;
        let calls = (iters * agg) as f64;
        let per_call: Vec<f64> = rows
            .iter()
            .map(|r| r.first().map_or(f64::NAN, |b| b / calls))
            .collect();
        let per_rank_s: Vec<Vec<f64>> = rows.iter().map(|r| r[1.min(r.len())..].to_vec()).collect();
        let times_s = (0..iters)
            .map(|i| {
                let at = per_rank_s.iter().filter_map(|r| r.get(i).copied());
                max_of(&at.collect::<Vec<f64>>())
            })
            .collect();
        let sampled = Sampled {
            samples: vec![self.plan.settings.across_ranks.pick(&per_call)],
            per_rank: per_call.iter().map(|t| vec![*t]).collect(),
            measured_s: max_of(&per_call) * calls,
            iters,
            stop_reason: crate::stats::StopReason::Fixed,
            warm,
        };
        let each = PerIteration {
            times_s,
            per_rank_s,
            skipped: skip.min(iters.saturating_sub(1)),
            timing,
        };
        Ok((sampled, each))
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
