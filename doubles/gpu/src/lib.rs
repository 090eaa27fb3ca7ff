//! TEST DOUBLE — not CUDA, not NCCL, not NVML. One shared library that answers to
//! `libcuda.so.1`, `libnccl.so.2` and `libnvidia-ml.so.1` (tests symlink those names to it), so
//! ncclprobe's NCCL backend and live topology run end to end on machines without a GPU (the
//! NVML part: `nvml.rs`).
//!
//! It implements the semantics the backend relies on, not canned numbers:
//! - "device memory" is host memory; copies really copy;
//! - every stream is a worker thread executing its queue in order; `cuStreamQuery` reports
//!   NOT_READY while work is pending; events record the time their turn comes;
//! - collectives move and reduce real data between ranks — threads of one process or separate
//!   processes — through files in a directory named by the unique id (publish, then wait for
//!   every peer's part), in call order, on the caller's stream;
//! - `ncclGroupStart/End` batch sends and receives so a rank posts all sends before waiting;
//!   a thread that calls several communicators outside a group is refused (ncclInvalidUsage),
//!   sends and receives pair up per peer in call order with no other rank taking part (as
//!   NCCL's point-to-point does), so pairs of ranks can exchange while others stay idle,
//!   as NCCL requires grouping when one thread drives several devices;
//! - faults for tests: `NCCLPROBE_TEST_DOUBLE_FAULT=init:RANK | async:RANK:BYTES |
//!   remote:RANK:BYTES | contained:RANK:BYTES | hang:RANK:BYTES | die:RANK:BYTES` (RANK's first
//!   collective moving at least BYTES never completes with an async error: ncclSystemError /
//!   ncclRemoteError, as NCCL reports a peer process that exited; fails its stream with
//!   CUDA_ERROR_CONTAINED (226); never completes / kills the process);
//!   `NCCLPROBE_TEST_DOUBLE_GPUS` sets the device count (2).

#![allow(non_snake_case, clippy::missing_safety_doc)]

mod nvml;

use ncclprobe::dtype::{
    accumulate_bytes, accumulate_premul_bytes, premul_bytes, premultiplies_avg, scale_avg_bytes,
    Dtype, RedOp,
};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------------
// CUDA driver
// ------------------------------------------------------------------------------------------

type CUresult = c_int;
const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
const CUDA_ERROR_NOT_READY: CUresult = 600;

static INITIALISED: AtomicBool = AtomicBool::new(false);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
const MEMORY_PER_DEVICE: usize = 4 << 30;

