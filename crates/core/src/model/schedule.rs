//! What a run record says about nccl-tests' own schedule (its `*_perf` names): how calls were
//! scheduled, waited for (-z) and timed one by one (-I), and the GPU memory report (-M).

use serde::{Deserialize, Serialize};

/// nccl-tests' -M: device memory taken by each stage of a rank, the most of any rank (src/util.cu,
/// writeMemInfo: `Initialization`, `User-Allocated`, `Collective`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuMemory {
    /// What the communicator's init took.
    pub initialization_bytes: i64,
    /// What the send and receive buffers took.
    pub user_allocated_bytes: i64,
    /// What NCCL took while the collectives ran (connections made on first use).
    pub collective_bytes: i64,
}

impl GpuMemory {
    /// As the bytes, the most of each stage over every rank's.
    pub fn to_bytes(self) -> [u8; 24] {
        let mut out = [0u8; 24];
        for (chunk, v) in out.chunks_exact_mut(8).zip([
            self.initialization_bytes,
            self.user_allocated_bytes,
            self.collective_bytes,
        ]) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// The stage-by-stage maximum of ranks' [`GpuMemory::to_bytes`]; `None` when no rank had one.
    pub fn most_of(ranks: &[Vec<u8>]) -> Option<GpuMemory> {
        let read = |b: &[u8], i: usize| -> Option<i64> {
            b.get(i * 8..i * 8 + 8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        };
        ranks
            .iter()
            .filter(|b| b.len() == 24)
            .map(|b| GpuMemory {
                initialization_bytes: read(b, 0).unwrap_or(0),
                user_allocated_bytes: read(b, 1).unwrap_or(0),
                collective_bytes: read(b, 2).unwrap_or(0),
            })
            .reduce(|a, b| GpuMemory {
                initialization_bytes: a.initialization_bytes.max(b.initialization_bytes),
                user_allocated_bytes: a.user_allocated_bytes.max(b.user_allocated_bytes),
                collective_bytes: a.collective_bytes.max(b.collective_bytes),
            })
    }
}

/// nccl-tests' -z 1..3 (src/common.cu, startColl and BenchTime): each timed iteration is
/// waited for before the next begins.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Blocking {
    /// -z 1: wait, then a barrier of all ranks; the barrier is in the time.
    WaitAndBarrier,
    /// -z 2: wait, no barrier.
    Wait,
    /// -z 3: wait, then a barrier; the time is the calls' alone, barriers left out.
    WaitBarrierExcluded,
}

impl Blocking {
    /// The mode of nccl-tests' `-z` value: 0 is none; any other value but 1 and 3 waits
    /// without a barrier, as startColl tests `if (blocking_coll)` and then `== 1`.
    pub fn from_flag(z: i64) -> Option<Blocking> {
        match z {
            0 => None,
            1 => Some(Blocking::WaitAndBarrier),
            3 => Some(Blocking::WaitBarrierExcluded),
            _ => Some(Blocking::Wait),
        }
    }

    /// Whether all ranks meet after each iteration.
    pub fn barrier(self) -> bool {
        self != Blocking::Wait
    }
}

/// How a point's calls are scheduled.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Warm-up until the time per call settles, then samples until the interval is tight.
    #[default]
    Adaptive,
    /// nccl-tests' own (src/common.cu, TimeTest and BenchTime): exactly `-w` warm-up calls
    /// and one sample of `-n` calls per placement, after the checked call.
    NcclTests,
}

impl Schedule {
    pub fn is_adaptive(&self) -> bool {
        *self == Schedule::Adaptive
    }
}

/// Each timed call of a point's one sample (nccl-tests' -I, src/common.cu BenchTime with
/// `per_iter_timing`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PerIteration {
    /// Per call, the slowest rank's seconds (nccl-tests: the maximum over its process rows).
    pub times_s: Vec<f64>,
    /// Per rank, its own seconds per call, in rank order.
    pub per_rank_s: Vec<Vec<f64>>,
    /// Leading calls left out of the summary (-K).
    pub skipped: usize,
    /// How the calls were timed apart.
    pub timing: IterationTiming,
}

/// How one call of a batch is timed apart from the next.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IterationTiming {
    /// CUDA events recorded on the stream between calls, none waited for (as nccl-tests).
    CudaEvents,
    /// The host clock around each call of a backend whose calls return complete.
    HostClock,
    /// The host clock around each call, each waited for before the next is started: an
    /// asynchronous backend that could not record events between calls (-g N in one thread).
    HostClockEachWaited,
}
