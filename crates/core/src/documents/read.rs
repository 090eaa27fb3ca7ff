//! The one reader of our JSON documents: every command that takes a run record, a matrix, a
//! comparison or any other `kind` goes through `read`, which checks in order that the bytes
//! are a JSON object, that its `schema_version` is the one this build reads, that its `kind`
//! is the one the command expects, that it has the document's shape (unknown fields refused),
//! and that what it says is possible (`Document::check`). The first problem is the error.

use super::kind::Kind;
use super::matrix::MatrixDocument;
use super::{
    BaselinesDocument, Comparison, DdpSimulation, DiagnosisDocument, FsdpSimulation, Qualification,
    Simulator, TopologyDocument, SCHEMA_VERSION,
};
use crate::model::check::{non_negative, positive};
use crate::model::RunRecord;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use thiserror::Error;

/// Why a file is not the document a command reads. Every one is bad input (exit 2); the
/// message names the file.
#[derive(Debug, Error, PartialEq)]
pub enum DocumentError {
    #[error("{file}: not JSON ({reason})")]
    NotJson { file: String, reason: String },
    #[error("{file}: is JSON but not an ncclprobe document ({what})")]
    Foreign { file: String, what: String },
    #[error("{file}: has schema_version {found}; this build of ncclprobe reads schema_version {SCHEMA_VERSION}")]
    Version { file: String, found: i64 },
    #[error("{file}: is an ncclprobe `{found}` document, not a {expected}")]
    WrongKind {
        file: String,
        found: String,
        expected: &'static str,
    },
    #[error("{file}: not a valid ncclprobe {expected}: {reason}")]
    Shape {
        file: String,
        expected: &'static str,
        reason: String,
    },
    #[error("{file}: not a usable ncclprobe {expected}: {reason}")]
    Content {
        file: String,
        expected: &'static str,
        reason: String,
    },
}

/// What a document says it is before its body is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub kind: Kind,
    pub simulator: Option<Simulator>,
}

