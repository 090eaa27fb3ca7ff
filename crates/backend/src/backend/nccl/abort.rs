//! Who may touch a communicator, and when it is aborted.
//!
//! NCCL forbids using one communicator from two threads at once, and `ncclCommAbort` frees the
//! communicator before it returns (src/init.cc: ncclCommAbort → commReclaim → commFree): an
//! abort from a timeout or signal thread while the owner is inside `ncclAllReduce` or
//! `ncclGroupEnd` on the same communicator is a use after free. nccl-tests aborts only from
//! the thread that polls its streams (src/common.cu, `testStreamSynchronize`). So here:
//!
//! - only the thread that owns a communicator calls NCCL on it (under `-g N` one thread owns
//!   every communicator of a group call while it makes it, then each rank thread owns its own);
//! - communicators are blocking, as nccl-tests makes them (a non-blocking one pays a thread
//!   per call: see `NcclConfig::nccl_tests`). A call returns once its work is enqueued, and
//!   the owner waits for the stream itself, polling `cuStreamQuery` and
//!   `ncclCommGetAsyncError` (`completion::wait`), so a hung collective usually holds no
//!   thread inside NCCL. Not always: once a long batch has filled NCCL's work FIFO behind a
//!   hung kernel, the next enqueue spins in `waitWorkFifoAvailable` (src/enqueue.cc, v2.28.9
//!   1122-1131), polling event callbacks and never the abort flag, and CUDA's launch queue
//!   blocks a launch the same way. There, as where NCCL itself waits for peers (init, the
//!   connection a first call makes), the owner is stuck inside a call: the watchdog or the
//!   signal thread then ends the run without it, the record is closed, and the process ends
//!   without the libraries' exit handlers (`exit::end_without_teardown`). Where NCCL returns `ncclInProgress`
//!   (`NCCL_COMM_BLOCKING=0` in the environment) the owner polls until it is done
//!   (`Handle::settle`), as NCCL's user guide prescribes;
//! - a timeout or a signal only raises a flag (`abort_all`); the owner sees it at its next poll
//!   and aborts the communicator itself. A handle is aborted at most once and never used after.

use super::api::Api;
use crate::backend::BackendError;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `ncclInProgress` in nccl.h's `ncclResult_t` (2.14+): a non-blocking call goes on in the
/// background; poll `ncclCommGetAsyncError` until it says otherwise.
pub(super) const NCCL_IN_PROGRESS: c_int = 7;

/// `ncclRemoteError` in nccl.h's `ncclResult_t` (2.14+): "A call failed possibly due to a
/// network error or a remote process exiting prematurely".
pub(super) const NCCL_REMOTE_ERROR: c_int = 6;

/// Why a record has no NCCL estimate on a non-blocking communicator.
pub(super) const NO_SIMULATION_NON_BLOCKING: &str = "no NCCL estimate (ncclGroupSimulateEnd) per point: the communicators are non-blocking (NCCL_COMM_BLOCKING=0), where NCCL launches a simulated group for real";

/// NCCL_COMM_BLOCKING=0 in the environment, which makes every communicator non-blocking
/// whatever its config says (NCCL_PARAM CommBlocking: only 0 and 1 override).
pub(super) fn non_blocking_by_env() -> bool {
    std::env::var("NCCL_COMM_BLOCKING").is_ok_and(|v| v.trim().parse::<i64>() == Ok(0))
}

#[derive(Default)]
struct Flags {
    aborted: bool,
    abort_requested: bool,
}

/// One communicator: its raw handle, used by its owner only, and the flags other threads set.
pub struct Handle {
    api: Arc<Api>,
    raw: usize,
    flags: Mutex<Flags>,
}

fn registry() -> &'static Mutex<Vec<Arc<Handle>>> {
    static R: std::sync::OnceLock<Mutex<Vec<Arc<Handle>>>> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

