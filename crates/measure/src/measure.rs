//! The harness every rank runs: warm-up, calibration, adaptive sampling, the correctness check,
//! and statistics. Decisions that must agree across ranks are made from all-gathered numbers,
//! so every rank reaches them without another message.

use crate::backend::{BackendError, Communicator, PointSpec};
use crate::coll::{Collective, Layout, Placement};
use crate::data::{count_wrong, fill_inputs, Generator};
use crate::exit::Failure;
use crate::fault_injection::{self, Injected, Site};
use crate::model::{Point, PointCost, RankInfo, Schedule};
use crate::plan::Plan;
use crate::stats::{summarize, StopRule};
use crate::units::format_size;
use crate::watchdog::Watchdog;

pub mod keep;
mod schedule;

fn backend_failure(what: &str, e: BackendError) -> Failure {
    crate::backend::failure(what, e)
}

fn max_of(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Measures one point on this rank; every rank returns the same `Point`.
pub struct PointRunner<'a> {
    pub comm: &'a mut dyn Communicator,
    pub plan: &'a Plan,
    pub watchdog: Option<&'a Watchdog>,
    /// Called with `true` before the point's first (checked, untimed) calls and `false` after
    /// them, on the rank that reads NCCL's log: `--show-algo` turns the tuner's lines on there.
    pub around_check: Option<fn(bool)>,
}

