//! `-R 1|2` on one rank: buffers from ncclMemAlloc registered with the communicator (or
//! symmetric windows), what NCCL says it did, and the plain cuMemAlloc buffers otherwise.

use super::api::{CommProperties, RegistrationMode, NCCL_WIN_COLL_SYMMETRIC};
use super::comm::NcclComm;
use crate::backend::cuda::drv;
use crate::backend::BackendError;
use std::ffi::c_void;
use std::sync::Arc;

/// `ncclInvalidArgument` in nccl.h's `ncclResult_t`.
const NCCL_INVALID_ARGUMENT: std::ffi::c_int = 4;

impl NcclComm {
    /// `-R 1`: allocate buffers with ncclMemAlloc and register them with the communicator;
    /// `-R 2`: register them as symmetric windows (a collective call on every rank).
    pub fn use_registration(&mut self, mode: RegistrationMode) -> Result<(), BackendError> {
        let nccl = &self.api.nccl;
        let missing = |flag: &str, needs: &str, since: &str| {
            BackendError::Unavailable(format!(
                "{flag} needs {needs} (NCCL {since} or newer); NCCL {} at {} has none",
                nccl.version(),
                nccl.path.display()
            ))
        };
        let reg = self
            .api
            .registration
            .ok_or_else(|| missing("-R 1", "ncclMemAlloc and ncclCommRegister", "2.19"))?;
        if mode == RegistrationMode::Symmetric {
            if reg.window.is_none() {
                return Err(missing("-R 2", "ncclCommWindowRegister", "2.27"));
            }
            self.verify_symmetric_support()?;
        }
        self.registered = Some((reg, mode, [0, 0]));
        Ok(())
    }

    /// -R 2: NCCL hands back a window that is only local, with success, when the communicator
    /// has no symmetric support (2.27: across nodes or without P2P between every GPU; 2.28+:
    /// also with NCCL_WIN_ENABLE=0 or cuMem off; src/dev_runtime.cc). NCCL 2.29 says which
    /// (ncclCommQueryProperties' deviceApiSupport); older NCCL cannot, and the record says the
    /// request went unverified.
    fn verify_symmetric_support(&mut self) -> Result<(), BackendError> {
        let version = self.api.nccl.version();
        let Some(query) = self.api.query_properties else {
            self.notes.push(format!(
                "-R 2: symmetric windows requested, not verified: NCCL {version} cannot say whether they are symmetric (ncclCommQueryProperties is NCCL 2.29+); without symmetric support NCCL registers them as local windows"
            ));
            return Ok(());
        };
        let mut props = CommProperties::new();
        let c = self.comm.raw()?;
        // SAFETY: a live communicator, called by its owner; `props` initialised as
        // NCCL_COMM_PROPERTIES_INITIALIZER does, with room for fields NCCL may add.
        let rc = unsafe { query(c, &mut props) };
        let device = self.device;
        self.comm
            .check(&|| format!("ncclCommQueryProperties on GPU {device}"), rc)?;
        if !props.device_api_support {
            return Err(BackendError::Unavailable(format!(
                "-R 2: NCCL {version} reports no symmetric support on GPU {device} (ncclCommQueryProperties: deviceApiSupport = 0): its windows would be local only. NCCL gives symmetric support with cuMem on (NCCL_CUMEM_ENABLE unset or 1), windows enabled (NCCL_WIN_ENABLE unset or 1), and P2P between every GPU of one node"
            )));
        }
        self.notes.push(format!(
            "-R 2: symmetric support confirmed by NCCL {version} (ncclCommQueryProperties)"
        ));
        Ok(())
    }

    /// Free the device buffers (deregistering them first under -R 1).
    pub(super) fn free_buffers(&mut self) {
        if self.capacity == 0 {
            return;
        }
        // SAFETY: our own allocations (and registrations), released once.
        unsafe {
            match &mut self.registered {
                Some((reg, mode, handles)) => {
                    let deregister = match (*mode, reg.window) {
                        (RegistrationMode::Symmetric, Some((_, deregister))) => deregister,
                        _ => reg.deregister,
                    };
                    for (buf, handle) in [self.dev_send, self.dev_recv]
                        .iter()
                        .zip(handles.iter_mut())
                    {
                        if *handle != 0 {
                            // An aborted communicator took its registrations with it.
                            if let Ok(c) = self.comm.raw() {
                                let rc = deregister(c, *handle as *mut c_void);
                                let _ = self.comm.check(&|| "deregistration".into(), rc);
                            }
                            *handle = 0;
                        }
                        (reg.mem_free)(*buf as *mut c_void);
                    }
                }
                None => {
                    drv::cuMemFree_v2(self.dev_send);
                    drv::cuMemFree_v2(self.dev_recv);
                }
            }
        }
        self.capacity = 0;
    }

