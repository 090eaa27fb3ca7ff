//! Faults for tests (`NCCLPROBE_TEST_DOUBLE_FAULT`): which rank, after how many bytes, and
//! what happens to its collective.

use super::comms::Comm;
use super::{NCCL_REMOTE_ERROR, NCCL_SYSTEM_ERROR};
use crate::cuda::streams::{CUDA_ERROR_CONTAINED, STREAM_ERROR};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum FaultKind {
    Init,
    Async,
    Remote,
    /// The GPU's work fails with CUDA_ERROR_CONTAINED (226, cuda.h since 12.4: Hopper after
    /// an NVLink fault), a code newer than cudarc's 11.8 bindings.
    Contained,
    Hang,
    /// The call itself never finishes (NCCL waiting in connection setup for a peer that never
    /// comes): a blocking communicator holds the calling thread inside the call; a
    /// non-blocking one stays ncclInProgress. Only an abort ends it.
    Stall,
    Die,
    /// The collective completes but one output byte is wrong, only when it runs from a
    /// CUDA graph launch (as a fault of graph-time registration or a persistent plan would):
    /// a check made with eager calls under -G misses it.
    GraphWrong,
}

#[derive(Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) rank: usize,
    after: u64,
}

pub(crate) fn fault() -> Option<Fault> {
    let v = std::env::var("NCCLPROBE_TEST_DOUBLE_FAULT").ok()?;
    let mut p = v.split(':');
    let kind = match p.next()? {
        "init" => FaultKind::Init,
        "async" => FaultKind::Async,
        "remote" => FaultKind::Remote,
        "contained" => FaultKind::Contained,
        "hang" => FaultKind::Hang,
        "stall" => FaultKind::Stall,
        "die" => FaultKind::Die,
        "graph-wrong" => FaultKind::GraphWrong,
        _ => return None,
    };
    let rank = p.next()?.parse().ok()?;
    let after = p.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    Some(Fault { kind, rank, after })
}

impl Comm {
    /// A stall fault at this call (of `bytes`): wait, inside the call (or, non-blocking, in
    /// NCCL's background thread), until the communicator is aborted. True = stalled.
    pub(crate) fn stalled(&self, bytes: usize) -> bool {
        let stalls = fault().is_some_and(|f| {
            f.kind == FaultKind::Stall && f.rank == self.rank && bytes as u64 >= f.after
        });
        if stalls {
            while !self.aborted.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        stalls
    }

    /// A graph-wrong fault for this rank at a collective of `bytes` launched from a graph.
    pub(crate) fn wrong_in_graph(&self, bytes: usize) -> bool {
        fault().is_some_and(|f| {
            f.kind == FaultKind::GraphWrong && f.rank == self.rank && bytes as u64 >= f.after
        }) && crate::cuda::graphs::launching()
    }

    /// Apply an injected fault at this collective (of `bytes`); true = do not complete it.
    pub(crate) fn faulted(&self, bytes: usize) -> bool {
        let n = self.collectives.fetch_add(1, Ordering::AcqRel) + 1;
        let Some(f) = fault() else { return false };
        if f.rank != self.rank
            || (bytes as u64) < f.after
            || matches!(
                f.kind,
                FaultKind::Init | FaultKind::Stall | FaultKind::GraphWrong
            )
        {
            return false;
        }
        match f.kind {
            FaultKind::Die => {
                eprintln!(
                    "test double: rank {} dies at collective {n} ({bytes} bytes)",
                    self.rank
                );
                std::process::exit(9);
            }
            FaultKind::Async => self.async_error.store(NCCL_SYSTEM_ERROR, Ordering::Release),
            FaultKind::Remote => self.async_error.store(NCCL_REMOTE_ERROR, Ordering::Release),
            FaultKind::Contained => STREAM_ERROR.store(CUDA_ERROR_CONTAINED, Ordering::Release),
            FaultKind::Hang | FaultKind::Init | FaultKind::Stall | FaultKind::GraphWrong => {}
        }
        while !self.aborted.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}
