//! Every human and machine output: the nccl-tests table, CSV, the record writer, the topology
//! matrix, findings, simulations; JSON of any typed document.

pub mod csv;
pub mod designs;
pub mod expect;
pub mod findings;
pub mod fleet;
pub mod junit;
pub mod matrix;
pub mod memory;
pub mod messages;
pub mod nccl_dump;
pub mod perf;
pub mod perf_json;
pub mod plots;
pub mod record;
pub mod report;
pub mod safe;
pub mod simulate;
pub mod table;
pub mod topo;
pub mod trace;

/// Pretty JSON for stdout; a serialisation failure is an internal error.
pub fn to_json(value: &impl serde::Serialize) -> Result<String, crate::exit::Failure> {
    serde_json::to_string_pretty(value).map_err(|e| crate::exit::Failure::internal(e.to_string()))
}
