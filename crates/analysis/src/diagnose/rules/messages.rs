//! Findings from the message catalogue (`import::messages`): every line a log's processes
//! printed that the catalogue knows as a problem becomes evidence of one finding, with the
//! catalogue's cause and fix.
//!
//! Lines that go together make one finding. In one process, a report that follows another
//! within a few lines (NCCL's `-> 2` unwinding, the proxy's or PyTorch's echo of the same
//! failure, the final `unhandled system error`) belongs to the first: the first is the cause,
//! the rest consequences. The same first failure on several ranks is one finding that says on
//! how many processes and hosts it was seen.

use crate::diagnose::facts::Inputs;
use crate::diagnose::finding::{Evidence, Hit, HitText, Severity};
use crate::import::messages::seen::SeenLine;
use crate::import::messages::{catalogue, Catalogue};
use std::collections::{BTreeMap, BTreeSet};

/// Lines after a report in which another report of the same process is its consequence.
const FOLLOWS_WITHIN: usize = 40;
/// Evidence lines: first failures shown, then consequences.
const ROOTS_SHOWN: usize = 8;
const FOLLOWERS_SHOWN: usize = 4;

fn severity_of(word: &str) -> Severity {
    match word {
        "info" => Severity::Info,
        "warning" => Severity::Warning,
        _ => Severity::Error,
    }
}

/// Who printed a line: NCCL's `host:pid`, a `[rankN]` prefix, or nobody the line names.
fn process_key(l: &SeenLine) -> String {
    match (&l.process, l.rank) {
        (Some((h, p)), _) => format!("{h}:{p}"),
        (None, Some(r)) => format!("rank {r}"),
        _ => String::new(),
    }
}

/// What makes two lines the same finding: the entry, the note and the caller's class.
type Key = (usize, Option<usize>, Option<usize>);

/// One first failure and what followed it, across the processes that printed it.
#[derive(Default)]
struct Group<'a> {
    roots: Vec<&'a SeenLine>,
    followers: Vec<&'a SeenLine>,
    processes: BTreeSet<String>,
    hosts: BTreeSet<String>,
    ranks: BTreeSet<usize>,
}

/// The message itself, without the prefix NCCL or a launcher put before it.
fn message_text(c: &Catalogue, l: &SeenLine) -> String {
    let text = &l.evidence.text;
    let e = &c.entries[l.entry()];
    let mut start = e.regex().find(text).map(|m| m.start()).unwrap_or(0);
    // A format that opens with a value (`%s: Test CUDA failure`) matches from the line's
    // start: begin at the word before its first literal text instead.
    if e.format.starts_with(['%', '{']) {
        if let Some(at) = text.find(e.pattern.anchor.as_str()) {
            let before = text[..at].trim_end();
            start = before
                .rfind(char::is_whitespace)
                .map(|i| i + 1)
                .unwrap_or(0);
        }
    }
    let msg = text[start..].trim();
    if msg.chars().count() > 140 {
        format!("{}…", msg.chars().take(140).collect::<String>())
    } else {
        msg.to_string()
    }
}

/// Where the message comes from and when its source prints it: the catalogue's citation.
fn cited(c: &Catalogue, l: &SeenLine) -> String {
    let e = &c.entries[l.entry()];
    let project = &c.projects[e.project];
    let mut out = format!(
        "{} {}:{}{} ({}, {})",
        project.name,
        e.file,
        e.line,
        e.function
            .as_ref()
            .map(|f| format!(" in {f}()"))
            .unwrap_or_default(),
        project.source,
        c.versions(e)
    );
    if let Some(g) = &e.guard {
        out.push_str(&format!("; printed when `{g}`"));
    }
    if let Some(r) = &e.returns {
        out.push_str(&format!(", then returns {r}"));
    }
    out
}

