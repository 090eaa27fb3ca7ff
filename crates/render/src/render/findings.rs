//! A diagnosis for people (inputs, a one-line summary, then each finding with its evidence,
//! why, fix and source) and as CSV (one row per piece of evidence).

use crate::documents::diagnosis::{Facts, Finding};
use std::fmt::Write;

/// The diagnosis as `diagnose` prints it by default.
pub fn table(facts: &Facts, findings: &[Finding]) -> String {
    let mut out = String::new();
    for input in &facts.inputs {
        let _ = writeln!(out, "# input: {} ({})", input.file, input.kind);
    }
    if let Some(l) = &facts.live {
        if let Some(e) = &l.nvml_error {
            let _ = writeln!(out, "# {e}");
        }
        if l.sysfs_gpus == 0 && l.nvml_gpus.is_none() {
            out.push_str(
                "# no NVIDIA GPU on this machine; reporting what can be read without one\n",
            );
        }
    }
    let transports = if facts.transports.is_empty() {
        "none seen".to_string()
    } else {
        facts.transports.join(", ")
    };
    let hosts = match (facts.hosts.len(), &facts.live) {
        // Read live and named by no log: the one machine this ran on.
        (0, Some(_)) => "this one".to_string(),
        // A paste that names no host (nvidia-smi, a topology): not "0".
        (0, None) => "not named".to_string(),
        (n, _) => n.to_string(),
    };
    let _ = writeln!(
        out,
        "# NCCL {}; transports {transports}; hosts {hosts}; ranks {}",
        facts.nccl_version.as_deref().unwrap_or("unknown"),
        facts
            .ranks
            .map(|n| n.to_string())
            .unwrap_or_else(|| "unknown".into()),
    );
    if findings.is_empty() {
        out.push_str("no findings\n");
    }
    for f in findings {
        let title = format!("[{:?}] {}: {}", f.severity, f.id, f.title);
        let _ = writeln!(out, "\n{}", crate::term::wrap_to_terminal(&title, "    "));
        for e in f.evidence.iter().take(6) {
            let _ = writeln!(out, "    {}", e.cited());
        }
        // Prose wrapped to the terminal ($COLUMNS), each continuation under its label's text.
        for (label, text) in [
            ("why", &f.explanation),
            ("fix", &f.fix),
            ("source", &f.source),
        ] {
            let line = format!("  {label}: {text}");
            let indent = " ".repeat(label.len() + 4);
            let _ = writeln!(out, "{}", crate::term::wrap_to_terminal(&line, &indent));
        }
    }
    crate::render::safe::display(&out).into_owned()
}

/// `id,severity,title,file,line,evidence`: one row per piece of evidence (a finding without
/// evidence still gets one row), in the order of the findings.
pub fn csv(findings: &[Finding]) -> Result<String, csv::Error> {
    let mut rows = Vec::new();
    for f in findings {
        let severity = format!("{:?}", f.severity).to_lowercase();
        let row = |file: &str, line: String, text: &str| {
            [
                f.id.clone(),
                severity.clone(),
                f.title.clone(),
                file.into(),
                line,
                text.into(),
            ]
        };
        if f.evidence.is_empty() {
            rows.push(row("", String::new(), ""));
        }
        for e in &f.evidence {
            let line = if e.line > 0 {
                e.line.to_string()
            } else {
                String::new()
            };
            rows.push(row(&e.file, line, &e.text));
        }
    }
    super::csv::table(
        &["id", "severity", "title", "file", "line", "evidence"],
        rows,
    )
    .map(|text| crate::render::safe::display(&text).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::diagnosis::{Evidence, Severity};

    fn ev(file: &str, line: usize, text: &str) -> Evidence {
        Evidence {
            file: file.into(),
            line,
            text: text.into(),
        }
    }

    #[test]
    fn csv_has_a_row_per_evidence_and_quotes_commas() {
        let f = Finding {
            id: "topo.cross-numa".into(),
            severity: Severity::Warning,
            title: "GPU pairs cross NUMA nodes (topo.txt)".into(),
            evidence: vec![
                ev("topo.txt", 0, "GPU0 <-> GPU1: SYS"),
                ev("log", 12, "a, b"),
            ],
            explanation: String::new(),
            fix: String::new(),
            source: String::new(),
        };
        let text = csv(&[f]).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "id,severity,title,file,line,evidence");
        assert_eq!(
            lines[1],
            "topo.cross-numa,warning,GPU pairs cross NUMA nodes (topo.txt),topo.txt,,GPU0 <-> GPU1: SYS"
        );
        assert_eq!(
            lines[2],
            "topo.cross-numa,warning,GPU pairs cross NUMA nodes (topo.txt),log,12,\"a, b\""
        );
    }
}
