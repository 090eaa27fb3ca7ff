//! The `host` backend: ranks are threads of one process that move data through each other's
//! buffers directly (like CUDA IPC peers). Always available; also the correctness oracle.

pub use super::barrier::ArrivalBarrier;
use super::barrier::Backoff;
use super::{AlignedBuf, BackendError, Communicator, PairRole, PointSpec};
use crate::coll::traffic::Exchange;
use crate::coll::{Collective, Placement};
use crate::data::RankBuffers;
use crate::dtype::{
    accumulate_bytes, accumulate_premul_bytes, accumulate_scaled_bytes, combine_bytes,
    mulsum_scalar, premul_bytes, premultiplies_avg, scale_avg_bytes, scale_bytes, RedOp,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Addresses a rank publishes for its peers during one `run`.
#[derive(Default)]
struct Slot {
    send: AtomicUsize,
    recv: AtomicUsize,
    scratch: AtomicUsize,
    /// Pair synchronisations this rank has made, and their count when the current exchange
    /// began (what its partner counts from).
    pair_syncs: AtomicU64,
    pair_base: AtomicU64,
}

struct Shared {
    barrier: ArrivalBarrier,
    slots: Vec<Slot>,
    exchange: Mutex<Vec<Vec<u8>>>,
}

/// Create the communicators of an `nranks`-thread world; hand one to each thread.
pub fn world(nranks: usize) -> Vec<HostComm> {
    let shared = Arc::new(Shared {
        barrier: ArrivalBarrier::new(nranks),
        slots: (0..nranks).map(|_| Slot::default()).collect(),
        exchange: Mutex::new(vec![Vec::new(); nranks]),
    });
    (0..nranks)
        .map(|rank| HostComm {
            pairing: None,
            patient: false,
            rank,
            shared: Arc::clone(&shared),
            send: AlignedBuf::default(),
            recv: AlignedBuf::default(),
            scratch: AlignedBuf::default(),
            spec: None,
            exchange: Exchange::default(),
        })
        .collect()
}

/// A step of pair exchanges as `begin_pairs` set it up.
struct Pairing {
    role: PairRole,
    partner: usize,
    partner_base: u64,
    partner_send: usize,
    meetings: u64,
}

pub struct HostComm {
    pairing: Option<Pairing>,
    /// In a matrix step (`begin_pairs` was called): a rank without a partner sleeps in
    /// barriers.
    patient: bool,
    rank: usize,
    shared: Arc<Shared>,
    send: AlignedBuf,
    recv: AlignedBuf,
    scratch: AlignedBuf,
    spec: Option<PointSpec>,
    /// alltoallv: this rank's side of the prepared call.
    exchange: Exchange,
}

/// Byte range of chunk `k` when `count` elements are split over `n` ranks.
fn chunk(count: usize, n: usize, k: usize, elem: usize) -> (usize, usize) {
    let lo = count * k / n;
    let hi = count * (k + 1) / n;
    (lo * elem, (hi - lo) * elem)
}

/// Reduce `[off, off+len)` of every source into every destination, a cache-sized block at a
/// time (sources read once, destinations written once).
///
/// Safety: every address is valid for the range; no other thread touches these ranges until
/// the caller's next barrier; a destination may equal a source (each block is fully read first).
unsafe fn reduce_fanout(spec: &PointSpec, srcs: &[usize], dsts: &[usize], off: usize, len: usize) {
    const BLOCK: usize = 16 << 10;
    let mut acc = [0u64; BLOCK / 8];
    let acc: &mut [u8] = bytemuck::cast_slice_mut(&mut acc);
    let mut done = 0;
    while done < len {
        let n = BLOCK.min(len - done);
        let a = &mut acc[..n];
        a.copy_from_slice(peer(srcs[0], off + done, n));
        let ranks = srcs.len();
        if spec.op == RedOp::MulSum {
            // Every input times its rank's scalar (rank r is srcs[r]), then summed.
            scale_bytes(spec.dtype, a, mulsum_scalar(0));
            for (r, &src) in srcs.iter().enumerate().skip(1) {
                let k = mulsum_scalar(r);
                accumulate_scaled_bytes(spec.dtype, a, peer(src, off + done, n), k);
            }
        } else if premultiplies_avg(spec.dtype, spec.op) {
            premul_bytes(spec.dtype, a, ranks);
            for &src in &srcs[1..] {
                accumulate_premul_bytes(spec.dtype, a, peer(src, off + done, n), ranks);
            }
        } else {
            for &src in &srcs[1..] {
                accumulate_bytes(spec.dtype, a, peer(src, off + done, n), spec.op);
            }
            if spec.op == RedOp::Avg {
                scale_avg_bytes(spec.dtype, a, ranks);
            }
        }
        for &dst in dsts {
            own(dst, off + done, n).copy_from_slice(a);
        }
        done += n;
    }
}

/// A peer's bytes. Safety: the caller guarantees, through the barriers of the collective's
/// schedule, that nobody writes `[ptr+off, ptr+off+len)` while this slice is alive.
unsafe fn peer<'a>(ptr: usize, off: usize, len: usize) -> &'a [u8] {
    std::slice::from_raw_parts((ptr + off) as *const u8, len)
}

/// Our own bytes, possibly read by peers elsewhere. Safety: as for `peer`, and no other slice
/// to this range is alive.
unsafe fn own<'a>(ptr: usize, off: usize, len: usize) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut((ptr + off) as *mut u8, len)
}

