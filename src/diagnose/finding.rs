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
