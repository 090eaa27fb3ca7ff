//! The double's own tests of grouping across communicators driven by one thread.

use super::collectives::ncclAllReduce;
use super::group::{ncclGroupEnd, ncclGroupStart};
use super::init::{ncclCommInitAll, ncclCommInitRank, ncclGetUniqueId, UniqueId};
use super::{NCCL_INVALID_USAGE, NCCL_IN_PROGRESS, NCCL_SUCCESS};
use crate::cuda::device::cuInit;
use crate::cuda::memory::{cuMemAlloc_v2, cuMemcpyDtoH_v2, cuMemcpyHtoD_v2};
use crate::cuda::streams::{cuStreamCreate, cuStreamQuery, cuStreamSynchronize};
use crate::cuda::CUDA_SUCCESS;
use std::ffi::c_void;

/// Two communicators of one clique, driven by this thread; a stream per rank.
unsafe fn clique() -> ([*mut c_void; 2], [*mut c_void; 2], [u64; 2]) {
    assert_eq!(cuInit(0), CUDA_SUCCESS);
    use_gpu0();
    let mut comms = [std::ptr::null_mut(); 2];
    assert_eq!(
        ncclCommInitAll(comms.as_mut_ptr(), 2, [0, 1].as_ptr()),
        NCCL_SUCCESS
    );
    let mut streams = [std::ptr::null_mut(); 2];
    let mut bufs = [0u64; 2];
    for r in 0..2 {
        assert_eq!(cuStreamCreate(&mut streams[r], 0), CUDA_SUCCESS);
        assert_eq!(cuMemAlloc_v2(&mut bufs[r], 16), CUDA_SUCCESS);
        let data = [r as f32 + 1.0; 4];
        assert_eq!(
            cuMemcpyHtoD_v2(bufs[r], data.as_ptr() as *const c_void, 16),
            CUDA_SUCCESS
        );
    }
    (comms, streams, bufs)
}

#[test]
fn one_thread_must_group_calls_on_several_communicators() {
    let _serial = serial();
    // SAFETY: handles made by the double itself, buffers of 4 floats.
    unsafe {
        let (comms, streams, bufs) = clique();
        let b = |r: usize| bufs[r] as *mut c_void;
        assert_eq!(
            ncclAllReduce(b(0), b(0), 4, 7, 0, comms[0], streams[0]),
            NCCL_SUCCESS
        );
        assert_eq!(
            ncclAllReduce(b(1), b(1), 4, 7, 0, comms[1], streams[1]),
            NCCL_INVALID_USAGE
        );
    }
}

#[test]
fn grouped_calls_from_one_thread_complete_and_reduce() {
    let _serial = serial();
    // SAFETY: as above.
    unsafe {
        let (comms, streams, bufs) = clique();
        assert_eq!(ncclGroupStart(), NCCL_SUCCESS);
        for r in 0..2 {
            let p = bufs[r] as *mut c_void;
            assert_eq!(
                ncclAllReduce(p, p, 4, 7, 0, comms[r], streams[r]),
                NCCL_SUCCESS
            );
        }
        assert_eq!(ncclGroupEnd(), NCCL_SUCCESS);
        for r in 0..2 {
            assert_eq!(cuStreamSynchronize(streams[r]), CUDA_SUCCESS);
            let mut out = [0f32; 4];
            assert_eq!(
                cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, bufs[r], 16),
                CUDA_SUCCESS
            );
            assert_eq!(out, [3.0; 4]);
        }
    }
}

/// Two ranks of one communicator initialised from two threads on `devices`.
fn init_pair(devices: [i32; 2]) -> [i32; 2] {
    let mut id = UniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id.internal) }, NCCL_SUCCESS);
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let id = UniqueId {
                internal: id.internal,
            };
            std::thread::spawn(move || {
                crate::cuda::device::CURRENT_DEVICE.with(|c| c.set(devices[rank]));
                let mut comm = std::ptr::null_mut();
                // SAFETY: a valid out-pointer and the id made above.
                unsafe { ncclCommInitRank(&mut comm, 2, id, rank as i32) }
            })
        })
        .collect();
    let codes: Vec<i32> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    [codes[0], codes[1]]
}

#[test]
fn two_ranks_on_one_gpu_fail_init_on_both_as_nccl_does() {
    let _serial = serial();
    assert_eq!(init_pair([0, 1]), [NCCL_SUCCESS, NCCL_SUCCESS]);
    assert_eq!(init_pair([0, 0]), [NCCL_INVALID_USAGE, NCCL_INVALID_USAGE]);
}