impl PointRunner<'_> {
    fn arm(&self, what: &str) {
        if let Some(w) = self.watchdog {
            w.arm(what);
        }
    }

    /// `iters` iterations of `agg` calls each (-m; 1 elsewhere) on every rank; every rank's
    /// seconds for them, in rank order.
    fn timed_per_rank(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        what: &str,
    ) -> Result<Vec<f64>, Failure> {
        self.arm(what);
        let t = self
            .comm
            .run_aggregated(placement, iters, agg)
            .map_err(|e| backend_failure(what, e))?;
        self.comm
            .allgather_f64(t)
            .map_err(|e| backend_failure(what, e))
    }

    /// One sample's `iters` iterations of `agg` calls on every rank, waited for one by one
    /// under nccl-tests' -z; every rank's seconds, in rank order.
    fn sample_per_rank(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        what: &str,
    ) -> Result<Vec<f64>, Failure> {
        let s = &self.plan.settings;
        let t = match (s.graph_launches, s.blocking) {
            // -G: the batch's time over its launches, so each sample is one batch's worth.
            (Some(launches), _) => {
                self.arm(what);
                self.comm
                    .run_graph(placement, iters, agg, launches)
                    .map_err(|e| backend_failure(what, e))?
                    / launches.max(1) as f64
            }
            (None, Some(mode)) => self.blocking_batch(placement, iters, agg, mode, what)?.0,
            (None, None) => return self.timed_per_rank(placement, iters, agg, what),
        };
        self.comm
            .allgather_f64(t)
            .map_err(|e| backend_failure(what, e))
    }

    /// `iters` calls, timed as the slowest rank saw them.
    fn timed(&mut self, placement: Placement, iters: usize, what: &str) -> Result<f64, Failure> {
        Ok(max_of(&self.timed_per_rank(placement, iters, 1, what)?))
    }

    /// Measures one point: the exact check on the first call after the inputs are written
    /// (untimed for the statistics, and the first warm-up call), warm-up until the rate
    /// settles, then samples until the interval is tight, `budget_s` of measured time is spent
    /// or the sample cap is reached.
    pub fn measure(
        &mut self,
        spec: &PointSpec,
        placement: Placement,
        budget_s: f64,
    ) -> Result<Point, Failure> {
        let started = std::time::Instant::now();
        let n = self.comm.nranks();
        let rank = self.comm.rank();
        let s = &self.plan.settings;
        let size_bytes = spec.reported_size_bytes(n);
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
            traffic: spec.traffic.clone(),
        };
        let layout = spec.layout(n, rank);
        fill_inputs(&gen, rank, &layout, placement, self.comm.buffers());
        self.comm.upload().map_err(|e| backend_failure(&what, e))?;

        // The point's calls begin here: a rank held up before its first one is named with it.
        self.arm(&what);
        fault_injection::strike(
            self.plan.fault.as_ref(),
            rank,
            size_bytes,
            Site::BeforeTiming { what: &what },
        );

        if let Some(f) = self.around_check {
            f(true);
        }
        let checked = self.check(spec, placement, &gen, &layout, &what);
        if let Some(f) = self.around_check {
            f(false);
        }
        let checked = checked?;
        let warm = self.warm_up(placement, &what, checked.call_s)?;
        let (sampled, per_iteration) = match (s.schedule, s.per_iteration_skip) {
            (Schedule::NcclTests, Some(skip)) => {
                let (sampled, each) = self.sample_each(placement, &what, warm, skip)?;
                (sampled, Some(each))
            }
            _ => (self.sample(placement, &what, warm, budget_s)?, None),
        };
        let (samples, per_rank, measured_s) =
            (sampled.samples, sampled.per_rank, sampled.measured_s);
        let (iters, stop_reason, warm) = (sampled.iters, sampled.stop_reason, sampled.warm);

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

        let stats = summarize(&samples);
        let time_s = stats.median_s;
        let (algbw, busbw) = spec.bandwidths(n, time_s);
        Ok(Point {
            collective: spec.coll,
            nranks: n,
            dtype: spec.dtype,
            redop: spec.coll.labels_op().then_some(spec.op),
            root: if spec.coll.is_rooted() {
                spec.root as i64
            } else {
                -1
            },
            placement,
            size_bytes,
            // nccl-tests prints `args->nbytes / wordSize(type)` with `args->nbytes = paramCount *
            // wordSize(type)` (src/common.cu, setupArgs and the row's preamble): the count each
            // rank passes to NCCL, which for all_gather, reduce_scatter and alltoall is the
            // per-rank share (rounded down to 16 bytes), not the whole message.
            count: spec.reported_count(n),
            time_s,
            algbw_bytes_per_s: algbw,
            busbw_bytes_per_s: busbw,
            wrong: checked.wrong,
            iters_per_sample: iters,
            samples_s: samples,
            stats,
            stop_reason,
            per_rank_time_s: per_rank.iter().map(|v| summarize(v).median_s).collect(),
            nccl_model_time_s: self.comm.model_time_s(placement),
            arrivals,
            cost: Some(PointCost {
                wall_s: started.elapsed().as_secs_f64(),
                check_s: checked.spent_s,
                warmup_s: warm.spent_s,
                sampling_s: measured_s,
                budget_s,
            }),
            per_iteration,
            nccl_algo: None,
        })
    }

    /// Samples until the interval is tight, `budget_s` of measured time is spent or the
    /// sample cap is reached.
    fn sample(
        &mut self,
        placement: Placement,
        what: &str,
        mut warm: Warm,
        budget_s: f64,
    ) -> Result<Sampled, Failure> {
        let s = &self.plan.settings;
        let n = self.comm.nranks();
        let rule = StopRule {
            min_samples: s.min_samples,
            max_samples: s.max_samples,
            target_rel_ci: s.target_rel_ci,
            budget_s,
        };
        let mut iters = warm.iters_per_sample;
        let mut samples = Vec::new();
        let mut per_rank: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut measured_s = 0.0;
        // -m: each iteration is `agg` calls in one group; times stay per call.
        let agg = s.agg_iters.unwrap_or(1).max(1);
        let stop_reason = loop {
            let all: Vec<f64> = self
                .sample_per_rank(placement, iters, agg, what)?
                .into_iter()
                .map(|t| t / (iters * agg) as f64)
                .collect();
            // Every rank of the job: more than `n` when NCCL_TESTS_SPLIT runs groups at once.
            if per_rank.len() < all.len() {
                per_rank.resize(all.len(), Vec::new());
            }
            for (r, v) in all.iter().enumerate() {
                per_rank[r].push(*v);
            }
            let rate = max_of(&all);
            // A first sample at well under half the time per call the warm-up settled on means
            // the warm-up ended on a slow call (the sweep's very first call sets up the
            // transport): that sample was warm-up, and samples are sized again from it.
            if samples.is_empty() && iters < MAX_ITERS && rate < 0.5 * warm.per_call_s {
                let again = s
                    .iters_per_sample
                    .unwrap_or_else(|| iters_for(s.sample_target_s, rate));
                if again > iters {
                    warm.spent_s += rate * iters as f64;
                    warm.per_call_s = rate;
                    iters = again;
                    per_rank.iter_mut().for_each(Vec::clear);
                    continue;
                }
            }
            samples.push(s.across_ranks.pick(&all));
            measured_s += rate * (iters * agg) as f64;
            if let Some(reason) = rule.decide(&samples, measured_s) {
                break reason;
            }
        };
        Ok(Sampled {
            samples,
            per_rank,
            measured_s,
            iters,
            stop_reason,
            warm,
        })
    }

    /// Warm-up after the checked calls (`first_call_s` is the slowest rank's time of the last
    /// one, `None` when nothing was checked): batches of about one sample until two in a row
    /// agree on the time per call within [`SETTLED`], at least `-w` calls and `--warmup-time`
    /// seconds, at most [`WARMUP_BATCHES`] batches. Calls that last a sample or more are warm
    /// after the first: a second whole call would cost as much as a sample.
    fn warm_up(
        &mut self,
        placement: Placement,
        what: &str,
        first_call_s: Option<f64>,
    ) -> Result<Warm, Failure> {
        let s = &self.plan.settings;
        // The checked call warmed up too; its time is the check's.
        let (mut calls, mut spent_s, mut per_iter_s) = match first_call_s {
            Some(t) => (1, 0.0, t),
            None => {
                let t = self.timed(placement, 1, what)?;
                (1, t, t)
            }
        };
        if s.schedule == Schedule::NcclTests {
            // Exactly -w calls, whatever they show; the checked call stands for nccl-tests'
            // untimed first call of each placement (src/common.cu, BenchTime).
            let k = s.warmup_iters.saturating_sub(calls);
            if k > 0 {
                spent_s += self.timed(placement, k, what)?;
            }
            // BenchTime's "Sync": one untimed call right before the timed loop, so the loop
            // starts on a GPU that just worked, not one idle through the check's copies and
            // host compare (on an H100, -n 20 batches otherwise measured 20-50 µs more per
            // batch than nccl-tests: +2.5 µs a call at 4 MiB).
            spent_s += self.timed(placement, 1, what)?;
            return Ok(Warm {
                iters_per_sample: s.iters_per_sample.unwrap_or(20),
                per_call_s: per_iter_s,
                spent_s,
            });
        }
        let long_calls = per_iter_s >= s.sample_target_s;
        let mut batches = 0;
        while calls < s.warmup_iters
            || spent_s < s.warmup_min_s
            || (!long_calls && batches < WARMUP_BATCHES)
        {
            let k =
                iters_for(s.sample_target_s, per_iter_s).max(s.warmup_iters.saturating_sub(calls));
            let t = self.timed(placement, k, what)?;
            let rate = t / k as f64;
            let settled = (rate - per_iter_s).abs() <= SETTLED * per_iter_s;
            (calls, spent_s, per_iter_s) = (calls + k, spent_s + t, rate);
            batches += 1;
            if settled && calls >= s.warmup_iters && spent_s >= s.warmup_min_s {
                break;
            }
        }
        Ok(Warm {
            iters_per_sample: s
                .iters_per_sample
                .unwrap_or_else(|| iters_for(s.sample_target_s, per_iter_s)),
            per_call_s: per_iter_s,
            spent_s,
        })
    }

    /// The exact check, on the first calls after the inputs were written (as nccl-tests'
    /// check, untimed for the statistics, but done first so that its calls are also the
    /// warm-up's first). Stops at the first check that finds a wrong element.
    fn check(
        &mut self,
        spec: &PointSpec,
        placement: Placement,
        gen: &Generator,
        layout: &Layout,
        what: &str,
    ) -> Result<Checked, Failure> {
        let rank = self.comm.rank();
        let size_bytes = spec.reported_size_bytes(self.comm.nranks());
        let s = &self.plan.settings;
        let mut checked = Checked {
            wrong: None,
            call_s: None,
            spent_s: 0.0,
        };
        // As nccl-tests, in-place results that the backend cannot produce are not checked, and
        // alltoallv's never are (AlltoAllvInitData: `reportErrors = in_place ? 0 : 1`).
        let unchecked = spec.coll == Collective::Alltoallv || !self.comm.checks_in_place(spec.coll);
        let check_iters = if placement == Placement::InPlace && unchecked {
            0
        } else {
            s.check_iters
        };
        for i in 0..check_iters {
            if i > 0 {
                fill_inputs(gen, rank, layout, placement, self.comm.buffers());
                self.comm.upload().map_err(|e| backend_failure(what, e))?;
            }
            // Named as the point: its first call is the check's. Under -G it is captured into
            // a graph and launched once, as nccl-tests checks (src/common.cu 806-831): a fault
            // of graph launches alone (graph-time registration, persistent plans) shows there.
            let t = match self.plan.settings.graph_launches {
                Some(_) => {
                    self.arm(what);
                    let t = self
                        .comm
                        .run_graph(placement, 1, 1, 1)
                        .map_err(|e| backend_failure(what, e))?;
                    let all = self
                        .comm
                        .allgather_f64(t)
                        .map_err(|e| backend_failure(what, e))?;
                    max_of(&all)
                }
                None => self.timed(placement, 1, what)?,
            };
            checked.call_s = Some(t);
            checked.spent_s += t;
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
            checked.wrong = Some(total);
            if total > 0 {
                break;
            }
        }
        Ok(checked)
    }
}

