//! The catalogue's lines in one log, in the order they came, each with the process that printed
//! it (the `host:pid:tid` prefix, or PyTorch's `[rankN]:`) — so diagnosis can tell a first
//! failure from what followed it in the same process, and the same message on every rank.

use super::{catalogue, Recognised};
use crate::documents::diagnosis::Evidence;
use std::collections::BTreeMap;

/// Lines kept per message: the first ones, then only counted.
const PER_ENTRY: usize = 24;
/// Lines kept in all, whatever the log's size.
const IN_ALL: usize = 4000;

#[derive(Debug, Clone, PartialEq)]
pub struct SeenLine {
    /// The entry, its note, its values and its caller's class.
    pub known: Recognised,
    pub evidence: Evidence,
    /// Host and pid of NCCL's prefix.
    pub process: Option<(String, u32)>,
    /// A rank a launcher's or PyTorch's prefix names (`[rank3]:`, `[1,3]<stderr>:`).
    pub rank: Option<usize>,
}

impl SeenLine {
    pub fn entry(&self) -> usize {
        self.known.entry
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    pub lines: Vec<SeenLine>,
    /// Every recognised line, by entry, kept or not.
    pub counts: BTreeMap<usize, usize>,
    /// The last line, when the catalogue did not know it: a wrapped message's first half.
    previous: Option<Evidence>,
    /// Choices lines state (`network` → `IB` → who said so), for comparing ranks: the
    /// variables NCCL read from the environment, and what notes mark as a choice.
    pub facts: BTreeMap<String, BTreeMap<String, Vec<(String, Evidence)>>>,
}

/// Who said it: NCCL's host, else the rank a prefix names, else nobody (an empty string).
pub fn speaker(process: &Option<(String, u32)>, rank: Option<usize>) -> String {
    match (process, rank) {
        (Some((h, _)), _) => h.clone(),
        (None, Some(r)) => format!("rank {r}"),
        _ => String::new(),
    }
}

/// `$1`, `$2` ... of a template, from a line's values.
fn fill(template: &str, values: &[String]) -> String {
    let mut out = template.to_string();
    for (i, v) in values.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), v.trim());
    }
    out
}

/// The choice a recognised line states, if it states one: a variable NCCL read from the
/// environment (`NCCL_SOCKET_IFNAME set by environment to eth0`), or a note's fact.
fn fact_of(known: &Recognised) -> Option<(String, String)> {
    let c = catalogue();
    let e = &c.entries[known.entry];
    if c.projects[e.project].name == "nccl" {
        if let Some((name, _)) = e.format.split_once(" set by environment to ") {
            let values = &known.captures;
            let (key, value) = if name == "%s" {
                (values.first()?.clone(), values.get(1)?.clone())
            } else {
                (name.to_string(), values.first()?.clone())
            };
            let value = value.trim_end_matches('.').to_string();
            return key.starts_with("NCCL_").then_some((key, value));
        }
    }
    let note = &c.notes[known.note.or(e.note)?];
    Some((
        fill(note.fact.as_deref()?, &known.captures),
        fill(note.value.as_deref().unwrap_or("$1"), &known.captures),
    ))
}

/// The rank a `[rank3]:` (PyTorch) or `[1,3]<stdout>:` (Open MPI's --tag-output) prefix names.
pub fn rank_prefix(t: &str) -> Option<usize> {
    let t = t.trim_start();
    if let Some(rest) = t.strip_prefix("[rank") {
        let (n, _) = rest.split_once("]:")?;
        return n.parse().ok();
    }
    let rest = t.strip_prefix('[')?;
    let (inside, after) = rest.split_once(']')?;
    let (_, rank) = inside.split_once(',')?;
    after.starts_with('<').then(|| rank.parse().ok()).flatten()
}

impl Seen {
    /// Look `t` (a trimmed line) up; keep it if the catalogue knows it. True when it did.
    pub fn feed(&mut self, ev: &dyn Fn() -> Evidence, t: &str, version: Option<&str>) -> bool {
        // A reply's quoting (`> > host:pid:tid ...`) is not the line's.
        let t = t.trim_start_matches(['>', ' ']);
        let c = catalogue();
        let (known, evidence) = match c.recognise(t, version) {
            Some(k) => (k, ev()),
            None => match self.wrapped(t, version) {
                Some(found) => found,
                None => {
                    // Kept for the next line, which may be its continuation.
                    self.previous = (t.len() >= 20 && t.len() <= 400).then(ev);
                    return false;
                }
            },
        };
        self.previous = None;
        let t = evidence.text.clone();
        let t = t.as_str();
        let count = self.counts.entry(known.entry).or_default();
        *count += 1;
        let process = super::super::nccl_lines::prefix_of(t).map(|(h, p)| (h.to_string(), p));
        let rank = rank_prefix(t);
        if let Some((key, value)) = fact_of(&known) {
            let said = self.facts.entry(key).or_default().entry(value).or_default();
            let who = speaker(&process, rank);
            if said.len() < 64 && !said.iter().any(|(w, _)| w == &who) {
                said.push((who, evidence.clone()));
            }
        }
        if *count <= PER_ENTRY && self.lines.len() < IN_ALL {
            self.lines.push(SeenLine {
                known,
                evidence,
                process,
                rank,
            });
        }
        true
    }

    /// A message a terminal or a poster wrapped: the line before, unrecognised, joined to this
    /// one (with a space, or without where a word was cut), recognised as a whole. The
    /// evidence is the line before, with the joined text.
    fn wrapped(&mut self, t: &str, version: Option<&str>) -> Option<(Recognised, Evidence)> {
        let prev = self.previous.take()?;
        // A line with NCCL's own prefix starts a message; it continues none.
        if super::super::nccl_lines::prefix_of(t).is_some() {
            return None;
        }
        let c = catalogue();
        [" ", ""].iter().find_map(|glue| {
            let joined = format!("{}{glue}{}", prev.text.trim_end(), t.trim_start());
            c.recognise(&joined, version).map(|k| {
                let mut e = prev.clone();
                e.text = joined.chars().take(400).collect();
                (k, e)
            })
        })
    }

    /// Lines that report a problem (not context), in order.
    pub fn reports(&self) -> impl Iterator<Item = &SeenLine> {
        let c = catalogue();
        self.lines
            .iter()
            .filter(move |l| c.explain(&l.known).finding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_and_pytorch_prefixes_name_ranks() {
        assert_eq!(
            rank_prefix("[rank3]: Traceback (most recent call last):"),
            Some(3)
        );
        assert_eq!(
            rank_prefix("[1,12]<stderr>:host:1:2 [0] NCCL WARN x"),
            Some(12)
        );
        assert_eq!(rank_prefix("[2026-01-01 10:00:00] NCCL WARN x"), None);
        assert_eq!(rank_prefix("no prefix"), None);
    }
}
