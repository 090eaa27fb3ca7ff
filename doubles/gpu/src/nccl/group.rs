//! Groups: ncclGroupStart/End batch sends and receives (and defer collectives) per thread;
//! ncclGroupSimulateEnd estimates without running; the send/receive exchange at the group's end.

use super::comms::{comm_of, Comm, P2p};
use super::{NcclResult, NCCL_INVALID_ARGUMENT, NCCL_IN_PROGRESS, NCCL_SUCCESS};
use crate::cuda::streams::{stream_on, Work};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// A collective called inside a group: its communicator, bytes, and the launch deferred to
/// the group's end.
pub(crate) struct Deferred {
    pub(crate) comm: usize,
    pub(crate) bytes: usize,
    pub(crate) launch: Box<dyn FnOnce() + Send>,
}

/// A communicator's initialisation called inside a group: it runs at the group's end, every
/// rank's at once (each waits for its peers), and answers its result.
pub(crate) type Init = (usize, Box<dyn FnOnce() -> NcclResult + Send>);

/// This thread's group: depth, queued sends/receives, deferred collectives and inits.
#[derive(Default)]
pub(crate) struct Group {
    pub(crate) depth: usize,
    pub(crate) p2p: Vec<P2p>,
    pub(crate) collectives: Vec<Deferred>,
    pub(crate) inits: Vec<Init>,
    /// The first failure of a call made inside the group (NCCL's `ncclGroupError`).
    pub(crate) error: NcclResult,
}

type Closed = (Vec<P2p>, Vec<Deferred>, Vec<Init>, NcclResult);