/// A document this reader reads: its kind, its name in messages, and what its content must
/// satisfy beyond its shape.
pub trait Document: DeserializeOwned {
    /// In messages: "a run record", "a pair matrix", ...
    const NAME: &'static str;
    fn accepts(head: &Head) -> bool;
    /// The first thing the document says that cannot be (a time of 0, no ranks...).
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What JSON that is not an object is, in words.
fn json_shape(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The `schema_version` and `kind` of a document, checked; refuses what is not ours.
pub fn head(file: &str, bytes: &[u8]) -> Result<Head, DocumentError> {
    #[derive(Deserialize)]
    struct Raw {
        schema_version: Option<serde_json::Value>,
        kind: Option<serde_json::Value>,
        simulator: Option<serde_json::Value>,
        #[serde(flatten)]
        _rest: std::collections::BTreeMap<String, IgnoredAny>,
    }
    let raw: Raw = match serde_json::from_slice(bytes) {
        Ok(raw) => raw,
        Err(e) => {
            // Valid JSON of another shape (`[]`, `null`) is named; anything else is not JSON.
            return Err(match serde_json::from_slice::<serde_json::Value>(bytes) {
                Ok(v) => DocumentError::Foreign {
                    file: file.into(),
                    what: json_shape(&v).into(),
                },
                Err(_) => DocumentError::NotJson {
                    file: file.into(),
                    reason: e.to_string(),
                },
            });
        }
    };
    let Some(version) = raw.schema_version else {
        return Err(DocumentError::Foreign {
            file: file.into(),
            what: "an object without `schema_version`".into(),
        });
    };
    match version.as_i64() {
        Some(v) if v == i64::from(SCHEMA_VERSION) => {}
        Some(found) => {
            return Err(DocumentError::Version {
                file: file.into(),
                found,
            })
        }
        None => {
            return Err(DocumentError::Foreign {
                file: file.into(),
                what: format!("`schema_version` is {version}, not a version number"),
            })
        }
    }
    // A record written before documents carried a kind is a run.
    let kind = match raw.kind {
        None => Kind::Run,
        Some(k) => serde_json::from_value(k.clone()).map_err(|_| DocumentError::Foreign {
            file: file.into(),
            what: format!("`kind` {k} is none of ncclprobe's"),
        })?,
    };
    let simulator = raw.simulator.and_then(|s| serde_json::from_value(s).ok());
    Ok(Head { kind, simulator })
}

/// A document's kind as it names itself (`run`, `matrix`, ...).
pub fn kind_name(kind: Kind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// Read one document of type `T` from `file`'s bytes: version, kind, shape, content.
pub fn read<T: Document>(file: &str, bytes: &[u8]) -> Result<T, DocumentError> {
    let head = head(file, bytes)?;
    if !T::accepts(&head) {
        return Err(DocumentError::WrongKind {
            file: file.into(),
            found: kind_name(head.kind),
            expected: T::NAME,
        });
    }
    read_body(file, bytes)
}

/// The body of a document whose head was already read and accepted.
pub fn read_body<T: Document>(file: &str, bytes: &[u8]) -> Result<T, DocumentError> {
    let doc: T = serde_json::from_slice(bytes).map_err(|e| DocumentError::Shape {
        file: file.into(),
        expected: T::NAME,
        reason: e.to_string(),
    })?;
    doc.check().map_err(|reason| DocumentError::Content {
        file: file.into(),
        expected: T::NAME,
        reason,
    })?;
    Ok(doc)
}

impl Document for RunRecord {
    const NAME: &'static str = "run record";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Run
    }
    fn check(&self) -> Result<(), String> {
        crate::model::check::run(self)
    }
}

impl Document for MatrixDocument {
    const NAME: &'static str = "pair matrix";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Matrix
    }
    fn check(&self) -> Result<(), String> {
        if self.backend.nranks < 2 && !self.measurements.is_empty() {
            return Err(format!(
                "backend.nranks is {}; a pair needs 2 ranks",
                self.backend.nranks
            ));
        }
        for (i, m) in self.measurements.iter().enumerate() {
            let at = |f: &str| format!("measurements[{i}].{f}");
            if m.from >= self.endpoints.len() || m.to >= self.endpoints.len() {
                return Err(format!(
                    "{} names endpoint {} -> {}; there are {}",
                    at("from/to"),
                    m.from,
                    m.to,
                    self.endpoints.len()
                ));
            }
            positive(&at("time_s"), m.time_s)?;
            non_negative(&at("bw_bytes_per_s"), m.bw_bytes_per_s)?;
        }
        Ok(())
    }
}

impl Document for Comparison {
    const NAME: &'static str = "comparison";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Comparison
    }
    fn check(&self) -> Result<(), String> {
        for (i, p) in self.points.iter().enumerate() {
            non_negative(
                &format!("points[{i}].measured_busbw_bytes_per_s"),
                p.measured_busbw_bytes_per_s,
            )?;
            non_negative(&format!("points[{i}].ratio"), p.ratio)?;
        }
        Ok(())
    }
}

impl Document for Qualification {
    const NAME: &'static str = "qualification";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Qualification
    }
    fn check(&self) -> Result<(), String> {
        // A verdict that contradicts its own rules would pass a gate it failed.
        if self.passed && self.results.iter().any(|r| !r.passed) {
            return Err("`passed` is true but a rule failed".into());
        }
        if self.attempts == 0 {
            return Err("`attempts` is 0: nothing was judged".into());
        }
        Ok(())
    }
}

impl Document for super::trace::TraceDocument {
    const NAME: &'static str = "trace";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Trace
    }
}

impl Document for DiagnosisDocument {
    const NAME: &'static str = "diagnosis";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Diagnosis
    }
}

impl Document for DdpSimulation {
    const NAME: &'static str = "DDP simulation";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Simulation && head.simulator != Some(Simulator::Fsdp)
    }
    fn check(&self) -> Result<(), String> {
        if self.world_size == 0 {
            return Err("world_size is 0".into());
        }
        Ok(())
    }
}

impl Document for FsdpSimulation {
    const NAME: &'static str = "FSDP simulation";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Simulation && head.simulator == Some(Simulator::Fsdp)
    }
    fn check(&self) -> Result<(), String> {
        if self.world_size == 0 {
            return Err("world_size is 0".into());
        }
        Ok(())
    }
}

impl Document for TopologyDocument {
    const NAME: &'static str = "topology";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Topology
    }
    fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        if let Some(d) = self.topology.devices.iter().find(|d| !seen.insert(*d)) {
            return Err(format!("device {d} is listed twice"));
        }
        Ok(())
    }
}

impl Document for BaselinesDocument {
    const NAME: &'static str = "list of baselines";
    fn accepts(head: &Head) -> bool {
        head.kind == Kind::Baselines
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
