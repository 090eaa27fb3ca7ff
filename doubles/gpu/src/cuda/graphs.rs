//! Stream capture and CUDA graphs, as the driver documents them: between
//! cuStreamBeginCapture and cuStreamEndCapture a stream records its work instead of running it
//! (the legacy stream cannot be captured; querying or synchronising a capturing stream is
//! illegal and invalidates the capture; in thread-local and global mode the capturing thread
//! may not allocate memory); the captured graph is instantiated, and each cuGraphLaunch puts
//! its nodes' work on the launch stream, in capture order.

use super::streams::{stream_of, Node};
use super::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;

/// cuda.h: "This error indicates that the operation is not permitted when the stream is
/// capturing."
pub(crate) const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
/// "This error indicates that the current capture sequence on the stream has been invalidated
/// due to a previous error."
const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
/// "This error indicates that the operation would make the legacy stream depend on a
/// capturing blocking stream" — and the legacy stream itself cannot begin a capture.
const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
/// CUstreamCaptureMode: CU_STREAM_CAPTURE_MODE_RELAXED.
const CAPTURE_MODE_RELAXED: u32 = 2;

std::thread_local! {
    /// Captures this thread began in global or thread-local mode and has not ended.
    static STRICT_CAPTURES: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread may make a capture-unsafe call (cuMemAlloc, cuMemFree, ...) now.
pub(crate) fn unsafe_call_allowed() -> bool {
    STRICT_CAPTURES.with(|c| c.get()) == 0
}

/// A captured graph, and an instantiated one: the nodes, in capture order.
struct Graph {
    nodes: Vec<Node>,
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(s: *mut c_void, mode: u32) -> CUresult {
    super::need_context!();
    if s.is_null() {
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    if mode > CAPTURE_MODE_RELAXED {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let stream = stream_of(s);
    let mut capture = stream.capture.lock().unwrap();
    if capture.is_some() {
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    *capture = Some(Default::default());
    if mode != CAPTURE_MODE_RELAXED {
        STRICT_CAPTURES.with(|c| c.set(c.get() + 1));
    }
    crate::trace::trace_line(&format!("call=cuStreamBeginCapture mode={mode}"));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(s: *mut c_void, graph: *mut *mut c_void) -> CUresult {
    if graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let stream = stream_of(s);
    let Some(capture) = stream.capture.lock().unwrap().take() else {
        return CUDA_ERROR_ILLEGAL_STATE;
    };
    STRICT_CAPTURES.with(|c| c.set(c.get().saturating_sub(1)));
    crate::trace::trace_line(&format!(
        "call=cuStreamEndCapture nodes={} invalidated={}",
        capture.nodes.len(),
        capture.invalidated
    ));
    if capture.invalidated {
        *graph = std::ptr::null_mut();
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *graph = Arc::into_raw(Arc::new(Graph {
        nodes: capture.nodes,
    })) as *mut c_void;
    CUDA_SUCCESS
}

unsafe fn graph_of(g: *mut c_void) -> Arc<Graph> {
    let a = Arc::from_raw(g as *const Graph);
    let out = Arc::clone(&a);
    std::mem::forget(a);
    out
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    _flags: u64,
) -> CUresult {
    super::need_context!();
    if exec.is_null() || graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let g = graph_of(graph);
    *exec = Arc::into_raw(Arc::new(Graph {
        nodes: g.nodes.clone(),
    })) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: *mut c_void, s: *mut c_void) -> CUresult {
    super::need_context!();
    if exec.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let stream = stream_of(s);
    crate::trace::trace_line("call=cuGraphLaunch");
    LAUNCHING.with(|l| l.set(true));
    for node in &graph_of(exec).nodes {
        stream.submit(Arc::clone(node));
    }
    LAUNCHING.with(|l| l.set(false));
    CUDA_SUCCESS
}

std::thread_local! {
    /// This thread is inside cuGraphLaunch, turning the graph's nodes into work.
    static LAUNCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a node is being launched from a graph (it is called on the launching thread),
/// for faults that strike graph launches only.
pub(crate) fn launching() -> bool {
    LAUNCHING.with(|l| l.get())
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: *mut c_void) -> CUresult {
    if exec.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    drop(Arc::from_raw(exec as *const Graph));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: *mut c_void) -> CUresult {
    if graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    drop(Arc::from_raw(graph as *const Graph));
    CUDA_SUCCESS
}