impl HostComm {
    fn slot(&self, rank: usize) -> (usize, usize, usize) {
        let s = &self.shared.slots[rank];
        (
            s.send.load(Ordering::Acquire),
            s.recv.load(Ordering::Acquire),
            s.scratch.load(Ordering::Acquire),
        )
    }

    fn barrier(&self) {
        // A rank without a partner in this matrix step has nothing to do until it ends.
        let patient = self.pairing.is_none() && self.patient;
        self.shared.barrier.wait_as(self.rank, patient);
    }

    /// The `k`-th meeting of this exchange with `peer` (the two ranks only, not the world):
    /// returns once the peer has come to its `k`-th too.
    fn meet(&self, peer: usize, peer_base: u64, k: u64) {
        let mine = &self.shared.slots[self.rank].pair_syncs;
        mine.fetch_add(1, Ordering::AcqRel);
        let theirs = &self.shared.slots[peer].pair_syncs;
        let mut wait = Backoff::default();
        while theirs.load(Ordering::Acquire) < peer_base + k {
            wait.pause();
        }
    }

    /// Reduce chunk `[off, off+len)` of every rank's send buffer into `dst`. When `dst_is_input`,
    /// `dst` already holds rank `skip`'s contribution (in place) and that rank is skipped.
    ///
    /// Safety: see `peer`/`own`.
    unsafe fn reduce_chunk(
        &self,
        spec: &PointSpec,
        sends: &[usize],
        dst: &mut [u8],
        off: usize,
        skip: Option<usize>,
    ) {
        let len = dst.len();
        let mut sources = (0..sends.len()).filter(|&s| Some(s) != skip);
        let ranks = sends.len();
        if spec.op == RedOp::MulSum {
            // Every input times its rank's scalar, then summed; in place, `dst` is rank
            // `skip`'s input.
            let first = match skip {
                Some(s) => s,
                None => {
                    let first = sources.next().unwrap_or(0);
                    dst.copy_from_slice(peer(sends[first], off, len));
                    first
                }
            };
            scale_bytes(spec.dtype, dst, mulsum_scalar(first));
            for s in sources {
                accumulate_scaled_bytes(
                    spec.dtype,
                    dst,
                    peer(sends[s], off, len),
                    mulsum_scalar(s),
                );
            }
            return;
        }
        if premultiplies_avg(spec.dtype, spec.op) {
            if skip.is_none() {
                let first = sources.next().unwrap_or(0);
                dst.copy_from_slice(peer(sends[first], off, len));
            }
            premul_bytes(spec.dtype, dst, ranks);
            for s in sources {
                accumulate_premul_bytes(spec.dtype, dst, peer(sends[s], off, len), ranks);
            }
            return;
        }
        if skip.is_none() {
            let (Some(a), Some(b)) = (sources.next(), sources.next()) else {
                // A one-rank world: the reduction is a copy.
                dst.copy_from_slice(peer(sends[0], off, len));
                return;
            };
            combine_bytes(
                spec.dtype,
                dst,
                peer(sends[a], off, len),
                peer(sends[b], off, len),
                spec.op,
            );
        }
        for s in sources {
            accumulate_bytes(spec.dtype, dst, peer(sends[s], off, len), spec.op);
        }
        if spec.op == RedOp::Avg {
            scale_avg_bytes(spec.dtype, dst, sends.len());
        }
    }

