//! The seam between the harness and the thing that moves bytes: one `Communicator` per rank.
//!
//! The harness runs the same code on every rank (threads for `host`, processes for `mpi`),
//! talking to its rank's communicator; only rank 0 writes results.

mod barrier;
pub mod cuda;
pub mod host;
pub mod hostlist;
pub mod launcher;
pub mod mpi;
pub mod nccl;
pub mod rendezvous;

use crate::coll::{Collective, Layout, Placement, Traffic};
use crate::data::RankBuffers;
use crate::dtype::{Dtype, RedOp};
use crate::model::IterationTiming;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum BackendError {
    #[error("{0}")]
    Unavailable(String),
    #[error("cannot allocate {bytes} bytes of buffers: {reason}")]
    Alloc { bytes: u64, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Failed(String),
    /// A peer rank's connection closed: it crashed or was killed.
    #[error("{0}")]
    PeerLost(String),
    /// Peers that did not come (or a hub nobody answered at) within the deadline.
    #[error("{0}")]
    TimedOut(String),
}

/// Runs a rank's whole run on a thread the backend owns (MPI's, which alone may call MPI);
/// `Err` says why it could not.
pub type Runner = Box<dyn Fn(Box<dyn FnOnce() + Send>) -> Result<(), String> + Send + Sync>;

/// What to run at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct PointSpec {
    pub coll: Collective,
    pub dtype: Dtype,
    pub op: RedOp,
    pub root: usize,
    /// Requested size divided by the element size (nccl-tests' `count`).
    pub count: usize,
    /// nccl-tests' -u: both buffers begin this many elements past their (aligned) start.
    pub unalign: usize,
    /// alltoallv: who sends how much to whom (the other collectives ignore it).
    pub traffic: Traffic,
    /// nccl-tests' maxBytes (-e): device buffers hold this many bytes and successive calls
    /// of a batch move through them (src/common.cu, startColl's shift); 0 = no rotation.
    pub rotate_within: usize,
}

impl PointSpec {
    /// How far -u moves both buffers from their aligned start, in bytes (src/common.cu,
    /// TimeTest: `unalign * wordSize(type)`).
    pub fn shift_bytes(&self) -> usize {
        self.unalign * self.dtype.size_bytes()
    }

    pub fn layout(&self, nranks: usize, rank: usize) -> Layout {
        Layout::new(
            self.coll,
            self.count,
            self.dtype.size_bytes(),
            nranks,
            rank,
            &self.traffic,
        )
    }

    /// The size a row is printed under (see `coll::reported_size_bytes`).
    pub fn reported_size_bytes(&self, nranks: usize) -> u64 {
        crate::coll::reported_size_bytes(self.coll, self.count, self.dtype, nranks, &self.traffic)
    }

    /// The count a row prints (see `coll::reported_count`).
    pub fn reported_count(&self, nranks: usize) -> u64 {
        crate::coll::reported_count(self.coll, self.count, self.dtype, nranks, &self.traffic)
    }

    /// (algbw, busbw) of one call taking `time_s` (see `coll::bandwidths`).
    pub fn bandwidths(&self, nranks: usize, time_s: f64) -> (f64, f64) {
        crate::coll::bandwidths(
            self.coll,
            self.count,
            self.dtype,
            nranks,
            &self.traffic,
            time_s,
        )
    }

