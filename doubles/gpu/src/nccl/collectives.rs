//! The collective and send/receive entry points: every call on a communicator passes
//! `called`; collectives publish this rank's part, wait for the others and compute the result.

use super::comms::{live_comm, InUse, P2p};
use super::group::{group_depth, ncclGroupEnd, ncclGroupStart, Deferred, GROUP};
use super::reduce::{premultiply, reduce, Op, Type};
use super::registration::is_registered;
use super::{NcclResult, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_SUCCESS};
use crate::cuda::streams::{stream_on, Work};
use crate::trace::{trace_line, tracing};
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

std::thread_local! {
    /// The communicator this thread last called outside a group.
    static UNGROUPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Every NCCL call on a communicator passes here. As NCCL documents, a thread that drives
/// several devices must group its calls (an ungrouped call may block waiting for a peer the
/// same thread has yet to launch): a thread calling a second communicator outside a group
/// gets ncclInvalidUsage. `NCCLPROBE_TEST_DOUBLE_TRACE=FILE` appends one line per call:
/// `thread=<id> rank=<r> grouped=<bool> registered=<bool> align=<n> stream=<own|null>
/// bufs=<0xaddr,...> call=<name>` (bufs: the call's buffer addresses in argument order;
/// registered: every buffer of the call lies in one registered with
/// ncclCommRegister; align: the largest power of two up to 256 that every buffer address is a
/// multiple of; null: the device's legacy default stream), for tests that check who launched
/// what on which buffers and streams.
unsafe fn called(
    c: *mut c_void,
    call: &str,
    bufs: &[usize],
    stream: *mut c_void,
    detail: &str,
) -> Result<InUse<'static>, NcclResult> {
    let depth = group_depth();
    let comm = live_comm(c, call);
    let inside = comm.enter(call);
    if tracing() {
        let registered = bufs.iter().all(|&b| is_registered(c as usize, b));
        let align = bufs
            .iter()
            .map(|&b| 1usize << b.trailing_zeros().min(8))
            .min()
            .unwrap_or(256);
        trace_line(&format!(
            "thread={:?} rank={} grouped={} registered={registered} align={align} stream={} bufs={} call={call}{detail}",
            std::thread::current().id(),
            comm.rank,
            depth > 0,
            if stream.is_null() { "null" } else { "own" },
            bufs.iter()
                .map(|b| format!("{b:#x}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if depth == 0 {
        let before = UNGROUPED.with(|u| u.replace(c as usize));
        if before != 0 && before != c as usize {
            eprintln!(
                "TEST DOUBLE: {call} on a second communicator from one thread outside ncclGroupStart/End"
            );
            return Err(NCCL_INVALID_USAGE);
        }
    }
    Ok(inside)
}

unsafe fn p2p(
    send: bool,
    buf: *const c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    c: *mut c_void,
    s: *mut c_void,
) -> NcclResult {
    let _inside = match called(
        c,
        if send { "ncclSend" } else { "ncclRecv" },
        &[buf as usize],
        s,
        &format!(" peer={peer} count={count}"),
    ) {
        Ok(inside) => inside,
        Err(rc) => return rc,
    };
    let Some(dtype) = Type::from_nccl(dt) else {
        return NCCL_INVALID_ARGUMENT;
    };
    let op = P2p {
        send,
        buf: buf as usize,
        bytes: count * dtype.size(),
        peer: peer as usize,
        comm: c as usize,
        stream: s as usize,
    };
    let grouped = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.p2p.push(op);
            None
        } else {
            Some(op)
        }
    });
    if let Some(op) = grouped {
        ncclGroupStart();
        GROUP.with(|g| g.borrow_mut().p2p.push(op));
        return ncclGroupEnd();
    }
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    buf: *const c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    c: *mut c_void,
    s: *mut c_void,
) -> NcclResult {
    p2p(true, buf, count, dt, peer, c, s)
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    buf: *mut c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    c: *mut c_void,
    s: *mut c_void,
) -> NcclResult {
    p2p(false, buf, count, dt, peer, c, s)
}

#[derive(Clone, Copy)]
enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast(usize),
    Reduce(usize),
}

