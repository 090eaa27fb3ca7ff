//! The message catalogue as documents: its entries with their judgement, how much of each
//! release's messages it holds, and the entry one pasted line comes from.

use crate::documents::messages::{CoverageRow, MessageRow};
use crate::import::messages::{catalogue, Catalogue, Entry, Recognised};

/// A class that only names its project: what is left once every specific class had its turn.
fn catch_all(c: &Catalogue, class: usize) -> bool {
    c.classes.get(class).is_some_and(|k| {
        k.files.is_empty() && k.formats.is_empty() && k.returns.is_empty() && k.levels.is_empty()
    })
}

fn row(c: &Catalogue, known: &Recognised) -> MessageRow {
    let e = &c.entries[known.entry];
    let x = c.explain(known);
    let note = known.note;
    MessageRow {
        id: e.id.clone(),
        project: c.projects[e.project].name.clone(),
        level: e.level.clone(),
        format: e.format.clone(),
        versions: c.versions(e),
        file: e.file.clone(),
        line: e.line,
        function: e.function.clone(),
        guard: e.guard.clone(),
        returns: e.returns.clone(),
        matchable: e.pattern.matchable(),
        class: x.id.to_string(),
        layer: x.layer.to_string(),
        severity: x.severity.to_string(),
        summary: x.summary.to_string(),
        explanation: x.explanation.to_string(),
        fix: x.fix.to_string(),
        source: x.source.to_string(),
        noted: note.is_some(),
        rule: x.rule.map(str::to_string),
    }
}

/// Which entries `messages` lists.
#[derive(Debug, Default)]
pub struct Filter {
    pub project: Option<String>,
    pub level: Option<String>,
    pub class: Option<String>,
    /// A piece of the format (case-insensitive).
    pub text: Option<String>,
    /// A release (`2.21.5`): only what it prints.
    pub version: Option<String>,
}

pub fn rows(filter: &Filter) -> Vec<MessageRow> {
    let c = catalogue();
    let text = filter.text.as_ref().map(|t| t.to_lowercase());
    c.entries
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            filter
                .project
                .as_ref()
                .is_none_or(|p| &c.projects[e.project].name == p)
                && filter
                    .level
                    .as_ref()
                    .is_none_or(|l| e.level.eq_ignore_ascii_case(l))
                && text
                    .as_ref()
                    .is_none_or(|t| e.format.to_lowercase().contains(t))
                && filter
                    .version
                    .as_ref()
                    .is_none_or(|v| c.printed_by(e, Some(v)))
        })
        .map(|(entry, e)| {
            row(
                c,
                &Recognised {
                    entry,
                    note: e.note,
                    captures: Vec::new(),
                    caller: None,
                },
            )
        })
        .filter(|r| filter.class.as_ref().is_none_or(|k| &r.class == k))
        .collect()
}

/// Per project, tag and level: formats in the source against entries, matchable, classified
/// and noted ones.
pub fn coverage() -> Vec<CoverageRow> {
    let c = catalogue();
    let mut out = Vec::new();
    for (p, project) in c.projects.iter().enumerate() {
        for (t, per) in project.per_tag.iter().enumerate() {
            for (level, &formats) in &per.formats {
                let of_tag: Vec<&Entry> = c
                    .entries
                    .iter()
                    .filter(|e| e.project == p && &e.level == level && e.tags.contains(&t))
                    .collect();
                out.push(CoverageRow {
                    project: project.name.clone(),
                    tag: per.tag.clone(),
                    level: level.clone(),
                    formats,
                    entries: of_tag.len(),
                    matchable: of_tag.iter().filter(|e| e.pattern.matchable()).count(),
                    classified: of_tag.iter().filter(|e| !catch_all(c, e.class)).count(),
                    noted: of_tag.iter().filter(|e| e.note.is_some()).count(),
                });
            }
        }
    }
    out
}

/// The entry `line` comes from (with the note its arguments select) and what each conversion
/// printed; none when the catalogue knows no such message. `version` is the NCCL release the
/// line came from, when known.
pub fn explain(line: &str, version: Option<&str>) -> Option<(MessageRow, Vec<String>)> {
    let c = catalogue();
    let r = c.recognise(line.trim(), version)?;
    Some((row(c, &r), r.captures.clone()))
}
