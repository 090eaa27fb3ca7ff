//! The harness every rank runs: warm-up, calibration, adaptive sampling, the correctness check,
//! and statistics. Decisions that must agree across ranks are made from all-gathered numbers,
//! so every rank reaches them without another message.

use crate::backend::{BackendError, Communicator, PointSpec};
use crate::coll::{bandwidths, reported_size_bytes, Layout, Placement};
use crate::data::{count_wrong, fill_inputs, Generator};
use crate::exit::Failure;
use crate::fault_injection::{self, Site};
use crate::model::Point;
use crate::plan::Plan;
use crate::stats::{summarize, StopRule};
use crate::units::format_size;
use crate::watchdog::Watchdog;

fn backend_failure(what: &str, e: BackendError) -> Failure {
    Failure::from_backend(what, e)
}

fn max_of(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Measures one point on this rank; every rank returns the same `Point`.
pub struct PointRunner<'a> {
    pub comm: &'a mut dyn Communicator,
    pub plan: &'a Plan,
    pub watchdog: Option<&'a Watchdog>,
}

impl PointRunner<'_> {
    fn arm(&self, what: &str) {
        if let Some(w) = self.watchdog {
            w.arm(what);
        }
    }

    fn timed(&mut self, placement: Placement, iters: usize, what: &str) -> Result<f64, Failure> {
        self.arm(what);
        let t = self
            .comm
            .run(placement, iters)
            .map_err(|e| backend_failure(what, e))?;
        let all = self
            .comm
            .allgather_f64(t)
            .map_err(|e| backend_failure(what, e))?;
        Ok(max_of(&all))
    }

    pub fn measure(&mut self, spec: &PointSpec, placement: Placement) -> Result<Point, Failure> {
        let n = self.comm.nranks();
        let rank = self.comm.rank();
        let s = &self.plan.settings;
        let size_bytes = reported_size_bytes(spec.coll, spec.count, spec.dtype, n);
        let what = format!(
            "{} {} {} ({} bytes) {}",
            spec.coll,
            spec.dtype,
            format_size(size_bytes),
            size_bytes,
            placement.name()
        );
        let gen = Generator {
            coll: spec.coll,
            op: spec.op,
            dtype: spec.dtype,
            nranks: n,
            root: spec.root,
        };
        let layout = spec.layout(n, rank);
        fill_inputs(&gen, rank, &layout, placement, self.comm.buffers());
        self.comm.upload().map_err(|e| backend_failure(&what, e))?;

        fault_injection::strike(
            self.plan.fault.as_ref(),
            rank,
            size_bytes,
            Site::BeforeTiming { what: &what },
        );

        let iters = self.warm_up(placement, &what)?;

        // Samples until the interval is tight, the budget is spent or the cap is reached.
        let rule = StopRule {
            min_samples: s.min_samples,
            max_samples: s.max_samples,
            target_rel_ci: s.target_rel_ci,
            budget_s: s.point_budget_s,
        };
        let mut samples = Vec::new();
        let mut per_rank: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut measured_s = 0.0;
        let stop_reason = loop {
            self.arm(&what);
            let t = self
                .comm
                .run(placement, iters)
                .map_err(|e| backend_failure(&what, e))?;
            let all = self
                .comm
                .allgather_f64(t / iters as f64)
                .map_err(|e| backend_failure(&what, e))?;
            for (r, v) in all.iter().enumerate().take(n) {
                per_rank[r].push(*v);
            }
            let sample = s.across_ranks.pick(&all);
            samples.push(sample);
            measured_s += max_of(&all) * iters as f64;
            if let Some(reason) = rule.decide(&samples, measured_s) {
                break reason;
            }
        };

        let arrivals = match s.stragglers {
            true => {
                self.arm(&format!("{what} (arrival times)"));
                Some(crate::arrivals::measure(
                    self.comm,
                    placement,
                    &self.plan.injected,
                    &what,
                )?)
            }
            false => None,
        };

        let wrong = self.check(spec, placement, &gen, &layout, &what)?;

        let stats = summarize(&samples);
        let time_s = stats.median_s;
        let (algbw, busbw) = bandwidths(spec.coll, spec.count, spec.dtype, n, time_s);
        Ok(Point {
            collective: spec.coll,
            nranks: n,
            dtype: spec.dtype,
            redop: spec.coll.has_op().then_some(spec.op),
            root: if spec.coll.is_rooted() {
                spec.root as i64
            } else {
                -1
            },
            placement,
            size_bytes,
            // nccl-tests prints the requested count (size / type size), not the rounded one.
            count: spec.count as u64,
            time_s,
            algbw_bytes_per_s: algbw,
            busbw_bytes_per_s: busbw,
            wrong,
            iters_per_sample: iters,
            samples_s: samples,
            stats,
            stop_reason,
            per_rank_time_s: per_rank.iter().map(|v| summarize(v).median_s).collect(),
            nccl_model_time_s: self.comm.model_time_s(placement),
            arrivals,
        })
    }

    /// Warm-up: the asked-for count, then more until the asked-for time has passed. Returns
    /// the iterations per sample (given, or enough for the sample target at the warm rate).
    fn warm_up(&mut self, placement: Placement, what: &str) -> Result<usize, Failure> {
        let s = &self.plan.settings;
        let first = s.warmup_iters.max(1);
        let mut warm_s = self.timed(placement, first, what)?;
        let mut per_iter_s = warm_s / first as f64;
        while warm_s < s.warmup_min_s {
            let k = ((s.warmup_min_s - warm_s) / per_iter_s.max(1e-9))
                .ceil()
                .clamp(1.0, 1e6) as usize;
            let t = self.timed(placement, k, what)?;
            warm_s += t;
            per_iter_s = t / k as f64;
        }
        Ok(s.iters_per_sample.unwrap_or_else(|| {
            (s.sample_target_s / per_iter_s.max(1e-9))
                .ceil()
                .clamp(1.0, 1e6) as usize
        }))
    }

    /// Checks after timing, on fresh inputs, untimed (as nccl-tests does); `None` when the
    /// point is not checked. Stops at the first check that finds a wrong element.
    fn check(
        &mut self,
        spec: &PointSpec,
        placement: Placement,
        gen: &Generator,
        layout: &Layout,
        what: &str,
    ) -> Result<Option<u64>, Failure> {
        let rank = self.comm.rank();
        let size_bytes = reported_size_bytes(spec.coll, spec.count, spec.dtype, self.comm.nranks());
        let s = &self.plan.settings;
        let mut wrong = None;
        // As nccl-tests, in-place results that the backend cannot produce are not checked.
        let check_iters =
            if placement == Placement::InPlace && !self.comm.checks_in_place(spec.coll) {
                0
            } else {
                s.check_iters
            };
        for _ in 0..check_iters {
            fill_inputs(gen, rank, layout, placement, self.comm.buffers());
            self.comm.upload().map_err(|e| backend_failure(what, e))?;
            self.arm(&format!("{what} (check)"));
            self.comm
                .run(placement, 1)
                .map_err(|e| backend_failure(what, e))?;
            self.comm.download().map_err(|e| backend_failure(what, e))?;
            fault_injection::strike(
                self.plan.fault.as_ref(),
                rank,
                size_bytes,
                Site::CheckOutput {
                    recv: self.comm.buffers().recv,
                    layout,
                    placement,
                    elem_bytes: spec.dtype.size_bytes(),
                },
            );
            let local = count_wrong(gen, rank, layout, placement, self.comm.buffers().recv);
            let total = self
                .comm
                .allreduce_sum_u64(local)
                .map_err(|e| backend_failure(what, e))?;
            wrong = Some(total);
            if total > 0 {
                break;
            }
        }
        Ok(wrong)
    }
}
