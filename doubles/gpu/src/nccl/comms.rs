//! The communicator: its state, the exchange through files in the unique id's directory,
//! and the calls that ask about it, abort it or destroy it.

use super::{NcclResult, NCCL_IN_PROGRESS, NCCL_REMOTE_ERROR, NCCL_SUCCESS};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub struct Comm {
    pub(crate) dir: PathBuf,
    pub(crate) rank: usize,
    pub(crate) nranks: usize,
    pub(crate) device: c_int,
    pub(crate) seq: AtomicU64,
    pub(crate) collectives: AtomicU64,
    /// What ncclCommGetAsyncError answers: success, ncclInProgress while a non-blocking init
    /// or call goes on in the background, or the error that ended it.
    pub(crate) async_error: AtomicI32,
    pub(crate) aborted: AtomicBool,
    /// `ncclConfig_t.blocking` after NCCL_COMM_BLOCKING (src/init.cc, envConfigOverride):
    /// a non-blocking communicator's calls return ncclInProgress and finish in the background.
    pub(crate) blocking: bool,
    /// The thread inside an API call on this communicator, the call, and how deep (an
    /// ungrouped send is a group of one: the call nests a group end).
    pub(crate) user: Mutex<Option<(std::thread::ThreadId, String, u32)>>,
    /// Set by ncclCommAbort and ncclCommDestroy, which free a real communicator: any later
    /// call on the handle is a use after free, and the double ends the process saying so.
    pub(crate) freed: AtomicBool,
    /// Sends and receives of a group that was only simulated: NCCL 2.23+ leaves them queued
    /// in the communicator's planner (src/group.cc), and the next group runs them first.
    pub(crate) stale_p2p: Mutex<Vec<P2p>>,
    /// Sends to (true, peer) and receives from (false, peer) issued so far: what pairs them.
    pub(crate) p2p_counts: Mutex<HashMap<(bool, usize), u64>>,
    /// Device memory the communicator holds on `device` (released when it is freed): what
    /// init took, and what the first launch's connections took (NCCL 2.22+ connects at first
    /// use, NCCL_RUNTIME_CONNECT=1).
    pub(crate) held: AtomicUsize,
    pub(crate) connected: AtomicBool,
    /// ncclRedOpCreatePreMulSum's ops: the op's value, its type and its scalar's bytes.
    pub(crate) premulsums: Mutex<Vec<(c_int, c_int, [u8; 8])>>,
}

/// What the double's NCCL takes of its device at init (NCCL's device-side communicator,
/// channels and work FIFOs; the real figure depends on the topology and version).
pub(crate) const INIT_BYTES: usize = 48 << 20;
/// What it takes at its first launch (the connections' buffers, made on first use).
pub(crate) const CONNECT_BYTES: usize = 12 << 20;

impl Comm {
    /// The first launch on the communicator connects it: take [`CONNECT_BYTES`] of its device.
    pub(crate) fn connect_on_first_use(&self) {
        if !self.connected.swap(true, Ordering::AcqRel)
            && crate::cuda::memory::reserve(self.device as usize, CONNECT_BYTES)
        {
            self.held.fetch_add(CONNECT_BYTES, Ordering::AcqRel);
        }
    }

    /// Give back every byte the communicator holds (it is being freed).
    fn release_memory(&self) {
        let held = self.held.swap(0, Ordering::AcqRel);
        crate::cuda::memory::release(self.device as usize, held);
    }
}

impl Comm {
    /// An error ended the communicator (ncclInProgress is not one).
    pub(crate) fn failed(&self) -> bool {
        !matches!(
            self.async_error.load(Ordering::Acquire),
            NCCL_SUCCESS | NCCL_IN_PROGRESS
        )
    }

    pub(crate) fn file(&self, seq: u64, tag: &str) -> PathBuf {
        self.dir.join(format!("{seq:012}-{tag}"))
    }

    pub(crate) fn publish(&self, seq: u64, tag: &str, bytes: &[u8]) {
        let tmp = self
            .dir
            .join(format!(".{seq:012}-{tag}.{}", std::process::id()));
        if std::fs::write(&tmp, bytes).is_ok() {
            let _ = std::fs::rename(&tmp, self.file(seq, tag));
        }
    }

