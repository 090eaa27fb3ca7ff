//! The message catalogue for people (a terminal listing, one entry explained, the coverage per
//! release), for scripts (CSV) and for an issue (Markdown).

use crate::documents::messages::{CoverageRow, MessageRow, MessagesDocument};
use crate::exit::Failure;
use crate::render::safe;
use std::fmt::Write;

fn shown(text: String) -> String {
    safe::display(&text).into_owned()
}

fn md(text: &str) -> String {
    safe::markdown(text, safe::TEXT_CHARS)
}

/// One line per entry: id, level, class, where, and the format.
pub fn table(doc: &MessagesDocument) -> String {
    let mut out = String::new();
    for r in &doc.entries {
        let _ = writeln!(
            out,
            "{:<20} {:<6} {:<22} {}:{}  {}",
            r.id,
            r.level,
            r.class,
            r.file,
            r.line,
            r.format.replace('\n', "\\n")
        );
    }
    let _ = writeln!(out, "{} entries", doc.entries.len());
    shown(out)
}

/// Formats in each release's source against the entries that hold them.
pub fn coverage_table(rows: &[CoverageRow]) -> String {
    let mut out = format!(
        "{:<14} {:<12} {:<7} {:>7} {:>7} {:>9} {:>10} {:>6}\n",
        "project", "tag", "level", "formats", "entries", "matchable", "classified", "noted"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<14} {:<12} {:<7} {:>7} {:>7} {:>9} {:>10} {:>6}",
            r.project, r.tag, r.level, r.formats, r.entries, r.matchable, r.classified, r.noted
        );
    }
    shown(out)
}

/// Everything about one entry, and the values a line gave its conversions.
pub fn explain(line: &str, entry: Option<&MessageRow>, values: &[String]) -> String {
    let Some(r) = entry else {
        return shown(format!(
            "not in the catalogue: {line}\n(`ncclprobe messages --grep TEXT` searches it)\n"
        ));
    };
    let mut out = String::new();
    let _ = writeln!(out, "{} [{}] {}", r.class, r.severity, r.summary);
    let _ = writeln!(
        out,
        "  message   {} {} {}",
        r.project,
        r.level,
        r.format.replace('\n', "\\n")
    );
    if !values.is_empty() {
        let _ = writeln!(out, "  values    {}", values.join(" | "));
    }
    let _ = writeln!(out, "  printed   by {}", r.versions);
    let func = r
        .function
        .as_ref()
        .map(|f| format!(" in {f}()"))
        .unwrap_or_default();
    let _ = writeln!(out, "  from      {}:{}{func}", r.file, r.line);
    if let Some(g) = &r.guard {
        let _ = writeln!(out, "  when      {g}");
    }
    if let Some(code) = &r.returns {
        let _ = writeln!(out, "  returns   {code}");
    }
    let _ = writeln!(out, "  layer     {}", r.layer);
    let _ = writeln!(out, "  meaning   {}", r.explanation);
    let _ = writeln!(out, "  fix       {}", r.fix);
    let _ = writeln!(out, "  source    {}", r.source);
    if let Some(rule) = &r.rule {
        let _ = writeln!(out, "  reported  as {rule} by ncclprobe diagnose");
    }
    shown(out)
}

pub fn csv(doc: &MessagesDocument) -> Result<String, Failure> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let fail = |e: ::csv::Error| Failure::internal(e.to_string());
    w.write_record([
        "id",
        "project",
        "level",
        "format",
        "versions",
        "file",
        "line",
        "function",
        "guard",
        "returns",
        "matchable",
        "class",
        "layer",
        "severity",
        "summary",
        "fix",
    ])
    .map_err(fail)?;
    for r in &doc.entries {
        w.write_record([
            r.id.as_str(),
            &r.project,
            &r.level,
            &r.format,
            &r.versions,
            &r.file,
            &r.line.to_string(),
            r.function.as_deref().unwrap_or(""),
            r.guard.as_deref().unwrap_or(""),
            r.returns.as_deref().unwrap_or(""),
            if r.matchable { "yes" } else { "no" },
            &r.class,
            &r.layer,
            &r.severity,
            &r.summary,
            &r.fix,
        ])
        .map_err(fail)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Failure::internal(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| Failure::internal(e.to_string()))
}

pub fn markdown(doc: &MessagesDocument) -> String {
    let mut out =
        String::from("| class | level | message | from | versions |\n|---|---|---|---|---|\n");
    for r in &doc.entries {
        let _ = writeln!(
            out,
            "| {} | {} | `{}` | {}:{} | {} |",
            md(&r.class),
            md(&r.level),
            md(&r.format.replace('\n', " ")),
            md(&r.file),
            r.line,
            md(&r.versions)
        );
    }
    out
}
