//! Renderers: the nccl-tests table, CSV, and the JSON record writer.

pub mod csv;
pub mod record;
pub mod table;

/// Pretty JSON for stdout; a serialisation failure is an internal error.
pub fn to_json(value: &impl serde::Serialize) -> Result<String, crate::exit::Failure> {
    serde_json::to_string_pretty(value).map_err(|e| crate::exit::Failure::internal(e.to_string()))
}