    /// One call of the collective. Every rank has published its addresses; ranks read peers'
    /// buffers directly, and the barriers order each phase's writes before the next reads.
    unsafe fn execute(&self, spec: &PointSpec, placement: Placement) {
        let n = self.shared.slots.len();
        let me = self.rank;
        let elem = spec.dtype.size_bytes();
        let layout = spec.layout(n, me);
        let in_place = placement == Placement::InPlace;
        let slots: Vec<(usize, usize, usize)> = (0..n).map(|r| self.slot(r)).collect();
        let sends: Vec<usize> = slots.iter().map(|s| s.0).collect();
        let (_, my_recv, my_scratch) = slots[me];
        let per_bytes = layout.param_count * elem;
        match spec.coll {
            // `prepare` refused it (PointSpec::runnable).
            Collective::Unknown => {}
            Collective::Gather => {
                // The root reads every rank's share into its place (its own is there in place).
                if me == spec.root {
                    for (s, &send) in sends.iter().enumerate() {
                        if !(in_place && s == me) {
                            own(my_recv, s * per_bytes, per_bytes)
                                .copy_from_slice(peer(send, 0, per_bytes));
                        }
                    }
                }
            }
            Collective::Scatter => {
                // Every rank reads its share of the root's input (the root's own is in place).
                if !(in_place && me == spec.root) {
                    own(my_recv, 0, per_bytes).copy_from_slice(peer(
                        sends[spec.root],
                        me * per_bytes,
                        per_bytes,
                    ));
                }
            }
            Collective::Hypercube => {
                // nccl-tests' exchange (src/hypercube.cu): the own share into place, then per
                // step k the partner r ^ 2^k's 2^k shares that this rank lacks. Each step reads
                // blocks the partner finished before the barrier and writes only its own.
                if !in_place {
                    own(my_recv, me * per_bytes, per_bytes)
                        .copy_from_slice(peer(sends[me], 0, per_bytes));
                }
                let recvs: Vec<usize> = slots.iter().map(|s| s.1).collect();
                let mut mask = 1;
                while mask < n {
                    self.barrier();
                    let block = ((me & !(mask - 1)) ^ mask) * per_bytes;
                    let len = mask * per_bytes;
                    own(my_recv, block, len).copy_from_slice(peer(recvs[me ^ mask], block, len));
                    mask <<= 1;
                }
            }
            Collective::AllReduce => {
                // Each rank reduces its chunk and writes the result straight into every rank's
                // output: inputs read once, outputs written once, no gather phase. Only this
                // rank touches chunk `me` of any buffer, and each block is read before written,
                // so in place is safe too.
                let (off, len) = chunk(layout.param_count, n, me, elem);
                let recvs: Vec<usize> = slots.iter().map(|s| s.1).collect();
                reduce_fanout(spec, &sends, &recvs, off, len);
            }
            Collective::ReduceScatter => {
                let off = me * per_bytes;
                let dst = own(my_recv, 0, per_bytes);
                self.reduce_chunk(spec, &sends, dst, off, in_place.then_some(me));
            }
            Collective::AllGather => {
                for (s, &send) in sends.iter().enumerate() {
                    if in_place && s == me {
                        continue;
                    }
                    own(my_recv, s * per_bytes, per_bytes)
                        .copy_from_slice(peer(send, 0, per_bytes));
                }
            }
            Collective::Broadcast => {
                let len = layout.param_count * elem;
                if !(in_place && me == spec.root) {
                    own(my_recv, 0, len).copy_from_slice(peer(sends[spec.root], 0, len));
                }
            }
            Collective::Reduce => {
                // Every rank reduces one chunk straight into the root's output.
                let (off, len) = chunk(layout.param_count, n, me, elem);
                let root_recv = slots[spec.root].1;
                let dst = own(root_recv, off, len);
                self.reduce_chunk(spec, &sends, dst, off, in_place.then_some(spec.root));
            }
            Collective::Alltoall | Collective::Sendrecv | Collective::Alltoallv => {
                // In place, inputs and outputs share one buffer: stage the input first.
                let sources: Vec<usize> = if in_place {
                    let bytes = layout.send_count * elem;
                    own(my_scratch, 0, bytes).copy_from_slice(peer(sends[me], 0, bytes));
                    self.barrier();
                    slots.iter().map(|s| s.2).collect()
                } else {
                    sends
                };
                if spec.coll == Collective::Alltoallv {
                    // Each peer's part for this rank follows what it sent lower ranks.
                    let x = &self.exchange;
                    for (s, &source) in sources.iter().enumerate() {
                        let len = x.recv[s].count * elem;
                        if len > 0 {
                            own(my_recv, x.recv[s].offset * elem, len).copy_from_slice(peer(
                                source,
                                x.at_peer[s] * elem,
                                len,
                            ));
                        }
                    }
                } else if spec.coll == Collective::Alltoall {
                    for (s, &source) in sources.iter().enumerate() {
                        own(my_recv, s * per_bytes, per_bytes).copy_from_slice(peer(
                            source,
                            me * per_bytes,
                            per_bytes,
                        ));
                    }
                } else {
                    let from = (me + n - 1) % n;
                    own(my_recv, 0, per_bytes).copy_from_slice(peer(sources[from], 0, per_bytes));
                }
            }
        }
        // Nobody may overwrite its buffers for the next call while peers still read them.
        self.barrier();
    }
}