/// Two warm-up batches in a row whose times per call differ by at most this fraction mean the
/// rate has settled.
const SETTLED: f64 = 0.1;

/// The most warm-up batches of about a sample each, beyond `-w` and `--warmup-time`.
const WARMUP_BATCHES: usize = 5;

/// The most calls in one batch.
const MAX_ITERS: usize = 1_000_000;

/// Calls per batch for a batch of about `target_s`.
fn iters_for(target_s: f64, per_call_s: f64) -> usize {
    (target_s / per_call_s.max(1e-9))
        .ceil()
        .clamp(1.0, MAX_ITERS as f64) as usize
}

/// What the check found and cost.
struct Checked {
    wrong: Option<u64>,
    /// The slowest rank's time of the last checked call.
    call_s: Option<f64>,
    spent_s: f64,
}

/// What sampling gave: the samples (across ranks and per rank), their measured time, the
/// batch they were taken in, why it stopped, and the warm-up (with any calibration redone).
struct Sampled {
    samples: Vec<f64>,
    per_rank: Vec<Vec<f64>>,
    measured_s: f64,
    iters: usize,
    stop_reason: crate::stats::StopReason,
    warm: Warm,
}

/// What the warm-up settled on and cost.
struct Warm {
    iters_per_sample: usize,
    /// The slowest rank's time per call at the end of the warm-up.
    per_call_s: f64,
    spent_s: f64,
}

