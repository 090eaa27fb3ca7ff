//! What a diagnosis document holds: findings with a stable id, a severity, the evidence behind
//! them (values, or lines with their file and line number), and the facts the inputs gave.
//! `diagnose` and the log reader (`import::nccl_log`) make them and re-export them.

use crate::model::{Headline, RunStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A line that supports a fact: file, line number, text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub file: String,
    pub line: usize,
    pub text: String,
}

impl Evidence {
    /// `file:line: text`, or `file: text` when the fact is not one line.
    pub fn cited(&self) -> String {
        match self.line {
            0 => format!("{}: {}", self.file, self.text),
            n => format!("{}:{n}: {}", self.file, self.text),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

/// What the inputs say, summed up (the `facts` of a diagnosis document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Facts {
    pub nccl_version: Option<String>,
    pub transports: Vec<String>,
    pub gdrdma: bool,
    pub network: Option<String>,
    pub env: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    pub ranks: Option<usize>,
    pub nodes: Option<usize>,
    pub inputs: Vec<InputFile>,
    pub topology: Option<TopologySummary>,
    pub runs: Vec<RunSummary>,
    pub live: Option<LiveSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    pub file: String,
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySummary {
    pub file: String,
    pub devices: Vec<String>,
    pub links: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSummary {
    pub file: Option<String>,
    pub status: RunStatus,
    pub points: usize,
    pub headlines: Vec<Headline>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveSummary {
    pub nvml_gpus: Option<usize>,
    pub nvml_error: Option<String>,
    pub driver_version: Option<String>,
    pub sysfs_gpus: usize,
    pub wsl2: bool,
    pub kernel: Option<String>,
    pub devshm_bytes: Option<u64>,
    pub cpu: Option<String>,
    pub nics: Vec<Nic>,
    pub infiniband: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    pub name: String,
    pub speed_mbit_per_s: Option<u64>,
}
