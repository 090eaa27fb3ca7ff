//! The message catalogue as documents: `ncclprobe messages` (every entry, and the coverage of
//! each release's source) and `ncclprobe diagnose --explain LINE` (the entry one line is from).

use super::kind::Kind;
use crate::buildinfo::ToolInfo;
use serde::{Deserialize, Serialize};

/// One message and its judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRow {
    pub id: String,
    /// `nccl`, `rccl`, `aws-ofi-nccl`, `pytorch`, ...
    pub project: String,
    /// WARN, INFO, ERROR, or RESULT (an error code's text a caller prints).
    pub level: String,
    /// The printf format as the source writes it (`{NAME}` for a macro between literals).
    pub format: String,
    /// The releases that print it, as runs of tags.
    pub versions: String,
    /// Where the newest of them prints it.
    pub file: String,
    pub line: u32,
    pub function: Option<String>,
    /// The condition in the source that guards the print.
    pub guard: Option<String>,
    /// The result code the source returns after it.
    pub returns: Option<String>,
    /// Enough literal text to be recognised in a log.
    pub matchable: bool,
    /// The finding id diagnosis raises for it.
    pub class: String,
    pub layer: String,
    pub severity: String,
    pub summary: String,
    pub explanation: String,
    pub fix: String,
    pub source: String,
    /// A note records a maintainer's or the source's explanation of this very message.
    pub noted: bool,
    /// The ncclprobe rule that reports it in its stead, if any.
    pub rule: Option<String>,
}

/// How much of one release's messages the catalogue holds and explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoverageRow {
    pub project: String,
    pub tag: String,
    pub level: String,
    /// Distinct formats the tag's source prints.
    pub formats: usize,
    /// Catalogue entries printed by the tag.
    pub entries: usize,
    /// Of those, with enough literal text to be recognised.
    pub matchable: usize,
    /// Of those, in a class more specific than the project's catch-all.
    pub classified: usize,
    /// Of those, with a note of their own.
    pub noted: usize,
}

/// `ncclprobe messages --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    pub entries: Vec<MessageRow>,
    pub coverage: Vec<CoverageRow>,
}

/// `ncclprobe diagnose --explain LINE --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainDocument {
    pub schema_version: u32,
    pub kind: Kind,
    pub tool: ToolInfo,
    /// The line asked about.
    pub line: String,
    /// The entry it comes from; none when the catalogue knows no such message.
    pub entry: Option<MessageRow>,
    /// What each conversion of the format printed in the line.
    pub values: Vec<String>,
}
