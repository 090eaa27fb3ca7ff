//! Streams (a worker thread each, running its queue in order), stream query/sync with the
//! sticky error a fault leaves, and events that record the time their turn comes.

use super::{CUresult, CUDA_ERROR_NOT_READY, CUDA_SUCCESS};
use crate::trace::trace_line;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// A node of a captured graph: called on the thread that launches the graph, each launch, it
/// returns the work the launch puts on the stream (NCCL's calls take their sequence numbers
/// at that moment, as a launch on the host would). Outside a capture it is called at once.
pub(crate) type Node = Arc<dyn Fn() -> Work + Send + Sync>;

/// A stream capture in progress (cuStreamBeginCapture): the nodes so far, and whether an
/// illegal call has invalidated it.
#[derive(Default)]
pub(crate) struct Capture {
    pub(crate) nodes: Vec<Node>,
    pub(crate) invalidated: bool,
}

/// A stream: a worker thread running its queue in order. A blocking stream (created with
/// flags 0) synchronises with the legacy default stream: before each of its jobs, what the
/// legacy stream has pending (pageable copies' DMA, see `memory::flush_legacy`) lands. A
/// `CU_STREAM_NON_BLOCKING` stream does not (CUDA runtime API, "Stream synchronization
/// behavior"), so work on it must be ordered explicitly.
pub struct Stream {
    blocking: bool,
    /// Set between cuStreamBeginCapture and cuStreamEndCapture: work is recorded, not run.
    pub(crate) capture: Mutex<Option<Capture>>,
    queue: Mutex<VecDeque<Work>>,
    ready: Condvar,
    pending: AtomicUsize,
    done: Condvar,
    done_lock: Mutex<()>,
}

impl Stream {
    fn new(blocking: bool) -> Arc<Stream> {
        let s = Arc::new(Stream {
            blocking,
            capture: Mutex::new(None),
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            pending: AtomicUsize::new(0),
            done: Condvar::new(),
            done_lock: Mutex::new(()),
        });
        let worker = Arc::clone(&s);
        std::thread::spawn(move || loop {
            let job = {
                let mut q = worker.queue.lock().unwrap();
                loop {
                    if let Some(j) = q.pop_front() {
                        break j;
                    }
                    q = worker.ready.wait(q).unwrap();
                }
            };
            if worker.blocking {
                super::memory::flush_legacy();
            }
            job();
            worker.pending.fetch_sub(1, Ordering::AcqRel);
            let _g = worker.done_lock.lock().unwrap();
            worker.done.notify_all();
        });
        s
    }

    /// Run the node's work now, or record the node while the stream is being captured.
    pub(crate) fn submit(&self, node: Node) {
        if let Some(c) = self.capture.lock().unwrap().as_mut() {
            c.nodes.push(node);
            return;
        }
        self.push(node());
    }

    fn push(&self, work: Work) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.queue.lock().unwrap().push_back(work);
        self.ready.notify_one();
    }

    /// Whether a capture is in progress; a query or synchronisation then is illegal and
    /// invalidates it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
    fn capturing(&self) -> bool {
        match self.capture.lock().unwrap().as_mut() {
            Some(c) => {
                c.invalidated = true;
                true
            }
            None => false,
        }
    }

    pub(crate) fn synchronize(&self) {
        let mut g = self.done_lock.lock().unwrap();
        while self.pending.load(Ordering::Acquire) > 0 {
            g = self
                .done
                .wait_timeout(g, Duration::from_millis(5))
                .unwrap()
                .0;
        }
    }
}

/// The default (null) stream of the current context's device: the legacy stream, whose
/// pending work blocking streams wait for. Each context has its own (CUDA runtime API,
/// "Default stream": the legacy default stream is per device), so two GPUs driven from one
/// thread with the NULL stream do not wait for each other.
pub(crate) fn null_stream() -> Arc<Stream> {
    null_stream_of(super::device::current_device().unwrap_or(0))
}

