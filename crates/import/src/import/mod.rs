//! What users already have, read into our records: nccl-tests output, `nvidia-smi topo -m`,
//! `NCCL_DEBUG=INFO` and error logs, `nvidia-smi`'s process table, and what users paste about
//! the host (GPU utilisation, `free`, `nproc`, PyTorch's DataLoader warning).

pub mod input;
pub mod messages;
pub mod nccl_causes;
pub mod nccl_dump;
pub(crate) mod nccl_lines;
pub mod nccl_log;
pub mod nccl_tests;
pub mod pastes;
pub mod smi;
pub mod text;
pub mod topo;
pub mod trace;
pub mod xid;
