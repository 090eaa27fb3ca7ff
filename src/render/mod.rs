//! Renderers: the nccl-tests table, CSV, and the JSON record writer.

pub mod csv;
pub mod record;
pub mod table;
