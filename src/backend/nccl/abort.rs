//! Who may touch a communicator, and when it may be aborted. `ncclCommAbort` frees the
//! communicator (src/init.cc: commReclaim/commFree): after it, any call on the handle is a use
//! after free. So every communicator has one `Handle`, and every call goes through it:
//!
//! - quick calls (`ncclCommGetAsyncError`, deregistration, destroy) run under the handle's
//!   lock, so no abort can free the communicator during them;
//! - calls that may block (enqueues and group ends wait for peers while connecting) mark the
//!   handle busy; another thread may then abort it to unblock them, which is what
//!   ncclCommAbort is for, and the owner sees it aborted when the call returns;
//! - otherwise an abort from another thread (a timeout, a signal) is only requested, and the
//!   owner aborts at its next poll. A handle is aborted at most once and never used after.

use super::api::Api;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    aborted: bool,
    abort_requested: bool,
    /// Calls in progress that may block (nested: a group around enqueues).
    blocking_calls: u32,
}

/// One communicator and its state.
pub struct Handle {
    api: Arc<Api>,
    raw: usize,
    state: Mutex<State>,
}

/// The communicator was aborted (or destroyed): nothing may use it.
#[derive(Debug)]
pub struct Gone;

fn registry() -> &'static Mutex<Vec<Arc<Handle>>> {
    static R: std::sync::OnceLock<Mutex<Vec<Arc<Handle>>>> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(Vec::new()))
}

impl Handle {
    /// Take ownership of a communicator NCCL just created.
    pub fn register(api: Arc<Api>, raw: usize) -> Arc<Handle> {
        let h = Arc::new(Handle {
            api,
            raw,
            state: Mutex::new(State::default()),
        });
        if let Ok(mut list) = registry().lock() {
            list.push(Arc::clone(&h));
        }
        h
    }

    /// The raw communicator, for a call made inside `enter_blocking`/`blocking`/`quick`.
    pub fn raw(&self) -> *mut c_void {
        self.raw as *mut c_void
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call that cannot block, made while no abort can free the communicator.
    pub fn quick<R>(&self, call: impl FnOnce(*mut c_void) -> R) -> Result<R, Gone> {
        let state = self.lock();
        if state.aborted {
            return Err(Gone);
        }
        let r = call(self.raw as *mut c_void);
        drop(state);
        Ok(r)
    }

    /// A call that may block; another thread may abort the communicator meanwhile.
    pub fn blocking<R>(&self, call: impl FnOnce(*mut c_void) -> R) -> Result<R, Gone> {
        let busy = self.enter_blocking()?;
        let r = call(self.raw as *mut c_void);
        busy.leave().map(|_| r)
    }

    /// Mark the communicator busy in calls that may block until the guard is left.
    pub fn enter_blocking(&self) -> Result<Busy<'_>, Gone> {
        let mut state = self.lock();
        if state.aborted {
            return Err(Gone);
        }
        state.blocking_calls += 1;
        Ok(Busy { handle: self })
    }

    /// Abort now (the owner, or anyone while the owner is blocked inside NCCL).
    pub fn abort(&self) {
        let mut state = self.lock();
        self.abort_locked(&mut state);
    }

    fn abort_locked(&self, state: &mut State) {
        if !state.aborted {
            // SAFETY: a live communicator (never aborted or destroyed: `aborted` says so).
            unsafe { (self.api.nccl_abort)(self.raw as *mut c_void) };
            state.aborted = true;
        }
    }

    /// From a thread that does not own the communicator: abort it if its owner is blocked in
    /// a call (to unblock it), else ask the owner to.
    fn abort_from_outside(&self) {
        let mut state = self.lock();
        if state.blocking_calls > 0 {
            self.abort_locked(&mut state);
        } else {
            state.abort_requested = true;
        }
    }

    /// Whether another thread asked for an abort (the owner then aborts and stops).
    pub fn abort_requested(&self) -> bool {
        self.lock().abort_requested
    }

    pub fn aborted(&self) -> bool {
        self.lock().aborted
    }

    /// The owner is done with it: destroy it unless it was aborted, and forget it.
    pub fn destroy(&self) {
        if let Ok(mut list) = registry().lock() {
            list.retain(|h| h.raw != self.raw);
        }
        let mut state = self.lock();
        if !state.aborted {
            // SAFETY: a live communicator, destroyed once.
            unsafe { (self.api.nccl_destroy)(self.raw as *mut c_void) };
            state.aborted = true;
        }
    }
}

/// Calls that may block are in progress on a communicator (see `Handle::enter_blocking`).
pub struct Busy<'a> {
    handle: &'a Handle,
}

impl Busy<'_> {
    /// The calls returned; `Gone` when the communicator was aborted meanwhile.
    pub fn leave(self) -> Result<(), Gone> {
        let aborted = self.handle.lock().aborted;
        drop(self);
        if aborted {
            Err(Gone)
        } else {
            Ok(())
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut state = self.handle.lock();
        state.blocking_calls = state.blocking_calls.saturating_sub(1);
    }
}

/// Abort every live communicator of this process (a timeout or a signal ends the run): now
/// where the owner is blocked inside NCCL, at the owner's next poll otherwise.
pub fn abort_all() {
    let handles: Vec<Arc<Handle>> = match registry().lock() {
        Ok(list) => list.clone(),
        Err(_) => return,
    };
    for h in handles {
        h.abort_from_outside();
    }
}
