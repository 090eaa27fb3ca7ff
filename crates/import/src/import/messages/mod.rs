//! The message catalogue: every message NCCL (and the other projects a job's log mixes in)
//! prints, generated from their source by `ci/messages/generate` into `data/messages/*.json`,
//! joined to the judgement in `data/messages/causes*.toml` — the class each belongs to, what it
//! means and what to do. `recognise` finds the entry a printed line comes from, with the values
//! its conversions took, whatever prefix the line lost or gained.

pub mod causes;
pub mod format;
pub mod seen;

use aho_corasick::{AhoCorasick, MatchKind};
use causes::{CausesFile, Class, Note};
use format::Pattern;
use regex::Regex;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// The most of one line the catalogue looks at.
const MAX_LINE: usize = 4096;

/// The generated catalogues, one per project.
const CATALOGUES: &[&str] = &[
    include_str!("../../../../../data/messages/nccl.json"),
    include_str!("../../../../../data/messages/nccl-tests.json"),
    include_str!("../../../../../data/messages/rccl.json"),
    include_str!("../../../../../data/messages/aws-ofi-nccl.json"),
    include_str!("../../../../../data/messages/pytorch.json"),
    include_str!("../../../../../data/messages/openmpi.json"),
    include_str!("../../../../../data/messages/prrte.json"),
    include_str!("../../../../../data/messages/pmix.json"),
    include_str!("../../../../../data/messages/ucx.json"),
    include_str!("../../../../../data/messages/libfabric.json"),
    include_str!("../../../../../data/messages/nccl-rdma-sharp-plugins.json"),
];

/// The judgement files, one per project (`causes.toml` is NCCL's).
const CAUSES: &[(&str, &str)] = &[
    (
        "causes.toml",
        include_str!("../../../../../data/messages/causes.toml"),
    ),
    (
        "causes-nccl-tests.toml",
        include_str!("../../../../../data/messages/causes-nccl-tests.toml"),
    ),
    (
        "causes-rccl.toml",
        include_str!("../../../../../data/messages/causes-rccl.toml"),
    ),
    (
        "causes-aws-ofi-nccl.toml",
        include_str!("../../../../../data/messages/causes-aws-ofi-nccl.toml"),
    ),
    (
        "causes-pytorch.toml",
        include_str!("../../../../../data/messages/causes-pytorch.toml"),
    ),
    (
        "causes-openmpi.toml",
        include_str!("../../../../../data/messages/causes-openmpi.toml"),
    ),
    (
        "causes-prrte.toml",
        include_str!("../../../../../data/messages/causes-prrte.toml"),
    ),
    (
        "causes-pmix.toml",
        include_str!("../../../../../data/messages/causes-pmix.toml"),
    ),
    (
        "causes-ucx.toml",
        include_str!("../../../../../data/messages/causes-ucx.toml"),
    ),
    (
        "causes-libfabric.toml",
        include_str!("../../../../../data/messages/causes-libfabric.toml"),
    ),
    (
        "causes-nccl-rdma-sharp-plugins.toml",
        include_str!("../../../../../data/messages/causes-nccl-rdma-sharp-plugins.toml"),
    ),
];

#[derive(Debug, Deserialize)]
struct Doc {
    schema_version: u32,
    kind: String,
    project: String,
    source: String,
    tags: Vec<String>,
    per_tag: Vec<PerTag>,
    entries: Vec<RawEntry>,
}

/// How many distinct formats of each level one tag's source prints.
#[derive(Debug, Clone, Deserialize)]
pub struct PerTag {
    pub tag: String,
    pub formats: BTreeMap<String, usize>,
}

#[derive(Debug, Deserialize)]
struct RawEntry {
    id: String,
    level: String,
    format: String,
    subsys: Vec<String>,
    tags: String,
    file: String,
    line: u32,
    function: Option<String>,
    guard: Option<String>,
    returns: Option<String>,
}

/// One project's catalogue: where it was read from, and which tags.
#[derive(Debug)]
pub struct Project {
    pub name: String,
    pub source: String,
    pub tags: Vec<String>,
    pub per_tag: Vec<PerTag>,
}