impl Communicator for HostComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.shared.slots.len()
    }

    fn prepare(&mut self, spec: &PointSpec) -> Result<(), BackendError> {
        spec.runnable(self.nranks())?;
        self.pairing = None;
        self.patient = false;
        let layout = spec.layout(self.nranks(), self.rank);
        let bytes = layout.buffer_count() * spec.dtype.size_bytes();
        self.send.ensure_at(bytes, spec.shift_bytes())?;
        self.recv.ensure_at(bytes, spec.shift_bytes())?;
        if matches!(
            spec.coll,
            Collective::Alltoall | Collective::Sendrecv | Collective::Alltoallv
        ) {
            self.scratch.ensure(bytes)?;
        }
        self.exchange = match spec.coll {
            Collective::Alltoallv => spec.traffic.exchange(
                self.rank,
                self.nranks(),
                layout.param_count,
                spec.dtype.size_bytes(),
            ),
            _ => Exchange::default(),
        };
        self.spec = Some(spec.clone());
        Ok(())
    }

    fn buffers(&mut self) -> RankBuffers<'_> {
        RankBuffers {
            send: self.send.bytes_mut(),
            recv: self.recv.bytes_mut(),
        }
    }

    fn run(&mut self, placement: Placement, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("run() before prepare()".to_string()))?;
        let elem = spec.dtype.size_bytes();
        let layout = spec.layout(self.nranks(), self.rank);
        let recv = self.recv.as_mut_ptr() as usize;
        let (send_addr, recv_addr) = match placement {
            Placement::OutOfPlace => (self.send.as_mut_ptr() as usize, recv),
            Placement::InPlace => (
                recv + layout.send_inplace_offset * elem,
                recv + layout.recv_inplace_offset * elem,
            ),
        };
        let slot = &self.shared.slots[self.rank];
        slot.send.store(send_addr, Ordering::Release);
        slot.recv.store(recv_addr, Ordering::Release);
        slot.scratch
            .store(self.scratch.as_mut_ptr() as usize, Ordering::Release);
        // Everyone's addresses are visible before anyone reads a peer.
        self.barrier();
        let start = Instant::now();
        for _ in 0..iters {
            // SAFETY: the buffers behind the published addresses live in `self` (and the peers'
            // `HostComm`s), which stay alive and unresized for the whole `run`: every rank is
            // inside this call until the final barrier. `execute` orders conflicting accesses
            // with barriers; each phase writes disjoint ranges (see the comments there).
            unsafe { self.execute(&spec, placement) };
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Publish this rank's send buffer and meeting count, and read its partner's: the one
    /// world barrier of a step.
    fn begin_pairs(&mut self, role: PairRole) -> Result<(), BackendError> {
        let me = &self.shared.slots[self.rank];
        me.send
            .store(self.send.as_mut_ptr() as usize, Ordering::Release);
        me.pair_base
            .store(me.pair_syncs.load(Ordering::Acquire), Ordering::Release);
        // Addresses and counts are published before anyone reads a partner's.
        self.pairing = None;
        self.patient = false;
        self.barrier();
        self.patient = true;
        self.pairing = role.peer().map(|partner| {
            if self.nranks() > std::thread::available_parallelism().map_or(1, |n| n.get()) {
                pin_apart(self.rank, partner);
            }
            let slot = &self.shared.slots[partner];
            Pairing {
                role,
                partner,
                partner_base: slot.pair_base.load(Ordering::Acquire),
                partner_send: slot.send.load(Ordering::Acquire),
                meetings: 0,
            }
        });
        Ok(())
    }

    /// A message is the receiver copying the sender's buffer (as a CUDA IPC peer reads);
    /// after each phase the two ranks meet, so the sender's buffer is not reused early and a
    /// round trip's answer waits for its question.
    fn exchange(&mut self, role: PairRole, iters: usize) -> Result<f64, BackendError> {
        let spec = self
            .spec
            .clone()
            .ok_or_else(|| BackendError::Failed("exchange() before prepare()".to_string()))?;
        if role == PairRole::Idle {
            return Ok(0.0);
        }
        let mut pairing = match self.pairing.take() {
            Some(p) if p.role == role => p,
            _ => {
                return Err(BackendError::Failed(format!(
                    "exchange({role:?}) without begin_pairs({role:?})"
                )))
            }
        };
        let bytes = spec.count;
        let recv = self.recv.as_mut_ptr() as usize;
        let phases: Vec<_> = role
            .phases()
            .into_iter()
            .filter(|t| t.send_to.is_some() || t.recv_from.is_some())
            .collect();
        let start = Instant::now();
        for _ in 0..iters {
            for phase in &phases {
                if phase.recv_from.is_some() {
                    // SAFETY: the peer's send buffer holds `bytes` (it prepared the same
                    // pair spec) and nobody writes it during the step; our receive buffer is
                    // ours alone.
                    unsafe {
                        own(recv, 0, bytes).copy_from_slice(peer(pairing.partner_send, 0, bytes))
                    };
                }
                pairing.meetings += 1;
                self.meet(pairing.partner, pairing.partner_base, pairing.meetings);
            }
        }
        let elapsed = start.elapsed().as_secs_f64();
        self.pairing = Some(pairing);
        Ok(elapsed)
    }

    fn allgather_bytes(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let poisoned = || BackendError::Failed("a host rank panicked during an exchange".into());
        self.shared.exchange.lock().map_err(|_| poisoned())?[self.rank] = data.to_vec();
        self.barrier();
        let all = self.shared.exchange.lock().map_err(|_| poisoned())?.clone();
        self.barrier();
        Ok(all)
    }

    fn missing_ranks_probe(&self) -> Option<Box<dyn Fn() -> Vec<usize> + Send + Sync>> {
        let shared = Arc::clone(&self.shared);
        Some(Box::new(move || shared.barrier.missing()))
    }
}

