//! Seed 004 (`shared/seeds/`) as setups and its out-of-memory message as an [`Oom`]: the worked
//! example the memory model was built on, which the tests of this crate and of the report above
//! it hold the model to.

use super::observed::Oom;
use super::{overheads, presets, Setup, Strategy};
use crate::documents::memory::{Checkpointing, Logits, Offload, TrainPrecision, Trainable};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// Seed 004's setup: Gemma-2B (MGM-2B's language model), ZeRO-3 on one 24 GB GPU (23.63 GiB
/// as its out-of-memory message says), fp16, FlashAttention, batch 1, sequence 1024,
/// expandable segments, no offload (the zero3.json its report edits).
pub fn seed_004() -> Setup {
    Setup {
        shape: presets::preset("gemma-2b").unwrap_or_else(|e| panic!("{e}")),
        trainable: Trainable::Full,
        frozen_params: 0,
        world_size: 1,
        gpus_per_node: 1,
        strategy: Strategy::FullShard,
        offload_optimizer: Offload::None,
        offload_params: Offload::None,
        precision: TrainPrecision::Mixed,
        optimizer: Default::default(),
        quantize: None,
        seq_len: 1024,
        micro_batch: 1,
        checkpointing: Checkpointing::None,
        flash_attention: true,
        logits: Logits::HfUpcast,
        expandable_segments: true,
        cuda_context_bytes: overheads::CUDA_CONTEXT_BYTES,
        fragmentation: None,
        gpu_capacity: Some((23.63 * GIB, "test".into())),
        host_capacity: Some((50e9, "test".into())),
        observed_terms: Vec::new(),
    }
}

/// Seed 004 as the report ran it: the optimizer offloaded, MGM-2B's frozen towers beside
/// Gemma-2B, on its 64 GB host.
pub fn seed_004_offload() -> Setup {
    Setup {
        offload_optimizer: Offload::Cpu,
        frozen_params: 500_000_000,
        host_capacity: Some((64e9, "test".into())),
        ..seed_004()
    }
}

/// The report's error: "Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.63 GiB
/// of which 243.94 MiB is free. Including non-PyTorch memory, this process has 22.66 GiB
/// memory in use."
pub fn seed_004_oom() -> Oom {
    Oom {
        source: "seed:1".into(),
        gpu: Some(0),
        requested_bytes: 500.0 * MIB,
        capacity_bytes: Some(23.63 * GIB),
        free_bytes: Some(243.94 * MIB),
        process_in_use_bytes: Some(22.66 * GIB),
        listed_processes_bytes: Vec::new(),
        reserved_unallocated_bytes: None,
        reserved_total_bytes: None,
        allocated_bytes: None,
    }
}