/// "host \t pid \t group \t device" of this rank, for the all-gather that tells rank 0 who
/// is where (the host name a test gave this rank through `--inject-fault hosts:…`, if any).
fn whoami(comm: &dyn Communicator, injected: &Injected) -> String {
    let host = host_name(comm.rank(), injected);
    format!(
        "{host}\t{}\t{}\t{}",
        std::process::id(),
        comm.group(),
        comm.device_label().unwrap_or_default()
    )
}

/// This rank's host name (or the one a test gave it through `--inject-fault hosts:…`).
pub fn host_name(rank: usize, injected: &Injected) -> String {
    match injected.hosts.as_ref().and_then(|h| h.get(rank)) {
        Some(h) => h.clone(),
        None => hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
    }
}

/// Who is where: every rank's host, process and device, on every rank.
pub fn exchange_whoami(
    comm: &mut dyn Communicator,
    injected: &Injected,
) -> Result<Vec<RankInfo>, Failure> {
    let me = whoami(comm, injected);
    let everyone = comm
        .allgather_bytes(me.as_bytes())
        .map_err(|e| crate::backend::failure("exchanging rank information", e))?;
    Ok(everyone
        .iter()
        .enumerate()
        .map(|(rank, b)| parse_whoami(rank, b))
        .collect())
}

pub(crate) fn parse_whoami(rank: usize, bytes: &[u8]) -> RankInfo {
    let text = String::from_utf8_lossy(bytes);
    let mut fields = text.splitn(4, '\t');
    let host = fields.next().unwrap_or_default().to_string();
    let pid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let group = fields.next().and_then(|g| g.parse().ok()).unwrap_or(0);
    let device = fields.next().filter(|d| !d.is_empty()).map(str::to_string);
    RankInfo {
        rank,
        host,
        pid,
        device,
        group,
    }
}

/// Where a progress bar draws: stderr, or nowhere under -q (indicatif draws none off a
/// terminal either).
pub fn progress_target() -> indicatif::ProgressDrawTarget {
    match crate::term::quiet() {
        true => indicatif::ProgressDrawTarget::hidden(),
        false => indicatif::ProgressDrawTarget::stderr(),
    }
}
