//! What a document is: the `kind` every JSON document carries.

use serde::{Deserialize, Serialize};

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Run,
    Diagnosis,
    Simulation,
    Topology,
    Comparison,
    Qualification,
    Baselines,
    Matrix,
    #[serde(rename = "memory-plan")]
    MemoryPlan,
    Fleet,
    /// `ncclprobe messages`: the message catalogue, or `diagnose --explain`'s one entry.
    Messages,
    /// `ncclprobe trace`: a training job's steps and collectives from its own records.
    Trace,
}
