//! Analysis over records: collective time curves and the DDP/FSDP step simulator.

pub mod curve;
pub mod ddp;
pub mod fsdp;
pub mod loader;
pub mod loader_plan;
pub mod memory;
pub mod models;
pub mod optimizer_step;
pub mod trace;
