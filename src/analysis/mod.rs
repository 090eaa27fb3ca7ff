//! Analysis over records: collective time curves and the DDP/FSDP step simulator.

pub mod curve;
pub mod ddp;
pub mod fsdp;
pub mod memory;
pub mod models;
