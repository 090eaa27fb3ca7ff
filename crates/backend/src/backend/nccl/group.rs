//! `-g N`: one thread enqueues every GPU's calls of a batch between ncclGroupStart/End.

use super::abort::NCCL_IN_PROGRESS;
use super::api::Api;
use super::enqueue::{enqueue_step, enqueue_transfer, steps, Target};
use crate::backend::cuda::drv;
use crate::backend::{BackendError, PairRole, PointSpec};
use crate::coll::Placement;
use cudarc::driver::sys as cu;
use std::sync::Mutex;
use std::time::Instant;

/// What every rank of a batch enqueues: a collective, or its part of a pair exchange.
#[derive(Clone)]
pub(super) enum Work {
    /// The collective, and how many calls of it each group holds (-m).
    Collective(PointSpec, Placement, usize),
    Pair(PairRole, usize),
}

/// `-g N` in one process, as nccl-tests does it and as NCCL requires when one thread drives
/// several devices: rank threads hand over their targets, one thread (rank 0's) enqueues every
/// GPU's call between `ncclGroupStart` and `ncclGroupEnd`, then each rank waits for its own
/// stream. Every rank thread calls `launch` with the same point and iteration count (the
/// harness takes its decisions from all-gathered numbers).
pub struct GroupLauncher {
    targets: Mutex<Vec<Option<(Target, Work)>>>,
    arrived: std::sync::Barrier,
    launched: std::sync::Barrier,
    error: Mutex<Option<BackendError>>,
}

impl GroupLauncher {
    pub(super) fn new(n: usize) -> GroupLauncher {
        GroupLauncher {
            targets: Mutex::new(vec![None; n]),
            arrived: std::sync::Barrier::new(n),
            launched: std::sync::Barrier::new(n),
            error: Mutex::new(None),
        }
    }

    /// Enqueue `iters` grouped calls on every rank; returns when all are enqueued, with the
    /// moment every rank had arrived (the start of the timed batch).
    pub(super) fn launch(
        &self,
        api: &Api,
        target: Target,
        work: Work,
        iters: usize,
    ) -> Result<Instant, BackendError> {
        let poisoned = || BackendError::Failed("a rank thread panicked".into());
        let my_rank = target.rank;
        self.targets.lock().map_err(|_| poisoned())?[my_rank] = Some((target, work));
        self.arrived.wait();
        let start = Instant::now();
        if my_rank == 0 {
            let targets: Vec<(Target, Work)> = self
                .targets
                .lock()
                .map_err(|_| poisoned())?
                .iter()
                .flatten()
                .cloned()
                .collect();
            let outcome = (|| {
                // This thread owns every communicator of the group while it makes the group's
                // calls: the other rank threads wait at the barrier below meanwhile.
                for iter in 0..iters {
                    grouped(api, &targets, iter)?;
                }
                Ok(())
            })();
            *self.error.lock().map_err(|_| poisoned())? = outcome.err();
        }
        self.launched.wait();
        match &*self.error.lock().map_err(|_| poisoned())? {
            Some(e) => Err(e.clone()),
            None => Ok(start),
        }
    }
}

impl Work {
    /// The groups one iteration takes: a collective's steps (hypercube's copy and exchanges;
    /// one for the others), a round trip's two phases, a one-way exchange's one.
    fn phases(&self, nranks: usize) -> usize {
        match self {
            Work::Collective(spec, ..) => steps(spec.coll, nranks),
            Work::Pair(..) => 2,
        }
    }

    fn has_phase(&self, phase: usize, nranks: usize) -> bool {
        match self {
            Work::Collective(..) => phase < self.phases(nranks),
            Work::Pair(role, _) => role.phases()[phase] != Default::default(),
        }
    }
}

/// Iteration `iter` of every target's work: each phase in a group of its own, in order, so
/// that a step that sends what the step before received (hypercube) gets it.
pub(super) fn grouped(
    api: &Api,
    targets: &[(Target, Work)],
    iter: usize,
) -> Result<(), BackendError> {
    let phases = targets
        .iter()
        .map(|(t, w)| w.phases(t.nranks))
        .max()
        .unwrap_or(0);
    for phase in 0..phases {
        if targets.iter().any(|(t, w)| w.has_phase(phase, t.nranks)) {
            one_group(api, targets, phase, iter)?;
        }
    }
    Ok(())
}

/// One group: every GPU's part of phase `phase` of iteration `iter` between ncclGroupStart
/// and ncclGroupEnd.
pub(super) fn one_group(
    api: &Api,
    targets: &[(Target, Work)],
    phase: usize,
    iter: usize,
) -> Result<(), BackendError> {
    // SAFETY: no arguments; paired with the group end below.
    unsafe { (api.nccl_group_start)() };
    let mut first_error = Ok(());
    for (t, work) in targets {
        // SAFETY: each target's context and buffers were set up by its rank for this work
        // (prepare) before it arrived.
        let r = unsafe {
            api.cuda(
                "cuCtxSetCurrent",
                drv::cuCtxSetCurrent(t.ctx as cu::CUcontext),
            )
            .and_then(|_| match work {
                Work::Collective(spec, placement, agg) if phase < steps(spec.coll, t.nranks) => {
                    let agg = (*agg).max(1);
                    (0..agg).try_for_each(|a| {
                        enqueue_step(api, &t.at(iter * agg + a), spec, *placement, phase)
                    })
                }
                Work::Collective(..) => Ok(()),
                Work::Pair(role, bytes) => enqueue_transfer(api, t, role.phases()[phase], *bytes),
            })
        };
        if first_error.is_ok() {
            first_error = r;
        }
    }
    // SAFETY: closes the group opened above.
    let end = unsafe { (api.nccl_group_end)() };
    first_error?;
    // With non-blocking communicators the group end returns ncclInProgress while NCCL connects
    // in the background; every communicator of the group then says when it is done.
    match end {
        NCCL_IN_PROGRESS => targets.iter().try_for_each(|(t, work)| {
            t.comm.settle(&|| match work {
                Work::Collective(spec, ..) => {
                    t.doing(spec.coll.name(), spec.count * spec.dtype.size_bytes())
                }
                Work::Pair(_, bytes) => t.doing("ncclSend/ncclRecv", *bytes),
            })
        }),
        _ => api.nccl_check(&format!("ncclGroupEnd on {} GPUs", targets.len()), end),
    }
}