/// A one-rank communicator created non-blocking (`ncclConfig_t.blocking = 0`), polled ready.
unsafe fn non_blocking_comm() -> *mut c_void {
    use super::comms::ncclCommGetAsyncError;
    use super::init::ncclCommInitRankConfig;
    assert_eq!(cuInit(0), CUDA_SUCCESS);
    use_gpu0();
    let mut id = UniqueId { internal: [0; 128] };
    assert_eq!(ncclGetUniqueId(&mut id.internal), NCCL_SUCCESS);
    // NCCL_CONFIG_INITIALIZER's prefix: size, magic, version, blocking = 0, the rest undefined.
    let mut config = [i32::MIN; 20];
    (config.as_mut_ptr() as *mut usize).write_unaligned(80);
    config[2] = 0xcafe_beef_u32 as i32;
    config[3] = 22800;
    config[4] = 0;
    let mut comm = std::ptr::null_mut();
    let rc = ncclCommInitRankConfig(&mut comm, 1, id, 0, config.as_mut_ptr() as *mut c_void);
    assert_eq!(rc, NCCL_IN_PROGRESS);
    let mut state = NCCL_IN_PROGRESS;
    while state == NCCL_IN_PROGRESS {
        assert_eq!(ncclCommGetAsyncError(comm, &mut state), NCCL_SUCCESS);
    }
    assert_eq!(state, NCCL_SUCCESS);
    comm
}

#[test]
fn a_non_blocking_call_is_in_progress_until_launched_then_runs_in_stream_order() {
    let _serial = serial();
    use super::comms::ncclCommGetAsyncError;
    use crate::cuda::memory::cuMemcpyHtoDAsync_v2;
    // SAFETY: handles made by the double itself, a buffer of 4 floats.
    unsafe {
        let comm = non_blocking_comm();
        let mut stream = std::ptr::null_mut();
        assert_eq!(cuStreamCreate(&mut stream, 1), CUDA_SUCCESS);
        let mut buf = 0u64;
        assert_eq!(cuMemAlloc_v2(&mut buf, 16), CUDA_SUCCESS);
        let data = [2.5f32; 4];
        let p = buf as *mut c_void;
        assert_eq!(
            cuMemcpyHtoDAsync_v2(buf, data.as_ptr() as *const c_void, 16, stream),
            CUDA_SUCCESS
        );
        assert_eq!(ncclAllReduce(p, p, 4, 7, 0, comm, stream), NCCL_IN_PROGRESS);
        let mut state = NCCL_IN_PROGRESS;
        while state == NCCL_IN_PROGRESS {
            assert_eq!(ncclCommGetAsyncError(comm, &mut state), NCCL_SUCCESS);
        }
        assert_eq!(state, NCCL_SUCCESS);
        assert_eq!(cuStreamSynchronize(stream), CUDA_SUCCESS);
        let mut out = [0f32; 4];
        assert_eq!(
            cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, buf, 16),
            CUDA_SUCCESS
        );
        assert_eq!(out, [2.5; 4]);
    }
}

#[test]
fn a_synchronous_pageable_upload_is_not_ordered_before_a_non_blocking_stream() {
    let _serial = serial();
    // SAFETY: handles made by the double itself, buffers of 4 floats.
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        use_gpu0();
        let (mut blocking, mut non_blocking) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(cuStreamCreate(&mut blocking, 0), CUDA_SUCCESS);
        assert_eq!(cuStreamCreate(&mut non_blocking, 1), CUDA_SUCCESS);
        let (mut dev, mut seen) = (0u64, [0f32; 4]);
        assert_eq!(cuMemAlloc_v2(&mut dev, 16), CUDA_SUCCESS);
        let data = [7f32; 4];
        let copy_back = |stream, out: &mut [f32; 4]| {
            crate::cuda::memory::cuMemcpyDtoHAsync_v2(
                out.as_mut_ptr() as *mut c_void,
                dev,
                16,
                stream,
            );
            cuStreamSynchronize(stream);
        };
        assert_eq!(
            cuMemcpyHtoD_v2(dev, data.as_ptr() as *const c_void, 16),
            CUDA_SUCCESS
        );
        copy_back(non_blocking, &mut seen);
        assert_eq!(
            seen, [0.0; 4],
            "a non-blocking stream does not wait for the legacy stream"
        );
        copy_back(blocking, &mut seen);
        assert_eq!(seen, [7.0; 4], "a blocking stream does");
    }
}

/// Make GPU 0's primary context current on this thread.
unsafe fn use_gpu0() {
    use crate::cuda::device::{cuCtxSetCurrent, cuDevicePrimaryCtxRetain};
    let mut ctx = std::ptr::null_mut();
    assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), CUDA_SUCCESS);
    assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

#[test]
fn calls_on_the_current_context_fail_on_a_thread_without_one() {
    let _serial = serial();
    let rc = std::thread::spawn(|| {
        let mut dev = 0u64;
        // SAFETY: a valid out-pointer.
        unsafe { cuMemAlloc_v2(&mut dev, 16) }
    })
    .join()
    .unwrap();
    assert_eq!(rc, 201, "CUDA_ERROR_INVALID_CONTEXT");
}

