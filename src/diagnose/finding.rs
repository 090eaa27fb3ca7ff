//! What diagnosis reports: findings with a stable id, a severity, the evidence behind them
//! (values, or lines with their file and line number), an explanation, a fix and a source.

use serde::{Deserialize, Serialize};

pub use crate::import::nccl_log::Evidence;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub title: String,
    pub evidence: Vec<Evidence>,
    pub explanation: String,
    pub fix: String,
    pub source: String,
}

/// Evidence from a file: its name, the line (0 when the fact is not one line) and the text.
pub fn ev(file: &str, line: usize, text: impl Into<String>) -> Evidence {
    Evidence {
        file: file.to_string(),
        line,
        text: text.into(),
    }
}

/// Evidence read off this machine.
pub fn value_ev(what: impl Into<String>) -> Evidence {
    ev("(live)", 0, what)
}