fn device_count() -> c_int {
    std::env::var("NCCLPROBE_TEST_DOUBLE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

std::thread_local! {
    static CURRENT_DEVICE: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

fn allocations() -> &'static Mutex<HashMap<usize, std::alloc::Layout>> {
    static A: OnceLock<Mutex<HashMap<usize, std::alloc::Layout>>> = OnceLock::new();
    A.get_or_init(|| Mutex::new(HashMap::new()))
}

type Work = Box<dyn FnOnce() + Send>;

/// A stream: a worker thread running its queue in order.
pub struct Stream {
    queue: Mutex<VecDeque<Work>>,
    ready: Condvar,
    pending: AtomicUsize,
    done: Condvar,
    done_lock: Mutex<()>,
}

impl Stream {
    fn new() -> Arc<Stream> {
        let s = Arc::new(Stream {
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
            job();
            worker.pending.fetch_sub(1, Ordering::AcqRel);
            let _g = worker.done_lock.lock().unwrap();
            worker.done.notify_all();
        });
        s
    }

    fn enqueue(&self, work: Work) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.queue.lock().unwrap().push_back(work);
        self.ready.notify_one();
    }

    fn synchronize(&self) {
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

/// The default (null) stream.
fn null_stream() -> &'static Arc<Stream> {
    static S: OnceLock<Arc<Stream>> = OnceLock::new();
    S.get_or_init(Stream::new)
}

unsafe fn stream_of(handle: *mut c_void) -> Arc<Stream> {
    if handle.is_null() {
        Arc::clone(null_stream())
    } else {
        // The handle is an `Arc<Stream>` leaked by cuStreamCreate.
        let s = Arc::from_raw(handle as *const Stream);
        let out = Arc::clone(&s);
        std::mem::forget(s);
        out
    }
}

#[no_mangle]
pub extern "C" fn cuInit(_flags: u32) -> CUresult {
    INITIALISED.store(true, Ordering::Release);
    CUDA_SUCCESS
}

fn ready() -> CUresult {
    if INITIALISED.load(Ordering::Acquire) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_INITIALIZED
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    if v.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *v = 12040;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    if ready() != 0 {
        return ready();
    }
    *n = device_count();
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult {
    if ordinal < 0 || ordinal >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *dev = ordinal;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    let s = format!("ncclprobe test double GPU {dev}\0");
    let n = (len.max(1) as usize - 1).min(s.len() - 1);
    std::ptr::copy_nonoverlapping(s.as_ptr() as *const c_char, name, n);
    *name.add(n) = 0;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> CUresult {
    if dev < 0 || dev >= device_count() {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *ctx = (dev as usize + 1) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(_dev: c_int) -> CUresult {
    CUDA_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> CUresult {
    CURRENT_DEVICE.with(|c| c.set(ctx as usize as c_int - 1));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let used = ALLOCATED.load(Ordering::Relaxed) / device_count().max(1) as usize;
    *total = MEMORY_PER_DEVICE;
    *free = MEMORY_PER_DEVICE.saturating_sub(used);
    CUDA_SUCCESS
}

unsafe fn alloc(bytes: usize) -> Option<*mut u8> {
    let layout = std::alloc::Layout::from_size_align(bytes.max(1), 256).ok()?;
    let p = std::alloc::alloc_zeroed(layout);
    if p.is_null() {
        return None;
    }
    allocations().lock().unwrap().insert(p as usize, layout);
    ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
    Some(p)
}

unsafe fn free(p: usize) -> CUresult {
    match allocations().lock().unwrap().remove(&p) {
        Some(layout) => {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            std::alloc::dealloc(p as *mut u8, layout);
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> CUresult {
    if ALLOCATED.load(Ordering::Relaxed) + bytes
        > MEMORY_PER_DEVICE * device_count().max(1) as usize
    {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    match alloc(bytes) {
        Some(p) => {
            *dptr = p as u64;
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CUresult {
    free(dptr as usize)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize) -> CUresult {
    match alloc(bytes) {
        Some(ptr) => {
            *p = ptr as *mut c_void;
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    free(p as usize)
}

#[derive(Clone, Copy)]
struct SendPtr(usize);

/// When the DMA of the last pageable host-to-device copy finishes (see cuMemcpyHtoD_v2).
fn pageable_dma_until() -> &'static Mutex<Option<Instant>> {
    static T: OnceLock<Mutex<Option<Instant>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(None))
}

/// As the CUDA driver documents (API synchronization behavior): "For transfers from pageable
/// host memory to device memory ... the function will return once the pageable buffer has
/// been copied to the staging memory for DMA transfer to device memory, but the DMA to final
/// destination may not have completed." With `NCCLPROBE_TEST_DOUBLE_PAGEABLE_GBPS` the DMA
/// of a pageable source takes n / rate after the call returns; cuCtxSynchronize waits for it.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CUresult {
    null_stream().synchronize();
    std::ptr::copy(src as *const u8, dst as *mut u8, n);
    let pinned = allocations().lock().unwrap().contains_key(&(src as usize));
    let rate = std::env::var("NCCLPROBE_TEST_DOUBLE_PAGEABLE_GBPS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok());
    if let (false, Some(gbps)) = (pinned, rate) {
        let dma = Duration::from_secs_f64(n as f64 / (gbps * 1e9));
        *pageable_dma_until().lock().unwrap() = Some(Instant::now() + dma);
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    null_stream().synchronize();
    let until = pageable_dma_until().lock().unwrap().take();
    if let Some(t) = until {
        std::thread::sleep(t.saturating_duration_since(Instant::now()));
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CUresult {
    null_stream().synchronize();
    std::ptr::copy(src as *const u8, dst as *mut u8, n);
    CUDA_SUCCESS
}

/// An asynchronous copy: `n` bytes from `src` to `dst` when the stream gets to it.
unsafe fn copy_on_stream(dst: usize, src: usize, n: usize, stream: *mut c_void) -> CUresult {
    let (d, s) = (SendPtr(dst), SendPtr(src));
    stream_of(stream).enqueue(Box::new(move || {
        let (d, s) = (d, s);
        std::ptr::copy(s.0 as *const u8, d.0 as *mut u8, n)
    }));
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    copy_on_stream(dst as usize, src as usize, n, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    copy_on_stream(dst as usize, src as usize, n, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut *mut c_void, _flags: u32) -> CUresult {
    *out = Arc::into_raw(Stream::new()) as *mut c_void;
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(_s: *mut c_void) -> CUresult {
    // The worker keeps its Arc; leaking one stream per communicator is fine for a double.
    CUDA_SUCCESS
}

/// A sticky error every stream reports once a fault put the device in it.
static STREAM_ERROR: AtomicI32 = AtomicI32::new(0);
const CUDA_ERROR_CONTAINED: CUresult = 226;

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(s: *mut c_void) -> CUresult {
    let failed = STREAM_ERROR.load(Ordering::Acquire);
    if failed != 0 {
        return failed;
    }
    if stream_of(s).pending.load(Ordering::Acquire) == 0 {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_READY
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(s: *mut c_void) -> CUresult {
    stream_of(s).synchronize();
    CUDA_SUCCESS
}

struct Event {
    at: Mutex<Option<Instant>>,
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut *mut c_void, _flags: u32) -> CUresult {
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
    stream_of(s).enqueue(Box::new(move || {
        *ev.at.lock().unwrap() = Some(Instant::now())
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

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(rc: CUresult, out: *mut *const c_char) -> CUresult {
    let s: &'static [u8] = match rc {
        0 => b"no error (test double)\0",
        2 => b"out of memory (test double)\0",
        600 => b"device not ready (test double)\0",
        _ => b"error (test double)\0",
    };
    *out = s.as_ptr() as *const c_char;
    CUDA_SUCCESS
}

// ------------------------------------------------------------------------------------------
// NCCL
// ------------------------------------------------------------------------------------------

type NcclResult = c_int;

/// `ncclUniqueId`: `struct { char internal[128]; }`, passed by value.
#[repr(C)]
pub struct UniqueId {
    internal: [u8; 128],
}
const NCCL_SUCCESS: NcclResult = 0;
const NCCL_SYSTEM_ERROR: NcclResult = 2;
const NCCL_INVALID_ARGUMENT: NcclResult = 4;
const NCCL_INVALID_USAGE: NcclResult = 5;
const NCCL_REMOTE_ERROR: NcclResult = 6;

#[derive(Clone, Copy, PartialEq)]
enum FaultKind {
    Init,
    Async,
    Remote,
    /// The GPU's work fails with CUDA_ERROR_CONTAINED (226, cuda.h since 12.4: Hopper after
    /// an NVLink fault), a code newer than cudarc's 11.8 bindings.
    Contained,
    Hang,
    Die,
}

#[derive(Clone, Copy)]
struct Fault {
    kind: FaultKind,
    rank: usize,
    after: u64,
}

fn fault() -> Option<Fault> {
    let v = std::env::var("NCCLPROBE_TEST_DOUBLE_FAULT").ok()?;
    let mut p = v.split(':');
    let kind = match p.next()? {
        "init" => FaultKind::Init,
        "async" => FaultKind::Async,
        "remote" => FaultKind::Remote,
        "contained" => FaultKind::Contained,
        "hang" => FaultKind::Hang,
        "die" => FaultKind::Die,
        _ => return None,
    };
    let rank = p.next()?.parse().ok()?;
    let after = p.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    Some(Fault { kind, rank, after })
}

pub struct Comm {
    dir: PathBuf,
    rank: usize,
    nranks: usize,
    device: c_int,
    seq: AtomicU64,
    collectives: AtomicU64,
    async_error: AtomicI32,
    aborted: AtomicBool,
    /// Set by ncclCommAbort and ncclCommDestroy, which free a real communicator: any later
    /// call on the handle is a use after free, and the double ends the process saying so.
    freed: AtomicBool,
    /// Sends and receives of a group that was only simulated: NCCL 2.23+ leaves them queued
    /// in the communicator's planner (src/group.cc), and the next group runs them first.
    stale_p2p: Mutex<Vec<P2p>>,
    /// Sends to (true, peer) and receives from (false, peer) issued so far: what pairs them.
    p2p_counts: Mutex<HashMap<(bool, usize), u64>>,
}

impl Comm {
    fn file(&self, seq: u64, tag: &str) -> PathBuf {
        self.dir.join(format!("{seq:012}-{tag}"))
    }

    fn publish(&self, seq: u64, tag: &str, bytes: &[u8]) {
        let tmp = self
            .dir
            .join(format!(".{seq:012}-{tag}.{}", std::process::id()));
        if std::fs::write(&tmp, bytes).is_ok() {
            let _ = std::fs::rename(&tmp, self.file(seq, tag));
        }
    }

    /// Wait for a peer's part (read it when `read`); `None` once aborted (or a peer aborted).
    fn wait(&self, seq: u64, tag: &str, read: bool) -> Option<Vec<u8>> {
        let path = self.file(seq, tag);
        let mut sleep = Duration::from_micros(50);
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return None;
            }
            if read {
                if let Ok(b) = std::fs::read(&path) {
                    return Some(b);
                }
            } else if path.exists() {
                return Some(Vec::new());
            }
            if std::fs::read_dir(&self.dir)
                .map(|d| {
                    d.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("aborted-"))
                })
                .unwrap_or(false)
            {
                self.async_error.store(NCCL_REMOTE_ERROR, Ordering::Release);
                return None;
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_millis(2));
        }
    }

    /// Every rank has published `seq`, so every rank has finished `seq - 1` (streams run in
    /// order): this rank's files of `seq - 1` can go.
    fn cleanup(&self, seq: u64) {
        if seq == 0 {
            return;
        }
        let prefix = format!("{:012}-", seq - 1);
        let mine = [format!("r{}", self.rank), format!("g{}", self.rank)];
        if let Ok(d) = std::fs::read_dir(&self.dir) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if let Some(tag) = n.strip_prefix(&prefix) {
                    if mine.iter().any(|m| m == tag) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }

    /// Apply an injected fault at this collective (of `bytes`); true = do not complete it.
    fn faulted(&self, bytes: usize) -> bool {
        let n = self.collectives.fetch_add(1, Ordering::AcqRel) + 1;
        let Some(f) = fault() else { return false };
        if f.rank != self.rank || (bytes as u64) < f.after || f.kind == FaultKind::Init {
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
            FaultKind::Hang | FaultKind::Init => {}
        }
        while !self.aborted.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// A communicator an API call names: one already freed (aborted or destroyed) ends the
/// process, as a use after free would on real NCCL — but always, and with a message.
unsafe fn live_comm(c: *mut c_void, call: &str) -> &'static Comm {
    let comm = comm_of(c);
    if comm.freed.load(Ordering::Acquire) {
        eprintln!("TEST DOUBLE: {call} on a communicator already freed by ncclCommAbort/ncclCommDestroy (use after free)");
        std::process::abort();
    }
    comm
}

unsafe fn comm_of(c: *mut c_void) -> &'static Comm {
    &*(c as *const Comm)
}

fn dtype_of(t: c_int) -> Option<Dtype> {
    Some(match t {
        0 => Dtype::Int8,
        1 => Dtype::Uint8,
        2 => Dtype::Int32,
        3 => Dtype::Uint32,
        4 => Dtype::Int64,
        5 => Dtype::Uint64,
        6 => Dtype::Half,
        7 => Dtype::Float,
        8 => Dtype::Double,
        9 => Dtype::Bfloat16,
        _ => return None,
    })
}

fn op_of(o: c_int) -> Option<RedOp> {
    Some(match o {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        _ => return None,
    })
}

/// A registered buffer: (communicator, start, length, handle).
type Registered = (usize, usize, usize, usize);

fn registrations() -> &'static Mutex<Vec<Registered>> {
    static R: OnceLock<Mutex<Vec<Registered>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

fn is_registered(comm: usize, ptr: usize) -> bool {
    registrations()
        .lock()
        .map(|r| {
            r.iter()
                .any(|&(c, s, l, _)| c == comm && ptr >= s && ptr < s + l.max(1))
        })
        .unwrap_or(false)
}

/// NCCL 2.19's allocator: device memory like cuMemAlloc's.
#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(p: *mut *mut c_void, bytes: usize) -> NcclResult {
    let mut d = 0u64;
    if cuMemAlloc_v2(&mut d, bytes) != CUDA_SUCCESS {
        return NCCL_SYSTEM_ERROR;
    }
    *p = d as *mut c_void;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(p: *mut c_void) -> NcclResult {
    match cuMemFree_v2(p as u64) {
        CUDA_SUCCESS => NCCL_SUCCESS,
        _ => NCCL_INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    c: *mut c_void,
    buf: *mut c_void,
    bytes: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    if c.is_null() || buf.is_null() || handle.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    let h = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut r) = registrations().lock() {
        r.push((c as usize, buf as usize, bytes, h));
    }
    *handle = h as *mut c_void;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(c: *mut c_void, handle: *mut c_void) -> NcclResult {
    let Ok(mut r) = registrations().lock() else {
        return NCCL_SYSTEM_ERROR;
    };
    let before = r.len();
    r.retain(|&(comm, _, _, h)| !(comm == c as usize && h == handle as usize));
    if r.len() == before {
        NCCL_INVALID_ARGUMENT
    } else {
        NCCL_SUCCESS
    }
}

/// NCCL 2.27's symmetric windows: registered like ncclCommRegister's buffers here; the flag
/// must be NCCL_WIN_COLL_SYMMETRIC (1) or NCCL_WIN_DEFAULT (0). As register/register.cc does,
/// with cuMem or local registration turned off (NCCL_CUMEM_ENABLE=0, NCCL_LOCAL_REGISTER=0)
/// the call succeeds and hands back a NULL window.
#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    c: *mut c_void,
    buf: *mut c_void,
    bytes: usize,
    win: *mut *mut c_void,
    flags: c_int,
) -> NcclResult {
    if !(0..=1).contains(&flags) {
        return NCCL_INVALID_ARGUMENT;
    }
    let off = |var: &str| std::env::var(var).is_ok_and(|v| v.trim() == "0");
    if off("NCCL_CUMEM_ENABLE") || off("NCCL_LOCAL_REGISTER") {
        *win = std::ptr::null_mut();
        return NCCL_SUCCESS;
    }
    ncclCommRegister(c, buf, bytes, win)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(c: *mut c_void, win: *mut c_void) -> NcclResult {
    if win.is_null() {
        return NCCL_SUCCESS;
    }
    ncclCommDeregister(c, win)
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(v: *mut c_int) -> NcclResult {
    *v = std::env::var("NCCLPROBE_TEST_DOUBLE_NCCL_VERSION")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(21805);
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut [u8; 128]) -> NcclResult {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let token = format!(
        "ncclprobe-double-{}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut out = [0u8; 128];
    out[..token.len().min(127)].copy_from_slice(&token.as_bytes()[..token.len().min(127)]);
    *id = out;
    NCCL_SUCCESS
}

fn token_of(id: &[u8; 128]) -> Option<String> {
    let end = id.iter().position(|&b| b == 0).unwrap_or(128);
    let s = std::str::from_utf8(&id[..end]).ok()?;
    s.starts_with("ncclprobe-double-").then(|| s.to_string())
}

fn new_comm(
    token: &str,
    rank: usize,
    nranks: usize,
    device: c_int,
) -> Result<*mut c_void, NcclResult> {
    if fault().is_some_and(|f| f.kind == FaultKind::Init && f.rank == rank) {
        return Err(NCCL_SYSTEM_ERROR);
    }
    let dir = std::env::temp_dir().join(token);
    std::fs::create_dir_all(&dir).map_err(|_| NCCL_SYSTEM_ERROR)?;
    let comm = Box::new(Comm {
        dir,
        rank,
        nranks,
        device,
        seq: AtomicU64::new(0),
        collectives: AtomicU64::new(0),
        async_error: AtomicI32::new(NCCL_SUCCESS),
        stale_p2p: Mutex::new(Vec::new()),
        p2p_counts: Mutex::new(HashMap::new()),
        freed: AtomicBool::new(false),
        aborted: AtomicBool::new(false),
    });
    Ok(Box::into_raw(comm) as *mut c_void)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    out: *mut *mut c_void,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    let Some(token) = token_of(&id.internal) else {
        return NCCL_INVALID_ARGUMENT;
    };
    if nranks < 1 || rank < 0 || rank >= nranks {
        return NCCL_INVALID_ARGUMENT;
    }
    match new_comm(
        &token,
        rank as usize,
        nranks as usize,
        CURRENT_DEVICE.with(|c| c.get()),
    ) {
        Ok(c) => {
            *out = c;
            NCCL_SUCCESS
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut *mut c_void,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    let mut id = [0u8; 128];
    ncclGetUniqueId(&mut id);
    let token = token_of(&id).unwrap_or_default();
    for r in 0..ndev.max(0) as usize {
        let dev = if devlist.is_null() {
            r as c_int
        } else {
            *devlist.add(r)
        };
        match new_comm(&token, r, ndev as usize, dev) {
            Ok(c) => *comms.add(r) = c,
            Err(e) => return e,
        }
    }
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(c: *mut c_void, out: *mut NcclResult) -> NcclResult {
    *out = live_comm(c, "ncclCommGetAsyncError")
        .async_error
        .load(Ordering::Acquire);
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclCommAbort");
    comm.freed.store(true, Ordering::Release);
    comm.aborted.store(true, Ordering::Release);
    let _ = std::fs::write(comm.dir.join(format!("aborted-{}", comm.rank)), b"");
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclCommDestroy");
    comm.freed.store(true, Ordering::Release);
    comm.aborted.store(true, Ordering::Release);
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(c: *const c_void, n: *mut c_int) -> NcclResult {
    *n = live_comm(c as *mut c_void, "ncclCommCount").nranks as c_int;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(c: *const c_void, r: *mut c_int) -> NcclResult {
    *r = live_comm(c as *mut c_void, "ncclCommUserRank").rank as c_int;
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(c: *const c_void, d: *mut c_int) -> NcclResult {
    *d = live_comm(c as *mut c_void, "ncclCommCuDevice").device;
    NCCL_SUCCESS
}

#[no_mangle]
pub extern "C" fn ncclGetErrorString(rc: NcclResult) -> *const c_char {
    let s: &'static [u8] = match rc {
        0 => b"no error\0",
        1 => b"unhandled cuda error (test double)\0",
        2 => b"unhandled system error (test double)\0",
        3 => b"internal error (test double)\0",
        4 => b"invalid argument (test double)\0",
        5 => b"invalid usage (test double)\0",
        6 => b"remote process exited or there was a network error (test double)\0",
        _ => b"unknown result code (test double)\0",
    };
    s.as_ptr() as *const c_char
}

/// One queued point-to-point operation of a group.
struct P2p {
    send: bool,
    buf: usize,
    bytes: usize,
    peer: usize,
    comm: usize,
    stream: usize,
}

/// A collective called inside a group: its bytes, and the launch deferred to the group's end.
type Deferred = (usize, Box<dyn FnOnce()>);

/// This thread's group: depth, queued sends/receives, deferred collectives.
#[derive(Default)]
struct Group {
    depth: usize,
    p2p: Vec<P2p>,
    collectives: Vec<Deferred>,
}

std::thread_local! {
    static GROUP: std::cell::RefCell<Group> = std::cell::RefCell::new(Group::default());
}

fn group_depth() -> usize {
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

std::thread_local! {
    /// The communicator this thread last called outside a group.
    static UNGROUPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn trace_path() -> Option<&'static str> {
    static TRACE: OnceLock<Option<String>> = OnceLock::new();
    TRACE
        .get_or_init(|| std::env::var("NCCLPROBE_TEST_DOUBLE_TRACE").ok())
        .as_deref()
}

fn tracing() -> bool {
    trace_path().is_some()
}

/// One line in the trace file (`NCCLPROBE_TEST_DOUBLE_TRACE`), when tests asked for one.
fn trace_line(line: &str) {
    use std::io::Write;
    if let Some(path) = trace_path() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Every NCCL call on a communicator passes here. As NCCL documents, a thread that drives
/// several devices must group its calls (an ungrouped call may block waiting for a peer the
/// same thread has yet to launch): a thread calling a second communicator outside a group
/// gets ncclInvalidUsage. `NCCLPROBE_TEST_DOUBLE_TRACE=FILE` appends one line per call:
/// `thread=<id> rank=<r> grouped=<bool> registered=<bool> call=<name>` (registered: every buffer
/// of the call lies in one registered with ncclCommRegister), for tests that check who
/// launched what on which buffers.
unsafe fn called(c: *mut c_void, call: &str, bufs: &[usize]) -> Result<(), NcclResult> {
    let depth = group_depth();
    let comm = live_comm(c, call);
    if tracing() {
        let registered = bufs.iter().all(|&b| is_registered(c as usize, b));
        trace_line(&format!(
            "thread={:?} rank={} grouped={} registered={registered} call={call}",
            std::thread::current().id(),
            comm.rank,
            depth > 0
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
    Ok(())
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
    if let Err(rc) = called(
        c,
        if send { "ncclSend" } else { "ncclRecv" },
        &[buf as usize],
    ) {
        return rc;
    }
    let Some(dtype) = dtype_of(dt) else {
        return NCCL_INVALID_ARGUMENT;
    };
    let op = P2p {
        send,
        buf: buf as usize,
        bytes: count * dtype.size_bytes(),
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
    if let Err(rc) = called(c, name, &[send as usize, recv as usize]) {
        return rc;
    }
    let Some(dtype) = dtype_of(dt) else {
        return NCCL_INVALID_ARGUMENT;
    };
    let op = op_of(op).unwrap_or(RedOp::Sum);
    let comm = comm_of(c);
    let (sp, rp) = (send as usize, recv as usize);
    let ts = dtype.size_bytes();
    let stream = s as usize;
    // Launched at once outside a group; inside one, at ncclGroupEnd (never, if the group is
    // only simulated). The sequence number is taken at launch, so a simulated call uses none.
    let launch = move || {
        let seq = comm.seq.fetch_add(1, Ordering::AcqRel);
        stream_of(stream as *mut c_void).enqueue(Box::new(move || {
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
            comm.publish(seq, &format!("r{me}"), input);
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
            if comm.async_error.load(Ordering::Acquire) != 0 {
                return;
            }
            let out = |len: usize| std::slice::from_raw_parts_mut(rp as *mut u8, len);
            // As NCCL reduces: floating avg multiplies every input by 1/n (rounded to the
            // multiply type) before summing (enqueue.cc, reduce_kernel.h FuncPreMulSum);
            // integer avg sums, then divides.
            let reduce = |range: std::ops::Range<usize>| -> Vec<u8> {
                let mut present = parts.iter().flatten();
                let mut acc = present
                    .next()
                    .map(|p| p[range.clone()].to_vec())
                    .unwrap_or_default();
                if premultiplies_avg(dtype, op) {
                    premul_bytes(dtype, &mut acc, n);
                    for p in present {
                        accumulate_premul_bytes(dtype, &mut acc, &p[range.clone()], n);
                    }
                    return acc;
                }
                for p in present {
                    accumulate_bytes(dtype, &mut acc, &p[range.clone()], op);
                }
                if op == RedOp::Avg {
                    scale_avg_bytes(dtype, &mut acc, n);
                }
                acc
            };
            match kind {
                Coll::AllReduce => out(count * ts).copy_from_slice(&reduce(0..count * ts)),
                Coll::Reduce(root) if me == root => {
                    out(count * ts).copy_from_slice(&reduce(0..count * ts))
                }
                Coll::Reduce(_) => {}
                Coll::ReduceScatter => {
                    out(count * ts).copy_from_slice(&reduce(me * count * ts..(me + 1) * count * ts))
                }
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
            comm.cleanup(seq);
        }));
    };
    if group_depth() > 0 {
        GROUP.with(|g| {
            g.borrow_mut()
                .collectives
                .push((count * ts, Box::new(launch)))
        });
    } else {
        launch();
    }
    NCCL_SUCCESS
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two communicators of one clique, driven by this thread; a stream per rank.
    unsafe fn clique() -> ([*mut c_void; 2], [*mut c_void; 2], [u64; 2]) {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
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
}