/// What a rank sees once its communicator was aborted (by a timeout or a signal).
pub(super) fn aborted_error() -> BackendError {
    BackendError::Failed("the NCCL communicator was aborted (timeout or signal)".into())
}

impl Handle {
    /// Take ownership of a communicator NCCL just handed back (possibly still initialising).
    pub fn register(api: Arc<Api>, raw: usize) -> Arc<Handle> {
        let h = Arc::new(Handle {
            api,
            raw,
            flags: Mutex::new(Flags::default()),
        });
        if let Ok(mut list) = registry().lock() {
            list.push(Arc::clone(&h));
        }
        h
    }

    fn flags(&self) -> MutexGuard<'_, Flags> {
        self.flags.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The raw communicator, for the owner's calls; `Err` once it was aborted or destroyed.
    pub fn raw(&self) -> Result<*mut c_void, BackendError> {
        if self.flags().aborted {
            return Err(aborted_error());
        }
        Ok(self.raw as *mut c_void)
    }

    /// The communicator's state (`ncclCommGetAsyncError`): success, in progress, or an error.
    pub fn state(&self) -> Result<c_int, BackendError> {
        let raw = self.raw()?;
        let mut rc = 0;
        // SAFETY: a live communicator (not aborted: `raw` says so), called by its owner, and a
        // valid out-pointer.
        let called = unsafe { (self.api.nccl_async_error)(raw, &mut rc) };
        if called != 0 {
            return Err(BackendError::Failed(format!(
                "ncclCommGetAsyncError failed: {}",
                self.api.nccl.error_string(called)
            )));
        }
        Ok(rc)
    }

    /// Owner only: wait until the communicator is no longer `ncclInProgress` (a non-blocking
    /// init or call finished in the background), aborting it at once if another thread asked.
    /// `what` says what was going on (`all_reduce of 512 bytes on rank 1 (GPU 1)`), for the
    /// error when the communicator ends in one.
    pub fn settle(&self, what: &dyn Fn() -> String) -> Result<(), BackendError> {
        let mut backoff = Backoff::default();
        loop {
            if self.abort_requested() {
                self.abort();
                return Err(aborted_error());
            }
            match self.state()? {
                0 => return Ok(()),
                NCCL_IN_PROGRESS => {}
                rc => {
                    // A failed non-blocking call leaves the communicator unusable (NCCL's
                    // user guide: abort it); abort makes its stream's work return too.
                    self.abort();
                    return Err(self.async_error(rc, &what()));
                }
            }
            backoff.pause();
        }
    }

    /// The error an NCCL async error `rc` ends the run with; a peer that is gone (nccl.h:
    /// ncclRemoteError) is told apart, for its own exit code.
    pub(super) fn async_error(&self, rc: c_int, what: &str) -> BackendError {
        let message = format!(
            "NCCL async error during {what}: {}; communicator aborted",
            self.api.nccl.error_string(rc)
        );
        if rc == NCCL_REMOTE_ERROR {
            BackendError::PeerLost(message)
        } else {
            BackendError::Failed(message)
        }
    }

    /// Owner only: check a call's result; `ncclInProgress` is waited for (`settle`).
    pub fn check(&self, what: &dyn Fn() -> String, rc: c_int) -> Result<(), BackendError> {
        match rc {
            0 => Ok(()),
            NCCL_IN_PROGRESS => self.settle(what),
            rc => Err(BackendError::Failed(format!(
                "{} failed: {}",
                what(),
                self.api.nccl.error_string(rc)
            ))),
        }
    }

    /// Owner only: abort now (a timeout or signal asked, or the communicator failed).
    pub fn abort(&self) {
        let mut flags = self.flags();
        if !flags.aborted {
            // SAFETY: a live communicator (never aborted or destroyed: `aborted` says so),
            // called by its owner; ncclCommAbort may be called on a non-blocking communicator
            // whatever its state (NCCL user guide, "Fault Tolerance").
            unsafe { (self.api.nccl_abort)(self.raw as *mut c_void) };
            flags.aborted = true;
        }
    }

