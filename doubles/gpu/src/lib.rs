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
//!
//! Where each part lives:
//! - `cuda/`: the CUDA driver — `cuda/device.rs` (init, devices, contexts, driver version,
//!   error strings), `cuda/memory.rs` (allocations, copies, host memory), `cuda/streams.rs`
//!   (stream worker threads, stream query/sync and the sticky error, events);
//! - `nccl/`: NCCL — `nccl/mod.rs` (result codes, version, error strings), `nccl/comms.rs`
//!   (the communicator, its file exchange, abort/destroy/async error), `nccl/init.rs` (unique
//!   ids, communicator creation), `nccl/faults.rs` (`NCCLPROBE_TEST_DOUBLE_FAULT`),
//!   `nccl/registration.rs` (ncclMemAlloc, buffer and window registration), `nccl/group.rs`
//!   (groups, the send/receive exchange), `nccl/collectives.rs` (collective and send/receive
//!   entry points, the collectives' exchange);
//! - `nvml.rs`: NVML;
//! - `trace.rs`: the call trace (`NCCLPROBE_TEST_DOUBLE_TRACE`) both CUDA and NCCL write.

#![allow(non_snake_case, clippy::missing_safety_doc)]

mod cuda;
mod nccl;
mod nvml;
mod trace;
