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
        match &self.group {
            Some(group) => {
                start = group.launch(
                    &self.api,
                    self.target(),
                    Work::Collective(spec, placement, agg),
                    iters,
                )?;
                self.current()?;
            }
            None => {
                let target = self.target();
                for _ in 0..iters {
                    if agg > 1 {
                        let work = [(target.clone(), Work::Collective(spec, placement, agg))];
                        grouped(&self.api, &work)?;
                        self.current()?;
                        continue;
                    }
                    // SAFETY: buffers sized by prepare for this spec in both placements.
                    unsafe { enqueue(&self.api, &target, &spec, placement)? };
                }
            }
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
            for e in &events[..iters] {
                // SAFETY: our event, recorded on our stream.
                self.api
                    .cuda("cuEventRecord", unsafe { drv::cuEventRecord(*e, stream) })?;
                if agg > 1 {
                    let work = [(target.clone(), Work::Collective(spec, placement, agg))];
                    grouped(&self.api, &work)?;
                    self.current()?;
                } else {
                    // SAFETY: buffers sized by prepare for this spec in both placements.
                    unsafe { enqueue(&self.api, &target, &spec, placement)? };
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
}
