//! Groups: ncclGroupStart/End batch sends and receives (and defer collectives) per thread;
//! ncclGroupSimulateEnd estimates without running; the send/receive exchange at the group's end.

use super::comms::{comm_of, P2p};
use super::{NcclResult, NCCL_INVALID_ARGUMENT, NCCL_SUCCESS};
use crate::cuda::streams::stream_of;
use std::ffi::c_void;

/// A collective called inside a group: its bytes, and the launch deferred to the group's end.
type Deferred = (usize, Box<dyn FnOnce()>);

/// This thread's group: depth, queued sends/receives, deferred collectives.
#[derive(Default)]
pub(crate) struct Group {
    pub(crate) depth: usize,
    pub(crate) p2p: Vec<P2p>,
    pub(crate) collectives: Vec<Deferred>,
}

std::thread_local! {
    pub(crate) static GROUP: std::cell::RefCell<Group> = std::cell::RefCell::new(Group::default());
}

pub(crate) fn group_depth() -> usize {
    GROUP.with(|g| g.borrow().depth)
}

#[no_mangle]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    NCCL_SUCCESS
}

/// Close a group level; at the outermost, hand back what it queued.
fn close_group() -> Option<(Vec<P2p>, Vec<Deferred>)> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth = g.depth.saturating_sub(1);
        (g.depth == 0).then(|| {
            (
                std::mem::take(&mut g.p2p),
                std::mem::take(&mut g.collectives),
            )
        })
    })
}

/// `ncclGroupSimulateEnd` (NCCL 2.22): nothing runs; the group's estimated time, in
/// microseconds, from a plain model of this double (5 µs + bytes at 10 GB/s per call), so
/// tests can see the estimate travel into the record.
#[repr(C)]
pub struct SimInfo {
    size: usize,
    magic: u32,
    version: u32,
    estimated_time: f32,
}

/// As NCCL does (src/group.cc, enqueue.cc): only collectives are estimated (a group of sends
/// and receives leaves estimatedTime at -1), nothing is launched, and the group's sends and
/// receives stay queued on their communicators for the next group to run first.
#[no_mangle]
pub unsafe extern "C" fn ncclGroupSimulateEnd(info: *mut SimInfo) -> NcclResult {
    let Some((p2p, collectives)) = close_group() else {
        return NCCL_SUCCESS;
    };
    if info.is_null() || (*info).magic != 0x7468_5283 {
        return NCCL_INVALID_ARGUMENT;
    }
    if !collectives.is_empty() {
        (*info).estimated_time = collectives
            .iter()
            .map(|(b, _)| 5.0 + *b as f32 / 10e3)
            .sum();
    }
    for op in p2p {
        comm_of(op.comm as *mut c_void)
            .stale_p2p
            .lock()
            .unwrap()
            .push(op);
    }
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    let Some((new_ops, collectives)) = close_group() else {
        return NCCL_SUCCESS;
    };
    // Operations a simulated group left in the planners of these communicators run first.
    let mut ops = Vec::new();
    let mut comms: Vec<usize> = new_ops.iter().map(|o| o.comm).collect();
    comms.sort_unstable();
    comms.dedup();
    for c in comms {
        ops.append(&mut comm_of(c as *mut c_void).stale_p2p.lock().unwrap());
    }
    ops.extend(new_ops);
    for (_, launch) in collectives {
        launch();
    }
    // One batch per (comm, stream): all sends, then all receives.
    let mut batches: Vec<(usize, usize, Vec<P2p>)> = Vec::new();
    for op in ops {
        match batches
            .iter_mut()
            .find(|b| b.0 == op.comm && b.1 == op.stream)
        {
            Some(b) => b.2.push(op),
            None => batches.push((op.comm, op.stream, vec![op])),
        }
    }
    for (comm_ptr, stream_ptr, ops) in batches {
        let comm = comm_of(comm_ptr as *mut c_void);
        // As NCCL matches them: the k-th send from A to B meets the k-th receive on B from A,
        // whatever else either rank (or any other rank) does; nobody else takes part. The
        // numbers are taken now, at the group's end, in the caller's order.
        let numbered: Vec<(P2p, u64)> = ops
            .into_iter()
            .map(|op| {
                let mut counts = comm.p2p_counts.lock().unwrap();
                let n = counts.entry((op.send, op.peer)).or_insert(0);
                *n += 1;
                (op, *n)
            })
            .collect();
        stream_of(stream_ptr as *mut c_void).enqueue(Box::new(move || {
            if comm.faulted(numbered.iter().map(|(o, _)| o.bytes).sum()) {
                return;
            }
            for (op, n) in numbered.iter().filter(|(o, _)| o.send) {
                let data = std::slice::from_raw_parts(op.buf as *const u8, op.bytes);
                comm.publish(*n, &format!("p{}to{}", comm.rank, op.peer), data);
            }
            for (op, n) in numbered.iter().filter(|(o, _)| !o.send) {
                let tag = format!("p{}to{}", op.peer, comm.rank);
                let Some(data) = comm.wait(*n, &tag, true) else {
                    return;
                };
                let _ = std::fs::remove_file(comm.file(*n, &tag));
                let len = data.len().min(op.bytes);
                std::ptr::copy_nonoverlapping(data.as_ptr(), op.buf as *mut u8, len);
            }
        }));
    }
    NCCL_SUCCESS
}