    /// Imports can name collectives no backend runs (`unknown`); hypercube needs
    /// a power-of-two rank count (nccl-tests' exchange pairs rank with `rank ^ mask`).
    pub fn runnable(&self, nranks: usize) -> Result<(), BackendError> {
        if !self.coll.is_measured() {
            return Err(BackendError::Unsupported(format!(
                "cannot run {}: ncclprobe measures {}",
                self.coll,
                Collective::ALL
                    .into_iter()
                    .chain(Collective::EXTRA)
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if self.coll == Collective::Hypercube && !nranks.is_power_of_two() {
            return Err(BackendError::Unsupported(format!(
                "hypercube needs a power-of-two number of ranks (each step pairs rank r with r XOR 2^k), not {nranks}"
            )));
        }
        Ok(())
    }
}

/// What one rank does in each iteration of a `matrix` exchange with its partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairRole {
    /// Not paired in this step (an odd rank out, or another pair's turn).
    Idle,
    /// Send one message to `to` per iteration (one-way).
    Send { to: usize },
    /// Receive one message from `from` per iteration (one-way).
    Recv { from: usize },
    /// Send to and receive from `peer` at once (two-way).
    Both { peer: usize },
    /// Send to `peer`, then wait for its answer (latency, the side that starts).
    Ping { peer: usize },
    /// Wait for `peer`'s message, then answer it (latency, the other side).
    Pong { peer: usize },
}

/// One phase of an iteration: what is sent and received together (one NCCL group).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfer {
    pub send_to: Option<usize>,
    pub recv_from: Option<usize>,
}

impl PairRole {
    /// The partner, if any.
    pub fn peer(self) -> Option<usize> {
        match self {
            PairRole::Idle => None,
            PairRole::Send { to } => Some(to),
            PairRole::Recv { from } => Some(from),
            PairRole::Both { peer } | PairRole::Ping { peer } | PairRole::Pong { peer } => {
                Some(peer)
            }
        }
    }

    /// The phases of one iteration, in order: a round trip is two (there and back), the
    /// others one; a phase with nothing to do is skipped.
    pub fn phases(self) -> [Transfer; 2] {
        let send = |p| Transfer {
            send_to: Some(p),
            recv_from: None,
        };
        let recv = |p| Transfer {
            send_to: None,
            recv_from: Some(p),
        };
        let none = Transfer::default();
        match self {
            PairRole::Idle => [none, none],
            PairRole::Send { to } => [send(to), none],
            PairRole::Recv { from } => [recv(from), none],
            PairRole::Both { peer } => [
                Transfer {
                    send_to: Some(peer),
                    recv_from: Some(peer),
                },
                none,
            ],
            PairRole::Ping { peer } => [send(peer), recv(peer)],
            PairRole::Pong { peer } => [recv(peer), send(peer)],
        }
    }
}

impl PointSpec {
    /// The buffers of a `matrix` exchange: `bytes` to send and `bytes` to receive.
    pub fn pair(bytes: usize) -> PointSpec {
        PointSpec {
            coll: Collective::Sendrecv,
            dtype: Dtype::Uint8,
            op: RedOp::Sum,
            root: 0,
            count: bytes,
            unalign: 0,
            traffic: Traffic::default(),
            rotate_within: 0,
        }
    }
}

/// One rank's view of a backend.
pub trait Communicator {
    fn rank(&self) -> usize;
    fn nranks(&self) -> usize;
    /// Allocate (or reuse) buffers large enough for `spec` in both placements.
    fn prepare(&mut self, spec: &PointSpec) -> Result<(), BackendError>;
    /// Host-visible send and receive buffers of the prepared point.
    fn buffers(&mut self) -> RankBuffers<'_>;
    /// Issue `iters` back-to-back calls of the prepared collective and wait for the last; the
    /// wall time in seconds.
    fn run(&mut self, placement: Placement, iters: usize) -> Result<f64, BackendError>;

    /// `iters` iterations of `agg` calls each (nccl-tests' -m), timed as one batch. This
    /// default is for backends without grouped calls: `iters * agg` calls in a row.
    fn run_aggregated(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<f64, BackendError> {
        self.run(placement, iters * agg.max(1))
    }

    /// nccl-tests' -G: `iters` iterations of `agg` calls captured into a CUDA graph, which is
    /// then launched `launches` times; the seconds from the first launch until the last is
    /// done. Only a backend on GPUs has graphs.
    fn run_graph(
        &mut self,
        _placement: Placement,
        _iters: usize,
        _agg: usize,
        _launches: usize,
    ) -> Result<f64, BackendError> {
        Err(BackendError::Unsupported(
            "-G: CUDA graphs need the NCCL backend".into(),
        ))
    }

    /// `iters` iterations of `agg` calls each (-m; 1 elsewhere), timed one by one (nccl-tests'
    /// -I): the batch's seconds, each iteration's, and how they were told apart. This default
    /// is for backends whose calls return complete (host, MPI): the host clock around each
    /// iteration is its time.
    fn run_each(
        &mut self,
        placement: Placement,
        iters: usize,
        agg: usize,
    ) -> Result<(f64, Vec<f64>, IterationTiming), BackendError> {
        let start = std::time::Instant::now();
        let mut each = Vec::with_capacity(iters);
        for _ in 0..iters {
            each.push(self.run_aggregated(placement, 1, agg)?);
        }
        let batch_s = start.elapsed().as_secs_f64();
        Ok((batch_s, each, IterationTiming::HostClock))
    }
    /// Set up a step of pair exchanges in which this rank plays `role`. Every rank of the
    /// world calls it once per step (idle ranks too), so a backend may synchronise here.
    fn begin_pairs(&mut self, _role: PairRole) -> Result<(), BackendError> {
        Ok(())
    }

    /// `iters` iterations of `role` (as begun) with messages of the prepared size
    /// (`PointSpec::pair`), from the send buffer into the receive buffer; the wall time in
    /// seconds. Only the two ends of a pair take part.
    fn exchange(&mut self, _role: PairRole, _iters: usize) -> Result<f64, BackendError> {
        Err(BackendError::Unsupported(
            "this backend cannot exchange messages between pairs of ranks".into(),
        ))
    }
    /// Every rank's `data`, in rank order (control plane: results, decisions, host names).
    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError>;

    fn allgather_f64(&mut self, value: f64) -> Result<Vec<f64>, BackendError> {
        Ok(self
            .allgather_bytes(&value.to_le_bytes())?
            .into_iter()
            .map(|b| b.try_into().map(f64::from_le_bytes).unwrap_or(f64::NAN))
            .collect())
    }

    /// Every rank's `values`, in rank order.
    fn allgather_f64s(&mut self, values: &[f64]) -> Result<Vec<Vec<f64>>, BackendError> {
        let mine: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(self
            .allgather_bytes(&mine)?
            .iter()
            .map(|b| {
                b.chunks_exact(8)
                    .map(|c| c.try_into().map_or(f64::NAN, f64::from_le_bytes))
                    .collect()
            })
            .collect())
    }

    fn allreduce_sum_u64(&mut self, value: u64) -> Result<u64, BackendError> {
        Ok(self
            .allgather_bytes(&value.to_le_bytes())?
            .into_iter()
            .map(|b| b.try_into().map(u64::from_le_bytes).unwrap_or(0))
            .fold(0u64, u64::saturating_add))
    }

    /// The device this rank drives, for the banner and the record (`None`: host memory).
    /// What the run record should say about this communicator (e.g. that a requested feature
    /// could not be verified); rank 0's go into the record's notes and the table's header.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    fn device_label(&self) -> Option<String> {
        None
    }

    /// NCCL_TESTS_SPLIT: the group (color) of this rank's communicator; 0 without a split.
    /// `rank` and `nranks` are within the group; the control plane spans every group.
    fn group(&self) -> usize {
        0
    }

    /// nccl-tests' -M: what this rank's init, buffers and collectives took of its GPU's
    /// memory so far (`None`: no GPU).
    fn gpu_memory(&mut self) -> Option<crate::model::GpuMemory> {
        None
    }

    /// Copy the host buffers to the device (after inputs were written); no-op for host memory.
    fn upload(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Copy the result back to the host buffers (before checking); no-op for host memory.
    fn download(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    /// What the library's own cost model predicts for one call of the prepared point, where
    /// it has one (NCCL 2.22's ncclGroupSimulateEnd); seconds.
    fn model_time_s(&mut self, _placement: Placement) -> Option<f64> {
        None
    }

    /// Whether in-place results of `coll` are checked (NCCL's in-place alltoall is not).
    fn checks_in_place(&self, _coll: Collective) -> bool {
        true
    }

    /// Ranks that have not arrived at the collective the caller is waiting in, where the
    /// backend can tell (the watchdog names them).
    fn missing_ranks_probe(&self) -> Option<Box<dyn Fn() -> Vec<usize> + Send + Sync>> {
        None
    }
}

/// Zeroed 8-byte-aligned storage, so every element type can be viewed in place; or, under
/// nccl-tests' -u, viewed from `offset` bytes past that alignment.
#[derive(Default)]
pub struct AlignedBuf {
    words: Vec<u64>,
    offset: usize,
    len_bytes: usize,
}

impl AlignedBuf {
    /// Grow to at least `len_bytes`; reports allocation failure instead of aborting.
    pub fn ensure(&mut self, len_bytes: usize) -> Result<(), BackendError> {
        self.ensure_at(len_bytes, 0)
    }

    /// Grow to `len_bytes` seen from `offset` bytes past the aligned start.
    pub fn ensure_at(&mut self, len_bytes: usize, offset: usize) -> Result<(), BackendError> {
        self.offset = 0;
        self.len_bytes = 0;
        let len_bytes_total = len_bytes + offset;
        let words = len_bytes_total.div_ceil(8);
        if self.words.len() < words {
            let extra = words - self.words.len();
            self.words
                .try_reserve_exact(extra)
                .map_err(|e| BackendError::Alloc {
                    bytes: len_bytes as u64,
                    reason: e.to_string(),
                })?;
            self.words.resize(words, 0);
        }
        self.offset = offset;
        self.len_bytes = len_bytes;
        Ok(())
    }
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[self.offset..self.offset + self.len_bytes]
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[self.offset..self.offset + self.len_bytes]
    }
    /// The start of the view (`offset` bytes past the aligned start).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
}

/// What the dynamic loader said (libloading keeps dlerror's text in the error's source).
pub fn dl_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => cause.to_string(),
        None => e.to_string(),
    }
}

/// The failure a backend error while doing `what` ends a command with: its kind decides the
/// exit code.
pub fn failure(what: &str, e: BackendError) -> crate::exit::Failure {
    use crate::exit::{ExitCode, Failure};
    match e {
        BackendError::Unavailable(m) => Failure::unavailable(m),
        BackendError::Unsupported(m) => Failure::usage(m),
        BackendError::PeerLost(m) => Failure::new(ExitCode::PeerLost, format!("{what}: {m}")),
        BackendError::TimedOut(m) => Failure::new(ExitCode::Timeout, m),
        other => Failure::internal(format!("{what}: {other}")),
    }
}