pub fn explained(inp: &Inputs) -> Vec<Hit> {
    let c = catalogue();
    let mut groups: BTreeMap<Key, Group> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    for log in &inp.logs {
        // The last report of each process: (its line, its group key, its severity).
        let mut last: BTreeMap<String, (usize, Key, Severity, bool)> = BTreeMap::new();
        // Groups this log opened: whether each is only an echo (an error code's text ...).
        let mut opened: Vec<(Key, bool)> = Vec::new();
        for l in log.messages.reports() {
            let x = c.explain(&l.known);
            let severity = severity_of(x.severity);
            let who = process_key(l);
            let key = (l.known.entry, l.known.note, l.known.caller);
            // A cause never follows an echo: the echo (an error code's text printed first)
            // joins the cause instead, below.
            let follows = last.get(&who).filter(|(line, _, sev, echo)| {
                l.evidence.line <= line + FOLLOWS_WITHIN
                    && *sev >= severity
                    && (!echo || x.consequence)
            });
            let first_cause = opened.iter().find(|(_, echo)| !echo).map(|(k, _)| *k);
            let group_key = match (follows, first_cause) {
                (Some(&(_, root, _, echo)), _) if root != key => {
                    groups.entry(root).or_default().followers.push(l);
                    last.insert(who.clone(), (l.evidence.line, root, severity, echo));
                    continue;
                }
                (None, Some(root)) if x.consequence && root != key => {
                    groups.entry(root).or_default().followers.push(l);
                    continue;
                }
                _ => key,
            };
            let g = groups.entry(group_key).or_insert_with(|| {
                order.push(group_key);
                opened.push((group_key, x.consequence));
                Group::default()
            });
            if follows.is_none() || !g.processes.contains(&who) {
                g.roots.push(l);
            }
            g.processes.insert(who.clone());
            if let Some((h, _)) = &l.process {
                g.hosts.insert(h.clone());
            }
            g.ranks.extend(l.rank);
            last.insert(who, (l.evidence.line, group_key, severity, x.consequence));
        }
        // Echoes printed before the failure they echo (a launcher's summary at the top)
        // join it too.
        if let Some(&(cause, _)) = opened.iter().find(|(_, echo)| !echo) {
            for (k, _) in opened.iter().filter(|(_, echo)| *echo) {
                if let Some(echo) = groups.remove(k) {
                    order.retain(|o| o != k);
                    let g = groups.entry(cause).or_default();
                    g.followers.extend(echo.roots);
                    g.followers.extend(echo.followers);
                }
            }
        }
    }
    let nranks = inp.nranks();
    order
        .into_iter()
        .filter_map(|key| {
            let g = groups.remove(&key)?;
            let first = *g.roots.first()?;
            Some(hit(c, first, &g, nranks))
        })
        .collect()
}

fn hit(c: &Catalogue, first: &SeenLine, g: &Group, nranks: Option<usize>) -> Hit {
    let x = c.explain(&first.known);
    let processes = g.processes.iter().filter(|p| !p.is_empty()).count();
    let lines = g.roots.len();
    let where_ = match (processes, g.hosts.len()) {
        (0, _) if lines > 1 => format!(" ({lines} lines)"),
        (0, _) => String::new(),
        (1, _) => format!(
            " (printed by {})",
            g.processes.iter().next_back().cloned().unwrap_or_default()
        ),
        (n, h) if nranks == Some(n) => format!(
            " (on every rank: {n} processes on {h} host{})",
            if h == 1 { "" } else { "s" }
        ),
        (n, 0) => format!(" (on {n} ranks)"),
        (n, h) => format!(
            " (on {n} processes, {h} host{})",
            if h == 1 { "" } else { "s" }
        ),
    };
    let title = format!("{}: {}{where_}", x.summary, message_text(c, first));
    let mut evidence: Vec<Evidence> = Vec::new();
    let mut shown = BTreeSet::new();
    // One line per process first, then the rest.
    for l in g
        .roots
        .iter()
        .filter(|l| shown.insert(process_key(l)))
        .chain(g.roots.iter())
    {
        if evidence.len() >= ROOTS_SHOWN {
            break;
        }
        if !evidence.contains(&l.evidence) {
            evidence.push(l.evidence.clone());
        }
    }
    for l in g.followers.iter().take(FOLLOWERS_SHOWN) {
        if !evidence.contains(&l.evidence) {
            evidence.push(l.evidence.clone());
        }
    }
    let mut explanation = x.explanation.to_string();
    if !g.followers.is_empty() {
        explanation.push_str(&format!(
            " The {} line{} after it in the same process follow{} from it.",
            g.followers.len(),
            if g.followers.len() == 1 { "" } else { "s" },
            if g.followers.len() == 1 { "s" } else { "" }
        ));
    }
    let source = format!("{}; message: {}", x.source, cited(c, first));
    let mut h = Hit::new(title, evidence).with_severity(severity_of(x.severity));
    h.text = Some(HitText {
        id: x.id.to_string(),
        explanation,
        fix: x.fix.to_string(),
        source,
    });
    h.unless = x.rule.map(str::to_string);
    h
}