/// The double's state is the process's (streams, the legacy stream's pending copies, the
/// current context per thread): these tests take turns, so one's synchronisation does not
/// land another's pending copy.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A captured all-reduce runs at each launch of its graph, not at capture; the capture forbids
/// queries and allocations on the capturing thread, as CUDA does.
#[test]
fn a_graph_replays_its_captured_collectives_and_a_capture_is_strict() {
    use crate::cuda::graphs::*;
    use crate::cuda::streams::cuStreamQuery;
    let _serial = serial();
    // SAFETY: handles made by the double itself, buffers of 4 floats.
    unsafe {
        let (comms, streams, bufs) = clique();
        let mut graphs = [std::ptr::null_mut(); 2];
        for &s in &streams {
            assert_eq!(cuStreamBeginCapture_v2(s, 1), CUDA_SUCCESS);
        }
        let mut spare = 0u64;
        assert_eq!(
            cuMemAlloc_v2(&mut spare, 16),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        assert_eq!(ncclGroupStart(), NCCL_SUCCESS);
        for r in 0..2 {
            let b = bufs[r] as *mut c_void;
            assert_eq!(
                ncclAllReduce(b, b, 4, 7, 0, comms[r], streams[r]),
                NCCL_SUCCESS
            );
        }
        assert_eq!(ncclGroupEnd(), NCCL_SUCCESS);
        let mut execs = [std::ptr::null_mut(); 2];
        for r in 0..2 {
            assert_eq!(cuStreamEndCapture(streams[r], &mut graphs[r]), CUDA_SUCCESS);
            assert_eq!(
                cuGraphInstantiateWithFlags(&mut execs[r], graphs[r], 0),
                CUDA_SUCCESS
            );
        }
        let read = |r: usize| {
            assert_eq!(cuStreamSynchronize(streams[r]), CUDA_SUCCESS);
            let mut out = [0f32; 4];
            assert_eq!(
                cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, bufs[r], 16),
                CUDA_SUCCESS
            );
            out[0]
        };
        // Captured, not run: the inputs 1 and 2 are as they were.
        assert_eq!((read(0), read(1)), (1.0, 2.0));
        // Each launch sums in place: 3, then 6.
        for expected in [3.0, 6.0] {
            for r in 0..2 {
                assert_eq!(cuGraphLaunch(execs[r], streams[r]), CUDA_SUCCESS);
            }
            assert_eq!((read(0), read(1)), (expected, expected));
        }
        // A query during a capture is refused and spoils the capture.
        assert_eq!(cuStreamBeginCapture_v2(streams[0], 1), CUDA_SUCCESS);
        assert_eq!(
            cuStreamQuery(streams[0]),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        let mut spoiled = std::ptr::null_mut();
        assert_eq!(cuStreamEndCapture(streams[0], &mut spoiled), 901);
        assert!(spoiled.is_null());
        // The legacy stream cannot be captured.
        assert_ne!(
            cuStreamBeginCapture_v2(std::ptr::null_mut(), 1),
            CUDA_SUCCESS
        );
    }
}

#[test]
fn a_receive_smaller_than_its_send_takes_the_first_bytes_and_a_larger_one_never_ends() {
    use super::collectives::{ncclRecv, ncclSend};
    let _serial = serial();
    // SAFETY: handles made by the double itself, buffers of 4 floats.
    unsafe {
        let (comms, streams, bufs) = clique();
        let b = |r: usize| bufs[r] as *mut c_void;
        // Rank 0 sends [1, 1]; rank 1 asks for one float: it gets the first (NVIDIA/nccl#1938).
        let exchange = |sent: usize, received: usize| {
            assert_eq!(ncclGroupStart(), NCCL_SUCCESS);
            assert_eq!(
                ncclSend(b(0), sent, 7, 1, comms[0], streams[0]),
                NCCL_SUCCESS
            );
            assert_eq!(
                ncclRecv(b(1), received, 7, 0, comms[1], streams[1]),
                NCCL_SUCCESS
            );
            assert_eq!(ncclGroupEnd(), NCCL_SUCCESS);
        };
        exchange(2, 1);
        for stream in streams {
            assert_eq!(cuStreamSynchronize(stream), CUDA_SUCCESS);
        }
        let mut out = [0f32; 4];
        assert_eq!(
            cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, bufs[1], 16),
            CUDA_SUCCESS
        );
        assert_eq!(out, [1.0, 2.0, 2.0, 2.0]);
        // Rank 1 asks for more than rank 0 sends: its stream never completes, until aborted.
        exchange(1, 3);
        assert_eq!(cuStreamSynchronize(streams[0]), CUDA_SUCCESS);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(cuStreamQuery(streams[1]), 600, "CUDA_ERROR_NOT_READY");
        for c in comms {
            assert_eq!(super::comms::ncclCommAbort(c), NCCL_SUCCESS);
        }
        assert_eq!(cuStreamSynchronize(streams[1]), CUDA_SUCCESS);
    }
}
