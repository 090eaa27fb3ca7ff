//! What diagnosis reports: findings with a stable id, a severity, the evidence behind them
//! (values, or lines with their file and line number), an explanation, a fix and a source.

pub use crate::documents::diagnosis::{Evidence, Finding, Severity};

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

/// One raised finding, before the table's text is attached.
pub struct Hit {
    pub title: String,
    pub evidence: Vec<Evidence>,
    /// Overrides the rule's severity (e.g. a PCIe speed that is only low at idle is info).
    pub severity: Option<Severity>,
    /// Overrides the rule's id and texts: the message catalogue's findings carry their own.
    pub text: Option<HitText>,
    /// Dropped when a finding with this id is raised too (a rule that says it better).
    pub unless: Option<String>,
}

/// A finding's id and texts, where they come from data rather than the rule's row.
pub struct HitText {
    pub id: String,
    pub explanation: String,
    pub fix: String,
    pub source: String,
}

impl Hit {
    pub fn new(title: impl Into<String>, evidence: Vec<Evidence>) -> Hit {
        Hit {
            title: title.into(),
            evidence,
            severity: None,
            text: None,
            unless: None,
        }
    }

    pub fn with_severity(mut self, severity: Severity) -> Hit {
        self.severity = Some(severity);
        self
    }
}