/// One message: its format, where the newest tag that prints it does so, and its judgement.
#[derive(Debug)]
pub struct Entry {
    pub id: String,
    pub project: usize,
    pub level: String,
    pub format: String,
    pub subsys: Vec<String>,
    /// Indexes into the project's tags.
    pub tags: Vec<usize>,
    pub file: String,
    pub line: u32,
    pub function: Option<String>,
    pub guard: Option<String>,
    pub returns: Option<String>,
    pub class: usize,
    /// The note on this message, if a maintainer's explanation is recorded.
    pub note: Option<usize>,
    /// Notes that apply when the printed line also contains their `line` text.
    pub arg_notes: Vec<usize>,
    pub pattern: Pattern,
    regex: OnceLock<Regex>,
}

impl Entry {
    pub fn regex(&self) -> &Regex {
        self.regex.get_or_init(|| self.pattern.compile())
    }

    /// A line of this level is a problem report (a finding), not context.
    pub fn reports(&self) -> bool {
        matches!(self.level.as_str(), "WARN" | "ERROR" | "RESULT")
    }
}

/// A line the catalogue recognised.
#[derive(Debug, Clone, PartialEq)]
pub struct Recognised {
    pub entry: usize,
    /// The note that explains it (an argument's note first, then the message's own).
    pub note: Option<usize>,
    /// What each conversion printed.
    pub captures: Vec<String>,
    /// The class of the file that called a shared macro (`transport/nvls.cc:158 NCCL WARN Cuda
    /// failure ...`), when the line names it and it is more telling than the macro's own.
    pub caller: Option<usize>,
}

/// The judgement on one recognised line: the note's words where it has them, else the class's.
#[derive(Debug, Clone)]
pub struct Explanation<'c> {
    pub id: &'c str,
    pub layer: &'c str,
    pub severity: &'c str,
    pub summary: &'c str,
    pub explanation: &'c str,
    pub fix: &'c str,
    pub source: &'c str,
    /// The ncclprobe rule that reports this message instead.
    pub rule: Option<&'c str>,
    /// Whether the line is a problem (a WARN, an error, or an INFO a note marks).
    pub finding: bool,
    /// Whether it repeats an earlier failure (every error code's text does).
    pub consequence: bool,
}

pub struct Catalogue {
    pub projects: Vec<Project>,
    pub entries: Vec<Entry>,
    pub classes: Vec<Class>,
    pub notes: Vec<Note>,
    finder: AhoCorasick,
    /// For each anchor the finder knows, the entries that have it.
    anchored: Vec<Vec<usize>>,
    /// What did not join up when loading: a note on no message, a class named by nothing ...
    pub problems: Vec<String>,
}

/// `"0-2,5"` → `[0, 1, 2, 5]`.
fn tag_indexes(ranges: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in ranges.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            out.extend(a..=b);
        }
    }
    out
}

/// The catalogue shipped in the binary.
pub fn catalogue() -> &'static Catalogue {
    static C: OnceLock<Catalogue> = OnceLock::new();
    C.get_or_init(|| Catalogue::load(CATALOGUES, CAUSES))
}

