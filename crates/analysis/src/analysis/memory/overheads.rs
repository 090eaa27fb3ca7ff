//! What a training process holds on its GPU besides tensors: the CUDA context, NCCL's
//! buffers, and the caching allocator's fragmentation. None has a published closed form; each
//! is an assumption stated here, overridable from the command line.

/// CUDA context with PyTorch's kernels loaded lazily (`CUDA_MODULE_LOADING=LAZY`, the
/// default since CUDA 11.7 / PyTorch 2.x): about 300-600 MiB by GPU and driver; the plan
/// takes 512 MiB unless told.
pub const CUDA_CONTEXT_BYTES: f64 = 512.0 * 1024.0 * 1024.0;

/// NCCL_BUFFSIZE's default: 4 MiB per protocol buffer.
const NCCL_BUFFSIZE: f64 = 4.0 * 1024.0 * 1024.0;
/// Channels NCCL opens on a node with NVLink or several NICs (it picks 2 to 32).
const NCCL_CHANNELS: f64 = 16.0;

/// NCCL's buffers for one communicator: per channel, a send and a receive peer of the ring,
/// each with the Simple protocol's NCCL_BUFFSIZE and about as much again for LL/LL128:
/// 2 × 2 × 4 MiB × 16 channels = 256 MiB. Nothing with one rank (no communicator is used).
pub fn nccl_bytes(world_size: usize) -> f64 {
    if world_size <= 1 {
        0.0
    } else {
        2.0 * 2.0 * NCCL_BUFFSIZE * NCCL_CHANNELS
    }
}

/// The caching allocator's fragmentation reserve as a fraction of what tensors take: blocks
/// split for small tensors cannot serve a larger request, so the reserved memory exceeds the
/// allocated peak. `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` grows one segment in
/// place instead of reserving new ones (PyTorch's CUDA semantics notes), which leaves less
/// stranded: 3% then against 10% without (assumptions; `--fragmentation` overrides).
pub fn fragmentation_fraction(expandable_segments: bool) -> f64 {
    if expandable_segments {
        0.03
    } else {
        0.10
    }
}
