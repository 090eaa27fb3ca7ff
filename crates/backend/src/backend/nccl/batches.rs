//! How an NCCL rank times a batch of calls: as one batch (host clock or `--cuda-events`), with
//! -m's aggregated groups, or each call apart (-I).

use super::comm::NcclComm;
use super::enqueue::enqueue;
use super::group::{grouped, Work};
use crate::backend::cuda::drv;
use crate::backend::BackendError;
use crate::coll::Placement;
use crate::model::IterationTiming;
use cudarc::driver::sys as cu;
use std::time::Instant;

impl NcclComm {
    /// `iters` iterations of the prepared collective, timed as one batch: each iteration is
    /// one call, or with `agg` > 1 (nccl-tests' -m) `agg` calls between ncclGroupStart and
    /// ncclGroupEnd (src/common.cu, BenchTime: `if (agg_iters>1) ncclGroupStart()`).
    pub(super) fn run_batch(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("run() before prepare()".into()))?;
        self.current()?;
        let stream = self.stream as cu::CUstream;
        let mut start = Instant::now();
        if let Some((a, _)) = self.events {
            // SAFETY: an event created for this rank, recorded on its stream.
            self.api.cuda("cuEventRecord", unsafe {
                drv::cuEventRecord(a as cu::CUevent, stream)
            })?;
        }
        if let Some(all_arrived) = self.enqueue_batch(&spec, placement, iters, agg)? {
            start = all_arrived;
        }
        if let Some((_, b)) = self.events {
            // SAFETY: as above.
            self.api.cuda("cuEventRecord", unsafe {
                drv::cuEventRecord(b as cu::CUevent, stream)
            })?;
        }
        self.wait(&spec)?;
        let host_s = start.elapsed().as_secs_f64();
        match self.events {
            Some((a, b)) => {
                let mut ms = 0f32;
                // SAFETY: both events completed (the stream is idle).
                self.api.cuda("cuEventElapsedTime", unsafe {
                    drv::cuEventElapsedTime(&mut ms, a as cu::CUevent, b as cu::CUevent)
                })?;
                Ok(ms as f64 * 1e-3)
            }
            None => Ok(host_s),
        }
    }

    /// -I as nccl-tests times it (src/common.cu, BenchTime with per_iter_timing: recordEvents
    /// before each iteration and once after the last, getElapsedTimes between neighbours):
    /// events on the stream between iterations (each one call, or -m's group of `agg`), none
    /// waited for until the batch is done. With -g N from one thread the group launcher owns
    /// the streams, so each iteration is timed to its end on the host instead, and the record
    /// says so.
    pub(super) fn run_each_timed(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<(f64, Vec<f64>, IterationTiming), BackendError> {
        if self.group.is_some() {
            let start = Instant::now();
            let each = (0..iters)
                .map(|_| self.run_batch(placement, 1, agg))
                .collect::<Result<Vec<f64>, _>>()?;
            let batch_s = start.elapsed().as_secs_f64();
            return Ok((batch_s, each, IterationTiming::HostClockEachWaited));
        }
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("run_each() before prepare()".into()))?;
        self.current()?;
        let stream = self.stream as cu::CUstream;
        let mut events: Vec<cu::CUevent> = Vec::with_capacity(iters + 1);
        let result = (|| {
            for _ in 0..=iters {
                let mut e = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; default flags (timing enabled).
                self.api
                    .cuda("cuEventCreate", unsafe { drv::cuEventCreate(&mut e, 0) })?;
                events.push(e);
            }
            let start = Instant::now();
            let target = self.target();
            for (iter, e) in events[..iters].iter().enumerate() {
                // SAFETY: our event, recorded on our stream.
                self.api
                    .cuda("cuEventRecord", unsafe { drv::cuEventRecord(*e, stream) })?;
                if agg > 1 {
                    let work = [(
                        target.clone(),
                        Work::Collective(spec.clone(), placement, agg),
                    )];
                    grouped(&self.api, &work, iter)?;
                    self.current()?;
                } else {
                    // SAFETY: buffers sized by prepare for this spec in both placements.
                    unsafe { enqueue(&self.api, &target.at(iter), &spec, placement)? };
                }
            }
            // SAFETY: as above.
            self.api.cuda("cuEventRecord", unsafe {
                drv::cuEventRecord(events[iters], stream)
            })?;
            self.wait(&spec)?;
            let host_s = start.elapsed().as_secs_f64();
            let mut each = Vec::with_capacity(iters);
            for pair in events.windows(2) {
                let mut ms = 0f32;
                // SAFETY: both events completed (the stream is idle).
                self.api.cuda("cuEventElapsedTime", unsafe {
                    drv::cuEventElapsedTime(&mut ms, pair[0], pair[1])
                })?;
                each.push(ms as f64 * 1e-3);
            }
            let batch_s = match self.events {
                Some(_) => each.iter().sum(),
                None => host_s,
            };
            Ok((batch_s, each, IterationTiming::CudaEvents))
        })();
        for e in events {
            // SAFETY: our own events, destroyed once; none is pending after wait (or abort).
            unsafe { drv::cuEventDestroy_v2(e) };
        }
        result
    }

    /// -G as nccl-tests runs it (src/common.cu, BenchTime with cudaGraphLaunches): the batch's
    /// calls captured on the rank's stream (thread-local mode), the graph instantiated, the
    /// ranks met, then the graph launched `launches` times and the stream waited for; the
    /// seconds from the first launch. With -g N each rank captures its own stream while the
    /// group launcher issues every GPU's calls.
    pub(super) fn run_graph_batch(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
        launches: usize,
    ) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("run_graph() before prepare()".into()))?;
        let g = drv::graphs().map_err(BackendError::Unsupported)?;
        if self.stream == 0 {
            return Err(BackendError::Unsupported(
                "-G with -y 1: the legacy (NULL) stream cannot be captured".into(),
            ));
        }
        self.current()?;
        let stream = self.stream as cu::CUstream;
        // SAFETY: the rank's own stream, idle (every batch ends waiting for it).
        self.api.cuda("cuStreamBeginCapture", unsafe {
            (g.begin_capture)(stream, drv::CAPTURE_MODE_THREAD_LOCAL)
        })?;
        let captured = self.enqueue_batch(&spec, placement, iters, agg).map(|_| ());
        let mut graph: cu::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above, whatever the enqueueing did.
        let ended = self.api.cuda("cuStreamEndCapture", unsafe {
            (g.end_capture)(stream, &mut graph)
        });
        if let Err(e) = captured.and(ended) {
            if !graph.is_null() {
                // SAFETY: the graph just captured, never instantiated.
                unsafe { (g.destroy)(graph) };
            }
            return Err(e);
        }
        let mut exec: cu::CUgraphExec = std::ptr::null_mut();
        // SAFETY: a graph just captured; flags 0 as nccl-tests.
        let made = self.api.cuda("cuGraphInstantiate", unsafe {
            (g.instantiate)(&mut exec, graph, 0)
        });
        let timed = made.and_then(|_| {
            // "Resync CPU, restart timing, launch cuda graph".
            self.control.allgather(&[])?;
            let start = Instant::now();
            for _ in 0..launches {
                // SAFETY: the instantiated graph on the rank's stream.
                self.api
                    .cuda("cuGraphLaunch", unsafe { (g.launch)(exec, stream) })?;
            }
            self.wait(&spec)?;
            Ok(start.elapsed().as_secs_f64())
        });
        // SAFETY: our own graph and its instance, nothing left running on them.
        unsafe {
            if !exec.is_null() {
                (g.exec_destroy)(exec);
            }
            if !graph.is_null() {
                (g.destroy)(graph);
            }
        }
        timed
    }

    /// Enqueue `iters` iterations of `agg` calls (grouped when more than one), from this
    /// thread or, with -g N, through the group launcher (then: the moment every rank had
    /// arrived); nothing waited for.
    fn enqueue_batch(
        &mut self,
        spec: &crate::backend::PointSpec,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<Option<Instant>, BackendError> {
        let target = self.target();
        if let Some(group) = &self.group {
            let arrived = group.launch(
                &self.api,
                target,
                Work::Collective(spec.clone(), placement, agg),
                iters,
            )?;
            self.current()?;
            return Ok(Some(arrived));
        }
        for iter in 0..iters {
            if agg > 1 {
                grouped(
                    &self.api,
                    &[(
                        target.clone(),
                        Work::Collective(spec.clone(), placement, agg),
                    )],
                    iter,
                )?;
                self.current()?;
            } else {
                // SAFETY: buffers sized by prepare for this spec in both placements.
                unsafe { enqueue(&self.api, &target.at(iter), spec, placement)? };
            }
        }
        Ok(None)
    }
}