    /// Wait for a peer's part (read it when `read`); `None` once aborted (or a peer aborted).
    pub(crate) fn wait(&self, seq: u64, tag: &str, read: bool) -> Option<Vec<u8>> {
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
    pub(crate) fn cleanup(&self, seq: u64) {
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
}

/// An API call in progress on a communicator (see `Comm::enter`).
pub(crate) struct InUse<'a>(&'a Comm);

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        let mut user = self.0.user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, depth)) = user.as_mut() {
            *depth -= 1;
            if *depth == 0 {
                *user = None;
            }
        }
    }
}

impl Comm {
    /// Enter an API call. NCCL forbids using one communicator from two threads at once
    /// (user guide, "Thread Safety"), and ncclCommAbort frees the communicator before it
    /// returns (src/init.cc, commReclaim): a call while another thread is inside one, an abort
    /// above all, is a use after free on real NCCL. The double ends the process saying so.
    /// A call on a communicator still `ncclInProgress` is refused the same way: NCCL's user
    /// guide asks to poll ncclCommGetAsyncError until it is no longer in progress first.
    pub(crate) fn enter(&self, call: &str) -> InUse<'_> {
        let me = std::thread::current().id();
        let mut user = self.user.lock().unwrap_or_else(|p| p.into_inner());
        match user.as_mut() {
            Some((thread, inside, _)) if *thread != me => {
                eprintln!(
                    "TEST DOUBLE: {call} on rank {}'s communicator from {me:?} while {thread:?} is inside {inside} on it (NCCL forbids concurrent use of a communicator; an abort frees it under the other call)",
                    self.rank
                );
                std::process::abort();
            }
            Some((_, _, depth)) => *depth += 1,
            None => {
                let polls = matches!(call, "ncclCommGetAsyncError" | "ncclCommAbort");
                if !polls && self.async_error.load(Ordering::Acquire) == NCCL_IN_PROGRESS {
                    eprintln!(
                        "TEST DOUBLE: {call} on rank {}'s communicator while it is ncclInProgress (poll ncclCommGetAsyncError until it is not, first)",
                        self.rank
                    );
                    std::process::abort();
                }
                *user = Some((me, call.to_string(), 1));
            }
        }
        InUse(self)
    }
}

/// One queued point-to-point operation of a group.
#[derive(Clone, Copy)]
pub(crate) struct P2p {
    pub(crate) send: bool,
    pub(crate) buf: usize,
    pub(crate) bytes: usize,
    pub(crate) peer: usize,
    pub(crate) comm: usize,
    pub(crate) stream: usize,
}

/// A communicator an API call names: one already freed (aborted or destroyed) ends the
/// process, as a use after free would on real NCCL — but always, and with a message.
pub(crate) unsafe fn live_comm(c: *mut c_void, call: &str) -> &'static Comm {
    let comm = comm_of(c);
    if comm.freed.load(Ordering::Acquire) {
        eprintln!("TEST DOUBLE: {call} on a communicator already freed by ncclCommAbort/ncclCommDestroy (use after free)");
        std::process::abort();
    }
    comm
}

pub(crate) unsafe fn comm_of(c: *mut c_void) -> &'static Comm {
    &*(c as *const Comm)
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(c: *mut c_void, out: *mut NcclResult) -> NcclResult {
    let comm = live_comm(c, "ncclCommGetAsyncError");
    let _in = comm.enter("ncclCommGetAsyncError");
    *out = comm.async_error.load(Ordering::Acquire);
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclCommAbort");
    drop(comm.enter("ncclCommAbort"));
    comm.release_memory();
    comm.freed.store(true, Ordering::Release);
    comm.aborted.store(true, Ordering::Release);
    let _ = std::fs::write(comm.dir.join(format!("aborted-{}", comm.rank)), b"");
    NCCL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclCommDestroy");
    drop(comm.enter("ncclCommDestroy"));
    comm.release_memory();
    comm.freed.store(true, Ordering::Release);
    comm.aborted.store(true, Ordering::Release);
    NCCL_SUCCESS
}

/// NCCL 2.14+: flush the communicator's work, then (non-blocking) ncclInProgress until it is
/// quiescent; ncclCommDestroy then frees it.
#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(c: *mut c_void) -> NcclResult {
    let comm = live_comm(c, "ncclCommFinalize");
    let _in = comm.enter("ncclCommFinalize");
    if comm.blocking {
        return NCCL_SUCCESS;
    }
    comm.async_error.store(NCCL_IN_PROGRESS, Ordering::Release);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1));
        let _ = comm.async_error.compare_exchange(
            NCCL_IN_PROGRESS,
            NCCL_SUCCESS,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    });
    NCCL_IN_PROGRESS
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
