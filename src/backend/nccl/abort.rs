//! The communicators alive in this process, so a timeout can abort them all: an aborted
//! communicator makes its peers' calls return instead of hanging.

use super::api::Api;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

type LiveComm = (Arc<Api>, usize);

/// Communicators the watchdog aborts before the process exits on a timeout.
pub fn live_comms() -> &'static Mutex<Vec<LiveComm>> {
    static C: std::sync::OnceLock<Mutex<Vec<LiveComm>>> = std::sync::OnceLock::new();
    C.get_or_init(|| Mutex::new(Vec::new()))
}

/// Abort every registered communicator (the watchdog's last act).
pub fn abort_all() {
    if let Ok(list) = live_comms().try_lock() {
        for (api, comm) in list.iter() {
            // SAFETY: a communicator created by this process and not destroyed.
            unsafe { (api.nccl_abort)(*comm as *mut c_void) };
        }
    }
}
