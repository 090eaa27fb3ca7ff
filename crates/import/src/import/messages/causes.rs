//! The judgement beside the generated entries (`data/messages/causes*.toml`): classes of
//! messages, each with the layer it belongs to, its severity, what it means and what to do, and
//! the entries it covers (by project, file, format, result code, level); and notes on single
//! messages a maintainer explained, which come before the classes.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Class {
    /// The finding id diagnosis raises (`nccl.net-ib`, `mpi.launch` ...).
    pub id: String,
    pub layer: String,
    pub severity: String,
    pub summary: String,
    pub explanation: String,
    pub fix: String,
    pub source: String,
    #[serde(default)]
    pub projects: Vec<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub formats: Vec<String>,
    #[serde(default)]
    pub returns: Vec<String>,
    #[serde(default)]
    pub levels: Vec<String>,
    /// An ncclprobe rule that reports these messages with more than the catalogue knows:
    /// when it raises a finding, the class raises none.
    pub rule: Option<String>,
    /// Lines of this class repeat an earlier failure (an error code's text, a test's "stopped
    /// here"): they join the log's first failure instead of making a finding of their own.
    #[serde(default)]
    pub consequence: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Note {
    pub project: String,
    /// A piece of the entry's format.
    pub format: String,
    /// A piece of the printed line, for causes that live in an argument (`Cuda failure '%s'`).
    pub line: Option<String>,
    pub class: Option<String>,
    pub summary: Option<String>,
    pub severity: Option<String>,
    /// An INFO line that deserves a finding of its own (a fallback, a refusal).
    #[serde(default)]
    pub finding: bool,
    /// An ncclprobe rule already reports it: no finding of its own.
    pub rule: Option<String>,
    /// As for a class: the line repeats an earlier failure.
    #[serde(default)]
    pub consequence: bool,
    /// A choice the line states, which every rank should make alike (`network`, `net-plugin`):
    /// `$1`, `$2` ... stand for the values of the format's conversions.
    pub fact: Option<String>,
    /// The choice's value (`$1`, or a word such as `internal`).
    pub value: Option<String>,
    pub explanation: Option<String>,
    pub fix: Option<String>,
    pub source: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CausesFile {
    #[serde(default)]
    pub class: Vec<Class>,
    #[serde(default)]
    pub note: Vec<Note>,
}

/// `*` matches any run of characters; everything else itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

impl Class {
    /// Whether the class covers an entry of `project` printed from `file`.
    pub fn covers(
        &self,
        project: &str,
        file: &str,
        format: &str,
        returns: Option<&str>,
        level: &str,
    ) -> bool {
        (self.projects.is_empty() || self.projects.iter().any(|p| p == project))
            && (self.files.is_empty() || self.files.iter().any(|g| glob(g, file)))
            && (self.formats.is_empty() || self.formats.iter().any(|f| format.contains(f.as_str())))
            && (self.returns.is_empty()
                || returns.is_some_and(|r| self.returns.iter().any(|x| x == r)))
            && (self.levels.is_empty() || self.levels.iter().any(|l| l == level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_shells_do_for_star() {
        assert!(glob(
            "src/transport/net_ib*",
            "src/transport/net_ib/connect.cc"
        ));
        assert!(glob("src/transport/net_ib*", "src/transport/net_ib.cc"));
        assert!(glob("*", "anything"));
        assert!(glob("src/*/nvls.cc", "src/transport/nvls.cc"));
        assert!(!glob("src/*/nvls.cc", "src/transport/nvls.h"));
        assert!(!glob("src/graph/*", "src/init.cc"));
        assert!(glob("src/init.cc", "src/init.cc"));
        assert!(!glob("src/init.cc", "src/init.cc.bak"));
    }
}