impl Catalogue {
    /// Join catalogues and causes; what does not join is listed in `problems` (a test keeps
    /// the shipped files free of them).
    pub fn load(catalogues: &[&str], causes: &[(&str, &str)]) -> Catalogue {
        let mut problems = Vec::new();
        let mut classes = Vec::new();
        let mut notes = Vec::new();
        for (name, text) in causes {
            match toml::from_str::<CausesFile>(text) {
                Ok(f) => {
                    classes.extend(f.class);
                    notes.extend(f.note);
                }
                Err(e) => problems.push(format!("{name}: {e}")),
            }
        }
        let mut projects = Vec::new();
        let mut entries = Vec::new();
        for text in catalogues {
            let doc: Doc = match serde_json::from_str(text) {
                Ok(d) => d,
                Err(e) => {
                    problems.push(format!("a catalogue does not read: {e}"));
                    continue;
                }
            };
            if doc.schema_version != 1 || doc.kind != "ncclprobe.message_catalogue" {
                problems.push(format!("{}: not a catalogue this build reads", doc.project));
                continue;
            }
            let p = projects.len();
            for raw in doc.entries {
                let pattern = format::parse(&raw.format);
                entries.push(Entry {
                    id: raw.id,
                    project: p,
                    level: raw.level,
                    format: raw.format,
                    subsys: raw.subsys,
                    tags: tag_indexes(&raw.tags),
                    file: raw.file,
                    line: raw.line,
                    function: raw.function,
                    guard: raw.guard,
                    returns: raw.returns,
                    class: usize::MAX,
                    note: None,
                    arg_notes: Vec::new(),
                    pattern,
                    regex: OnceLock::new(),
                });
            }
            projects.push(Project {
                name: doc.project,
                source: doc.source,
                tags: doc.tags,
                per_tag: doc.per_tag,
            });
        }
        let mut used_notes = vec![false; notes.len()];
        for e in &mut entries {
            let project = projects[e.project].name.as_str();
            for (i, n) in notes.iter().enumerate() {
                if n.project == project && e.format.contains(n.format.as_str()) {
                    used_notes[i] = true;
                    if n.line.is_some() {
                        e.arg_notes.push(i);
                    } else if e.note.is_none() {
                        e.note = Some(i);
                    }
                }
            }
            let by_note = e
                .note
                .and_then(|n| notes[n].class.as_deref())
                .and_then(|id| classes.iter().position(|c| c.id == id));
            e.class = by_note
                .or_else(|| {
                    classes.iter().position(|c| {
                        c.covers(project, &e.file, &e.format, e.returns.as_deref(), &e.level)
                    })
                })
                .unwrap_or(usize::MAX);
            if e.class == usize::MAX {
                problems.push(format!("{} ({}): no class covers it", e.id, e.format));
            }
        }
        for (i, n) in notes.iter().enumerate() {
            if !used_notes[i] {
                problems.push(format!(
                    "note on {:?} ({}): no message has that format",
                    n.format, n.project
                ));
            }
            if let Some(c) = &n.class {
                if !classes.iter().any(|k| &k.id == c) {
                    problems.push(format!("note on {:?}: no class {c}", n.format));
                }
            }
        }
        let mut seen_ids = BTreeSet::new();
        for c in &classes {
            if !seen_ids.insert(c.id.as_str()) {
                problems.push(format!("class {} is defined twice", c.id));
            }
        }
        // One anchor per distinct text; entries whose literal text is too little to tell
        // their lines from others are listed but never recognised.
        let mut anchors: Vec<String> = Vec::new();
        let mut anchored: Vec<Vec<usize>> = Vec::new();
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            if !e.pattern.matchable() {
                continue;
            }
            let a = e.pattern.anchor.as_str();
            let k = *index.entry(a).or_insert_with(|| {
                anchors.push(a.to_string());
                anchored.push(Vec::new());
                anchors.len() - 1
            });
            anchored[k].push(i);
        }
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&anchors)
            .expect("anchors are plain strings");
        Catalogue {
            projects,
            entries,
            classes,
            notes,
            finder,
            anchored,
            problems,
        }
    }

    /// The entry a printed line comes from, if any: the match with the most literal text,
    /// then the one printed by `version` (the log's NCCL version, `2.21.5`), then a report
    /// over context.
    pub fn recognise(&self, line: &str, version: Option<&str>) -> Option<Recognised> {
        // No message is longer: a huge line (a minified dump, a base64 blob) costs no more.
        let mut cut = line.len().min(MAX_LINE);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        let line = &line[..cut];
        let mut candidates: BTreeSet<usize> = BTreeSet::new();
        for m in self.finder.find_overlapping_iter(line) {
            candidates.extend(&self.anchored[m.pattern().as_usize()]);
        }
        let mut best: Option<((usize, bool, bool), usize, regex::Captures)> = None;
        for i in candidates {
            let e = &self.entries[i];
            let Some(caps) = e.regex().captures(line) else {
                continue;
            };
            let score = (
                e.pattern.literal_len,
                self.printed_by(e, version),
                e.reports(),
            );
            if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                best = Some((score, i, caps));
            }
        }
        let (_, i, caps) = best?;
        let e = &self.entries[i];
        let arg_note = e.arg_notes.iter().copied().find(|&n| {
            self.notes[n]
                .line
                .as_deref()
                .is_some_and(|l| line.contains(l))
        });
        let caller = arg_note
            .is_none()
            .then(|| self.caller_class(e, line))
            .flatten();
        let note = arg_note.or(if caller.is_some() { None } else { e.note });
        Some(Recognised {
            entry: i,
            note,
            caller,
            captures: caps
                .iter()
                .skip(1)
                .map(|m| m.map(|m| m.as_str().to_string()).unwrap_or_default())
                .collect(),
        })
    }

    /// NCCL's prefix names the file and line that printed (`transport/nvls.cc:158 NCCL WARN`):
    /// for a message printed by a macro shared by many callers (CUDACHECK's `Cuda failure`,
    /// SYSCHECK's `Call to ... failed`), the caller's file says more than the macro's header.
    fn caller_class(&self, e: &Entry, line: &str) -> Option<usize> {
        let at = line
            .find(" NCCL WARN")
            .or_else(|| line.find(" NCCL INFO"))?;
        let file = line[..at].rsplit(' ').next()?.split(':').next()?;
        let file = file.rsplit_once("src/").map(|(_, f)| f).unwrap_or(file);
        let file = format!("src/{file}");
        let shared =
            e.file.ends_with(".h") || e.guard.as_deref().is_some_and(|g| g.starts_with("macro"));
        if file == e.file || !shared {
            return None;
        }
        let project = self.projects[e.project].name.as_str();
        let k = self.classes.iter().position(|c| {
            !c.files.is_empty()
                && c.covers(project, &file, &e.format, e.returns.as_deref(), &e.level)
        })?;
        (k != e.class).then_some(k)
    }

    /// Whether `e` is printed by the release `version` (`2.21.5`, from "NCCL version 2.21.5+cuda12.4").
    pub fn printed_by(&self, e: &Entry, version: Option<&str>) -> bool {
        let Some(v) = version else { return false };
        let v = v.split(['+', ' ']).next().unwrap_or(v);
        let tags = &self.projects[e.project].tags;
        e.tags.iter().any(|&t| {
            tags.get(t)
                .is_some_and(|tag| tag.trim_start_matches('v').split('-').next() == Some(v))
        })
    }

    /// The judgement on a recognised line.
    pub fn explain(&self, r: &Recognised) -> Explanation<'_> {
        let e = &self.entries[r.entry];
        let note = r.note.map(|n| &self.notes[n]);
        let class = note
            .and_then(|n| n.class.as_deref())
            .and_then(|id| self.classes.iter().find(|c| c.id == id))
            .or_else(|| r.caller.and_then(|k| self.classes.get(k)))
            .or_else(|| self.classes.get(e.class))
            .expect("every entry has a class (the catalogue test)");
        Explanation {
            id: &class.id,
            layer: &class.layer,
            severity: note
                .and_then(|n| n.severity.as_deref())
                .unwrap_or(&class.severity),
            summary: note
                .and_then(|n| n.summary.as_deref())
                .unwrap_or(&class.summary),
            explanation: note
                .and_then(|n| n.explanation.as_deref())
                .unwrap_or(&class.explanation),
            fix: note.and_then(|n| n.fix.as_deref()).unwrap_or(&class.fix),
            source: note
                .and_then(|n| n.source.as_deref())
                .unwrap_or(&class.source),
            rule: note
                .and_then(|n| n.rule.as_deref())
                .or(class.rule.as_deref()),
            finding: e.reports() || note.is_some_and(|n| n.finding),
            consequence: e.level == "RESULT"
                || class.consequence
                || note.is_some_and(|n| n.consequence),
        }
    }

    /// The releases that print `e`, as runs: `v2.18.1-1 … v2.22.3-1, v2.24.3-1`.
    pub fn versions(&self, e: &Entry) -> String {
        let tags = &self.projects[e.project].tags;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &t in &e.tags {
            match runs.last_mut() {
                Some((_, b)) if *b + 1 == t => *b = t,
                _ => runs.push((t, t)),
            }
        }
        let name = |i: usize| tags.get(i).map(String::as_str).unwrap_or("?");
        runs.iter()
            .map(|&(a, b)| {
                if a == b {
                    name(a).to_string()
                } else {
                    format!("{} … {}", name(a), name(b))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