/// With fewer cores than rank threads, put the two ends of a pair on different cores: two
/// threads that take turns on one core time the scheduler's switches (microseconds), not
/// the copy or the cache line between cores (tens of nanoseconds).
fn pin_apart(me: usize, partner: usize) {
    use nix::sched::{sched_setaffinity, CpuSet};
    // The process's cores (its main thread's mask), not this thread's: that one may be a
    // single core since the last pair.
    let Ok(allowed) = nix::sched::sched_getaffinity(nix::unistd::Pid::this()) else {
        return;
    };
    let usable: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if usable.len() < 2 {
        return;
    }
    let mut set = CpuSet::new();
    let core = usable[usize::from(me > partner) % usable.len()];
    if set.set(core).is_ok() {
        // Failure leaves the thread where the scheduler put it: only the timing suffers.
        let _ = sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// Single-thread memcpy bandwidth (bytes copied per second, best of several): the physical
/// ceiling the host backend is judged against.
pub fn memcpy_bandwidth(size_bytes: usize) -> Result<f64, BackendError> {
    let mut src = AlignedBuf::default();
    let mut dst = AlignedBuf::default();
    src.ensure(size_bytes)?;
    dst.ensure(size_bytes)?;
    src.bytes_mut().fill(1);
    dst.bytes_mut().fill(0);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        dst.bytes_mut().copy_from_slice(src.bytes());
        best = best.min(start.elapsed().as_secs_f64());
    }
    std::hint::black_box(dst.bytes());
    Ok(size_bytes as f64 / best)
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