    /// From any thread: ask the owner to abort at its next poll. Never calls NCCL.
    fn request_abort(&self) {
        self.flags().abort_requested = true;
    }

    /// Whether another thread asked for an abort (the owner then aborts and stops).
    pub fn abort_requested(&self) -> bool {
        self.flags().abort_requested
    }

    pub fn aborted(&self) -> bool {
        self.flags().aborted
    }

    /// Owner only, once done with it: finalize and destroy it when it is healthy (NCCL's
    /// order for non-blocking communicators: ncclCommFinalize, poll until ncclSuccess, then
    /// ncclCommDestroy), abort it otherwise; then forget it.
    pub fn destroy(&self) {
        if let Ok(mut list) = registry().lock() {
            list.retain(|h| h.raw != self.raw);
        }
        if self.aborted() {
            return;
        }
        let healthy = matches!(self.state(), Ok(0));
        let finalized = healthy
            && match self.api.nccl_finalize {
                // SAFETY: a live, idle communicator, called by its owner.
                Some(finalize) => self
                    .check(&|| "ncclCommFinalize".to_string(), unsafe {
                        finalize(self.raw as *mut c_void)
                    })
                    .is_ok(),
                None => true,
            };
        if !finalized {
            self.abort();
            return;
        }
        let mut flags = self.flags();
        if !flags.aborted {
            // SAFETY: a live communicator, finalized, destroyed once by its owner.
            unsafe { (self.api.nccl_destroy)(self.raw as *mut c_void) };
            flags.aborted = true;
        }
    }
}

/// A timeout or a signal ends the run: ask every live communicator's owner to abort it at its
/// next poll. Nothing here calls NCCL, so no communicator is freed under a thread using it.
pub fn abort_all() {
    let handles: Vec<Arc<Handle>> = match registry().lock() {
        Ok(list) => list.clone(),
        Err(_) => return,
    };
    for h in handles {
        h.request_abort();
    }
}

/// Between two polls of a stream or a communicator: spin, then yield the CPU (NCCL's proxy
/// threads need it), and sleep only once the wait is past 100 ms, long enough that a sleep's
/// 50-100 µs granularity is noise in anything timed.
pub(super) struct Backoff {
    spins: u32,
    since: Instant,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            spins: 0,
            since: Instant::now(),
        }
    }
}

impl Backoff {
    pub(super) fn pause(&mut self) {
        self.spins = self.spins.saturating_add(1);
        if self.spins < 64 {
            std::hint::spin_loop();
        } else if self.since.elapsed() < Duration::from_millis(100) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Communicators NCCL handed back from inits whose result was `rc`: each is registered (so a
/// timeout or a signal can ask for its abort) and, where NCCL still says `ncclInProgress`
/// (`NCCL_COMM_BLOCKING=0` in the environment overrides the configuration), waited for
/// until it is ready. On a failure every communicator created is aborted and the error names `what`.
pub(super) fn initialised(
    api: &Arc<Api>,
    what: &dyn Fn() -> String,
    rc: c_int,
    raw: &[*mut c_void],
) -> Result<Vec<Arc<Handle>>, BackendError> {
    let handles: Vec<Arc<Handle>> = raw
        .iter()
        .filter(|c| !c.is_null())
        .map(|&c| Handle::register(Arc::clone(api), c as usize))
        .collect();
    let ready = if handles.len() < raw.len() && rc == 0 {
        Err(BackendError::Failed(format!(
            "{} returned no communicator",
            what()
        )))
    } else if rc != 0 && rc != NCCL_IN_PROGRESS {
        Err(BackendError::Failed(format!(
            "{} failed: {}",
            what(),
            api.nccl.error_string(rc)
        )))
    } else {
        handles.iter().try_for_each(|h| h.settle(what))
    };
    match ready {
        Ok(()) => Ok(handles),
        Err(e) => {
            for h in &handles {
                h.abort();
                h.destroy();
            }
            Err(e)
        }
    }
}