/// A call inside a group failed: as NCCL's `ncclGroupErrCheck`, the group remembers the first
/// failure, and its end launches nothing of the group and answers that failure
/// (src/group.cc, ncclGroupEndInternal: `if ((ret = ncclGroupError) != ncclSuccess) goto
/// fail;`, whatever the communicators' blocking mode).
pub(crate) fn fail_group(rc: NcclResult) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.error == NCCL_SUCCESS {
            g.error = rc;
        }
    });
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
fn close_group() -> Option<Closed> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth = g.depth.saturating_sub(1);
        (g.depth == 0).then(|| {
            (
                std::mem::take(&mut g.p2p),
                std::mem::take(&mut g.collectives),
                std::mem::take(&mut g.inits),
                std::mem::replace(&mut g.error, NCCL_SUCCESS),
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
///
/// Except on a non-blocking communicator: ncclGroupEndInternal takes its non-blocking branch
/// (src/group.cc, v2.28.9 704-738), and groupLaunchNonBlocking calls groupLaunch without the
/// simulation info (642-644), so the group is launched for real on NCCL's thread, the
/// estimate is never written, and the call answers ncclInProgress with every communicator of
/// the group in progress until the launch is done.
#[no_mangle]
pub unsafe extern "C" fn ncclGroupSimulateEnd(info: *mut SimInfo) -> NcclResult {
    let Some((p2p, collectives, inits, error)) = close_group() else {
        return NCCL_SUCCESS;
    };
    if info.is_null() || (*info).magic != 0x7468_5283 {
        return NCCL_INVALID_ARGUMENT;
    }
    let non_blocking = p2p
        .iter()
        .map(|o| o.comm)
        .chain(collectives.iter().map(|d| d.comm))
        .any(|c| !comm_of(c as *mut c_void).blocking);
    if non_blocking || !inits.is_empty() || error != NCCL_SUCCESS {
        crate::trace::trace_line(
            "call=ncclGroupSimulateEnd simulated=0 (launched as ncclGroupEnd)",
        );
        return end_closed((p2p, collectives, inits, error));
    }
    if !collectives.is_empty() {
        (*info).estimated_time = collectives
            .iter()
            .map(|d| 5.0 + d.bytes as f32 / 10e3)
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

/// The group's end: inits run (every rank's at once), collectives launch, sends and receives
/// are matched. On blocking communicators this happens in the calling thread, inside the call;
/// when any communicator of the group is non-blocking it happens in a thread of NCCL's
/// (src/group.cc, groupLaunchNonBlocking): the call returns ncclInProgress and every
/// communicator of the group says ncclInProgress until the work is launched.
#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    match close_group() {
        Some(closed) => end_closed(closed),
        None => NCCL_SUCCESS,
    }
}

/// The end of the outermost group level: what ncclGroupEnd does with what the group queued.
unsafe fn end_closed((new_ops, collectives, inits, error): Closed) -> NcclResult {
    if error != NCCL_SUCCESS {
        // Nothing queued runs; the communicators handed back by the group's inits report
        // the failure (NCCL's groupCleanup sets each one's async error).
        for (c, _) in inits {
            comm_of(c as *mut c_void)
                .async_error
                .store(error, Ordering::Release);
        }
        drop((new_ops, collectives));
        return error;
    }
    if !inits.is_empty() {
        return end_inits(inits);
    }
    let mut comms: Vec<usize> = new_ops
        .iter()
        .map(|o| o.comm)
        .chain(collectives.iter().map(|d| d.comm))
        .collect();
    comms.sort_unstable();
    comms.dedup();
    let comms: Vec<&'static Comm> = comms.iter().map(|&c| comm_of(c as *mut c_void)).collect();
    let _inside: Vec<_> = comms.iter().map(|c| c.enter("ncclGroupEnd")).collect();
    // Operations a simulated group left in the planners of these communicators run first.
    let mut ops = Vec::new();
    for c in &comms {
        ops.append(&mut c.stale_p2p.lock().unwrap());
    }
    ops.extend(new_ops);
    let work = move || {
        for d in collectives {
            (d.launch)();
        }
        // SAFETY: the group's own operations, on communicators and streams that outlive it.
        unsafe { launch_p2p(ops) };
    };
    if comms.iter().all(|c| c.blocking) {
        work();
        return NCCL_SUCCESS;
    }
    for c in &comms {
        c.async_error.store(NCCL_IN_PROGRESS, Ordering::Release);
    }
    let background = comms.clone();
    in_background(Box::new(move || {
        work();
        for c in background {
            let _ = c.async_error.compare_exchange(
                NCCL_IN_PROGRESS,
                NCCL_SUCCESS,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }));
    NCCL_IN_PROGRESS
}

type Job = Box<dyn FnOnce() + Send>;

/// NCCL's thread for non-blocking group launches: one per process, running them in order.
fn in_background(job: Job) {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Mutex, OnceLock};
    static QUEUE: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::spawn(move || {
            for job in rx {
                job();
            }
        });
        Mutex::new(tx)
    });
    let _ = queue.lock().unwrap().send(job);
}

/// Communicators' inits called in a group: all run at once (each waits for its peers).
/// Blocking: the group end waits for them and answers the first failure; non-blocking: it
/// answers ncclInProgress and each communicator reports its own result when done.
fn end_inits(inits: Vec<Init>) -> NcclResult {
    // SAFETY: the handles were made by ncclCommInitRankConfig, never freed.
    let blocking = inits
        .iter()
        .all(|(c, _)| unsafe { comm_of(*c as *mut c_void) }.blocking);
    let threads: Vec<_> = inits
        .into_iter()
        .map(|(_, init)| std::thread::spawn(init))
        .collect();
    if !blocking {
        return NCCL_IN_PROGRESS;
    }
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or(super::NCCL_SYSTEM_ERROR))
        .find(|&rc| rc != NCCL_SUCCESS)
        .unwrap_or(NCCL_SUCCESS)
}

/// Enqueue a group's sends and receives: one batch per (communicator, stream).
unsafe fn launch_p2p(ops: Vec<P2p>) {
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
        let bytes: usize = ops.iter().map(|o| o.bytes).sum();
        if comm.stalled(bytes) {
            continue;
        }
        comm.connect_on_first_use();
        // As NCCL matches them: the k-th send from A to B meets the k-th receive on B from A,
        // whatever else either rank (or any other rank) does; nobody else takes part. The
        // numbers are taken at launch, in the caller's order: at the group's end, or at each
        // launch of a CUDA graph that captured the group.
        let node = move || -> Work {
            let numbered: Vec<(P2p, u64)> = ops
                .iter()
                .map(|&op| {
                    let mut counts = comm.p2p_counts.lock().unwrap();
                    let n = counts.entry((op.send, op.peer)).or_insert(0);
                    *n += 1;
                    (op, *n)
                })
                .collect();
            Box::new(move || {
                if comm.faulted(bytes) {
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
                    if data.len() < op.bytes {
                        // Real NCCL completes a receive larger than its send never (a smaller
                        // one takes the first bytes: NVIDIA/nccl#1938): hang until aborted.
                        let _ = comm.wait(u64::MAX, "a-receive-larger-than-its-send", false);
                        return;
                    }
                    std::ptr::copy_nonoverlapping(data.as_ptr(), op.buf as *mut u8, op.bytes);
                }
            })
        };
        stream_on(stream_ptr as *mut c_void, comm.device).submit(std::sync::Arc::new(node));
    }
}