    /// Allocate both device buffers of `bytes` (registered under -R 1).
    pub(super) fn alloc_buffers(&mut self, bytes: usize) -> Result<(), BackendError> {
        let device = self.device;
        let failed = |how: String| BackendError::Alloc {
            bytes: bytes as u64,
            reason: how,
        };
        let comm = Arc::clone(&self.comm);
        let nccl = &self.api.nccl;
        match &mut self.registered {
            Some((reg, mode, handles)) => {
                for (buf, handle) in [&mut self.dev_send, &mut self.dev_recv]
                    .into_iter()
                    .zip(handles.iter_mut())
                {
                    let mut p = std::ptr::null_mut();
                    // SAFETY: valid out-pointers; the device's context is current.
                    let rc = unsafe { (reg.mem_alloc)(&mut p, bytes) };
                    if rc != 0 {
                        return Err(failed(format!(
                            "ncclMemAlloc on GPU {device} failed: {}",
                            nccl.error_string(rc)
                        )));
                    }
                    *buf = p as u64;
                    let mut h = std::ptr::null_mut();
                    let c = comm.raw()?;
                    // SAFETY: a live communicator, called by its owner, and the buffer just
                    // allocated; every rank registers the same size at the same point
                    // (windows are collective: on a non-blocking communicator the call may
                    // return ncclInProgress while it waits for the peers).
                    let (call, rc) = unsafe {
                        match (*mode, reg.window) {
                            (RegistrationMode::Symmetric, Some((register, _))) => (
                                "ncclCommWindowRegister",
                                register(c, p, bytes, &mut h, NCCL_WIN_COLL_SYMMETRIC),
                            ),
                            _ => ("ncclCommRegister", (reg.register)(c, p, bytes, &mut h)),
                        }
                    };
                    // NCCL 2.28+ (dev_runtime.cc, 606-609): a window whose offset in its cuMem
                    // allocation is not a multiple of NCCL_WIN_REQUIRED_ALIGNMENT (4096) is
                    // ncclInvalidArgument: the buffer's placement, not a lack of memory.
                    if call == "ncclCommWindowRegister" && rc == NCCL_INVALID_ARGUMENT {
                        return Err(BackendError::Unavailable(format!(
                            "-R 2: ncclCommWindowRegister on GPU {device} refused the window ({}): NCCL 2.28+ takes a window only at an offset in its ncclMemAlloc allocation that is a multiple of 4096 bytes (NCCL_WIN_REQUIRED_ALIGNMENT)",
                            nccl.error_string(rc)
                        )));
                    }
                    comm.check(&|| format!("{call} on GPU {device}"), rc)
                        .map_err(|e| match e {
                            BackendError::Failed(m) if !comm.aborted() => failed(m),
                            e => e,
                        })?;
                    // NCCL 2.27 (register/register.cc, 2.27.7 209-222): with cuMem or local
                    // registration off, or an allocation whose base address or size is not a
                    // multiple of NCCL's 2 MiB registration page, ncclCommWindowRegister returns
                    // ncclSuccess and a NULL window; the buffer then runs unregistered, and a
                    // record saying "symmetric" would be false.
                    if h.is_null() && *mode == RegistrationMode::Symmetric {
                        return Err(BackendError::Unavailable(format!(
                            "-R 2: ncclCommWindowRegister on GPU {device} returned no window: NCCL makes symmetric windows only with cuMem and local registration on (NCCL_CUMEM_ENABLE, NCCL_LOCAL_REGISTER unset or 1, and a driver with cuMem), and (NCCL 2.27) only over an allocation whose base address and size are multiples of 2 MiB"
                        )));
                    }
                    // NCCL 2.24+ (register/register.cc, ncclCommRegister): NCCL_LOCAL_REGISTER=0
                    // or P2P through cudaMemcpy skip registration with a NULL handle and
                    // ncclSuccess; a record saying "registered" would be false.
                    if h.is_null() {
                        return Err(BackendError::Unavailable(format!(
                            "-R 1: ncclCommRegister on GPU {device} returned no handle: NCCL registered nothing (it skips registration with NCCL_LOCAL_REGISTER=0 or NCCL_P2P_USE_CUDA_MEMCPY=1, and for buffers backed by host memory)"
                        )));
                    }
                    *handle = h as usize;
                }
            }
            None => {
                for buf in [&mut self.dev_send, &mut self.dev_recv] {
                    // SAFETY: valid out-pointer; the device's context is current.
                    let rc = unsafe { drv::cuMemAlloc_v2(buf, bytes) };
                    if rc != drv::SUCCESS {
                        return Err(failed(format!(
                            "cuMemAlloc on GPU {device} failed with {} ({rc})",
                            drv::name(rc)
                        )));
                    }
                }
            }
        }
        self.capacity = bytes;
        Ok(())
    }
}
