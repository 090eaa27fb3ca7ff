//! The `nccl` backend: one rank per GPU, the CUDA driver API and NCCL both loaded at run time.
//!
//! `loader` finds NCCL where users have it; `api` resolves its entry points; `comm` is one
//! rank's communicator; `batches` times its calls; `group` enqueues several GPUs' calls from one thread (`-g N`); `abort`
//! keeps the live communicators so a timeout can abort them.

mod abort;
mod api;
mod batches;
mod buffers;
mod comm;
mod completion;
mod enqueue;
mod group;
mod loader;
mod memory;
mod types;

pub use abort::{abort_all, Handle};
pub use api::{cta_policy_for, Api, CtaPolicy, RegistrationMode};
pub use comm::{Group, NcclComm};
pub use loader::{
    candidates, describe_attempts, find_nccl, python_site_packages, version_string, Attempt, Nccl,
    Route,
};