/// The legacy stream of `device`'s context.
pub(crate) fn null_stream_of(device: std::ffi::c_int) -> Arc<Stream> {
    static S: OnceLock<Mutex<std::collections::HashMap<std::ffi::c_int, Arc<Stream>>>> =
        OnceLock::new();
    let mut all = S.get_or_init(Default::default).lock().unwrap();
    Arc::clone(all.entry(device).or_insert_with(|| Stream::new(true)))
}

/// A stream handle as a call on `device`'s communicator reads it: NULL is that device's
/// legacy stream (NCCL launches on the stream it is given, in the communicator's context).
pub(crate) unsafe fn stream_on(handle: *mut c_void, device: std::ffi::c_int) -> Arc<Stream> {
    if handle.is_null() {
        null_stream_of(device)
    } else {
        stream_of(handle)
    }
}

pub(crate) unsafe fn stream_of(handle: *mut c_void) -> Arc<Stream> {
    if handle.is_null() {
        null_stream()
    } else {
        // The handle is an `Arc<Stream>` leaked by cuStreamCreate.
        let s = Arc::from_raw(handle as *const Stream);
        let out = Arc::clone(&s);
        std::mem::forget(s);
        out
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut *mut c_void, flags: u32) -> CUresult {
    super::need_context!();
    // cuda.h, CUstream_flags: CU_STREAM_DEFAULT 0, CU_STREAM_NON_BLOCKING 1.
    if flags > 1 {
        return super::CUDA_ERROR_INVALID_VALUE;
    }
    trace_line(&format!("call=cuStreamCreate flags={flags}"));
    *out = Arc::into_raw(Stream::new(flags == 0)) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(_s: *mut c_void) -> CUresult {
    // The worker keeps its Arc; leaking one stream per communicator is fine for a double.
    CUDA_SUCCESS
}

/// A sticky error every stream reports once a fault put the device in it.
pub(crate) static STREAM_ERROR: AtomicI32 = AtomicI32::new(0);
pub(crate) const CUDA_ERROR_CONTAINED: CUresult = 226;

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(s: *mut c_void) -> CUresult {
    let failed = STREAM_ERROR.load(Ordering::Acquire);
    if failed != 0 {
        return failed;
    }
    let stream = stream_of(s);
    if stream.capturing() {
        return super::graphs::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if stream.pending.load(Ordering::Acquire) == 0 {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_READY
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(s: *mut c_void) -> CUresult {
    let stream = stream_of(s);
    if stream.capturing() {
        return super::graphs::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    stream.synchronize();
    if s.is_null() {
        super::memory::flush_legacy();
    }
    CUDA_SUCCESS
}

struct Event {
    at: Mutex<Option<Instant>>,
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut *mut c_void, _flags: u32) -> CUresult {
    super::need_context!();
    *out = Arc::into_raw(Arc::new(Event {
        at: Mutex::new(None),
    })) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(_e: *mut c_void) -> CUresult {
    CUDA_SUCCESS
}

unsafe fn event_of(e: *mut c_void) -> Arc<Event> {
    let a = Arc::from_raw(e as *const Event);
    let out = Arc::clone(&a);
    std::mem::forget(a);
    out
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(e: *mut c_void, s: *mut c_void) -> CUresult {
    trace_line("call=cuEventRecord");
    let ev = event_of(e);
    *ev.at.lock().unwrap() = None;
    stream_of(s).submit(Arc::new(move || {
        let ev = Arc::clone(&ev);
        Box::new(move || *ev.at.lock().unwrap() = Some(Instant::now()))
    }));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: *mut c_void) -> CUresult {
    let ev = event_of(e);
    while ev.at.lock().unwrap().is_none() {
        std::thread::sleep(Duration::from_micros(50));
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    start: *mut c_void,
    end: *mut c_void,
) -> CUresult {
    trace_line("call=cuEventElapsedTime");
    let (a, b) = (
        *event_of(start).at.lock().unwrap(),
        *event_of(end).at.lock().unwrap(),
    );
    match (a, b) {
        (Some(a), Some(b)) => {
            *ms = b.saturating_duration_since(a).as_secs_f32() * 1e3;
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_NOT_READY,
    }
}