/// Enqueue a collective: publish this rank's part, wait for the others, compute the result.
#[allow(clippy::too_many_arguments)]
unsafe fn collective(
    kind: Coll,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    c: *mut c_void,
    s: *mut c_void,
) -> NcclResult {
    let name = match kind {
        Coll::AllReduce => "ncclAllReduce",
        Coll::AllGather => "ncclAllGather",
        Coll::ReduceScatter => "ncclReduceScatter",
        Coll::Broadcast(_) => "ncclBroadcast",
        Coll::Reduce(_) => "ncclReduce",
    };
    let _inside = match called(c, name, &[send as usize, recv as usize], s, "") {
        Ok(inside) => inside,
        Err(rc) => return rc,
    };
    let Some(dtype) = Type::from_nccl(dt) else {
        return NCCL_INVALID_ARGUMENT;
    };
    // A built-in op, or one of this communicator's pre-multiplied sums: its scalar is taken
    // now (the caller may destroy the op right after the call, as nccl-tests does).
    let (op, scalar) = match Op::from_nccl(op) {
        Some(o) => (o, None),
        None => {
            let ops = live_comm(c, name).premulsums.lock().unwrap();
            match ops.iter().find(|o| o.0 == op) {
                Some(&(_, t, s)) if t == dt => (Op::Sum, Some(s)),
                // Unknown, destroyed, or made for another type.
                _ => return NCCL_INVALID_ARGUMENT,
            }
        }
    };
    // NCCL drops an empty collective at once (src/enqueue.cc, taskAppend: "Empty collectives
    // can be discarded"): nothing is enqueued, nobody waits for the peers.
    if count == 0 {
        return NCCL_SUCCESS;
    }
    let comm = live_comm(c, name);
    let (sp, rp) = (send as usize, recv as usize);
    let ts = dtype.size();
    // The tuner's bytes: through 2.23 NCCL's nBytes, the per-rank count times the ranks for
    // AllGather and ReduceScatter; from 2.24 the task's own count, per rank.
    let version = super::playing();
    let tuned_bytes = match kind {
        Coll::AllGather | Coll::ReduceScatter if version < 22400 => count * ts * comm.nranks,
        _ => count * ts,
    };
    let coll_name = name.trim_start_matches("nccl");
    let tuner = move || {
        super::debug::tuner_line(
            coll_name,
            tuned_bytes,
            comm.rank,
            comm.nranks,
            comm.device,
            version,
        )
    };
    // Through 2.23 the line comes as the call is tuned (a simulated group's calls too); from
    // 2.24 it sits in scheduleCollTasksToPlan (enqueue.cc:740-743), at the group's launch,
    // which a simulated group never reaches.
    if version < 22400 {
        tuner();
    }
    let stream = s as usize;
    // Launched at the group's end (a call outside a group is a group of one, as in NCCL;
    // never, if the group is only simulated). The sequence number is taken at launch, so a
    // simulated call uses none: at once, or, for a call captured into a CUDA graph, at each
    // launch of the graph.
    let launch = move || {
        if version >= 22400 {
            tuner();
        }
        if comm.stalled(count * ts) {
            return;
        }
        comm.connect_on_first_use();
        let node = move || -> Work {
            let seq = comm.seq.fetch_add(1, Ordering::AcqRel);
            let wrong = comm.wrong_in_graph(count * ts);
            Box::new(move || {
                if comm.faulted(count * ts) {
                    return;
                }
                let n = comm.nranks;
                let me = comm.rank;
                let input_bytes = match kind {
                    Coll::ReduceScatter => count * n * ts,
                    _ => count * ts,
                };
                // Every rank publishes (non-roots of a broadcast an empty part) and waits for every
                // rank, reading only the parts it needs: the exchange doubles as a barrier.
                let contributes = !matches!(kind, Coll::Broadcast(root) if root != me);
                let input: &[u8] = if contributes {
                    std::slice::from_raw_parts(sp as *const u8, input_bytes)
                } else {
                    &[]
                };
                match &scalar {
                    Some(s) => comm.publish(seq, &format!("r{me}"), &premultiply(dtype, input, s)),
                    None => comm.publish(seq, &format!("r{me}"), input),
                }
                let needs = |r: usize| match kind {
                    Coll::Broadcast(root) => r == root,
                    Coll::Reduce(root) => me == root,
                    _ => true,
                };
                let mut parts: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);
                for r in 0..n {
                    match comm.wait(seq, &format!("r{r}"), needs(r)) {
                        Some(p) if needs(r) => parts.push(Some(p)),
                        Some(_) => parts.push(None),
                        None => return,
                    }
                }
                // A failed communicator (not one still launching its next group) stops here.
                if comm.failed() {
                    return;
                }
                let out = |len: usize| std::slice::from_raw_parts_mut(rp as *mut u8, len);
                // The double's own arithmetic (reduce.rs), as NCCL reduces.
                let reduce = |range: std::ops::Range<usize>| -> Vec<u8> {
                    reduce(
                        dtype,
                        op,
                        n,
                        parts.iter().flatten().map(|p| &p[range.clone()]),
                    )
                };
                match kind {
                    Coll::AllReduce => out(count * ts).copy_from_slice(&reduce(0..count * ts)),
                    Coll::Reduce(root) if me == root => {
                        out(count * ts).copy_from_slice(&reduce(0..count * ts))
                    }
                    Coll::Reduce(_) => {}
                    Coll::ReduceScatter => out(count * ts)
                        .copy_from_slice(&reduce(me * count * ts..(me + 1) * count * ts)),
                    Coll::AllGather => {
                        let o = out(count * ts * n);
                        for (r, p) in parts.iter().enumerate() {
                            if let Some(p) = p {
                                o[r * count * ts..(r + 1) * count * ts].copy_from_slice(p);
                            }
                        }
                    }
                    Coll::Broadcast(root) => {
                        if let Some(p) = &parts[root] {
                            out(count * ts).copy_from_slice(p);
                        }
                    }
                }
                if wrong {
                    // The first byte this rank wrote (a non-root's reduce writes none).
                    if !matches!(kind, Coll::Reduce(root) if root != me) {
                        out(1)[0] ^= 0x40;
                    }
                }
                comm.cleanup(seq);
            })
        };
        stream_on(stream as *mut c_void, comm.device).submit(std::sync::Arc::new(node));
    };
    let deferred = Deferred {
        comm: c as usize,
        bytes: count * ts,
        launch: Box::new(launch),
    };
    if group_depth() > 0 {
        GROUP.with(|g| g.borrow_mut().collectives.push(deferred));
        return NCCL_SUCCESS;
    }
    ncclGroupStart();
    GROUP.with(|g| g.borrow_mut().collectives.push(deferred));
    ncclGroupEnd()
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    collective(Coll::AllReduce, s, r, count, dt, op, c, st)
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    collective(Coll::AllGather, s, r, count, dt, 0, c, st)
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    collective(Coll::ReduceScatter, s, r, count, dt, op, c, st)
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    collective(
        Coll::Broadcast(root.max(0) as usize),
        s,
        r,
        count,
        dt,
        0,
        c,
        st,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduce(
    s: *const c_void,
    r: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    root: c_int,
    c: *mut c_void,
    st: *mut c_void,
) -> NcclResult {
    collective(
        Coll::Reduce(root.max(0) as usize),
        s,
        r,
        count,
        dt,
        op,
        c,
        st,
    )
}

/// `ncclNumOps` of NCCL 2.11 and later: the first value ncclRedOpCreatePreMulSum hands out.
const NCCL_NUM_OPS: c_int = 5;
/// `ncclScalarHostImmediate`; `ncclScalarDevice` (0) would read the scalar on the GPU.
const NCCL_SCALAR_HOST_IMMEDIATE: c_int = 1;

/// NCCL 2.11+: an op that multiplies each rank's input by its scalar, then sums. The scalar
/// is read now (host immediate); the op belongs to the communicator until destroyed.
#[no_mangle]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    dt: c_int,
    residence: c_int,
    c: *mut c_void,
) -> NcclResult {
    let comm = live_comm(c, "ncclRedOpCreatePreMulSum");
    let _in = comm.enter("ncclRedOpCreatePreMulSum");
    let Some(t) = Type::from_nccl(dt) else {
        return NCCL_INVALID_ARGUMENT;
    };
    if op.is_null() || scalar.is_null() || residence != NCCL_SCALAR_HOST_IMMEDIATE {
        // The double has no device memory to read a device-resident scalar from.
        return NCCL_INVALID_ARGUMENT;
    }
    let mut bytes = [0u8; 8];
    std::ptr::copy_nonoverlapping(scalar as *const u8, bytes.as_mut_ptr(), t.size());
    let mut ops = comm.premulsums.lock().unwrap();
    let value = (NCCL_NUM_OPS..)
        .find(|v| ops.iter().all(|o| o.0 != *v))
        .unwrap_or(NCCL_NUM_OPS);
    ops.push((value, dt, bytes));
    *op = value;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclRedOpDestroy(op: c_int, c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclRedOpDestroy");
    let _in = comm.enter("ncclRedOpDestroy");
    let mut ops = comm.premulsums.lock().unwrap();
    match ops.iter().position(|o| o.0 == op) {
        Some(i) => {
            ops.remove(i);
            NCCL_SUCCESS
        }
        // "ncclRedOpDestroy : operator is a NCCL builtin" or not this communicator's.
        None => NCCL_INVALID_ARGUMENT,
    }
}
